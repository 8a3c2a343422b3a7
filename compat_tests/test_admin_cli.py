"""The admin CLI (`python -m pybroker topics|groups|produce|consume|cluster`), run as a real
subprocess against a real pybroker and, for the read-only commands and topic create/delete,
against Apache Kafka 3.9 too (one KRaft node for the whole module).

What a user sees is asserted: the exit code (0, 1 on a Kafka error with one `error: NAME:
message` line on stderr, 2 on a usage error), the tables, and the JSON of `--output json`.
Independent checks: records produced by the CLI are read back with kafka-python (keys land on
the partition of Kafka's murmur2 partitioner), records produced by kafka-python are read by the
CLI, and `groups describe` lag equals what Kafka's own kafka-consumer-groups --describe says.
Also: following a partition through the kill -9 of its leader (two-broker cluster), under-
replicated and offline partitions, and a SASL_SSL listener with SCRAM users and ACLs.
"""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import tempfile
import threading
import uuid
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.partitioner.default import murmur2

from compat_tests.group_member import (
    GROUP_BROKER_OVERRIDES,
    ThreadMember,
    close_all,
    wait_stable,
    wait_until,
)
from pybroker.testing import java
from pybroker.testing.cluster_harness import running_cluster
from pybroker.testing.debug_process import BrokerProcess
from pybroker.testing.procutil import free_port

# the tests that take `broker` share one per backend (and overrides): each uses topics and
# groups of its own (conftest.py: shared_broker)
pytestmark = [pytest.mark.timeout(300), pytest.mark.shared_broker]

