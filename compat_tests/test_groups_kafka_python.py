"""Consumer groups with kafka-python 3.0 KafkaConsumer(group_id=..., subscribe) members.

Each member polls in its own thread (compat_tests.group_member.ThreadMember) and commits
synchronously after every batch. A group is "stable" here when every member reports
MemberState STABLE in the same generation and the assignments are disjoint and cover the
topic. Records are produced only once the group is stable, so a record delivered twice is a
broker bug, not a rebalance artefact.
"""

from __future__ import annotations

import time
import uuid

import pytest

from compat_tests.group_member import (
    GROUP_BROKER_OVERRIDES,
    HEARTBEAT_INTERVAL_MS,
    SESSION_TIMEOUT_MS,
    ThreadMember,
    close_all,
    duplicates,
    produce,
    wait_stable,
    wait_until,
)
from pybroker.testing.client_helpers import create_topic, unique_topic

# tests share a broker per backend and storage: each uses topics and groups of its own
pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.broker_overrides(GROUP_BROKER_OVERRIDES),
    pytest.mark.shared_broker,
]

PARTITIONS = 4
JOIN_TIMEOUT = 60.0


def _group(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _consume_all(members, sent: dict, timeout: float = 60.0):
    """Poll until every sent (partition, offset) was seen by some member; then a short
    grace period so late duplicates show up. Returns [(member name, record)]."""
    want = set(sent)

    def seen():
        for m in members:
            m.check()
        got = {(p, o) for m in members for p, o, _ in m.records()}
        return want <= got

    wait_until(seen, timeout, what=f"all {len(want)} records consumed")
    grace = time.monotonic() + 1.0
    while time.monotonic() < grace:
        time.sleep(0.05)
    return [(m.name, r) for m in members for r in m.records()]


def _check_delivery(tagged, sent: dict, label: str) -> None:
    keys = [(p, o) for _, (p, o, _) in tagged]
    dup = duplicates(keys)
    missing = set(sent) - set(keys)
    extra = set(keys) - set(sent)
    print(
        f"[{label}] sent {len(sent)}, delivered {len(keys)} "
        f"(distinct {len(set(keys))}, duplicates {len(dup)}, missing {len(missing)})"
    )
    assert not missing, f"{len(missing)} records never delivered, e.g. {sorted(missing)[:5]}"
    assert not extra, f"records not produced in this test: {sorted(extra)[:5]}"
    assert not dup, f"{len(dup)} records delivered more than once: {sorted(dup.items())[:5]}"
    for _, (p, o, v) in tagged:
        assert v == sent[(p, o)], f"record {p}/{o}: got {v!r}, sent {sent[(p, o)]!r}"


@pytest.mark.multicore
def test_two_members_share_and_consume_exactly_once(broker):
    """Two members split 4 partitions 2+2 (disjoint); every record is delivered once."""
    topic, group = unique_topic("grp"), _group("g2")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    members = [ThreadMember(broker.bootstrap, topic, group, f"m{i}") for i in range(2)]
    try:
        sets = wait_stable(members, PARTITIONS, JOIN_TIMEOUT)
        print(f"[{broker.backend}] assignments: {[sorted(s) for s in sets]}")
        assert [len(s) for s in sets] == [2, 2]
        assert not (sets[0] & sets[1])
        stable_snaps = [m.snapshot() for m in members]
        n = 400
        sent = produce(broker.bootstrap, topic, PARTITIONS, n, "a")
        tagged = _consume_all(members, sent)
        assert [m.snapshot() for m in members] == stable_snaps, "group rebalanced while stable"
        _check_delivery(tagged, sent, f"{broker.backend}")
        for m, s in zip(members, sets, strict=True):
            mine = {p for p, _, _ in m.records()}
            print(f"[{broker.backend}] {m.name} owns {sorted(s)}, consumed {len(m.records())}")
            assert mine <= s, f"{m.name} consumed partitions {mine} outside its assignment {s}"
            assert not m.commit_failures, m.commit_failures
    finally:
        close_all(members)


def test_five_members_four_partitions_one_idle(broker):
    """Five members on four partitions: exactly one member has an empty assignment."""
    topic, group = unique_topic("grp"), _group("g5")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    members = [ThreadMember(broker.bootstrap, topic, group, f"m{i}") for i in range(5)]
    try:
        sets = wait_stable(members, PARTITIONS, JOIN_TIMEOUT)
        sizes = sorted(len(s) for s in sets)
        print(f"[{broker.backend}] 5 members, assignment sizes {sizes}")
        assert sizes == [0, 1, 1, 1, 1]
        assert sum(1 for s in sets if not s) == 1
    finally:
        close_all(members)


def test_clean_leave_moves_partitions(broker):
    """consumer.close() of one member hands its partitions to the other (LeaveGroup)."""
    topic, group = unique_topic("grp"), _group("leave")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    members = [ThreadMember(broker.bootstrap, topic, group, f"m{i}") for i in range(2)]
    try:
        wait_stable(members, PARTITIONS, JOIN_TIMEOUT)
        first = produce(broker.bootstrap, topic, PARTITIONS, 100, "before")
        wait_until(
            lambda: {(p, o) for m in members for p, o, _ in m.records()} >= set(first),
            60,
            what="records before the leave consumed",
        )
        leaver, stayer = members
        t0 = time.monotonic()
        leaver.close()
        t_closed = time.monotonic()
        wait_stable([stayer], PARTITIONS, SESSION_TIMEOUT_MS / 1000 * 5)
        t_owned = time.monotonic()
        # the listener's timestamp is the moment the new assignment was handed to the client
        t_assigned = next(
            t for t, parts in stayer.assign_events if t >= t0 and len(parts) == PARTITIONS
        )
        print(
            f"[{broker.backend}] clean leave -> remaining member owns all {PARTITIONS} "
            f"partitions: {t_assigned - t0:.3f}s after close() began "
            f"(close() took {t_closed - t0:.3f}s; observed via poll after "
            f"{t_owned - t0:.3f}s); session.timeout.ms={SESSION_TIMEOUT_MS}, "
            f"heartbeat.interval.ms={HEARTBEAT_INTERVAL_MS}"
        )
        second = produce(broker.bootstrap, topic, PARTITIONS, 100, "after")
        wait_until(
            lambda: {(p, o) for p, o, _ in stayer.records()} >= set(second),
            60,
            what="records after the leave consumed by the remaining member",
        )
        everything = {**first, **second}
        keys = [(p, o) for m in members for p, o, _ in m.records()]
        print(
            f"[{broker.backend}] before {len(first)} + after {len(second)} records; "
            f"delivered {len(keys)}, distinct {len(set(keys))}"
        )
        assert set(keys) == set(everything)
        # everything was committed before the leave: nothing may be delivered twice
        assert not duplicates(keys), duplicates(keys)
    finally:
        close_all(members)


def test_second_group_gets_every_record(broker):
    """Two groups on one topic each receive every record (pub-sub)."""
    topic = unique_topic("grp")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    ga, gb = _group("pubA"), _group("pubB")
    group_a = [ThreadMember(broker.bootstrap, topic, ga, f"a{i}") for i in range(2)]
    group_b = [ThreadMember(broker.bootstrap, topic, gb, "b0")]
    try:
        for members in (group_a, group_b):
            wait_stable(members, PARTITIONS, JOIN_TIMEOUT)
        sent = produce(broker.bootstrap, topic, PARTITIONS, 300, "ps")
        tagged_a = _consume_all(group_a, sent)
        tagged_b = _consume_all(group_b, sent)
        _check_delivery(tagged_a, sent, f"{broker.backend} group A (2 members)")
        _check_delivery(tagged_b, sent, f"{broker.backend} group B (1 member)")
    finally:
        close_all(group_a + group_b)
