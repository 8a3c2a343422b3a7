"""Share groups (KIP-932) on three pybroker processes sharing one ZooKeeper: the share-partition
state survives its leader's kill -9 and a broker's restart under four share consumers.

Four confluent-kafka ShareConsumers (explicit acknowledgement, one thread each) accept every
record they get and commit; each commit_sync answer tells which acknowledgements the broker
confirmed.  Meanwhile the partition's leader is killed with SIGKILL and started again, then the
new leader is restarted cleanly.  Kafka's guarantee is at-least-once: a record may come back
while its acknowledgement is unconfirmed (the acknowledging request failed, or its lock ran
out), never after the broker confirmed it; an acknowledgement whose answer was lost may still
have been applied.  So:

- none lost: every produced record is delivered, and in the end the share-partition start
  offset (DescribeShareGroupOffsets) is past all of them with no lag: each one acknowledged
  (none reached the delivery count limit, which is 10 here);
- no record is delivered again after its acknowledgement was confirmed;
- delivery counts never go down (a delivery is counted when it is released, acknowledged or
  its lock runs out; an acquisition on a leader that died before any of that is not counted,
  as in Kafka, so the next delivery may carry the same count).

Failover times are printed (run with -s), not asserted.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field

import pytest
from kafka import KafkaProducer

from compat_tests.share_clients import set_group_config, share_offsets, wait_members
from pybroker.testing.cluster_harness import running_cluster, wait_until

ck = pytest.importorskip("confluent_kafka")
if not hasattr(ck, "ShareConsumer"):
    pytest.skip("confluent-kafka without ShareConsumer (2.15+)", allow_module_level=True)

pytestmark = pytest.mark.timeout(420)

OVERRIDES = {
    "group.share.heartbeat.interval.ms": "1000",
    "group.share.min.heartbeat.interval.ms": "1000",
    "group.share.session.timeout.ms": "10000",
    "group.share.min.session.timeout.ms": "6000",
    "group.share.record.lock.duration.ms": "5000",
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.delivery.count.limit": "10",
}
RECORDS = 6000


@dataclass
class Log:
    """Everything the consumers saw, on one clock (time.monotonic)."""

    deliveries: list[tuple[float, int, int, str]] = field(default_factory=list)  # t, off, dc, c
    confirmed: dict[int, float] = field(default_factory=dict)  # offset -> first confirmation
    failed_commits: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def consumer_loop(bootstrap: str, group: str, topic: str, name: str, log: Log, stop) -> None:  # type: ignore[no-untyped-def]
    sc = ck.ShareConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
            "log_level": 2,
        }
    )
    sc.subscribe([topic])
    try:
        while not stop.is_set():
            try:
                msgs = sc.poll(0.5)
            except ck.KafkaException:
                continue
            offsets = []
            for m in msgs:
                if m.error():
                    continue
                with log.lock:
                    log.deliveries.append((time.monotonic(), m.offset(), m.delivery_count(), name))
                offsets.append(m.offset())
                sc.acknowledge(m, ck.AcknowledgeType.ACCEPT)
            if not offsets:
                continue
            try:
                result = sc.commit_sync(30)
            except ck.KafkaException:
                with log.lock:
                    log.failed_commits += 1
                continue
            ok = all(err is None for err in result.values()) and result
            now = time.monotonic()
            with log.lock:
                if ok:
                    for o in offsets:
                        log.confirmed.setdefault(o, now)
                else:
                    log.failed_commits += 1
    finally:
        try:
            sc.close()
        except Exception:
            pass


def produce(bootstrap: str, topic: str, stages: list[threading.Event]) -> None:
    """Produce RECORDS records in len(stages) equal parts, each once its event is set."""
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0, retries=50)
    per_stage = RECORDS // len(stages)
    for k, go in enumerate(stages):
        go.wait()
        for i in range(k * per_stage, (k + 1) * per_stage):
            p.send(topic, f"r{i}".encode(), partition=0)
            if i % 10 == 9:
                p.flush()
    p.flush()
    p.close()


def test_share_state_survives_leader_kill_and_broker_restart(tmp_path):
    with running_cluster(tmp_path, overrides=OVERRIDES) as cluster:
        topic = f"sq-{uuid.uuid4().hex[:8]}"
        group = f"ssg-{uuid.uuid4().hex[:8]}"
        cluster.create_topic(topic, partitions=1, rf=3, configs={"min.insync.replicas": "2"})
        cluster.wait_isr_full(topic)
        set_group_config(cluster.bootstrap, group, {"share.auto.offset.reset": "earliest"})
        log, stop = Log(), threading.Event()
        threads = [
            threading.Thread(
                target=consumer_loop,
                args=(cluster.bootstrap, group, topic, f"c{i}", log, stop),
                daemon=True,
            )
            for i in range(4)
        ]
        # Each phase's records are released after its fault, so a phase always has records
        # left to confirm (a fast run once had all 6,000 confirmed before the restart).
        stages = [threading.Event() for _ in range(3)]
        for t in threads:
            t.start()
        try:
            wait_members(cluster.bootstrap, group, 4)
            producer = threading.Thread(target=produce, args=(cluster.bootstrap, topic, stages))
            producer.start()
            stages[0].set()
            wait_until(lambda: len(log.confirmed) >= 1000, 120, 0.1, "1000 confirmations")
            # 1. the partition's leader: kill -9, then start it again
            leader = cluster.leader_of(topic, 0).leader
            t0 = time.monotonic()
            cluster.kill9(leader)
            cluster.wait_new_leader(topic, 0, old_leader=leader)
            before = len(log.confirmed)
            stages[1].set()
            wait_until(lambda: len(log.confirmed) > before + 200, 180, 0.1, "acks after kill")
            print(f"\nleader {leader} killed: acknowledgements confirmed again after "
                  f"{time.monotonic() - t0:.1f}s")  # fmt: skip
            cluster.restart(leader)
            # 2. the new leader: a clean restart (SIGTERM, start)
            new_leader = cluster.leader_of(topic, 0).leader
            t1 = time.monotonic()
            cluster.restart(new_leader)  # SIGTERM (exit 0 asserted), then start
            before = len(log.confirmed)
            stages[2].set()
            wait_until(lambda: len(log.confirmed) > before + 200, 180, 0.1, "acks after restart")
            print(f"broker {new_leader} restarted: acknowledgements confirmed again after "
                  f"{time.monotonic() - t1:.1f}s")  # fmt: skip
            producer.join(180)

            def all_done() -> bool:
                try:
                    p = share_offsets(cluster.bootstrap, group)[(topic, 0)]
                except (AssertionError, OSError, KeyError):
                    return False
                return p["start_offset"] == RECORDS and p["lag"] == 0

            wait_until(all_done, 240, 0.5, "the share-partition start offset past every record")
        finally:
            for go in stages:
                go.set()
            stop.set()
            for t in threads:
                t.join(60)
        with log.lock:
            deliveries = sorted(log.deliveries)
            confirmed = dict(log.confirmed)
        # none lost: each delivered, and (start offset past all) acknowledged
        assert {o for _, o, _, _ in deliveries} == set(range(RECORDS))
        assert max(dc for _, _, dc, _ in deliveries) < 10
        # nothing delivered after its acknowledgement was confirmed
        late = [
            (o, t - confirmed[o], c)
            for t, o, _, c in deliveries
            if o in confirmed and t > confirmed[o]
        ]
        assert late == [], late[:10]
        # delivery counts never go down
        last: dict[int, int] = {}
        for _, o, dc, _ in deliveries:
            assert dc >= last.get(o, 1), (o, dc, last.get(o))
            last[o] = dc
        redelivered = len(deliveries) - len(last)
        print(f"{len(deliveries)} deliveries of {RECORDS} records, {redelivered} redelivered, "
              f"{len(confirmed)} acknowledgements confirmed, {log.failed_commits} commits "
              "failed")  # fmt: skip
