"""The follower's FetchSessionHandler against the broker's FetchSessionCache, round by round:
both sides agree on what is in the session, and the follower only sends what changed."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pybroker.fetch_session import FetchPartition, FetchSessionCache
from pybroker.replication.session_handler import (
    FETCH_SESSION_ID_NOT_FOUND,
    INITIAL_EPOCH,
    FetchRequestData,
    FetchSessionHandler,
)


def params(offset, epoch=0):
    return {
        "partition": 0,
        "current_leader_epoch": epoch,
        "fetch_offset": offset,
        "last_fetched_epoch": epoch,
        "log_start_offset": 0,
        "partition_max_bytes": 1 << 20,
    }


class Leader:
    """The broker side: a cache and a log end per partition; answers like the Fetch handler."""

    def __init__(self):
        self.cache = FetchSessionCache(10)
        self.hw = {}

    def fetch(self, data):
        reqs = [
            FetchPartition(k, k[0], None, k[1], p["fetch_offset"], p["partition_max_bytes"])
            for k, p in data.partitions.items()
        ]
        ctx = self.cache.new_context(
            data.session_id,
            data.epoch,
            reqs,
            data.forgotten,
            privileged=True,
            uses_topic_ids=False,
            now_ms=0,
        )
        entries = {
            p.key: {
                "partition_index": p.partition,
                "error_code": 0,
                "high_watermark": self.hw[p.key],
                "log_start_offset": 0,
                "records": b"x" if p.fetch_offset < self.hw[p.key] else b"",
            }
            for p in ctx.partitions
        }
        error, sid, answered = ctx.respond(entries, 0)
        return error, sid, [p.key for p, _ in answered]


def round_trip(handler, leader, wanted):
    data = handler.build(wanted)
    error, sid, answered = leader.fetch(data)
    handler.handle_response(data, error, sid)
    return data, answered


def test_only_changed_partitions_are_sent_and_only_news_answered():
    leader, h = Leader(), FetchSessionHandler()
    a, b = ("t", 0), ("t", 1)
    leader.hw = {a: 5, b: 5}
    data, answered = round_trip(h, leader, {a: params(5), b: params(5)})
    assert data.full and set(answered) == {a, b} and h.session_id != 0
    data, answered = round_trip(h, leader, {a: params(5), b: params(5)})
    assert not data.full and data.partitions == {} and answered == []
    leader.hw[b] = 7  # new records on b
    data, answered = round_trip(h, leader, {a: params(5), b: params(5)})
    assert answered == [b]
    data, answered = round_trip(h, leader, {a: params(5), b: params(7)})
    assert list(data.partitions) == [b] and answered == []


def test_forgetting_and_truncation():
    leader, h = Leader(), FetchSessionHandler()
    a, b = ("t", 0), ("t", 1)
    leader.hw = {a: 5, b: 5}
    round_trip(h, leader, {a: params(5), b: params(5)})
    data, _ = round_trip(h, leader, {a: params(5)})
    assert data.forgotten == [b]
    assert list(leader.cache.sessions[h.session_id].partitions) == [a]
    # truncation (offset back) or a new leader epoch: a full request, in a new session
    old = h.session_id
    data, answered = round_trip(h, leader, {a: params(3, epoch=1)})
    assert data.full and answered == [a] and h.session_id not in (0, old)
    assert old not in leader.cache.sessions


def test_a_lost_session_falls_back_to_a_full_fetch():
    leader, h = Leader(), FetchSessionHandler()
    a = ("t", 0)
    leader.hw = {a: 1}
    round_trip(h, leader, {a: params(1)})
    leader.cache.remove(h.session_id)  # evicted, or the leader restarted
    data, answered = round_trip(h, leader, {a: params(1)})
    assert not data.full and answered == [] and h.session_id == 0
    data, answered = round_trip(h, leader, {a: params(1)})
    assert data.full and answered == [a] and h.session_id != 0


# -- the fetcher's reused parameter dicts against fresh ones (random rounds) ------------------


class _FromScratch(FetchSessionHandler):
    """build() recomputed from values only: copies of what was sent, every partition
    compared field by field, the forgotten ones looked up one by one."""

    def build(self, wanted):
        fields = [f for f in params(0) if f != "partition"]
        if self.epoch != INITIAL_EPOCH and any(
            k in self.sent
            and (
                p["current_leader_epoch"] != self.sent[k]["current_leader_epoch"]
                or p["fetch_offset"] < self.sent[k]["fetch_offset"]
            )
            for k, p in wanted.items()
        ):
            self.epoch = INITIAL_EPOCH
        if self.epoch == INITIAL_EPOCH:
            self.sent = {k: dict(v) for k, v in wanted.items()}
            return FetchRequestData(self.session_id, INITIAL_EPOCH, dict(wanted), [])
        send = {
            k: p
            for k, p in wanted.items()
            if k not in self.sent or any(self.sent[k][f] != p[f] for f in fields)
        }
        forgotten = [k for k in self.sent if k not in wanted]
        self.sent = {k: dict(v) for k, v in wanted.items()}
        return FetchRequestData(self.session_id, self.epoch, send, forgotten)


_KEYS = [("t", 0), ("t", 1), ("u", 0)]
_op = st.one_of(
    st.tuples(st.just("append"), st.sampled_from(_KEYS), st.integers(1, 3)),
    st.tuples(st.just("truncate"), st.sampled_from(_KEYS), st.integers(0, 3)),
    st.tuples(st.just("epoch"), st.sampled_from(_KEYS), st.just(0)),
    st.tuples(st.just("start"), st.sampled_from(_KEYS), st.integers(0, 2)),
    st.tuples(st.just("add"), st.sampled_from(_KEYS), st.just(0)),
    st.tuples(st.just("remove"), st.sampled_from(_KEYS), st.just(0)),
    st.tuples(
        st.just("round"), st.sampled_from(["ok", "lost", "epoch_error", "failed"]), st.just(0)
    ),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_op, max_size=60))
def test_build_with_reused_dicts_matches_a_from_scratch_computation(ops):
    """The fetcher passes the same dict for a partition whose parameters did not change (an
    identity check in build, and no forgotten list to compute while the sizes agree): after
    random appends, truncations, epochs, adds, removes and answers, every request is what
    a from-scratch computation over values, given new dicts every round, builds."""
    state = {k: [0, 0, 0, 0] for k in _KEYS[:2]}  # leader epoch, log end, last epoch, start
    cached: dict = {}  # key: (state it was built from, dict), as fetcher._Fetching
    reused, fresh = FetchSessionHandler(), _FromScratch()
    # ... and given the keys whose dict was added, replaced or removed since its last build
    # (the replica fetcher's kept ``_wanted`` and ``_sent_changed``)
    noted, last_wanted = FetchSessionHandler(), {}
    next_id = 1

    def build_params(s):
        return {
            "partition": 0,
            "current_leader_epoch": s[0],
            "fetch_offset": s[1],
            "last_fetched_epoch": s[2],
            "log_start_offset": s[3],
            "partition_max_bytes": 1 << 20,
        }

    for op, arg, n in ops:
        s = state.get(arg) if op != "round" else None
        if op == "append" and s is not None:
            s[1] += n
            s[2] = s[0]
        elif op == "truncate" and s is not None:
            s[1] = max(s[3], s[1] - n)
        elif op == "epoch" and s is not None:
            s[0] += 1
        elif op == "start" and s is not None:
            s[3] = min(s[1], s[3] + n)
        elif op == "add" and s is None:
            state[arg] = [0, 0, 0, 0]
        elif op == "remove":
            state.pop(arg, None)
            cached.pop(arg, None)
        elif op == "round":
            wanted_reused = {}
            for k, v in state.items():
                now = tuple(v)
                if k not in cached or cached[k][0] != now:
                    cached[k] = (now, build_params(v))
                wanted_reused[k] = cached[k][1]
            wanted_fresh = {k: build_params(v) for k, v in state.items()}
            changed = {
                k
                for k in {*wanted_reused, *last_wanted}
                if wanted_reused.get(k) is not last_wanted.get(k)
            }
            last_wanted = dict(wanted_reused)
            c = noted.build(wanted_reused, changed)
            a, b = reused.build(wanted_reused), fresh.build(wanted_fresh)
            assert (a.session_id, a.epoch, a.partitions, a.forgotten) == (
                b.session_id,
                b.epoch,
                b.partitions,
                b.forgotten,
            )
            assert (c.session_id, c.epoch, c.partitions, sorted(c.forgotten)) == (
                b.session_id,
                b.epoch,
                b.partitions,
                sorted(b.forgotten),
            )
            assert reused.sent == fresh.sent == noted.sent
            if arg == "failed":
                reused.handle_error()
                fresh.handle_error()
                noted.handle_error()
                continue
            error = {"ok": 0, "lost": FETCH_SESSION_ID_NOT_FOUND, "epoch_error": 71}[arg]
            sid = reused.session_id
            if a.full and error == 0:
                sid, next_id = next_id, next_id + 1
            reused.handle_response(a, error, sid)
            fresh.handle_response(b, error, sid)
            noted.handle_response(c, error, sid)
            assert (reused.session_id, reused.epoch) == (fresh.session_id, fresh.epoch)
            assert (noted.session_id, noted.epoch) == (fresh.session_id, fresh.epoch)
