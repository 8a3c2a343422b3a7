"""Apache Kafka's own Java tools (kafka-tools 3.9.x, the Java client) against pybroker.

Runs the real main classes the kafka-*.sh scripts run, on both metadata backends:
ClientCompatibilityTest (the ducktape client-compatibility driver), VerifiableProducer ->
VerifiableConsumer (group) round trip, TopicCommand and ConsumerGroupCommand. The jars come
from scripts/fetch-java-deps (Maven Central, cached in .cache/java); skipped only when java is
absent. Helpers: pybroker/testing/java.py. See docs/java.md.
"""

from __future__ import annotations

import collections
import json
import time
import uuid

import pytest

from pybroker.testing import java
from pybroker.testing.client_helpers import create_topic

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(not java.java_available(), reason="java not found (OpenJDK 17 expected)"),
    # a broker per backend and overrides: each test uses topics and groups of its own, and
    # the survey's tools change only its topic (conftest.py)
    pytest.mark.shared_broker,
]

TOOL_TIMEOUT = 120


@pytest.fixture(scope="session")
def java_cp() -> str:
    """Fetch (once, cached) and return the Kafka jars' classpath; fails loudly if it cannot."""
    with java.deps_or_fail():
        return java.classpath()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def explain(result: java.JavaResult, broker) -> str:
    """A failure message: the tool's outcome, Java exceptions, and requests pybroker refused."""
    refused = java.refused_requests(broker.output(max_lines=5000))
    lines = [result.describe()]
    errors = java.java_errors(result.stdout + "\n" + result.stderr)
    if errors:
        lines.append("Java exceptions:\n  " + "\n  ".join(errors))
    if refused:
        lines.append(
            "pybroker closed connections over (api key, version): "
            + ", ".join(f"{k} v{v} ({why})" for k, v, why in refused)
        )
    return "\n".join(lines)


def run_tool(main_class: str, args: list[str], broker, *, ok: bool = True, **kw):
    result = java.run_main(main_class, args, timeout=kw.pop("timeout", TOOL_TIMEOUT), **kw)
    if ok:
        assert result.ok, explain(result, broker)
    return result


# -- ClientCompatibilityTest --------------------------------------------------------------------

# Every feature flag of org.apache.kafka.tools.ClientCompatibilityTest (3.9), with the value a
# complete broker gives. expect-record-too-large-exception is the pre-KIP-74 behaviour (false on
# any broker with Fetch v3+); num-cluster-nodes is the single test broker.
CCT_FLAGS = {
    "offsets-for-times-supported": True,  # ListOffsets v1+ by timestamp
    "cluster-id-supported": True,  # Metadata v2+ cluster_id
    "expect-record-too-large-exception": False,
    "num-cluster-nodes": 1,  # describeCluster: DescribeCluster (60) or Metadata
    "create-topics-supported": True,  # CreateTopics, then describeTopics
    "describe-acls-supported": True,  # DescribeAcls (29); SECURITY_DISABLED counts as supported
    "describe-configs-supported": True,  # DescribeConfigs (32) for the BROKER resource
    "idempotent-producer-supported": True,  # InitProducerId + Produce with sequences
}

# Flags a complete broker sets but pybroker cannot pass yet, with the reason. Each gets a strict
# xfail test of its own, so implementing the API turns it into an XPASS failure: then delete
# the entry here.
CCT_NOT_YET: dict[str, str] = {}


def cct_args(topic: str, bootstrap: str, flags: dict) -> list[str]:
    args = ["--topic", topic, "--bootstrap-server", bootstrap]
    for name, value in flags.items():
        args += [f"--{name}", str(value).lower()]
    return args


def test_client_compatibility(broker, java_cp):
    """Every feature flag pybroker supports set as a full broker would; must print SUCCESS."""
    flags = dict(CCT_FLAGS)
    for name in CCT_NOT_YET:
        flags[name] = not CCT_FLAGS[name]
    r = run_tool(
        java.CLIENT_COMPATIBILITY_TEST, cct_args(unique("cct"), broker.bootstrap, flags), broker
    )
    assert "SUCCESS." in r.stdout, explain(r, broker)


