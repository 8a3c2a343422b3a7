"""What a follower's fetch session reads on a leader round by round (replication/changes.py,
handlers/_follower_rounds.py, fetch_session.py): the change feed answers exactly the keys
changed after a position, the logs announce every move of a log start that is not an
append, and an incremental answer keeps the session's order without a pass over it.  The
rounds against a live broker: compat_tests/test_follower_fetch_sessions.py."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pybroker.clock import ManualClock
from pybroker.fetch_session import FetchPartition, FetchSessionCache
from pybroker.log.manager import LogManager
from pybroker.log.mover import LogDirMover
from pybroker.log.partition_log import LogConfig
from pybroker.replication import changes
from pybroker.replication.changes import ChangeFeed
from pybroker.wire.records import build_batch, parse_batches


def append(log, n=2):
    buf = bytearray(build_batch([(None, b"v", [])] * n, timestamp=1))
    log.append(buf, parse_batches(buf))
    log.high_watermark = log.log_end_offset


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.one_of(st.integers(0, 40), st.just(-1)), max_size=300),
    st.integers(4, 16),
)
def test_since_answers_the_keys_changed_after_a_position_or_none(ops, bound):
    """A model (every change with its number) against the feed, with a small bound so that
    trims happen: ``since`` is exactly the keys changed after the position, or None only
    when some of those were dropped."""
    old = changes.MAX_KEYS
    changes.MAX_KEYS = bound
    try:
        feed, history, positions = ChangeFeed(), [], [0]
        for op in ops:
            if op < 0:
                positions.append(feed.seq)
                continue
            feed.note(op)
            history.append((feed.seq, op))
        for pos in positions:
            got = feed.since(pos)
            want = {k for seq, k in history if seq > pos}
            if got is None:
                assert len({k for _, k in history}) > bound  # (only after a trim)
            else:
                assert set(got) == want and len(got) == len(want)
    finally:
        changes.MAX_KEYS = old


def test_every_move_of_a_log_start_without_an_append_is_announced(tmp_path):
    """DeleteRecords, retention and the swap that ends a move between log dirs move a log
    start without an append: the leader's followers' sessions must look at it again."""
    one = len(build_batch([(None, b"v", [])] * 2, timestamp=1))
    dirs = [tmp_path / "a", tmp_path / "b"]
    clock = ManualClock()
    mgr = LogManager(dirs, LogConfig(segment_bytes=one, retention_ms=-1), clock)
    mgr.load_all()
    heard: list = []
    mgr.log_start_listeners.append(lambda t, p: heard.append((t, p)))
    log = mgr.get_or_create("t", 0)
    other = mgr.get_or_create("t", 1)
    for _ in range(4):
        append(log)
    append(other)
    mgr.delete_records("t", 0, 2)
    assert heard == [("t", 0)]
    mgr.delete_records("t", 0, 2)  # (not moved)
    assert heard == [("t", 0)]
    log.config = LogConfig(segment_bytes=one, retention_bytes=one)
    assert mgr.run_retention() >= 1
    assert heard == [("t", 0)] * 2  # (t-1 kept its segments: not announced)
    heard.clear()
    target = next(d for d in dirs if d != mgr.dir_of(log))
    fut = mgr.create_future("t", 0, target)
    mover = LogDirMover(mgr)
    while fut.log_end_offset < log.log_end_offset:
        mover._copy_chunk(log, fut)
    mgr.replace_current_with_future("t", 0)
    assert heard == [("t", 0)]
    mgr.close()


def _part(key, offset=0):
    return FetchPartition(key, key[0], None, key[1], offset, 1 << 20)


def _entry(key, hw):
    return {
        "partition_index": key[1],
        "error_code": 0,
        "high_watermark": hw,
        "log_start_offset": 0,
        "records": b"",
    }


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 7), max_size=5), max_size=20))
def test_an_incremental_answer_follows_the_sessions_order(rounds):
    """Rounds that read a few partitions each: the answer is in the session's order (the
    answered ones move to its end) as a pass over the whole session would give, and the
    keys without an idle stamp are the ones kept in ``unstamped``."""
    keys = [("t", i) for i in range(8)]
    cache = FetchSessionCache(4)
    ctx = cache.new_context(
        0, 0, [_part(k) for k in keys], [], privileged=True, uses_topic_ids=False, now_ms=0
    )
    _, sid, _ = ctx.respond({k: _entry(k, 0) for k in keys}, 0, {k: ("idle",) for k in keys})
    order = list(keys)  # the model of the session's order
    hw = dict.fromkeys(keys, 0)
    epoch = 1
    for read in rounds:
        ctx = cache.new_context(sid, epoch, [], [], privileged=True, uses_topic_ids=False, now_ms=0)
        epoch += 1
        entries = {}
        for i in read:
            hw[keys[i]] += 1
            entries[keys[i]] = _entry(keys[i], hw[keys[i]])
        stamps = {k: ("idle",) for k in entries if k[1] % 2 == 0}
        error, _, answered = ctx.respond(entries, 0, stamps)
        assert error == 0
        want = [k for k in order if k in entries]
        assert [p.key for p, _ in answered] == want
        order = [k for k in order if k not in entries] + want
        s = cache.sessions[sid]
        assert list(s.partitions) == order
        assert s.unstamped == {k for k, p in s.partitions.items() if p.idle_stamp is None}
