"""Committed offsets are exactly the last commit, however often group coordination moves
(issue 10, defect 1).

Three brokers on a private ZooKeeper.  A group's coordinator is C while all three are up and D
once C is gone (rendezvous hashing over the live brokers).  Commits and fetches are hand-built
OffsetCommit v2 / OffsetFetch v1 requests (a "simple" consumer: generation -1, no member), sent
to one chosen broker, so the test decides who answers: every broker that answers without an
error must answer the last commit acknowledged, never an older one.
"""

from __future__ import annotations

import struct
import time
import uuid

import pytest

from compat_tests.invariants import offset_fetch_v1_request, parse_offset_fetch_v1
from pybroker.testing import rawkafka
from pybroker.testing.cluster_harness import running_cluster, wait_until

pytestmark = pytest.mark.timeout(300)

API_OFFSET_COMMIT = 8
NONE, NOT_COORDINATOR = 0, 16


def offset_commit_v2_request(corr: int, group: str, topic: str, partition: int, offset: int):
    body = rawkafka.kstring(group) + struct.pack(">i", -1) + rawkafka.kstring("")
    body += struct.pack(">q", -1)  # retention_time: the broker's default
    body += struct.pack(">i", 1) + rawkafka.kstring(topic) + struct.pack(">i", 1)
    body += struct.pack(">iq", partition, offset) + rawkafka.kstring("")
    return rawkafka.frame(rawkafka.request_header(API_OFFSET_COMMIT, 2, corr) + body)


def parse_offset_commit_v2(body: bytes) -> int:
    r = rawkafka.Reader(body)
    codes = []
    for _ in range(r.take(">i")):
        r.string()
        for _ in range(r.take(">i")):
            _p, err = r.take(">ih")
            codes.append(err)
    assert len(codes) == 1, codes
    return codes[0]


@pytest.fixture
def cluster(request, tmp_path):
    with running_cluster(tmp_path) as c:
        request.node._pybrokers = list(c.brokers.values())
        yield c
    if c.stop_problems:
        pytest.fail("brokers did not stop cleanly: " + "; ".join(c.stop_problems))


class Offsets:
    """Commit at / fetch from one chosen broker, retrying while it is not (yet) coordinator."""

    def __init__(self, cluster, group: str, topic: str):
        self.cluster, self.group, self.topic = cluster, group, topic

    def _commit_once(self, broker: int, offset: int):
        try:
            body = self.cluster._roundtrip(
                broker,
                lambda c: offset_commit_v2_request(c, self.group, self.topic, 0, offset),
                5.0,
            )
        except (OSError, AssertionError, struct.error):
            return None
        return (True,) if parse_offset_commit_v2(body) == NONE else None

    def commit(self, broker: int, offset: int, timeout: float = 60.0) -> None:
        wait_until(
            lambda: self._commit_once(broker, offset),
            timeout,
            0.1,
            f"broker {broker} acknowledging a commit of {offset}",
        )

    def fetch(self, broker: int) -> tuple[int, int] | None:
        """(error, offset) of partition 0 at `broker`, None when it did not answer."""
        try:
            body = self.cluster._roundtrip(
                broker,
                lambda c: offset_fetch_v1_request(c, self.group, self.topic, [0]),
                5.0,
            )
        except (OSError, AssertionError, struct.error):
            return None
        return parse_offset_fetch_v1(body)[0]

    def fetch_ok(self, broker: int, timeout: float = 60.0) -> int:
        """The committed offset once `broker` answers as coordinator."""

        def answered():
            got = self.fetch(broker)
            return (got[1],) if got is not None and got[0] == NONE else None

        return wait_until(answered, timeout, 0.1, f"broker {broker} answering OffsetFetch")[0]


def _coordinators(cluster, group: str) -> tuple[int, int]:
    """(C, D): the coordinator with every broker up, and the one after C leaves."""
    from pybroker.coord.metadata.placement import coordinator_for

    ids = cluster.ids
    c = coordinator_for(group, ids)
    d = coordinator_for(group, [i for i in ids if i != c])
    err, node = wait_until(
        lambda: (lambda r: r if r[0] == NONE else None)(cluster.find_coordinator(group)),
        30,
        0.2,
        "FindCoordinator",
    )
    assert node == c, f"FindCoordinator named {node}, rendezvous hashing says {c}"
    return c, d


def _wait_gone(cluster, broker: int) -> None:
    wait_until(
        lambda: broker not in cluster.metadata([]).brokers,
        60,
        0.2,
        f"broker {broker} gone from Metadata",
    )


def test_coordination_moving_back_and_away_again_never_answers_an_older_commit(cluster):
    """The issue's sequence: commit 10 at C; stop C; commit 20 at D; restart C; commit 30 at
    C; stop C; OffsetFetch at D must answer 30 (it answered 20 from its previous term)."""
    topic = f"moves-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, 1, 3)
    group = f"g-{uuid.uuid4().hex[:8]}"
    c, d = _coordinators(cluster, group)
    offsets = Offsets(cluster, group, topic)

    offsets.commit(c, 10)
    assert offsets.fetch_ok(c) == 10

    cluster.stop_broker(c)
    offsets.commit(d, 20)
    assert offsets.fetch_ok(d) == 20

    cluster.restart(c)
    offsets.commit(c, 30)  # C is coordinator again once it acknowledges
    assert offsets.fetch_ok(c) == 30
    # D has learnt that C is back: it no longer answers for the group
    wait_until(
        lambda: (lambda r: r is not None and r[0] == NOT_COORDINATOR)(offsets.fetch(d)),
        60,
        0.2,
        "D answering NOT_COORDINATOR",
    )

    cluster.stop_broker(c)
    _wait_gone(cluster, c)
    assert offsets.fetch_ok(d) == 30
    offsets.commit(d, 40)
    assert offsets.fetch_ok(d) == 40

    cluster.restart(c)
    assert offsets.fetch_ok(c) == 40


def test_paused_coordinator_comes_back_with_the_commits_made_meanwhile(cluster):
    """SIGSTOP the coordinator longer than its ZooKeeper session: D takes over and takes a
    commit; when C resumes it re-registers, is coordinator again, and must answer D's commit,
    not the one it held before the pause; a commit at C is then what D answers after C goes."""
    topic = f"pause-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, 1, 3)
    group = f"g-{uuid.uuid4().hex[:8]}"
    c, d = _coordinators(cluster, group)
    offsets = Offsets(cluster, group, topic)

    offsets.commit(c, 100)
    assert offsets.fetch_ok(c) == 100

    cluster.pause(c)
    offsets.commit(d, 200, timeout=90)  # after C's session expired
    assert offsets.fetch_ok(d) == 200

    cluster.resume(c)
    # C re-registers in a new session; until it has, it may answer NOT_COORDINATOR or
    # COORDINATOR_NOT_AVAILABLE, but once it is back in the broker list and D has seen it,
    # an answer without error must be D's commit.
    wait_until(
        lambda: c in cluster.metadata([], via=[d]).brokers,
        60,
        0.2,
        f"broker {c} registered again",
    )
    time.sleep(1.0)  # let C's own view settle (not a timing assertion: the check below waits)
    assert offsets.fetch_ok(c) == 200

    offsets.commit(c, 300)
    cluster.stop_broker(c)
    _wait_gone(cluster, c)
    assert offsets.fetch_ok(d) == 300