@pytest.mark.parametrize(
    "flag",
    [
        pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=reason))
        for name, reason in CCT_NOT_YET.items()
    ],
)
def test_client_compatibility_not_yet(broker, java_cp, flag):
    """The flags pybroker cannot pass yet, each set as a full broker would (strict xfail)."""
    flags = dict(CCT_FLAGS)
    for name in CCT_NOT_YET:
        if name != flag:
            flags[name] = not CCT_FLAGS[name]
    r = run_tool(
        java.CLIENT_COMPATIBILITY_TEST,
        cct_args(unique("cct"), broker.bootstrap, flags),
        broker,
        ok=False,
    )
    assert r.ok and "SUCCESS." in r.stdout, explain(r, broker)


# -- VerifiableProducer -> VerifiableConsumer ---------------------------------------------------


def produce_verifiable(broker, topic: str, count: int, *, keys: int = 60) -> list[dict]:
    """VerifiableProducer (acks=all, idempotent by default); returns its acknowledged sends."""
    r = run_tool(
        java.VERIFIABLE_PRODUCER,
        [
            "--bootstrap-server",
            broker.bootstrap,
            "--topic",
            topic,
            "--max-messages",
            count,
            "--acks",
            "-1",
            "--repeating-keys",
            keys,
        ],
        broker,
    )
    events = r.json_lines()
    errors = [e for e in events if e["name"] == "producer_send_error"]
    assert not errors, f"{len(errors)} send errors, first: {errors[0]}\n{explain(r, broker)}"
    acked = [e for e in events if e["name"] == "producer_send_success"]
    tool_data = [e for e in events if e["name"] == "tool_data"]
    assert tool_data and tool_data[-1]["acked"] == count == tool_data[-1]["sent"], explain(
        r, broker
    )
    assert len(acked) == count
    return acked


def consume_verifiable(broker, topic: str, group: str, count: int) -> tuple[list[dict], list]:
    """VerifiableConsumer in `group` until `count` records; returns (events, record_data)."""
    r = run_tool(
        java.VERIFIABLE_CONSUMER,
        [
            "--bootstrap-server",
            broker.bootstrap,
            "--topic",
            topic,
            "--group-id",
            group,
            "--max-messages",
            count,
            "--reset-policy",
            "earliest",
            "--verbose",
        ],
        broker,
    )
    events = r.json_lines()
    names = collections.Counter(e["name"] for e in events)
    assert names["startup_complete"] == 1 and names["shutdown_complete"] == 1, explain(r, broker)
    assert names["partitions_assigned"] >= 1, explain(r, broker)
    return events, [e for e in events if e["name"] == "record_data"]


@pytest.mark.broker_overrides({"num.partitions": 3})
def test_verifiable_producer_consumer_roundtrip(broker, java_cp):
    """Every acknowledged record is consumed by a group member exactly once, offsets committed."""
    topic, group, n = unique("verifiable"), unique("vgroup"), 2000
    acked = produce_verifiable(broker, topic, n)  # auto-creates the topic with 3 partitions
    sent = {(e["partition"], e["offset"]): (e["key"], e["value"]) for e in acked}
    assert len(sent) == n, "two acknowledgements for one offset"
    by_partition = collections.defaultdict(list)
    for p, o in sent:
        by_partition[p].append(o)
    assert set(by_partition) == {0, 1, 2}, f"keys did not spread: {sorted(by_partition)}"
    for p, offsets in by_partition.items():
        assert sorted(offsets) == list(range(len(offsets))), f"partition {p}: offsets not dense"

    events, records = consume_verifiable(broker, topic, group, n)
    got = collections.Counter((e["partition"], e["offset"]) for e in records)
    dups = [k for k, c in got.items() if c > 1]
    assert not dups, f"consumed twice: {dups[:10]}"
    assert set(got) == set(sent), (
        f"missing {sorted(set(sent) - set(got))[:10]}, unexpected {sorted(set(got) - set(sent))[:10]}"
    )
    for e in records:
        assert (e["key"], e["value"]) == sent[(e["partition"], e["offset"])], e

    commits = [e for e in events if e["name"] == "offsets_committed"]
    assert commits and all(c["success"] for c in commits), commits[-3:]
    last = {}
    for c in commits:
        for o in c["offsets"]:
            last[o["partition"]] = o["offset"]
    assert last == {p: len(offs) for p, offs in by_partition.items()}, last