ROOT = Path(__file__).resolve().parent.parent
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def cli(bootstrap: str, *args: str, input: str | None = None, timeout: float = 90):
    """Run `python -m pybroker -b BOOTSTRAP ARGS...` from this checkout."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("PYBROKER_BOOTSTRAP", None)
    return subprocess.run(
        [sys.executable, "-m", "pybroker", "-b", bootstrap, *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env,
    )


def describe(r: subprocess.CompletedProcess) -> str:
    return f"{r.args[3:]} -> {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"


def ok(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 0, describe(r)
    return r.stdout


def js(bootstrap: str, *args: str, input: str | None = None):
    return json.loads(ok(cli(bootstrap, "--output", "json", *args, input=input)))


def failure(r: subprocess.CompletedProcess, code: int = 1) -> str:
    """The one stderr line of a failed command (nothing on stdout)."""
    assert r.returncode == code, describe(r)
    assert r.stdout == "", describe(r)
    lines = r.stderr.strip().splitlines()
    if code == 1:
        assert len(lines) == 1, describe(r)
    return lines[-1]


def rows(table: str) -> list[dict]:
    """The rows of the first table in `table` (header in capitals, two-space columns)."""
    lines = [ln for ln in table.splitlines() if ln.strip()]
    header = lines[0].split()
    return [dict(zip(header, ln.split(), strict=False)) for ln in lines[1:]]


def sections(text: str) -> dict[str, list[dict]]:
    """TITLE / ==== / table blocks of a human `describe` output."""
    out: dict[str, list[dict]] = {}
    for block in text.strip().split("\n\n"):
        title, _underline, *body = block.strip().splitlines()
        out[title] = rows("\n".join(body)) if body else []
    return out


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    """One Apache Kafka 3.9 node for the module."""
    from pybroker.testing.kafka_reference import start_kafka

    with java.deps_or_fail():
        java.classpath()
    # an authorizer, so ACLs can be compared (ANONYMOUS, the PLAINTEXT listener's
    # principal, is a super user: every other command is allowed as before)
    ref = start_kafka(
        tmp_path_factory.mktemp("kafka"),
        overrides={
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS",
        },
    )
    try:
        yield ref
    finally:
        ref.stop(check=False)


# -- usage ------------------------------------------------------------------------------------


def test_usage_errors_exit_2_and_an_unreachable_broker_exits_1():
    port = "127.0.0.1:1"  # nothing listens on port 1
    for args in (
        ["topics"],
        ["topics", "frobnicate"],
        ["topics", "create"],
        ["topics", "create", "t", "-p", "three"],
        ["groups", "reset-offsets", "g", "--topic", "t"],  # no --to-*
        ["groups", "reset-offsets", "g", "--topic", "t", "--to-earliest", "--to-latest"],
        ["consume", "t", "--format", "xml"],
        ["produce", "t", "--compression", "brotli"],
        ["--output", "yaml", "cluster"],
        ["topics", "alter-config", "t"],  # nothing to change
    ):
        r = cli(port, *args)
        assert r.returncode == 2, describe(r)
        assert r.stdout == "" and "error" in r.stderr, describe(r)
    line = failure(cli(port, "topics", "list"))
    assert line.startswith("error: cannot connect to 127.0.0.1:1"), line


# -- topics -----------------------------------------------------------------------------------


@pytest.mark.multicore
def test_topics_create_list_describe_alter_delete(broker):
    b = broker.bootstrap
    topic = unique("cli")
    assert rows(
        ok(cli(b, "topics", "create", topic, "-p", "3", "-r", "1", "-c", "retention.ms=3600000"))
    ) == [{"TOPIC": topic, "STATUS": "OK"}]
    line = failure(cli(b, "topics", "create", topic, "-p", "3"))
    assert line == f"error: TOPIC_ALREADY_EXISTS: Topic '{topic}' already exists.", line
    line = failure(cli(b, "topics", "create", unique("cli"), "-c", "no.such.config=1"))
    assert line.startswith("error: INVALID_CONFIG: "), line

    listed = {r["NAME"]: r for r in rows(ok(cli(b, "topics", "list")))}
    assert listed[topic] == {"NAME": topic, "PARTITIONS": "3", "REPLICAS": "1"}
    assert {"name": topic, "partitions": 3, "replicas": 1, "internal": False} in js(
        b, "topics", "list"
    )

    d = js(b, "topics", "describe", topic)
    assert d["name"] == topic and not d["internal"]
    assert [p["partition"] for p in d["partitions"]] == [0, 1, 2]
    for p in d["partitions"]:  # (a multi-core node: any of its brokers leads)
        leader = p["leader"]
        assert leader in broker.broker_ids and p["replicas"] == p["isr"] == [leader], d
        assert p["log_start_offset"] == 0 and p["high_watermark"] == 0, d
    configs = {c["name"]: c for c in d["configs"]}
    assert configs["retention.ms"]["value"] == "3600000"
    assert configs["retention.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG"
    assert configs["cleanup.policy"]["source"] == "DEFAULT_CONFIG"

    text = sections(ok(cli(b, "topics", "describe", topic)))
    assert text["SUMMARY"][0]["NAME"] == topic and text["SUMMARY"][0]["PARTITIONS"] == "3"
    assert {"KEY": "retention.ms", "VALUE": "3600000", "SOURCE": "DYNAMIC_TOPIC_CONFIG"} in (
        text["CONFIGS"]
    )
    assert [r["PARTITION"] for r in text["PARTITIONS"]] == ["0", "1", "2"]

    ok(
        cli(
            b,
            "topics",
            "alter-config",
            topic,
            "--set",
            "cleanup.policy=compact",
            "--delete",
            "retention.ms",
        )
    )
    configs = {c["name"]: c for c in js(b, "topics", "describe", topic)["configs"]}
    assert configs["cleanup.policy"]["value"] == "compact"
    assert configs["cleanup.policy"]["source"] == "DYNAMIC_TOPIC_CONFIG"
    assert configs["retention.ms"]["source"] == "DEFAULT_CONFIG"
    line = failure(cli(b, "topics", "alter-config", topic, "--set", "cleanup.policy=bogus"))
    assert line.startswith("error: INVALID_CONFIG: "), line

    assert js(b, "topics", "delete", topic) == {"topic": topic, "status": "OK"}
    wait_until(
        lambda: topic not in {t["name"] for t in js(b, "topics", "list")}, 30, 0.2, "deleted"
    )
    line = failure(cli(b, "topics", "describe", topic))
    assert line.startswith("error: UNKNOWN_TOPIC_OR_PARTITION: "), line
    line = failure(cli(b, "topics", "delete", topic))
    assert line.startswith("error: UNKNOWN_TOPIC_OR_PARTITION: "), line


# -- produce and consume ----------------------------------------------------------------------


def _read_all(bootstrap: str, topic: str, partitions: int) -> list:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=3000
    )
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        out = []
        while sum(consumer.position(tp) for tp in tps) < sum(ends.values()):
            for batch in consumer.poll(timeout_ms=1000).values():
                out.extend(batch)
        return sorted(out, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()


@pytest.mark.parametrize("codec", CODECS)
def test_produce_lines_read_back_by_kafka_python(broker, codec):
    b, topic = broker.bootstrap, unique("prod")
    ok(cli(b, "topics", "create", topic, "-p", "4"))
    lines = [f"key{i}|value {i}" for i in range(40)] + ["no separator here", "|empty key"]
    r = js(
        b,
        "produce",
        topic,
        "-k",
        "|",
        "-H",
        "src=cli",
        "-H",
        "n=1",
        "--compression",
        codec,
        input="\n".join(lines) + "\n",
    )
    assert r["records"] == len(lines)
    assert sum(p["records"] for p in r["partitions"]) == len(lines)

    got = _read_all(b, topic, 4)
    assert len(got) == len(lines)
    by_value = {rec.value.decode(): rec for rec in got}
    for i in range(40):
        rec = by_value[f"value {i}"]
        assert rec.key == f"key{i}".encode()
        assert rec.partition == (murmur2(rec.key) & 0x7FFFFFFF) % 4  # Kafka's default partitioner
        assert rec.headers == [("src", b"cli"), ("n", b"1")]
    assert by_value["no separator here"].key is None
    assert by_value["empty key"].key == b""
    # the offsets the CLI reported are the ones stored
    for p in r["partitions"]:
        stored = [rec.offset for rec in got if rec.partition == p["partition"]]
        assert (p["first_offset"], p["last_offset"]) == (stored[0], stored[-1])


def test_produce_to_one_partition_acks_and_errors(broker):
    b, topic = broker.bootstrap, unique("prod")
    ok(cli(b, "topics", "create", topic, "-p", "3"))
    r = cli(b, "produce", topic, "--partition", "2", "--acks", "1", input="a\nb\nc")
    assert r.stderr == "", describe(r)  # no progress when stderr is not a terminal
    out = rows(ok(r))
    assert out == [{"PARTITION": "2", "RECORDS": "3", "FIRST-OFFSET": "0", "LAST-OFFSET": "2"}]
    ok(cli(b, "produce", topic, "--partition", "1", "--acks", "0", input="x\ny\n"))
    wait_until(lambda: len(_read_all(b, topic, 3)) == 5, 30, 0.2, "acks=0 records stored")
    got = _read_all(b, topic, 3)
    assert [(r.partition, r.value) for r in got] == [
        (1, b"x"),
        (1, b"y"),
        (2, b"a"),
        (2, b"b"),
        (2, b"c"),
    ]
    line = failure(cli(b, "produce", topic, "--partition", "7", input="a\n"))
    assert line.startswith("error: UNKNOWN_TOPIC_OR_PARTITION: "), line
    line = failure(cli(b, "produce", unique("absent"), input="a\n"))
    assert line.startswith("error: UNKNOWN_TOPIC_OR_PARTITION: "), line


def test_produce_batches_stay_under_batch_size(broker):
    """A topic whose segments are smaller than one batch of every line refuses that batch
    (RECORD_LIST_TOO_LARGE, as Kafka); --batch-size / -X batch.size split the lines into
    batches under it, sent in order."""
    b, topic = broker.bootstrap, unique("small-seg")
    ok(cli(b, "topics", "create", topic, "-p", "1", "-c", "segment.bytes=2048"))
    lines = "".join(f"key{i}:value number {i:04d} " + "x" * 40 + "\n" for i in range(100))
    line = failure(cli(b, "produce", topic, "-k", ":", input=lines))
    assert line.startswith("error: RECORD_LIST_TOO_LARGE: "), line
    r = js(b, "produce", topic, "-k", ":", "--batch-size", "1500", input=lines)
    assert r["partitions"] == [{"partition": 0, "records": 100, "first_offset": 0,
                                "last_offset": 99}]  # fmt: skip
    js(b, "-X", "batch.size=1500", "produce", topic, "-k", ":", "--compression", "gzip",
       input=lines)  # fmt: skip
    got = [
        json.loads(x)
        for x in ok(cli(b, "consume", topic, "--from-beginning", "-e", "--format", "json"))
        .splitlines()
    ]  # fmt: skip
    assert [(x["offset"], x["key"]) for x in got] == [(i, f"key{i % 100}") for i in range(200)]
    # the log holds many batches (not one), each under its segment
    d = js(b, "topics", "describe", topic)
    assert d["partitions"][0]["high_watermark"] == 200


def test_consume_isolation_levels(broker):
    """read_committed (Kafka's consumer setting) hides aborted and open transactions and stops
    -e at the last stable offset; read_uncommitted, the default, shows every record."""
    from confluent_kafka import Producer

    b, topic = broker.bootstrap, unique("txn")
    ok(cli(b, "topics", "create", topic, "-p", "1"))
    producer = Producer({"bootstrap.servers": b, "transactional.id": unique("tx-cli")})
    producer.init_transactions(30)
    for values, commit in ((["c1", "c2"], True), (["a1"], False), (["c3"], True)):
        producer.begin_transaction()
        for v in values:
            producer.produce(topic, v.encode())
        producer.flush(30)  # (an abort drops what was not sent yet)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, b"open1")
    producer.flush(30)
    try:
        read = ["consume", topic, "--from-beginning", "-e"]
        assert ok(cli(b, *read, "--isolation-level", "read_committed")).split() == [
            "c1",
            "c2",
            "c3",
        ]
        assert ok(cli(b, "-X", "isolation.level=read_committed", *read)).split() == [
            "c1",
            "c2",
            "c3",
        ]
        assert ok(cli(b, *read)).split() == ["c1", "c2", "a1", "c3", "open1"]
    finally:
        producer.abort_transaction(30)
    assert ok(cli(b, *read, "--isolation-level", "read_committed")).split() == ["c1", "c2", "c3"]


def test_progress_only_on_a_terminal(broker):
    b, topic = broker.bootstrap, unique("tty")
    ok(cli(b, "topics", "create", topic, "-p", "1"))
    leader, follower = pty.openpty()
    try:
        r = subprocess.run(
            [sys.executable, "-m", "pybroker", "-b", b, "produce", topic],
            input=b"one\ntwo\n",
            stdout=subprocess.PIPE,
            stderr=follower,
            cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
            timeout=60,
        )
        os.close(follower)
        follower = -1
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: the writer side is closed
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
    assert r.returncode == 0, r
    assert b"produced 2 records to " + topic.encode() in seen, seen
    assert rows(r.stdout.decode())[0]["RECORDS"] == "2"


def _kafka_python_produce(bootstrap: str, topic: str, records: list[tuple]) -> None:
    p = KafkaProducer(bootstrap_servers=bootstrap)
    try:
        for partition, key, value, ts in records:
            p.send(
                topic, key=key, value=value, partition=partition, timestamp_ms=ts,
                headers=[("h", b"v")],
            )  # fmt: skip
        p.flush(30)
    finally:
        p.close()


def test_consume_positions_formats_and_limits(broker):
    b, topic = broker.bootstrap, unique("cons")
    ok(cli(b, "topics", "create", topic, "-p", "2"))
    base = 1_700_000_000_000
    recs = [(i % 2, f"k{i}".encode(), f"v{i}".encode(), base + i * 1000) for i in range(10)]
    _kafka_python_produce(b, topic, recs)

    out = ok(cli(b, "consume", topic, "--from-beginning", "-e"))
    assert sorted(out.splitlines()) == sorted(f"v{i}" for i in range(10))
    lines = [
        json.loads(x)
        for x in ok(
            cli(b, "consume", topic, "--from-beginning", "-e", "--format", "json", "-p", "1")
        ).splitlines()
    ]
    assert lines == [
        {
            "topic": topic,
            "partition": 1,
            "offset": n,
            "timestamp": base + i * 1000,
            "key": f"k{i}",
            "value": f"v{i}",
            "headers": [["h", "v"]],
        }
        for n, i in enumerate(range(1, 10, 2))
    ]
    # -e without a start position: the log end, so nothing
    assert ok(cli(b, "consume", topic, "-e")) == ""
    assert ok(cli(b, "consume", topic, "-p", "0", "--offset", "3", "-e")) == "v6\nv8\n"
    # the first record at or after the time (v4 on partition 0, v5 on partition 1)
    out = ok(cli(b, "consume", topic, "--timestamp", str(base + 4000), "-e", "--format", "json"))
    assert sorted(json.loads(x)["value"] for x in out.splitlines()) == [
        "v4",
        "v5",
        "v6",
        "v7",
        "v8",
        "v9",
    ]
    assert ok(cli(b, "consume", topic, "--from-beginning", "-p", "0", "-n", "2")) == "v0\nv2\n"
    line = failure(cli(b, "consume", topic, "-p", "5", "-e"))
    assert line.startswith("error: UNKNOWN_TOPIC_OR_PARTITION: "), line
    line = failure(cli(b, "consume", topic, "-p", "0", "--offset", "99", "-e"))
    assert line.startswith("error: OFFSET_OUT_OF_RANGE: "), line


class Follower:
    """`pybroker consume TOPIC --format json` running in the background (follow mode); the
    JSON lines it printed so far in `got`.  Its stderr goes to a file (a pipe nobody reads
    until the end could fill and stop it); `seen(n)` is a wait condition that fails at once,
    with that stderr, if the follower exited."""

    def __init__(self, bootstrap: str, topic: str, *args: str):
        self.err = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pybroker", "-b", bootstrap, "consume", topic, "--format", "json", *args],
            stdout=subprocess.PIPE,
            stderr=self.err,
            cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
        )  # fmt: skip
        self.got: list[dict] = []
        self._reader = threading.Thread(
            target=lambda: self.got.extend(json.loads(x) for x in self.proc.stdout), daemon=True
        )
        self._reader.start()

    def seen(self, n: int) -> bool:
        """Whether n records were printed; fails the test if the follower exited instead."""
        if len(self.got) >= n:
            return True
        if self.proc.poll() is not None:
            self._reader.join(10)
            pytest.fail(f"the follower exited with {self.proc.returncode} after {len(self.got)} "
                        f"records: {self.stderr()[-3000:]}", pytrace=False)  # fmt: skip
        return False

    def stderr(self) -> str:
        self.err.seek(0)
        return self.err.read().decode(errors="replace")

    def interrupt(self) -> tuple[int, str]:
        """Ctrl-C; (exit code, stderr)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            rc = self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait(10)
        self._reader.join(10)
        err = self.stderr()
        self.err.close()
        return rc, err


def test_consume_follows_until_interrupted(broker):
    b, topic = broker.bootstrap, unique("follow")
    ok(cli(b, "topics", "create", topic, "-p", "1"))
    f = Follower(b, topic)
    try:
        # it starts at the log end: produce until the follower has printed something
        def produced_and_seen():
            ok(cli(b, "produce", topic, "-k", ":", input="k:live\n"))
            return f.seen(1)

        # a deadline, not a timing: each round starts a CLI process (seconds at load 10+)
        wait_until(produced_and_seen, 180, 1.0, "followed records")
        assert {(r["key"], r["value"]) for r in f.got} == {("k", "live")}
        assert f.proc.poll() is None  # still following
    finally:
        rc, err = f.interrupt()
    assert rc == 0, err


def test_consume_follows_a_leader_change(tmp_path):
    """kill -9 of the partition leader while following: the consumer finds the new leader and
    prints what is produced there."""
    with running_cluster(tmp_path, size=2, overrides={"replica.lag.time.max.ms": 2000}) as c:
        topic = unique("move")
        c.create_topic(topic, partitions=1, rf=2)
        f = Follower(c.bootstrap, topic, "--from-beginning")
        try:
            ok(cli(c.bootstrap, "produce", topic, input="".join(f"a{i}\n" for i in range(5))))
            wait_until(lambda: f.seen(5), 180, 0.1, "records before the kill")
            old = c.leader_of(topic, 0).leader
            c.kill9(old)
            c.wait_new_leader(topic, 0, old)
            survivor = f"127.0.0.1:{c.brokers[1 - old].port}"
            ok(cli(survivor, "produce", topic, input="".join(f"b{i}\n" for i in range(5))))
            wait_until(lambda: f.seen(10), 180, 0.1, "records after the kill")
            assert [(r["offset"], r["value"]) for r in f.got] == [
                (i, f"{'a' if i < 5 else 'b'}{i % 5}") for i in range(10)
            ]
        finally:
            rc, err = f.interrupt()
        assert rc == 0, err


# -- groups -----------------------------------------------------------------------------------


def _kafka_describe(bootstrap: str, group: str) -> dict[tuple[str, int], dict]:
    """kafka-consumer-groups --describe: {(topic, partition): row}."""
    r = java.run_main(
        java.CONSUMER_GROUP_COMMAND,
        ["--bootstrap-server", bootstrap, "--describe", "--group", group],
        timeout=120,
    )
    assert r.ok, r.describe()
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    out, header = {}, None
    for ln in lines:
        fields = ln.split()
        if fields[0] == "GROUP":
            header = fields
        elif header:
            row = dict(zip(header, fields, strict=False))
            out[(row["TOPIC"], int(row["PARTITION"]))] = row
    return out


@pytest.mark.broker_overrides(GROUP_BROKER_OVERRIDES)
def test_groups_list_describe_reset_delete(broker):
    b, topic, group = broker.bootstrap, unique("grp"), unique("g")
    ok(cli(b, "topics", "create", topic, "-p", "3"))
    ok(cli(b, "produce", topic, "--partition", "0", input="".join(f"r{i}\n" for i in range(30))))
    for p in range(3):
        ok(cli(b, "produce", topic, "--partition", str(p), input="a\nb\nc\nd\ne\n"))
    ends = {
        p["partition"]: p["high_watermark"]
        for p in js(b, "topics", "describe", topic)["partitions"]
    }
    assert sum(ends.values()) == 45

    # two live members of a consumer group
    members = [ThreadMember(b, topic, group, f"m{i}") for i in range(2)]
    try:
        sets = wait_stable(members, 3, 60)
        wait_until(lambda: sum(len(m.records()) for m in members) == 45, 60, what="consumed")
        listed = {g["group"]: g for g in js(b, "groups", "list")}
        assert listed[group]["state"] == "Stable" and listed[group]["protocol_type"] == "consumer"
        d = js(b, "groups", "describe", group)
        assert d["state"] == "Stable" and d["protocol_type"] == "consumer"
        assert d["protocol"] in ("range", "roundrobin", "sticky", "cooperative-sticky")
        assigned = {
            m["client_id"]: {p for a in m["assignment"] for p in a["partitions"]}
            for m in d["members"]
        }
        assert sorted(map(frozenset, assigned.values()), key=sorted) == sorted(sets, key=sorted)
        line = failure(cli(b, "groups", "reset-offsets", group, "--topic", topic, "--to-earliest"))
        assert "inactive" in line and "Stable" in line, line
        line = failure(cli(b, "groups", "delete", group))
        assert line.startswith("error: NON_EMPTY_GROUP: "), line
    finally:
        for m in members:
            m.close()
        close_all(members)

    d = js(b, "groups", "describe", group)
    assert d["state"] == "Empty" and d["members"] == []
    # every record was committed: no lag; 7 more records make a lag of 7 on partition 1
    assert d["total_lag"] == 0, d
    ok(cli(b, "produce", topic, "--partition", "1", input="x\n" * 7))
    d = js(b, "groups", "describe", group)
    assert d["total_lag"] == 7
    mine = {(r["topic"], r["partition"]): r for r in d["offsets"]}
    kafka_view = _kafka_describe(b, group)
    assert set(mine) == set(kafka_view) == {(topic, p) for p in range(3)}
    for tp, row in kafka_view.items():
        assert str(mine[tp]["current_offset"]) == row["CURRENT-OFFSET"], (mine, kafka_view)
        assert str(mine[tp]["log_end_offset"]) == row["LOG-END-OFFSET"], (mine, kafka_view)
        assert str(mine[tp]["lag"]) == row["LAG"], (mine, kafka_view)
    text = sections(ok(cli(b, "groups", "describe", group)))
    assert text["GROUP"][0]["TOTAL-LAG"] == "7" and text["GROUP"][0]["STATE"] == "Empty"
    assert {(r["TOPIC"], r["PARTITION"], r["LAG"]) for r in text["OFFSETS"]} == {
        (topic, "0", "0"),
        (topic, "1", "7"),
        (topic, "2", "0"),
    }

    def committed():
        return {
            r["partition"]: r["current_offset"]
            for r in js(b, "groups", "describe", group)["offsets"]
        }

    ends = {
        p["partition"]: p["high_watermark"]
        for p in js(b, "topics", "describe", topic)["partitions"]
    }
    dry = js(b, "groups", "reset-offsets", group, "--topic", topic, "--to-earliest", "--dry-run")
    assert dry["dry_run"] and [(r["partition"], r["old"], r["new"]) for r in dry["offsets"]] == [
        (p, ends[p] - (7 if p == 1 else 0), 0) for p in range(3)
    ]
    assert committed() == {p: ends[p] - (7 if p == 1 else 0) for p in range(3)}  # unchanged
    js(b, "groups", "reset-offsets", group, "--topic", topic, "--to-earliest")
    assert committed() == {0: 0, 1: 0, 2: 0}
    js(b, "groups", "reset-offsets", group, "--topic", f"{topic}:1", "--shift-by", "4")
    assert committed() == {0: 0, 1: 4, 2: 0}
    js(b, "groups", "reset-offsets", group, "--topic", f"{topic}:1", "--shift-by", "-10")
    assert committed() == {0: 0, 1: 0, 2: 0}  # clamped to the log start
    js(b, "groups", "reset-offsets", group, "--topic", topic, "--to-latest")
    assert committed() == ends
    js(
        b,
        "groups",
        "reset-offsets",
        group,
        "--topic",
        topic,
        "--to-datetime",
        "2000-01-01T00:00:00",
    )
    assert committed() == {0: 0, 1: 0, 2: 0}  # every record is newer
    assert js(b, "groups", "describe", group)["total_lag"] == sum(ends.values())

    # consume -g: starts at the committed offsets and commits where it stopped
    out = ok(cli(b, "consume", topic, "-g", group, "-p", "2", "-n", "3"))
    assert out == "a\nb\nc\n"
    assert committed()[2] == 3

    assert js(b, "groups", "delete", group) == {"group": group, "status": "OK"}
    line = failure(cli(b, "groups", "describe", group))
    assert line.startswith("error: GROUP_ID_NOT_FOUND: "), line
    line = failure(cli(b, "groups", "delete", group))
    assert line.startswith("error: GROUP_ID_NOT_FOUND: "), line


# -- cluster ----------------------------------------------------------------------------------


@pytest.mark.multicore
@pytest.mark.shared_broker(False)  # a broker of its own: no topic led by a rack yet
def test_cluster_single_broker(broker):
    """One node: one broker, or a multi-core node's brokers, whose rack is the node."""
    c = js(broker.bootstrap, "cluster")
    ids = broker.broker_ids
    rack = None if len(ids) == 1 else f"127.0.0.1:{broker.port}"
    assert c["brokers"] == [
        {"id": i, "host": "127.0.0.1", "port": broker.port + k, "rack": rack}
        for k, i in enumerate(ids)
    ]
    assert c["controller_id"] in ids and c["cluster_id"]
    assert c["racks"] == ([] if rack is None else [{"rack": rack, "brokers": ids, "leaders": 0}])
    assert c["under_replicated"] == [] and c["offline"] == []
    text = sections(ok(cli(broker.bootstrap, "cluster")))
    assert text["BROKERS (* controller)"] == [
        {
            "ID": f"{i}*" if i == c["controller_id"] else str(i),
            "ADDRESS": f"127.0.0.1:{broker.port + k}",
            "RACK": rack or "-",
        }
        for k, i in enumerate(ids)
    ]
    if rack is not None:
        assert text["RACKS (a multi-core node is one)"] == [
            {"RACK": rack, "BROKERS": ",".join(map(str, ids)), "LEADERS": "0"}
        ]


def test_cluster_under_replicated_partitions(tmp_path):
    overrides = {"replica.lag.time.max.ms": 2000, "broker.rack": "r1"}
    with running_cluster(tmp_path, size=2, overrides=overrides) as c:
        topic = unique("urp")
        c.create_topic(topic, partitions=2, rf=2)
        solo = unique("solo")
        c.create_topic(solo, partitions=4, rf=1)
        on_1 = {
            p["partition"] for p in js(c.bootstrap, "topics", "describe", solo)["partitions"]
            if p["replicas"] == [1]
        }  # fmt: skip
        assert on_1, "round-robin placement puts partitions on both brokers"
        first = js(c.bootstrap, "cluster")
        assert [(x["id"], x["rack"]) for x in first["brokers"]] == [(0, "r1"), (1, "r1")]
        assert first["controller_id"] in (0, 1) and first["under_replicated"] == []
        c.kill9(1)
        bootstrap = f"127.0.0.1:{c.brokers[0].port}"

        def under():
            got = js(bootstrap, "cluster")["under_replicated"]
            return [u for u in got if u["topic"] == topic] if len(got) >= 2 else None

        found = wait_until(under, 60, 0.5, "under-replicated partitions")
        assert [(u["partition"], u["leader"], sorted(u["replicas"]), u["isr"]) for u in found] == [
            (0, 0, [0, 1], [0]),
            (1, 0, [0, 1], [0]),
        ]
        text = sections(ok(cli(bootstrap, "cluster")))
        assert len(text["UNDER-REPLICATED PARTITIONS"]) >= 2
        offline = js(bootstrap, "cluster")["offline"]
        assert [(o["partition"], o["replicas"]) for o in offline if o["topic"] == solo] == [
            (p, [1]) for p in sorted(on_1)
        ]
        assert {r["PARTITION"] for r in text["OFFLINE PARTITIONS"] if r["TOPIC"] == solo} == {
            str(p) for p in on_1
        }
        # describe still answers for a topic with leaderless partitions: no offsets for them
        d = js(bootstrap, "topics", "describe", solo)
        for p in d["partitions"]:
            if p["partition"] in on_1:
                assert (p["leader"], p["high_watermark"]) == (-1, None), d
            else:
                assert (p["leader"], p["high_watermark"]) == (0, 0), d


# -- the same commands against Apache Kafka 3.9 -----------------------------------------------


def _scenario(bootstrap: str, topic: str, group: str) -> dict:
    """Create a topic, produce keyed records with the CLI, consume some with a group, and
    collect what the read-only commands say, normalised to what both brokers must agree on."""
    ok(
        cli(
            bootstrap,
            "topics",
            "create",
            topic,
            "-p",
            "3",
            "-r",
            "1",
            "-c",
            "retention.ms=7200000",
            "-c",
            "cleanup.policy=compact",
        )
    )
    line = failure(cli(bootstrap, "topics", "create", topic))
    lines = "".join(f"key{i}:value{i}\n" for i in range(60))
    produced = js(bootstrap, "produce", topic, "-k", ":", input=lines)
    consumed = [
        json.loads(x)
        for x in ok(
            cli(bootstrap, "consume", topic, "--from-beginning", "-e", "--format", "json")
        ).splitlines()
    ]
    grouped = ok(
        cli(bootstrap, "consume", topic, "-g", group, "--from-beginning", "-p", "0", "-n", "5")
    )
    d = js(bootstrap, "topics", "describe", topic)
    g = js(bootstrap, "groups", "describe", group)
    listed = {x["group"]: x for x in js(bootstrap, "groups", "list")}
    cluster = js(bootstrap, "cluster")
    tool = _kafka_describe(bootstrap, group)  # kafka-consumer-groups --describe
    assert {(r["partition"], str(r["current_offset"]), str(r["lag"])) for r in g["offsets"]} == {
        (p, row["CURRENT-OFFSET"], row["LAG"]) for (t, p), row in tool.items() if t == topic
    }, (g, tool)
    result = {
        "duplicate": line,
        "produced": {
            (p["partition"], p["first_offset"], p["last_offset"]) for p in produced["partitions"]
        },
        "consumed": sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in consumed),
        "grouped": grouped,
        "listed": {x["name"]: x for x in js(bootstrap, "topics", "list")}[topic],
        "partitions": [
            (
                p["partition"],
                len(p["replicas"]),
                len(p["isr"]),
                p["log_start_offset"],
                p["high_watermark"],
            )
            for p in d["partitions"]
        ],
        "overrides": {
            c["name"]: c["value"] for c in d["configs"] if c["source"] == "DYNAMIC_TOPIC_CONFIG"
        },
        "config_names": {c["name"] for c in d["configs"]},
        "group": (
            g["state"],
            g["members"],
            [
                (r["partition"], r["current_offset"], r["log_end_offset"], r["lag"])
                for r in g["offsets"]
            ],
            g["total_lag"],
        ),
        "listed_group": (listed[group]["state"], listed[group]["protocol_type"]),
        "cluster": (
            len(cluster["brokers"]),
            cluster["controller_id"] in {x["id"] for x in cluster["brokers"]},
            bool(cluster["cluster_id"]),
            cluster["under_replicated"],
        ),
    }
    assert js(bootstrap, "topics", "delete", topic) == {"topic": topic, "status": "OK"}
    wait_until(
        lambda: topic not in {t["name"] for t in js(bootstrap, "topics", "list")},
        30,
        0.2,
        "deleted",
    )
    return result


