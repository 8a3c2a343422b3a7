"""Kafka's kafka-share-groups tool (org.apache.kafka.tools.consumer.group.ShareGroupCommand,
kafka-tools 4.4.0) against pybroker, its output compared with what it prints for Apache Kafka
4.4 (KRaft, one node on loopback, pybroker/testing/kafka_reference.py) after the same steps:

--reset-offsets --to-offset (a new group), --list, --describe (offsets, state, members) of an
empty group, then of a group with two live share consumers (confluent-kafka) that have
acknowledged everything, --delete and --reset-offsets refused while it has members, then
--delete-offsets, --describe, --delete and --list once they left.

Values that differ between any two clusters are normalized: member ids, client hosts, the
coordinator's address and id, which member got which partition (the assignor's arbitrary
choice: member ids are random) and the order of the member rows (Kafka prints its hash map's
order).  One known difference is masked: once the members acknowledged everything, Kafka still
shows the start offset from before their last acknowledgements (its share-partition writes
the start offset as it was before the batches that write carries; the lag, 0, counts them), and
pybroker the start offset past them (its write carries the state after the acknowledgement);
that step compares the lag and checks pybroker's start offset on its own.  Everything else must
be equal, line by line.  Kafka's side runs once per module, for both pybroker backends.
"""

from __future__ import annotations

import re
import threading
import time

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic

from compat_tests.share_clients import share_offsets, wait_members
from pybroker.testing import java
from pybroker.testing.kafka_reference import start_kafka

ck = pytest.importorskip("confluent_kafka")

pytestmark = [
    pytest.mark.timeout(900),
    pytest.mark.skipif(not java.java_available(), reason="java not found (OpenJDK 17 expected)"),
]

SHARE_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"
TOPIC, GROUP = "tool-topic", "tool-group"


def tool(bootstrap: str, *args: str, main: str = SHARE_GROUP_COMMAND) -> str:
    r = java.run_main(
        main,
        ["--bootstrap-server", bootstrap, *args],
        cp=java.kafka4_classpath(),
        log4j=None,
        jvm_args=[f"-Dlog4j2.configurationFile={java.KAFKA4_TOOLS_LOG4J2}"],
        timeout=180,
    )
    assert not r.timed_out, r.describe()
    err = "\n".join(line for line in r.stderr.splitlines() if "WARN" not in line)
    return f"exit {r.returncode}\n{r.stdout}\n--- stderr\n{err}"


def normalize(text: str, bootstrap: str) -> str:
    text = text.replace(bootstrap, "HOST:PORT")
    text = re.sub(r"HOST:PORT\s+\(\d+\)", "HOST:PORT (ID)", text)
    text = re.sub(r"(?<![\w+/])[A-Za-z0-9+/_=-]{22}(?![\w+/])", "MEMBER", text)  # Uuids
    text = re.sub(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", "MEMBER",
                  text)  # fmt: skip
    text = re.sub(r"/127\.0\.0\.1", "HOST", text)
    text = re.sub(r"\bmember\d\b", "CLIENT", text)  # (which member gets which partition
    text = re.sub(r" +", " ", text)  # is the assignor's arbitrary choice, on Kafka as here)
    # table rows in a stable order (Kafka prints members in its hash map's order)
    lines = text.split("\n")
    rows = [i for i, line in enumerate(lines) if line.startswith(GROUP + " ")]
    for i, line in zip(rows, sorted(lines[i] for i in rows), strict=True):
        lines[i] = line
    return "\n".join(lines)


def mask_start_offsets(text: str) -> str:
    return re.sub(rf"^({GROUP} {TOPIC} \d+) \d+ ", r"\1 S ", text, flags=re.M)


class Members:
    """Share consumers (confluent-kafka) in threads, accepting every record, until stopped."""

    def __init__(self, bootstrap: str, n: int) -> None:
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._run, args=(bootstrap, i), daemon=True) for i in range(n)
        ]
        for t in self.threads:
            t.start()

    def _run(self, bootstrap: str, i: int) -> None:
        sc = ck.ShareConsumer(
            {"bootstrap.servers": bootstrap, "group.id": GROUP, "client.id": f"member{i}",
             "share.acknowledgement.mode": "explicit", "log_level": 2}
        )  # fmt: skip
        sc.subscribe([TOPIC])
        try:
            while not self.stop.is_set():
                msgs = sc.poll(0.3)
                for m in msgs:
                    if not m.error():
                        sc.acknowledge(m, ck.AcknowledgeType.ACCEPT)
                if msgs:
                    sc.commit_sync()
        finally:
            sc.close()

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)