# -- TopicCommand -------------------------------------------------------------------------------


def topics(broker, *args: str, ok: bool = True) -> java.JavaResult:
    return run_tool(
        java.TOPIC_COMMAND, ["--bootstrap-server", broker.bootstrap, *args], broker, ok=ok
    )


def test_topic_command_create_list_describe(broker, java_cp):
    name, other = unique("tc"), unique("tc-other")
    r = topics(broker, "--create", "--topic", name, "--partitions", "3", "--replication-factor", "1",
               "--config", "retention.ms=86400000")  # fmt: skip
    assert f"Created topic {name}." in r.stdout, explain(r, broker)
    topics(broker, "--create", "--topic", other, "--partitions", "1")

    dup = topics(broker, "--create", "--topic", name, "--partitions", "3", ok=False)
    assert dup.returncode == 1, explain(dup, broker)
    assert "TopicExistsException" in dup.stdout + dup.stderr, explain(dup, broker)
    topics(broker, "--create", "--if-not-exists", "--topic", name, "--partitions", "3")

    listed = topics(broker, "--list").stdout.split()
    assert name in listed and other in listed, listed

    r = topics(broker, "--describe", "--topic", name)
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    head = lines[0]
    assert f"Topic: {name}" in head and "PartitionCount: 3" in head, r.stdout
    assert "ReplicationFactor: 1" in head and "retention.ms=86400000" in head, r.stdout
    assert "TopicId: " in head and "TopicId: AAAAAAAAAAAAAAAAAAAAAA" not in head, r.stdout
    parts = [ln.split() for ln in lines[1:]]
    assert len(parts) == 3, r.stdout
    for i, fields in enumerate(parts):
        row = dict(zip(fields[0::2], fields[1::2], strict=False))
        assert row["Partition:"] == str(i) and row["Leader:"] == "0", r.stdout
        assert row["Replicas:"] == "0" and row["Isr:"] == "0", r.stdout

    missing = topics(broker, "--describe", "--topic", unique("absent"), ok=False)
    assert missing.returncode == 1, explain(missing, broker)
    assert "does not exist" in missing.stdout + missing.stderr, explain(missing, broker)


# -- ConsumerGroupCommand -----------------------------------------------------------------------


def groups(broker, *args: str) -> java.JavaResult:
    return run_tool(
        java.CONSUMER_GROUP_COMMAND, ["--bootstrap-server", broker.bootstrap, *args], broker
    )


def table(stdout: str, first_column: str = "GROUP") -> list[dict]:
    """Rows of a ConsumerGroupCommand table (whitespace separated, header starts with GROUP)."""
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    rows, header = [], None
    for ln in lines:
        fields = ln.split()
        if fields[0] == first_column:
            header = [f for f in fields if f != "(ID)"]  # "COORDINATOR (ID)" is one column
            continue
        if header:
            if "(" in ln and header[1:2] == ["COORDINATOR"]:  # host:port  (id)
                fields = [fields[0], fields[1] + " " + fields[2], *fields[3:]]
            if "ASSIGNMENT-STRATEGY" in header and len(fields) == len(header) - 1:
                fields.insert(header.index("ASSIGNMENT-STRATEGY"), "")  # empty group: blank
            rows.append(dict(zip(header, fields, strict=False)))
    return rows


