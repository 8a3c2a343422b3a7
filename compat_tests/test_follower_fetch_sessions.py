"""Followers' incremental fetch sessions on a real cluster (private ZooKeeper): a leader skips
an in-sync follower's session partitions whose state has not changed since it last read them
there (the follower at their log end), and records the fetch without reading them.

- After random produces, DeleteRecords, topic config changes and idle rounds, what a follower
  learned from its incremental answers is what a sessionless (from-scratch) fetch at the
  same offsets answers: every high watermark and log start offset, and no records left
  behind; and the leader's audit of its rounds (handlers/_follower_rounds.py) found no state
  change that was not noted for the session (a change notification left out fails here).
- Idle in-sync followers stay in every ISR for longer than replica.lag.time.max.ms, and an
  acks=all produce after the idle time completes on every partition.

No timing assertions.
"""

from __future__ import annotations

import random
import time

import pytest

from pybroker.testing.client import Connection
from pybroker.testing.client_helpers import unique_topic
from pybroker.testing.cluster_harness import broker_log_excerpt, running_cluster, wait_until
from pybroker.wire.records import build_batch, parse_batches

pytestmark = pytest.mark.timeout(300)

PRODUCE, FETCH, DELETE_RECORDS, ALTER_CONFIGS = 0, 1, 21, 33
DAY_MS = 86_400_000
V = 12
PARTITIONS = 4


def _create(c, topic: str, assignment: dict[int, list[int]]) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=c.bootstrap, client_id="test-admin")
    try:
        admin.create_topics([NewTopic(topic, -1, -1, replica_assignments=assignment)])
    finally:
        admin.close()
    c.wait_isr_full(topic, partitions=len(assignment))


def _fetch(
    conn, follower: int, topic: str, offsets: dict[int, int], sid: int, epoch: int, tid=None
):
    """Fetch v12 by topic name, or v13 by topic id when ``tid`` is given (Kafka's followers)."""
    parts = [
        {
            "partition": p,
            "current_leader_epoch": -1,
            "fetch_offset": o,
            "last_fetched_epoch": -1,
            "log_start_offset": -1,
            "partition_max_bytes": 1 << 20,
        }
        for p, o in sorted(offsets.items())
    ]
    named = {"topic": topic} if tid is None else {"topic_id": tid}
    _, body = conn.request(
        FETCH,
        {
            "replica_id": follower,
            "max_wait_ms": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 24,
            "isolation_level": 0,
            "session_id": sid,
            "session_epoch": epoch,
            "topics": [{**named, "partitions": parts}] if parts else [],
            "forgotten_topics_data": [],
            "rack_id": "",
        },
        version=V if tid is None else 13,
    )
    assert body["error_code"] == 0, body
    got = {p["partition_index"]: p for t in body["responses"] for p in t["partitions"]}
    return body["session_id"], got


