"""ReplicaManager.read_from_log answers a consumer's idle partition (one it leads, at the high
watermark or LSO) without the full read path: the answer is the one the full path
(``_read``) gives, for every kind of partition a full fetch names: empty, at its end, behind
it (records), inside an open transaction (read_committed and not), with a current leader
epoch that matches, is old or is new, with a topic id of another incarnation, unknown; with
and without diverging-epoch checks (a diverging epoch before OUT_OF_RANGE) and Fetch v0-2's hard
limit."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from broker_fixture import BrokerFactory, unique_topic

from pybroker.errors import ErrorCode
from pybroker.replica_manager import READ_COMMITTED, FetchParams, ReadPartition
from pybroker.wire.records import build_batch, parse_batches

PID = 4242


@pytest.fixture
def broker(tmp_path):
    with BrokerFactory(tmp_path) as factory:
        yield factory()


def _batch(n: int, transactional: bool = False, seq: int = 0) -> bytearray:
    return bytearray(
        build_batch(
            [(None, b"v" * 20, [])] * n,
            timestamp=1_700_000_000_000,
            producer_id=PID if transactional else -1,
            producer_epoch=0 if transactional else -1,
            base_sequence=seq if transactional else -1,
            is_transactional=transactional,
        )
    )


def test_idle_partitions_answer_as_the_full_read_path(broker):
    topic = unique_topic("idle")
    with broker.client() as c:
        c.create_topic(topic, partitions=4)
    replicas = broker.broker.replicas

    async def scenario() -> list[tuple[str, object, object]]:
        for _ in range(200):  # the replicas are set up by the topic's change event
            if all(replicas.replicas.get((topic, i)) is not None for i in range(4)):
                break
            await asyncio.sleep(0.05)
        logs = [replicas.replicas[(topic, i)].log for i in range(4)]
        for log, n in zip(logs[1:], (3, 5, 2), strict=True):
            buf = _batch(n)
            log.append(buf, parse_batches(buf))
            log.high_watermark = log.log_end_offset
        # partition 3: an open transaction after 2 records: LSO 2, high watermark 5
        buf = _batch(3, transactional=True)
        logs[3].append(buf, parse_batches(buf))
        logs[3].high_watermark = logs[3].log_end_offset
        epoch = replicas.replicas[(topic, 0)].leader_epoch
        topic_id = logs[0].topic_id
        asks = [
            ReadPartition(topic, 0, 0, 1 << 20),  # empty, at its end
            ReadPartition(topic, 1, 3, 1 << 20, epoch),  # at its end, current epoch
            ReadPartition(topic, 2, 1, 1 << 20),  # behind its end: records
            ReadPartition(topic, 2, 5, 1 << 20, epoch + 1),  # an epoch from the future
            ReadPartition(topic, 1, 3, 1 << 20, epoch - 1),  # a fenced epoch
            ReadPartition(topic, 3, 2, 1 << 20),  # at the LSO, below the high watermark
            ReadPartition(topic, 3, 5, 1 << 20),  # at the high watermark, above the LSO
            ReadPartition(topic, 0, 0, 1 << 20, -1, -1, uuid.uuid4()),  # another incarnation
            ReadPartition(topic, 0, 0, 1 << 20, -1, -1, topic_id),
            ReadPartition(topic, 9, 0, 1 << 20),  # no such partition
            ReadPartition(topic, 1, 7, 1 << 20),  # beyond the log end
            ReadPartition(topic, 1, 3, 1 << 20, -1, epoch),  # at its end, last epoch ours
            # a last fetched epoch we never had, beyond the log end: diverging (v12+) comes
            # before OUT_OF_RANGE, as Kafka's fetchRecords
            ReadPartition(topic, 1, 7, 1 << 20, -1, epoch + 3),
        ]
        out = []
        for isolation in (0, READ_COMMITTED):
            for check_diverging in (False, True):
                for hard in (False, True):  # Fetch v0-2: no first batch above the limit
                    params = FetchParams(-1, 50 << 20, isolation, check_diverging, hard)
                    got, _ = replicas.read_from_log(params, asks)
                    for ask, result in zip(asks, got, strict=True):
                        want = replicas._read(params, ask, 50 << 20, not hard, True)
                        out.append((f"{ask} {params}", want, result))
        return out

    checked = broker.run(scenario())
    assert len(checked) == 104
    for what, want, got in checked:
        if want.records is not None:  # a file region: the same bytes of the same file
            assert got.records is not None, what
            assert (got.records.position, got.records.size) == (
                want.records.position,
                want.records.size,
            ), what
            want, got = want._replace(records=None), got._replace(records=None)
        assert got == want, what
    # the scenarios do cover the idle answer and the LSO below the high watermark
    lso_cases = [g for w, _, g in checked if "partition=3, fetch_offset=2" in w]
    assert lso_cases and all(g.last_stable_offset == 2 and g.high_watermark == 5 for g in lso_cases)
    past_end = [
        (w, g) for w, _, g in checked if "fetch_offset=7" in w and "last_fetched_epoch=-1" not in w
    ]
    assert len(past_end) == 8
    for what, got in past_end:
        if "check_diverging=True" in what:
            assert got.error == 0 and got.diverging_epoch is not None, what
        else:
            assert got.error == ErrorCode.OFFSET_OUT_OF_RANGE and got.diverging_epoch is None, what
