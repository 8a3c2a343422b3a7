"""Share groups (KIP-932) with confluent-kafka's ShareConsumer (librdkafka 2.16, preview)
against a pybroker process: the same user-visible behaviour as the Java client's tests
(compat_tests/test_share_groups_java.py): four consumers on one partition, implicit and
explicit acknowledgement, release -> delivery count 2, reject -> never again, a closed
consumer's records released, the delivery count limit, earliest and latest.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from kafka import KafkaProducer

from compat_tests.share_clients import SHARE_OVERRIDES, set_group_config, wait_members
from pybroker.testing.client_helpers import create_topic

ck = pytest.importorskip("confluent_kafka")
if not hasattr(ck, "ShareConsumer"):
    pytest.skip("confluent-kafka without ShareConsumer (2.15+)", allow_module_level=True)

# tests share a broker per backend: each uses topics and groups of its own (conftest.py)
pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.broker_overrides(SHARE_OVERRIDES),
    pytest.mark.shared_broker,
]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def produce(bootstrap: str, topic: str, values: list[str]) -> None:
    """In record batches of at most 10 (a queue fed by many small writes): records are
    acquired log batch by log batch, so one huge batch would go to one consumer."""
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0, batch_size=16384)
    for i, v in enumerate(values):
        p.send(topic, v.encode(), partition=0)
        if i % 10 == 9:
            p.flush()
    p.flush()
    p.close()


def new_consumer(bootstrap: str, group: str, mode: str = "implicit"):  # type: ignore[no-untyped-def]
    return ck.ShareConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": mode,
            "log_level": 3,
        }
    )


def setup(broker, n: int) -> tuple[str, str, list[str]]:  # type: ignore[no-untyped-def]
    topic = unique("ckq")
    create_topic(broker.bootstrap, topic, 1)
    group = unique("cksg")
    set_group_config(broker.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    values = [f"v{i}" for i in range(n)]
    return topic, group, values


def consume(sc, until, policy=None, timeout: float = 90.0) -> list[tuple[int, int, str]]:  # type: ignore[no-untyped-def]
    """Poll until ``until(records)``; ``policy(delivery_count, value)`` -> an
    AcknowledgeType in explicit mode.  Returns (offset, delivery count, value)s."""
    got: list[tuple[int, int, str]] = []
    deadline = time.monotonic() + timeout
    while not until(got) and time.monotonic() < deadline:
        msgs = sc.poll(0.5)
        for m in msgs:
            if m.error():
                continue
            got.append((m.offset(), m.delivery_count(), m.value().decode()))
            if policy is not None:
                sc.acknowledge(m, policy(m.delivery_count(), m.value().decode()))
        if msgs and policy is not None:
            sc.commit_sync()
    return got


def test_four_consumers_on_one_partition(broker):
    topic, group, values = setup(broker, 1000)
    results: list[list] = [[] for _ in range(4)]
    done = threading.Event()

    def run(i: int) -> None:
        sc = new_consumer(broker.bootstrap, group)
        sc.subscribe([topic])
        try:
            while not done.is_set():
                for m in sc.poll(0.5):
                    if not m.error():
                        results[i].append((m.offset(), m.delivery_count(), m.value().decode()))
        finally:
            sc.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    try:
        wait_members(broker.bootstrap, group, 4)
        produce(broker.bootstrap, topic, values)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if {v for r in results for _, _, v in r} >= set(values):
                break
            time.sleep(0.2)
    finally:
        done.set()
        for t in threads:
            t.join(60)
    got = [x for r in results for x in r]
    assert {v for _, _, v in got} == set(values)
    assert all(results), [len(r) for r in results]
    assert sorted(o for o, _, _ in got) == list(range(1000))


def test_release_then_reject_then_accept(broker):
    """Explicit: released records come back with delivery count 2; rejected ones never."""
    topic, group, values = setup(broker, 40)
    produce(broker.bootstrap, topic, values)
    sc = new_consumer(broker.bootstrap, group, "explicit")
    sc.subscribe([topic])
    t = ck.AcknowledgeType

    def policy(dc: int, value: str) -> int:
        if dc == 1:
            return t.RELEASE
        return t.REJECT if int(value[1:]) % 2 else t.ACCEPT

    try:
        got = consume(sc, lambda g: len(g) >= 80, policy)
    finally:
        sc.close()
    deliveries: dict[int, list[int]] = {}
    for o, dc, _ in got:
        deliveries.setdefault(o, []).append(dc)
    assert deliveries == {o: [1, 2] for o in range(40)}
    # accepted or rejected: a new consumer gets nothing, past the lock duration
    later = new_consumer(broker.bootstrap, group)
    later.subscribe([topic])
    try:
        end = time.monotonic() + 8
        assert consume(later, lambda g: time.monotonic() > end) == []
    finally:
        later.close()


def test_closed_consumer_releases_its_records(broker):
    topic, group, values = setup(broker, 20)
    set_group_config(broker.bootstrap, group, {"share.record.lock.duration.ms": "60000"})
    produce(broker.bootstrap, topic, values)
    holder = new_consumer(broker.bootstrap, group, "explicit")
    holder.subscribe([topic])
    held = consume(holder, lambda g: len(g) > 0)
    assert held
    holder.close()  # unacknowledged: its share session ends, the records are released
    other = new_consumer(broker.bootstrap, group)
    other.subscribe([topic])
    try:
        got = consume(other, lambda g: len({o for o, _, _ in g}) >= 20)
    finally:
        other.close()
    again = {o: dc for o, dc, _ in got if o in {h[0] for h in held}}
    assert again and set(again.values()) == {2}, again


def test_delivery_count_limit(broker):
    topic, group, values = setup(broker, 5)
    produce(broker.bootstrap, topic, values)
    sc = new_consumer(broker.bootstrap, group, "explicit")
    sc.subscribe([topic])
    try:
        got = consume(
            sc, lambda g: len(g) >= 15, lambda dc, v: ck.AcknowledgeType.RELEASE, timeout=60
        )
        end = time.monotonic() + 6
        more = consume(
            sc, lambda g: time.monotonic() > end, lambda dc, v: ck.AcknowledgeType.RELEASE
        )
    finally:
        sc.close()
    deliveries: dict[int, list[int]] = {}
    for o, dc, _ in got + more:
        deliveries.setdefault(o, []).append(dc)
    assert deliveries == {o: [1, 2, 3] for o in range(5)}


def test_latest_skips_what_was_there(broker):
    topic = unique("ckl")
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, [f"old{i}" for i in range(10)])
    group = unique("ckl")  # share.auto.offset.reset defaults to latest
    sc = new_consumer(broker.bootstrap, group)
    sc.subscribe([topic])
    try:
        wait_members(broker.bootstrap, group, 1)
        # the start offset is set at the share-partition's first load (the first fetch)
        consume(sc, lambda g: False, timeout=3)
        produce(broker.bootstrap, topic, [f"new{i}" for i in range(10)])
        got = consume(sc, lambda g: len(g) >= 10)
    finally:
        sc.close()
    assert sorted(v for _, _, v in got) == sorted(f"new{i}" for i in range(10))


def test_pybroker_cli_groups_for_a_share_group(broker):
    """`pybroker groups` on a share group: list (type share), describe (members, start
    offsets, lag), reset-offsets refused while it has members, then reset, delete-offsets and
    delete once they left."""
    from compat_tests.test_admin_cli import cli, js, ok

    topic, group, values = setup(broker, 20)
    produce(broker.bootstrap, topic, values)
    sc = new_consumer(broker.bootstrap, group, "explicit")
    sc.subscribe([topic])
    try:
        consume(sc, lambda g: len(g) >= 20, lambda dc, v: ck.AcknowledgeType.ACCEPT)
        listed = {g["group"]: g for g in js(broker.bootstrap, "groups", "list")}
        assert (listed[group]["type"], listed[group]["state"]) == ("share", "Stable")
        d = js(broker.bootstrap, "groups", "describe", group)
        assert (d["type"], d["state"], len(d["members"])) == ("share", "Stable", 1)
        assert d["members"][0]["assignment"] == [{"topic": topic, "partitions": [0]}]
        assert [(o["topic"], o["start_offset"], o["lag"]) for o in d["offsets"]] == [(topic, 20, 0)]
        r = cli(broker.bootstrap, "groups", "reset-offsets", group, "--topic", topic,
                "--to-earliest")  # fmt: skip
        assert r.returncode != 0 and "is not empty" in r.stderr, r.stderr
    finally:
        sc.close()
    d = js(broker.bootstrap, "groups", "reset-offsets", group, "--topic", topic, "--to-offset", "5")
    assert [(o["old"], o["new"]) for o in d["offsets"]] == [(20, 5)]
    d = js(broker.bootstrap, "groups", "describe", group)
    assert [(o["start_offset"], o["lag"]) for o in d["offsets"]] == [(5, 15)]
    ok(cli(broker.bootstrap, "groups", "delete-offsets", group, "--topic", topic))
    assert js(broker.bootstrap, "groups", "describe", group)["offsets"] == []
    ok(cli(broker.bootstrap, "groups", "delete", group))
    assert group not in {g["group"] for g in js(broker.bootstrap, "groups", "list")}


def test_metrics_and_console_show_share_groups(start_broker):
    """Kafka's share-group metrics and the console's share-group page: a member holds the
    first ten records of a partition (acquired, in flight) and accepted the next ten."""
    import urllib.request

    from compat_tests.test_metrics import scrape, value
    from pybroker.testing.procutil import free_port

    port = free_port()
    b = start_broker(**{"metrics.listener": f"http://127.0.0.1:{port}"})
    topic, group, values = setup(b, 20)
    p = KafkaProducer(bootstrap_servers=b.bootstrap, acks="all", linger_ms=1000)
    for v in values:
        p.send(topic, v.encode(), partition=0)
    p.flush()  # one batch: acquired whole by the first poll
    p.close()
    sc = new_consumer(b.bootstrap, group, "explicit")
    sc.subscribe([topic])
    try:
        got = []
        deadline = time.monotonic() + 60
        while not got and time.monotonic() < deadline:
            got = [m for m in sc.poll(0.5) if not m.error()]
        assert len(got) == 20
        for m in got[10:]:
            sc.acknowledge(m, ck.AcknowledgeType.ACCEPT)
        sc.commit_sync()
        s = scrape(port)
        assert value(s, "kafka_server_group_coordinator_metrics_group_count", protocol="share") == 1
        assert value(s, "kafka_server_group_coordinator_metrics_share_group_count",
                     state="Stable") == 1  # fmt: skip
        assert value(s, "kafka_server_sharegroupmetrics_recordacknowledgements_total",
                     ackType="Accept") == 10  # fmt: skip
        labels = {"group": group, "topic": topic, "partition": "0"}
        assert value(s, "kafka_server_sharepartitionmetrics_acquiredmessagecount", **labels) == 10
        assert (
            value(s, "kafka_server_sharepartitionmetrics_acknowledgedmessagecount", **labels) == 10
        )
        assert value(s, "kafka_server_sharepartitionmetrics_inflightmessagecount", **labels) == 20
        # the acknowledgements were stored (commit_sync returned): at least one state write
        assert value(s, "kafka_server_share_coordinator_metrics_write_total") >= 1
        assert value(s, "pybroker_share_state_write_seconds_total") > 0
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/groups", timeout=10) as r:
            listing = r.read().decode()
        assert group in listing and "share" in listing
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/groups/{group}", timeout=10) as r:
            page = r.read().decode()
        assert 'id="in-flight">10<' in page, page
        row = page[page.index('id="share-partitions"') :]
        assert f">{topic}</a>" in row
    finally:
        sc.close()