def test_same_answers_as_kafka(broker, kafka):
    topic, group = unique("same"), unique("same-g")
    ours = _scenario(broker.bootstrap, topic, group)
    theirs = _scenario(kafka.bootstrap, topic, group)
    config_names = (ours.pop("config_names"), theirs.pop("config_names"))
    assert ours == theirs
    # every topic config pybroker reports is one Kafka reports (Kafka has more: e.g. preallocate)
    assert config_names[0] <= config_names[1], config_names[0] - config_names[1]


# -- TLS and SASL -----------------------------------------------------------------------------

SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule"


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """A broker with a SASL_SSL listener (SCRAM users admin and alice, ACLs, admin a super
    user), as README's "A secured broker" section configures one."""
    from pybroker.testing.tls_certs import make_certs

    tmp = tmp_path_factory.mktemp("secured")
    certs = make_certs(tmp / "certs")
    plain, secure = free_port(), free_port()
    b = BrokerProcess(
        tmp / "broker",
        port=plain,
        overrides={
            "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_SSL://127.0.0.1:{secure}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_SSL://localhost:{secure}",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
                f'{SCRAM_JAAS} required username="admin" password="admin-secret";'
            ),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(certs.server),
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:admin",
        },
    )
    props = tmp / "server.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in b.settings().items()))
    r = subprocess.run(
        [sys.executable, "-m", "pybroker", "add-scram", str(props),
         "SCRAM-SHA-512=[name=admin,password=admin-secret]",
         "SCRAM-SHA-256=[name=alice,password=alice-secret]"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    b.start()
    admin = tmp / "admin.properties"  # Kafka's --command-config format
    admin.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        f'sasl.jaas.config={SCRAM_JAAS} required username="admin" password="admin-secret";\n'
        f"ssl.truststore.type=PEM\nssl.truststore.location={certs.ca}\n"
    )
    try:
        yield {"broker": b, "bootstrap": f"localhost:{secure}", "certs": certs, "admin": admin}
    finally:
        b.stop()
        b.cleanup()


def _alice(s, password: str = "alice-secret", ca=None) -> list[str]:
    """kcat-style -X settings for alice."""
    return [
        "-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanisms=SCRAM-SHA-256",
        "-X", "sasl.username=alice", "-X", f"sasl.password={password}",
        "-X", f"ssl.ca.location={ca or s['certs'].ca}",
    ]  # fmt: skip


def test_sasl_ssl_with_a_command_config_file(secured):
    b, admin = secured["bootstrap"], ["--command-config", str(secured["admin"])]
    topic = unique("sec")
    ok(cli(b, *admin, "topics", "create", topic, "-p", "2"))
    ok(cli(b, *admin, "produce", topic, "-k", ":", input="k1:v1\nk2:v2\n"))
    got = json.loads(
        "["
        + ",".join(
            ok(
                cli(b, *admin, "consume", topic, "--from-beginning", "-e", "--format", "json")
            ).splitlines()
        )
        + "]"
    )
    assert sorted((r["key"], r["value"]) for r in got) == [("k1", "v1"), ("k2", "v2")]
    c = js(b, *admin, "cluster")
    # the SASL_SSL listener's advertised address, not the PLAINTEXT one
    assert [(x["host"], x["port"]) for x in c["brokers"]] == [("localhost", int(b.split(":")[1]))]


def test_sasl_errors_name_kafkas_error(secured):
    b = secured["bootstrap"]
    line = failure(cli(b, *_alice(secured, "wrong"), "topics", "list"))
    assert line.startswith("error: SASL_AUTHENTICATION_FAILED: "), line
    # alice logs in, but has no ACL to create topics
    line = failure(cli(b, *_alice(secured), "topics", "create", unique("denied")))
    assert line.startswith("error: TOPIC_AUTHORIZATION_FAILED: "), line
    assert ok(cli(b, *_alice(secured), "topics", "list")) == "NAME  PARTITIONS  REPLICAS\n"
    # a server certificate the given CA did not sign
    line = failure(cli(b, *_alice(secured, ca=secured["certs"].other_ca), "topics", "list"))
    assert line.startswith("error: TLS handshake with ") and "CERTIFICATE_VERIFY_FAILED" in line
    # a typo in a setting is a usage error
    r = cli(b, "-X", "sasl.pasword=x", "topics", "list")
    assert r.returncode == 2 and "sasl.pasword" in r.stderr, describe(r)


# -- acls and users ---------------------------------------------------------------------------


def _acl_rows(out: str) -> set[tuple]:
    return {tuple(r.values()) for r in rows(out)} if out.strip() else set()


def test_acls_and_users_with_the_cli(secured):
    b, admin = secured["bootstrap"], ["--command-config", str(secured["admin"])]
    bob, prefix = unique("bob"), unique("bob-topics") + "-"
    topic, other = prefix + "orders", unique("elsewhere")

    def as_bob(mechanism: str = "SCRAM-SHA-256", password: str = "bob-secret") -> list[str]:
        return ["-X", "security.protocol=SASL_SSL", "-X", f"sasl.mechanism={mechanism}",
                "-X", f"sasl.username={bob}", "-X", f"sasl.password={password}",
                "-X", f"ssl.ca.location={secured['certs'].ca}"]  # fmt: skip

    # users: kafka-configs' syntax, two mechanisms at once
    spec = "SCRAM-SHA-256=[iterations=8192,password=bob-secret],SCRAM-SHA-512=[password=bob-secret]"
    ok(cli(b, *admin, "users", "add", bob, spec))
    assert rows(ok(cli(b, *admin, "users", "describe", bob))) == [
        {"USER": bob, "MECHANISM": "SCRAM-SHA-256", "ITERATIONS": "8192"},
        {"USER": bob, "MECHANISM": "SCRAM-SHA-512", "ITERATIONS": "4096"},
    ]
    assert {"user": bob, "mechanism": "SCRAM-SHA-512", "iterations": 4096} in js(
        b, *admin, "users", "list"
    )
    ok(cli(b, *as_bob(), "topics", "list"))  # bob logs in (no ACL needed to list nothing)
    ok(cli(b, *admin, "topics", "create", topic))
    ok(cli(b, *admin, "topics", "create", other))

    # ACLs: a prefixed producer role for bob, found by --principal and by a match filter
    added = ok(cli(b, *admin, "acls", "--add", "--allow-principal", f"User:{bob}", "--producer",
                   "--topic", prefix, "--resource-pattern-type", "prefixed"))  # fmt: skip
    expected = {
        ("TOPIC", prefix, "PREFIXED", f"User:{bob}", "*", op, "ALLOW")
        for op in ("CREATE", "DESCRIBE", "WRITE")
    }
    assert _acl_rows(added) == expected
    assert _acl_rows(ok(cli(b, *admin, "acls", "list", "--principal", f"User:{bob}"))) == expected
    matched = ok(cli(b, *admin, "acls", "list", "--topic", topic, "--resource-pattern-type",
                     "match"))  # fmt: skip
    assert expected <= _acl_rows(matched)
    assert _acl_rows(ok(cli(b, *admin, "acls", "list", "--topic", prefix))) == set()  # literal

    # bob may write under the prefix, not elsewhere; a deny entry wins over the allow
    ok(cli(b, *as_bob(), "produce", topic, input="hello\n"))
    line = failure(cli(b, *as_bob(), "produce", other, input="hello\n"))
    assert line.startswith("error: TOPIC_AUTHORIZATION_FAILED: "), line
    ok(cli(b, *admin, "acls", "add", "--deny-principal", f"User:{bob}", "--operation", "Write",
           "--topic", topic))  # fmt: skip
    line = failure(cli(b, *as_bob(), "produce", topic, input="hello\n"))
    assert line.startswith("error: TOPIC_AUTHORIZATION_FAILED: "), line
    removed = js(b, *admin, "acls", "remove", "--deny-principal", f"User:{bob}", "--operation",
                 "Write", "--topic", topic)  # fmt: skip
    assert [(r["permission"], r["operation"]) for r in removed] == [("DENY", "WRITE")]
    ok(cli(b, *as_bob(), "produce", topic, input="again\n"))

    # remove every ACL of the prefixed resource (no principal: all of them)
    removed = js(b, *admin, "acls", "--remove", "--force", "--topic", prefix,
                 "--resource-pattern-type", "prefixed")  # fmt: skip
    assert {r["operation"] for r in removed} == {"CREATE", "DESCRIBE", "WRITE"}
    assert js(b, *admin, "acls", "list", "--principal", f"User:{bob}") == []

    # credentials removed per mechanism, then all
    ok(cli(b, *admin, "users", "remove", bob, "--mechanism", "SCRAM-SHA-256"))
    line = failure(cli(b, *as_bob(), "topics", "list"))
    assert line.startswith("error: SASL_AUTHENTICATION_FAILED: "), line
    ok(cli(b, *as_bob("SCRAM-SHA-512"), "topics", "list"))
    assert js(b, *admin, "users", "remove", bob) == [
        {"user": bob, "mechanism": "SCRAM-SHA-512", "status": "removed"}
    ]
    line = failure(cli(b, *admin, "users", "describe", bob))
    assert line.startswith("error: RESOURCE_NOT_FOUND: "), line
    # ANONYMOUS (the PLAINTEXT listener) may not describe the cluster's ACLs
    line = failure(cli(secured["broker"].bootstrap, "acls", "list"))
    assert line.startswith("error: CLUSTER_AUTHORIZATION_FAILED"), line


def test_acls_need_an_authorizer(broker):
    line = failure(cli(broker.bootstrap, "acls", "list"))
    assert line.startswith("error: SECURITY_DISABLED: "), line


def _acls_users_scenario(bootstrap: str, auth: list[str], user: str, topic: str) -> dict:
    """acls and users commands whose answers both brokers must agree on."""
    out: dict = {}
    out["users_add"] = js(bootstrap, *auth, "users", "add", user,
                          "SCRAM-SHA-256=[iterations=8192,password=s1]", "--mechanism",
                          "SCRAM-SHA-512", "--password", "s2")  # fmt: skip
    out["users_describe"] = js(bootstrap, *auth, "users", "describe", user)
    out["users_list"] = [x for x in js(bootstrap, *auth, "users", "list") if x["user"] == user]
    principal = f"User:{user}"
    out["acls_add"] = js(bootstrap, *auth, "acls", "add", "--allow-principal", principal,
                         "--consumer", "--topic", topic, "--group", topic + "-g",
                         "--allow-host", "10.0.0.1")  # fmt: skip
    out["acls_add_cluster"] = js(bootstrap, *auth, "acls", "add", "--deny-principal", principal,
                                 "--operation", "Alter", "--cluster")  # fmt: skip
    out["acls_list"] = js(bootstrap, *auth, "acls", "list", "--principal", principal)
    out["acls_list_topic"] = js(bootstrap, *auth, "acls", "list", "--topic", topic)
    out["acls_remove"] = js(bootstrap, *auth, "acls", "remove", "--force", "--topic", topic,
                            "--group", topic + "-g", "--cluster")  # fmt: skip
    out["acls_after"] = js(bootstrap, *auth, "acls", "list", "--principal", principal)
    out["users_remove"] = js(bootstrap, *auth, "users", "remove", user)
    out["users_gone"] = failure(cli(bootstrap, *auth, "users", "describe", user)).split(":")[1]
    return out


def test_acls_and_users_same_answers_as_kafka(secured, kafka):
    user, topic = unique("carol"), unique("acl-topic")
    ours = _acls_users_scenario(
        secured["bootstrap"], ["--command-config", str(secured["admin"])], user, topic
    )
    theirs = _acls_users_scenario(kafka.bootstrap, [], user, topic)
    assert ours == theirs
    assert ours["users_gone"] == " RESOURCE_NOT_FOUND"
    assert len(ours["acls_remove"]) == 4  # Read, Describe on the topic; Read on the group; Alter
