"""Segment roll, retention and restart durability seen through the protocol (Kafka as the
spec): a real broker, real sockets, and its data directory in Kafka's layout."""

from __future__ import annotations

from broker_fixture import (
    NONE,
    OFFSET_OUT_OF_RANGE,
    batch,
    fetched_values,
    split_batches,
    unique_topic,
    wait_until,
)

from pybroker.wire.records import build_batch

T0 = 1_700_000_000_000


def live_segments(broker, topic, partition=0):
    """Base offsets of the segment files Kafka would list (``*.log``, not ``*.deleted``)."""
    d = broker.log_dir / f"{topic}-{partition}"
    return sorted(int(p.name[:-4]) for p in d.glob("*.log"))


def earliest(c, topic, partition=0):
    p = c.list_offset(topic, 0 if partition is None else partition, -2)
    assert p["error_code"] == NONE
    return p["offset"]


def latest(c, topic, partition=0):
    p = c.list_offset(topic, partition, -1)
    assert p["error_code"] == NONE
    return p["offset"]


def read_all(c, topic, start, partition=0):
    """Every record from ``start`` to the log end, fetching as a consumer does."""
    out = []
    offset = start
    end = latest(c, topic, partition)
    while offset < end:
        p = c.fetch(topic, partition, offset, max_bytes=4096)
        assert p["error_code"] == NONE
        got = [(o, v) for o, v in fetched_values(p["records"]) if o >= offset]
        assert got, f"no progress at offset {offset}"
        out += got
        offset = got[-1][0] + 1
    return out


def test_segments_roll_at_segment_bytes(start_broker):
    broker = start_broker(**{"log.segment.bytes": 2048})
    topic = unique_topic()
    with broker.client() as c:
        c.create_topic(topic)
        values = [f"v{i:03d}".encode() * 40 for i in range(30)]
        for v in values:
            assert c.produce(topic, 0, batch([v]))["error_code"] == NONE
        # Kafka rolls when the next batch would take the segment past segment.bytes
        per_segment = 2048 // len(batch([values[0]]))
        assert live_segments(broker, topic) == list(range(0, 30, per_segment))
        # reading across every segment boundary gives every record once, in order
        assert read_all(c, topic, 0) == list(enumerate(values))
        # a topic-level segment.bytes wins over log.segment.bytes
        big = unique_topic()
        c.create_topic(big, configs={"segment.bytes": "1048576"})
        for v in values:
            c.produce(big, 0, batch([v]))
        assert live_segments(broker, big) == [0]


def test_retention_by_size_removes_old_segments_and_advances_earliest(start_broker):
    broker = start_broker(
        **{
            "log.segment.bytes": 1024,
            "log.retention.bytes": 2048,
            "log.retention.check.interval.ms": 50,
        }
    )
    topic = unique_topic()
    with broker.client() as c:
        c.create_topic(topic)
        values = [f"r{i:03d}".encode() * 50 for i in range(40)]
        for v in values:
            assert c.produce(topic, 0, batch([v, v]))["error_code"] == NONE
        end = 80

        # Retention keeps running (every 50 ms) and may have last run mid-way through the
        # produces: wait until it has settled, i.e. Kafka's invariant holds (the segments
        # after the first are below retention.bytes) and the log start matches the files.
        d = broker.log_dir / f"{topic}-0"

        def settled():
            s = earliest(c, topic)
            sizes = [p.stat().st_size for p in sorted(d.glob("*.log"))]
            return s > 40 and live_segments(broker, topic)[0] == s and sum(sizes[1:]) < 2048 and s

        start = wait_until(settled)
        segs = live_segments(broker, topic)
        assert segs[0] == start  # the log now starts at its first remaining segment
        assert len(segs) < 10
        assert latest(c, topic) == end  # retention never moves the log end
        # what is left is a suffix of what was written, readable from the new start
        remaining = read_all(c, topic, start)
        assert [o for o, _ in remaining] == list(range(start, end))
        assert [v for _, v in remaining] == [v for v in values for _ in range(2)][start:]
        # below the start is out of range; consumers see the new log start offset
        assert c.fetch(topic, 0, 0)["error_code"] == OFFSET_OUT_OF_RANGE
        p = c.fetch(topic, 0, start)
        assert p["log_start_offset"] == start
        p = c.produce(topic, 0, batch([b"more"]))
        assert p["base_offset"] == end
        assert p["log_start_offset"] >= start
    # the new start survives a restart
    broker.restart()
    with broker.client() as c:
        assert earliest(c, topic) >= start
        assert latest(c, topic) == end + 1