def scenario(bootstrap: str) -> list[tuple[str, str]]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(TOPIC, 2, 1)])
    admin.close()
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(100):
        p.send(TOPIC, b"r%d" % i, partition=i % 2)
    p.flush()
    p.close()
    out = []

    def step(name: str, *args: str, main: str = SHARE_GROUP_COMMAND) -> None:
        out.append((name, normalize(tool(bootstrap, *args, main=main), bootstrap)))

    step("reset", "--reset-offsets", "--group", GROUP, "--topic", TOPIC, "--to-offset", "20",
         "--execute")  # fmt: skip
    step("list", "--list")
    step("describe", "--describe", "--group", GROUP)
    step("describe state", "--describe", "--group", GROUP, "--state")
    step("describe members", "--describe", "--group", GROUP, "--members")
    members = Members(bootstrap, 2)
    try:
        wait_members(bootstrap, GROUP, 2)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            offsets = share_offsets(bootstrap, GROUP)
            if all(o["lag"] == 0 for o in offsets.values()):
                break
            time.sleep(0.5)
        step("describe (members consumed all)", "--describe", "--group", GROUP)
        step("describe state (stable)", "--describe", "--group", GROUP, "--state")
        step("describe members (live)", "--describe", "--group", GROUP, "--members")
        step("delete (not empty)", "--delete", "--group", GROUP)
        step("reset (not empty)", "--reset-offsets", "--group", GROUP, "--topic", TOPIC,
             "--to-earliest", "--execute")  # fmt: skip
    finally:
        members.close()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and "Empty" not in tool(
        bootstrap, "--describe", "--group", GROUP, "--state"
    ):
        time.sleep(1)
    step("reset to earliest (dry run)", "--reset-offsets", "--group", GROUP, "--topic", TOPIC,
         "--to-earliest", "--dry-run")  # fmt: skip
    step("delete offsets", "--delete-offsets", "--group", GROUP, "--topic", TOPIC)
    step("describe (no offsets)", "--describe", "--group", GROUP)
    step("delete", "--delete", "--group", GROUP)
    step("list (gone)", "--list")
    step("describe (gone)", "--describe", "--group", GROUP)
    return out


@pytest.fixture(scope="module")
def kafka_output() -> list[tuple[str, str]]:
    """The scenario against Apache Kafka 4.4, run once for both pybroker backends."""
    with start_kafka(
        kafka4=True,
        overrides={
            "group.share.heartbeat.interval.ms": 1000,
            "group.share.min.heartbeat.interval.ms": 1000,
        },
    ) as kafka:
        return scenario(kafka.bootstrap)


# one backend (CI time): the tool's output does not depend on it; share groups on ZooKeeper
# are test_share_groups_java's and test_share_groups_confluent's
@pytest.mark.parametrize("backend", ["embedded"], indirect=True)
@pytest.mark.broker_overrides(
    {
        "group.share.heartbeat.interval.ms": "1000",
        "group.share.min.heartbeat.interval.ms": "1000",
    }
)
def test_kafka_share_groups_prints_what_it_prints_for_kafka(broker, kafka_output):
    ours = scenario(broker.bootstrap)
    consumed = dict(ours)["describe (members consumed all)"]
    assert re.findall(rf"^{GROUP} {TOPIC} (\d) (\d+) (\d+)$", consumed, re.M) == [
        ("0", "50", "0"),
        ("1", "50", "0"),
    ], consumed
    theirs = kafka_output
    assert [name for name, _ in ours] == [name for name, _ in theirs]
    diffs = []
    for (name, a), (_, b) in zip(ours, theirs, strict=True):
        if name == "describe (members consumed all)":
            a, b = mask_start_offsets(a), mask_start_offsets(b)
        if a != b:
            diffs.append(f"===== {name}\n--- pybroker\n{a}\n--- Kafka 4.4\n{b}")
    assert not diffs, "\n".join(diffs)
