"""Replication recovery on a real 3-broker cluster (private ZooKeeper): issue 10's sequences.

- A broker that was just made leader of a partition is paused (SIGSTOP) for longer than the
  ZooKeeper session right after another broker's clean restart; once resumed it follows the
  new leader and must rejoin every ISR (issue 10, defect 2).
- After the leader of a partition is killed, the new leader must not show clients a lower
  high watermark than the old one did: ListOffsets(latest) answers OFFSET_NOT_AVAILABLE until
  its high watermark has reached the start offset of its leader epoch (KIP-207), and never a
  lower offset than one answered before (issue 10, defect 3).

No timing assertions: the bounds below are generous recovery limits, not performance claims.
"""

from __future__ import annotations

import time

import pytest

from compat_tests.cluster import (
    SESSION_TIMEOUT_S,
    compare_replicas,
    read_topic,
    running_cluster,
)
from compat_tests.helpers import unique_topic

pytestmark = pytest.mark.timeout(400)

RECOVERY = 45.0  # fault_injection.RECOVERY_TIMEOUT


@pytest.fixture
def cluster(request, tmp_path):
    with running_cluster(tmp_path) as c:
        request.node._pybrokers = list(c.brokers.values())
        yield c
    if c.stop_problems:
        pytest.fail("brokers did not stop cleanly: " + "; ".join(c.stop_problems))


def _produce(bootstrap: str, topic: str, n: int, tag: str) -> list[int]:
    """n records to partition 0 with acks=all, one at a time; their offsets."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0, retries=20)
    try:
        return [
            producer.send(topic, f"{tag}-{i:04d}".encode(), partition=0).get(30).offset
            for i in range(n)
        ]
    finally:
        producer.close()


def test_paused_new_leader_rejoins_isr_after_restart_of_another(cluster):
    """Issue 10, defect 2: SIGTERM + restart broker X (the leader); at once SIGSTOP broker Y,
    which has just been made leader and has written nothing in its epoch, for longer than the
    session; SIGCONT.  Y then follows the leader elected meanwhile.  Its newest leader epoch
    holds no records and the new leader never saw it: Y must drop that epoch (as Kafka's
    truncateTo does when the target is at the log end) and rejoin the ISR, and records written
    afterwards reach every replica."""
    topic = unique_topic("rejoin")
    cluster.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
    _produce(cluster.bootstrap, topic, 50, "before")
    x = cluster.leader_of(topic, 0).leader
    cluster.stop_broker(x)
    y = cluster.wait_new_leader(topic, 0, x).leader
    cluster.restart(x)
    cluster.pause(y)
    time.sleep(SESSION_TIMEOUT_S + 2.0)
    cluster.resume(y)
    after = _produce(cluster.bootstrap, topic, 50, "after")
    t0 = time.monotonic()
    md = cluster.wait_isr_full(topic, timeout=RECOVERY)
    info = md.topic(topic)[0]
    print(
        f"\nrestarted {x}, paused {y} (the leader it got); leader now {info.leader} epoch "
        f"{info.leader_epoch}; ISR {info.isr} full {time.monotonic() - t0:.2f} s after the "
        f"last acknowledgement (offset {after[-1]})"
    )
    values = [v for _, v in read_topic(cluster.bootstrap, topic, 1)[0]]
    assert values == [f"before-{i:04d}".encode() for i in range(50)] + [
        f"after-{i:04d}".encode() for i in range(50)
    ]
    cluster.stop_problems = cluster.stop()
    rc = compare_replicas(cluster, topic, 0)
    assert not rc.problems, rc.problems