@pytest.mark.broker_overrides({"num.partitions": 3, "group.initial.rebalance.delay.ms": 0})
def test_consumer_group_command_list_describe(broker, java_cp):
    topic, group = unique("cgc"), unique("cgc-group")
    acked = produce_verifiable(broker, topic, 600)
    consume_verifiable(broker, topic, group, 600)  # commits every position it reached
    more = produce_verifiable(broker, topic, 90)
    end = collections.Counter(e["partition"] for e in acked + more)
    committed = collections.Counter(e["partition"] for e in acked)

    assert group in groups(broker, "--list").stdout.split()

    r = groups(broker, "--describe", "--group", group)
    rows = {int(row["PARTITION"]): row for row in table(r.stdout)}
    assert set(rows) == set(committed), r.stdout
    for p, row in rows.items():
        assert row["TOPIC"] == topic and row["GROUP"] == group, r.stdout
        assert int(row["CURRENT-OFFSET"]) == committed[p], r.stdout
        assert int(row["LOG-END-OFFSET"]) == end[p], r.stdout
        assert int(row["LAG"]) == end[p] - committed[p], r.stdout
    assert sum(int(row["LAG"]) for row in rows.values()) == 90, r.stdout

    state = table(groups(broker, "--describe", "--group", group, "--state").stdout)
    assert [s["STATE"] for s in state] == ["Empty"], state

    # A live member: --members and --state see it, and its assignment.
    live = java.start_main(
        java.VERIFIABLE_CONSUMER,
        [
            "--bootstrap-server",
            broker.bootstrap,
            "--topic",
            topic,
            "--group-id",
            group,
            "--reset-policy",
            "earliest",
        ],  # fmt: skip
        workdir=broker.workdir / "live-consumer",
    )
    try:
        deadline = time.monotonic() + 60
        while "partitions_assigned" not in live.stdout_text():
            assert live.is_running() and time.monotonic() < deadline, live.result().describe()
            time.sleep(0.2)
        members = table(groups(broker, "--describe", "--group", group, "--members").stdout)
        assert len(members) == 1 and members[0]["#PARTITIONS"] == "3", members
        state = table(groups(broker, "--describe", "--group", group, "--state").stdout)
        assert state[0]["STATE"] == "Stable" and state[0]["#MEMBERS"] == "1", state
        assert state[0]["ASSIGNMENT-STRATEGY"] == "range", state
    finally:
        res = live.stop()
    assert "shutdown_complete" in res.stdout, res.describe()


# -- The other admin tools: what pybroker serves and what it does not yet -----------------------

# (id, main class, args; {bs} {topic} {json} are filled in, API the tool needs, missing API or None)
# A "missing" entry names the API (key, versions the 3.9 Java client speaks) that pybroker does
# not advertise; the client refuses on its side with UnsupportedVersionException "The node does
# not support <API>", so nothing reaches the broker. The test asserts the exact set of failing
# probes, so implementing an API (or breaking a served one) fails it: update the table then.
ADMIN_PROBES = [
    ("configs-describe-topic", "kafka.admin.ConfigCommand",
     "--describe --entity-type topics --entity-name {topic}", None),
    ("configs-describe-broker", "kafka.admin.ConfigCommand",
     "--describe --entity-type brokers --entity-name 0", None),
    ("get-offset-shell", "org.apache.kafka.tools.GetOffsetShell", "--topic {topic}", None),
    ("cluster-id", "org.apache.kafka.tools.ClusterTool", "cluster-id", None),
    ("console-consumer", "org.apache.kafka.tools.consumer.ConsoleConsumer",
     "--topic {topic} --from-beginning --max-messages 5 --timeout-ms 20000", None),
    ("acls-list", "kafka.admin.AclCommand", "--list", None),
    ("configs-alter-topic", "kafka.admin.ConfigCommand",
     "--alter --entity-type topics --entity-name {topic} --add-config retention.ms=100000",
     None),
    ("configs-describe-clients", "kafka.admin.ConfigCommand", "--describe --entity-type clients",
     None),
    ("delete-records", "org.apache.kafka.tools.DeleteRecordsCommand", "--offset-json-file {json}",
     None),
    ("group-delete-offsets", java.CONSUMER_GROUP_COMMAND,
     "--delete-offsets --group absent-group --topic {topic}", None),
    ("log-dirs", "org.apache.kafka.tools.LogDirsCommand", "--describe",
     None),
    ("transactions-list", "org.apache.kafka.tools.TransactionsCommand", "list",
     None),
    ("describe-producers", "org.apache.kafka.tools.TransactionsCommand",
     "describe-producers --topic {topic} --partition 0", None),
    ("leader-election", "org.apache.kafka.tools.LeaderElectionCommand",
     "--election-type preferred --all-topic-partitions", None),
    ("reassignments-list", "org.apache.kafka.tools.reassign.ReassignPartitionsCommand", "--list",
     None),
]  # fmt: skip