@pytest.mark.parametrize("by_id", [False, True], ids=["names", "topic-ids"])
def test_incremental_answers_agree_with_sessionless_fetches_after_random_changes(tmp_path, by_id):
    # broker 1 is paused: the test fetches as broker 1 (the only follower fetching), so the
    # high watermarks move only with these fetches; long timeouts keep it in the ISRs
    overrides = {"zookeeper.session.timeout.ms": 60000, "replica.lag.time.max.ms": 60000}
    with running_cluster(tmp_path, size=2, overrides=overrides) as c:
        topic = unique_topic()
        _create(c, topic, {p: [0, 1] for p in range(PARTITIONS)})
        c.pause(1)
        host, port = c.brokers[0].host, c.brokers[0].port
        rng = random.Random(20261126)
        with Connection(host, port) as conn:
            tid = None
            if by_id:  # (a session keyed by topic ids: the leader maps the feed's names)
                _, md = conn.request(3, {"topics": [{"name": topic}]}, version=12)
                tid = md["topics"][0]["topic_id"]
            offsets = {p: 0 for p in range(PARTITIONS)}
            known: dict[int, tuple[int, int]] = {}  # partition: (high watermark, log start)
            sid, got = _fetch(conn, 1, topic, offsets, 0, 0, tid)
            assert sid != 0
            epoch = 1
            changed = dict(offsets)
            for step in range(40):
                op = rng.choice(["produce", "produce", "delete", "config", "idle"])
                p = rng.randrange(PARTITIONS)
                if op == "produce":  # (to broker 0 only: a client would ask paused broker 1)
                    records = build_batch(
                        [(None, f"{step}-{i}".encode(), []) for i in range(rng.randint(1, 3))]
                    )
                    _, r = conn.request(
                        PRODUCE,
                        {
                            "transactional_id": None,
                            "acks": 1,
                            "timeout_ms": 30000,
                            "topic_data": [
                                {
                                    "name": topic,
                                    "partition_data": [{"index": p, "records": records}],
                                }
                            ],
                        },
                    )
                    assert r["responses"][0]["partition_responses"][0]["error_code"] == 0, r
                elif op == "delete":
                    hw = known.get(p, (0, 0))[0]
                    to = rng.randint(known.get(p, (0, 0))[1], max(hw, 0))
                    _, r = conn.request(
                        DELETE_RECORDS,
                        {
                            "topics": [
                                {
                                    "name": topic,
                                    "partitions": [{"partition_index": p, "offset": to}],
                                }
                            ],
                            "timeout_ms": 10000,
                        },
                        version=1,
                    )
                    assert r["topics"][0]["partitions"][0]["error_code"] == 0, r
                elif op == "config":  # a new TopicInfo: every partition's stamp moves
                    _, r = conn.request(
                        ALTER_CONFIGS,
                        {
                            "resources": [
                                {
                                    "resource_type": 2,
                                    "resource_name": topic,
                                    "configs": [
                                        {"name": "retention.ms", "value": str(DAY_MS + step)}
                                    ],
                                }
                            ],
                            "validate_only": False,
                        },
                        version=0,
                    )
                    assert r["responses"][0]["error_code"] == 0, r
                    time.sleep(0.2)  # (the change reaches broker 0 through ZooKeeper)
                # follow as a follower does until an answer brings nothing
                for _ in range(10):
                    for q, e in got.items():
                        assert e["error_code"] == 0, e
                        known[q] = (e["high_watermark"], e["log_start_offset"])
                        if e["records"]:
                            last = parse_batches(bytearray(e["records"]))[-1].last_offset
                            offsets[q] = changed[q] = last + 1
                    sent = dict(changed)
                    changed.clear()
                    _, got = _fetch(conn, 1, topic, sent, sid, epoch, tid)
                    epoch += 1
                    if not got:
                        break
                assert not got, f"step {step}: still answering {sorted(got)}"
                # from scratch: a sessionless fetch of every partition at the same offsets
                _, full = _fetch(conn, 1, topic, offsets, 0, -1, tid)
                truth = {q: (e["high_watermark"], e["log_start_offset"]) for q, e in full.items()}
                assert known == truth, f"step {step} ({op} {p})"
                assert not any(e["records"] for e in full.values()), f"step {step}"
            for _ in range(2 * PARTITIONS):  # idle rounds: each audits a partition or more
                _, got = _fetch(conn, 1, topic, {}, sid, epoch, tid)
                epoch += 1
                assert not got, got
        missed = broker_log_excerpt(c.brokers[0], ["missed a change"])
        assert not missed.strip(), missed
        c.resume(1)


def test_idle_in_sync_followers_stay_in_sync(tmp_path):
    lag_ms = 1500
    with running_cluster(tmp_path, size=3, overrides={"replica.lag.time.max.ms": lag_ms}) as c:
        topic = unique_topic()
        c.create_topic(topic, partitions=6, rf=3)
        time.sleep(4 * lag_ms / 1000)  # idle: every follower fetch finds nothing new
        shrinks = "\n".join(broker_log_excerpt(b, ["lagging"]) for b in c.brokers.values())
        assert not shrinks.strip(), shrinks
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=c.bootstrap, acks="all", linger_ms=0)
        try:
            for p in range(6):
                producer.send(topic, b"after idle", partition=p).get(30)
        finally:
            producer.close()
        wait_until(lambda: c.isr_full(topic, 6), 30, what="ISRs full after the produce")
        # neither the leaders' session audits nor the followers' fetcher audits found a
        # change nobody noted (handlers/_follower_rounds.py, replication/fetcher.py)
        missed = "\n".join(broker_log_excerpt(b, ["missed a change"]) for b in c.brokers.values())
        assert not missed.strip(), missed
