"""A kafka-python consumer group across the loss of its coordinator broker (3 brokers, one
private ZooKeeper, compat_tests/cluster.py).

One member (group_id, manual synchronous commits after every batch) consumes an RF=3 topic
while an acks=all idempotent producer writes to it.  The broker FindCoordinator names for the
group is killed with kill -9 and later restarted (the group moves to a survivor and back).
Checked: every acknowledged record is consumed; a record is delivered again only if its offset
is at or above the last successful commit of its partition at the time it comes again.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter

import pytest
from kafka import KafkaConsumer
from kafka.errors import CommitFailedError, KafkaError
from kafka.structs import OffsetAndMetadata

from compat_tests.cluster import KafkaPythonLoad, running_cluster, wait_until
from compat_tests.group_member import _await_topic_metadata
from compat_tests.helpers import ALL_STORAGES, storage_overrides, unique_topic

pytestmark = pytest.mark.timeout(240)

PARTITIONS = 3


@pytest.fixture(params=ALL_STORAGES)
def cluster(request, tmp_path):
    """Three brokers, with each storage of committed offsets (offsets.storage: the
    metadata store, or __consumer_offsets with Kafka's RF 3)."""
    with running_cluster(tmp_path, overrides=storage_overrides(request.param, 3)) as c:
        request.node._pybrokers = list(c.brokers.values())
        yield c
    if c.stop_problems:
        pytest.fail("brokers did not stop cleanly: " + "; ".join(c.stop_problems))


class Member:
    """A group member driven from the test thread: poll, record, commit (sync)."""

    def __init__(self, bootstrap: str, topic: str, group: str):
        self.consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            client_id="cluster-member",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
            max_poll_records=50,
            request_timeout_ms=10000,
            reconnect_backoff_max_ms=1000,
        )
        self.consumer.subscribe([topic])
        _await_topic_metadata(self.consumer, topic)
        self.consumed: list[tuple[int, int, bytes]] = []
        self.committed: dict[int, int] = {}  # last successful commit (next offset to read)
        self.commit_ok_times: list[float] = []
        self.commit_failures: Counter = Counter()
        self.redelivered_ok = 0
        self.bad_redeliveries: list[tuple[int, int, int | None]] = []
        self._seen: set[tuple[int, int]] = set()

    def step(self) -> None:
        batch = self.consumer.poll(timeout_ms=200)
        if not batch:
            return
        for tp, recs in batch.items():
            for r in recs:
                key = (tp.partition, r.offset)
                if key in self._seen:
                    floor = self.committed.get(tp.partition)
                    if floor is not None and r.offset < floor:
                        self.bad_redeliveries.append((tp.partition, r.offset, floor))
                    else:
                        self.redelivered_ok += 1
                self._seen.add(key)
                self.consumed.append((tp.partition, r.offset, r.value))
        offsets = {tp: OffsetAndMetadata(recs[-1].offset + 1, "", -1) for tp, recs in batch.items()}
        try:
            self.consumer.commit(offsets)
        except (CommitFailedError, KafkaError) as e:
            self.commit_failures[type(e).__name__] += 1
        else:
            for tp, om in offsets.items():
                self.committed[tp.partition] = om.offset
            self.commit_ok_times.append(time.monotonic())

    def run_for(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.step()

    def close(self) -> None:
        self.consumer.close(autocommit=False)


def test_group_survives_coordinator_kill9(cluster):
    topic = unique_topic("grp")
    group = f"g-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, PARTITIONS, 3, {"min.insync.replicas": "2"})
    load = KafkaPythonLoad("group-load", cluster.bootstrap, topic, PARTITIONS, 0.005)
    load.start()
    member = Member(cluster.bootstrap, topic, group)
    try:
        wait_until(lambda: (member.step(), len(member.commit_ok_times) >= 20)[1], 60, 0, "commits")
        err, coordinator = cluster.find_coordinator(group)
        assert err == 0, f"FindCoordinator error {err}"
        md = cluster.metadata([])
        t_kill = cluster.kill9(coordinator)

        def progressed():
            member.step()
            return any(t > t_kill for t in member.commit_ok_times)

        wait_until(progressed, 90, 0, "a successful commit after the coordinator died")
        t_commit = time.monotonic() - t_kill
        err2, coordinator2 = cluster.find_coordinator(group)
        print(
            f"\ngroup {group}: coordinator broker {coordinator} (controller "
            f"{md.controller_id}) killed; first successful commit after {t_commit:.2f} s; "
            f"FindCoordinator now names {coordinator2} (error {err2})"
        )
        assert coordinator2 != coordinator
        member.run_for(3.0)
        cluster.restart(coordinator)  # rendezvous hashing hands the group back to it
        t_back = time.monotonic()

        def progressed_again():
            member.step()
            return any(t > t_back + 1.0 for t in member.commit_ok_times)

        wait_until(progressed_again, 90, 0, "commits after the coordinator came back")
        print(
            f"coordinator broker {coordinator} restarted; FindCoordinator names "
            f"{cluster.find_coordinator(group)[1]}"
        )
        member.run_for(2.0)
        stats = load.stop()
        acked = {stats.payload(a.seq) for a in stats.acked}

        def all_consumed():
            member.step()
            return acked <= {v for _, _, v in member.consumed}

        wait_until(all_consumed, 60, 0, "every acknowledged record consumed")
    finally:
        if load.is_alive():
            load._halt.set()
        member.close()
    counts = Counter((p, o) for p, o, _ in member.consumed)
    print(
        f"  {stats.summary()}; consumed {len(member.consumed)} records "
        f"({len(counts)} distinct), redelivered after the last commit "
        f"{member.redelivered_ok}, commit failures {dict(member.commit_failures)}"
    )
    assert not member.bad_redeliveries, (
        f"records delivered again below the last successful commit (partition, offset, "
        f"committed): {member.bad_redeliveries[:10]}"
    )