def test_retention_by_time_can_empty_the_log(start_broker):
    broker = start_broker(**{"log.retention.check.interval.ms": 50})
    topic = unique_topic()
    with broker.client() as c:
        c.create_topic(topic, configs={"retention.ms": "60000"})
        # CreateTime an hour old: past retention.ms as soon as a check runs
        old = T0 - 3_600_000
        for i in range(5):
            b = build_batch([(None, f"old{i}".encode(), [], old + i)])
            assert c.produce(topic, 0, b)["error_code"] == NONE
        wait_until(lambda: earliest(c, topic) == 5)
        assert latest(c, topic) == 5
        assert c.fetch(topic, 0, 0)["error_code"] == OFFSET_OUT_OF_RANGE
        p = c.fetch(topic, 0, 5)
        assert (p["error_code"], p["high_watermark"], p["log_start_offset"]) == (NONE, 5, 5)
        # the log takes writes at the old end
        p = c.produce(topic, 0, batch([b"new"]))
        assert (p["error_code"], p["base_offset"]) == (NONE, 5)
        assert fetched_values(c.fetch(topic, 0, 5)["records"]) == [(5, b"new")]


def test_restart_durability_offsets_continue_densely(start_broker):
    broker = start_broker(**{"log.segment.bytes": 4096})
    topic = unique_topic()
    written = []
    with broker.client() as c:
        c.create_topic(topic, partitions=2)
        for i in range(20):
            vals = [f"a{i}-{j}".encode() * 20 for j in range(3)]
            assert c.produce(topic, 0, batch(vals))["base_offset"] == len(written)
            written += vals
        c.produce(topic, 1, batch([b"p1"]))
    for round_ in range(2):
        broker.restart()
        with broker.client() as c:
            assert earliest(c, topic) == 0
            assert latest(c, topic) == len(written)
            assert latest(c, topic, 1) == 1 + round_
            assert read_all(c, topic, 0) == list(enumerate(written))
            vals = [f"b{round_}-{j}".encode() for j in range(4)]
            p = c.produce(topic, 0, batch(vals))
            assert (p["error_code"], p["base_offset"]) == (NONE, len(written))
            written += vals
            assert c.produce(topic, 1, batch([b"p1"]))["base_offset"] == 1 + round_
    with broker.client() as c:
        assert read_all(c, topic, 0) == list(enumerate(written))


def test_restart_keeps_stored_bytes_and_timestamp_lookup(start_broker):
    broker = start_broker(**{"log.segment.bytes": 1024})
    topic = unique_topic()
    sent = []
    with broker.client() as c:
        c.create_topic(topic)
        for i in range(12):
            b = build_batch([(b"k", f"t{i}".encode() * 30, [], T0 + 1000 * i)])
            assert c.produce(topic, 0, b)["error_code"] == NONE
            sent.append(b)
    broker.restart()
    with broker.client() as c:
        stored = []
        offset = 0
        while offset < 12:
            got = split_batches(c.fetch(topic, 0, offset)["records"])
            stored += got
            offset += len(got)
        assert [s[16:] for s in stored] == [b[16:] for b in sent]
        p = c.list_offset(topic, 0, T0 + 6500)
        assert (p["offset"], p["timestamp"]) == (7, T0 + 7000)
        p = c.list_offset(topic, 0, -3, version=7)
        assert (p["offset"], p["timestamp"]) == (11, T0 + 11000)


def test_idempotent_producer_state_survives_a_restart(start_broker):
    broker = start_broker()
    topic = unique_topic()
    with broker.client() as c:
        c.create_topic(topic)
        pid = c.init_producer_id()["producer_id"]
        c.produce(topic, 0, batch([b"plain"]))
        b0 = batch([b"a", b"b"], producer_id=pid, producer_epoch=0, base_sequence=0)
        assert c.produce(topic, 0, b0)["base_offset"] == 1
    broker.restart()
    with broker.client() as c:
        # the retry of an acknowledged batch is recognised after the restart
        p = c.produce(topic, 0, b0)
        assert (p["error_code"], p["base_offset"]) == (NONE, 1)
        gap = batch([b"x"], producer_id=pid, producer_epoch=0, base_sequence=5)
        assert c.produce(topic, 0, gap)["error_code"] == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
        nxt = batch([b"c"], producer_id=pid, producer_epoch=0, base_sequence=2)
        assert c.produce(topic, 0, nxt)["base_offset"] == 3
        assert [v for _, v in read_all(c, topic, 0)] == [b"plain", b"a", b"b", b"c"]