# Probes that fail against Apache Kafka too, with the error pybroker must give the same way:
# without an authorizer, Kafka answers DescribeAcls with SECURITY_DISABLED and the tool exits 1.
KAFKA_FAILS_TOO = {
    "acls-list": "SecurityDisabledException: No Authorizer is configured on the broker",
}


def test_admin_tools_survey(broker, java_cp, tmp_path):
    """Run each admin tool once; exactly the probes marked missing may fail, for that reason."""
    topic = unique("survey")
    create_topic(broker.bootstrap, topic, partitions=1)
    produce_verifiable(broker, topic, 20, keys=1)
    offsets_json = tmp_path / "delete-records.json"
    spec = {"version": 1, "partitions": [{"topic": topic, "partition": 0, "offset": 5}]}
    offsets_json.write_text(json.dumps(spec))
    failures, report = {}, []
    for name, main_class, args, _missing in ADMIN_PROBES:
        argv = ["--bootstrap-server", broker.bootstrap]
        argv += args.format(topic=topic, json=offsets_json).split()
        if main_class.endswith("ClusterTool"):  # its sub-command comes first
            argv = [argv[2], *argv[:2], *argv[3:]]
        r = java.run_main(main_class, argv, timeout=60)
        text = r.stdout + r.stderr
        # Some tools print the per-partition error and still exit 0.
        failed = not r.ok or "does not support" in text or "UnsupportedVersion" in text
        if name in KAFKA_FAILS_TOO and not r.ok and KAFKA_FAILS_TOO[name] in text:
            failed = False  # as Kafka does
        if failed:
            failures[name] = (java.java_errors(text, 3) or [text.strip()[-300:]], r)
        report.append(f"{name}: {'FAIL' if failed else 'ok'} ({r.returncode}, {r.elapsed:.1f}s)")
    print("\n".join(report))

    expected = {name for name, _c, _a, missing in ADMIN_PROBES if missing}
    unexpected = {n: failures[n] for n in failures.keys() - expected}
    fixed = expected - failures.keys()
    msg = []
    for n, (_errs, r) in unexpected.items():
        msg.append(f"{n} failed:\n{explain(r, broker)}")
    if fixed:
        msg.append(f"now pass (drop their 'missing' API in ADMIN_PROBES): {sorted(fixed)}")
    for n in expected & failures.keys():
        api = next(m for name, _c, _a, m in ADMIN_PROBES if name == n).split(" (")[0]
        wanted = "".join(c for c in api.upper() if c.isalpha())
        seen = " ".join(failures[n][0]).replace("_", "")
        if wanted not in seen.upper():
            msg.append(f"{n} failed for another reason than missing {api}: {failures[n][0]}")
    assert not msg, "\n\n".join(msg)
    assert broker.is_running()
