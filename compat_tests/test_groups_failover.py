"""Consumer-group failover with member PROCESSES (compat_tests/group_member.py).

Members consume, then commit synchronously, and log what they consumed and committed as JSON
lines, so the test can reason about what a member that died had committed:

- kill -9 of a member: after the session timeout its partitions move to the survivor, which
  resumes at the dead member's committed offsets (at-least-once: only records the dead member
  consumed but had not committed may be delivered again).
- all members restart (new processes, same group): they get only records produced after the
  last commit.
- broker restart (same log.dirs / same ZooKeeper chroot): committed offsets survive it.
"""

from __future__ import annotations

import time
import uuid

import pytest

from compat_tests.group_member import (
    GROUP_BROKER_OVERRIDES,
    HEARTBEAT_INTERVAL_MS,
    SESSION_TIMEOUT_MS,
    MemberProcess,
    close_all,
    duplicates,
    produce,
    wait_until,
)
from pybroker.testing.client_helpers import create_topic, unique_topic

# tests share a broker per backend (the one that restarts it has its own): each uses topics and
# groups of its own (conftest.py)
pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.broker_overrides(GROUP_BROKER_OVERRIDES),
    pytest.mark.shared_broker,
]

PARTITIONS = 4
JOIN_TIMEOUT = 60.0


def _group(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _latest_assignment(m: MemberProcess):
    """(generation, partitions) if the member's last rebalance event is an assignment."""
    evs = [e for e in m.events() if e["ev"] in ("assigned", "revoked")]
    if not evs or evs[-1]["ev"] != "assigned":
        return None
    return evs[-1]["generation"], frozenset(evs[-1]["partitions"])


def _stable(members: list[MemberProcess], partitions: int = PARTITIONS):
    for m in members:
        assert m.alive(), f"member {m.name} exited with {m.proc.returncode}:\n{m.stderr()}"
    latest = [_latest_assignment(m) for m in members]
    if any(a is None for a in latest) or len({g for g, _ in latest}) != 1:
        return None
    sets = [s for _, s in latest]
    if sum(len(s) for s in sets) != partitions or set().union(*sets) != set(range(partitions)):
        return None
    return sets


def _wait_stable(members: list[MemberProcess], timeout: float = JOIN_TIMEOUT):
    try:
        return wait_until(lambda: _stable(members), timeout, 0.1, "members stable")
    except AssertionError as e:
        views = "\n".join(
            f"{m.name}: last events {[x for x in m.events() if x['ev'] != 'records'][-4:]}"
            for m in members
        )
        raise AssertionError(f"{e}\n{views}") from None


def _uncommitted(m: MemberProcess) -> set[tuple[int, int]]:
    """Records the member consumed whose batch commit did not (visibly) succeed: a batch
    followed by commit_failed, or the last batch of a killed member."""
    out: set[tuple[int, int]] = set()
    pending: list[tuple[int, int]] = []
    for e in m.events():
        if e["ev"] == "records":
            out.update(pending)  # a batch with no commit line (should not happen alive)
            pending = [(p, o) for p, o, _ in e["records"]]
        elif e["ev"] == "committed":
            pending = []
        elif e["ev"] == "commit_failed":
            out.update(pending)
            pending = []
    out.update(pending)
    return out


def _start(tmp_path, names, broker, topic, group, **opts) -> list[MemberProcess]:
    return [MemberProcess(tmp_path, n, broker.bootstrap, topic, group, **opts) for n in names]


def _consumed_keys(members) -> list[tuple[int, int]]:
    return [(p, o) for m in members for p, o, _ in m.consumed()]


def _wait_consumed(
    members, want: set, timeout: float = 90.0, what: str = "records", dead=()
) -> None:
    def done():
        for m in members:
            if m not in dead and not m.alive():
                raise AssertionError(f"member {m.name} exited:\n{m.stderr()}")
        return want <= set(_consumed_keys(members))

    wait_until(done, timeout, interval=0.1, what=f"{len(want)} {what} consumed")
    end = time.monotonic() + 1.0  # grace: late duplicates show up
    while time.monotonic() < end:
        time.sleep(0.05)


def _wait_committed(members, sent: dict, timeout: float = 60.0) -> dict[int, int]:
    """Until the members' commits reach the end of every partition; returns them."""
    ends: dict[int, int] = {}
    for p, o in sent:
        ends[p] = max(ends.get(p, 0), o + 1)

    def merged():
        got: dict[int, int] = {}
        for m in members:
            for p, o in m.committed().items():
                got[p] = max(got.get(p, 0), o)
        return got if all(got.get(p, 0) >= e for p, e in ends.items()) else None

    return wait_until(merged, timeout, interval=0.1, what=f"commits up to {ends}")


def test_kill9_member_partitions_move_after_session_timeout(broker, tmp_path):
    topic, group = unique_topic("grp"), _group("kill")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    # slow members (10 records per batch, 100 ms per batch) so the kill lands mid-stream
    members = _start(
        tmp_path,
        ["victim", "survivor"],
        broker,
        topic,
        group,
        max_poll_records=10,
        delay_ms=100,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
    )
    victim, survivor = members
    try:
        sets = _wait_stable(members)
        victim_parts = set(sets[0])
        print(f"[{broker.backend}] victim owns {sorted(victim_parts)}, survivor {sorted(sets[1])}")
        n = 800
        sent = produce(broker.bootstrap, topic, PARTITIONS, n, "k")
        wait_until(
            lambda: sum(victim.committed().values()) >= 40,
            60,
            0.05,
            "the victim committed some records",
        )
        t_kill = time.time()
        victim.kill9()
        # committed offsets as the victim logged them (a commit that succeeded just before
        # the kill but was not logged only makes this check more lenient)
        victim_committed = victim.committed()
        victim_consumed = {(p, o) for p, o, _ in victim.consumed()}
        print(
            f"[{broker.backend}] kill -9 victim after it consumed {len(victim_consumed)} and "
            f"committed up to {victim_committed}"
        )

        def survivor_owns_all():
            for e in survivor.events("assigned"):
                if e["t"] >= t_kill and len(e["partitions"]) == PARTITIONS:
                    return e
            return None

        ev = wait_until(
            survivor_owns_all,
            SESSION_TIMEOUT_MS / 1000 * 5 + 30,
            0.05,
            "survivor owns all partitions after the kill",
        )
        print(
            f"[{broker.backend}] kill -9 -> survivor owns all {PARTITIONS} partitions after "
            f"{ev['t'] - t_kill:.3f}s (session.timeout.ms={SESSION_TIMEOUT_MS}, "
            f"heartbeat.interval.ms={HEARTBEAT_INTERVAL_MS}, "
            f"group.initial.rebalance.delay.ms=0)"
        )
        _wait_consumed([survivor, victim], set(sent), what="records (at least once)", dead=[victim])

        all_keys = _consumed_keys([victim, survivor])
        assert set(all_keys) == set(sent), "every record is consumed at least once"
        surv_records = [(p, o) for p, o, _ in survivor.consumed()]
        # nothing the victim committed is delivered again
        redelivered_committed = [
            (p, o) for p, o in surv_records if p in victim_committed and o < victim_committed[p]
        ]
        # where the survivor resumed on each of the victim's partitions
        resumed = {
            p: min((o for q, o in surv_records if q == p), default=None) for p in victim_parts
        }
        dup = duplicates(all_keys)
        allowed = _uncommitted(victim) | _uncommitted(survivor)
        unexplained = {k: c for k, c in dup.items() if k not in allowed}
        redelivered_uncommitted = set(surv_records) & victim_consumed
        print(
            f"[{broker.backend}] sent {n}; consumed {len(all_keys)} "
            f"(victim {len(victim_consumed)}, survivor {len(surv_records)}); "
            f"survivor resumed victim partitions at {resumed} (victim committed "
            f"{victim_committed}); re-delivered: {len(redelivered_uncommitted)} consumed-but-"
            f"uncommitted, {len(redelivered_committed)} committed; duplicates {len(dup)}, "
            f"unexplained {len(unexplained)}"
        )
        assert not redelivered_committed, (
            f"records committed by the dead member were delivered again: "
            f"{redelivered_committed[:10]}"
        )
        for p in victim_parts:
            if resumed[p] is not None:
                assert resumed[p] >= victim_committed.get(p, 0)
        assert not unexplained, (
            f"duplicates beyond at-least-once (not consumed-but-uncommitted): "
            f"{sorted(unexplained.items())[:10]}"
        )
        for p, o, v in victim.consumed() + survivor.consumed():
            assert v == sent[(p, o)]
    finally:
        close_all(members)


def _phase(tmp_path, broker, topic, group, names, sent: dict, label: str):
    """Start members, wait until exactly `sent` (and nothing older) is consumed and committed,
    stop them cleanly (SIGTERM -> close() -> LeaveGroup). Returns the delivered keys."""
    members = _start(tmp_path, names, broker, topic, group)
    try:
        _wait_consumed(members, set(sent), what=f"{label} records")
        committed = _wait_committed(members, sent)
        keys = _consumed_keys(members)
        dup = duplicates(keys)
        unexplained = {
            k: c for k, c in dup.items() if not any(k in _uncommitted(m) for m in members)
        }
        old = set(keys) - set(sent)
        print(
            f"[{broker.backend}] {label}: sent {len(sent)}, delivered {len(keys)} "
            f"(distinct {len(set(keys))}, older records {len(old)}, duplicates {len(dup)}, "
            f"unexplained {len(unexplained)}); committed {committed}"
        )
        assert not old, f"records from before the last commit delivered again: {sorted(old)[:10]}"
        assert set(keys) == set(sent)
        assert not unexplained, sorted(unexplained.items())[:10]
        for m in members:
            for p, o, v in m.consumed():
                assert v == sent[(p, o)]
        for m in members:
            code = m.terminate()
            assert code == 0, f"{m.name} exited with {code}:\n{m.stderr()}"
            assert m.events("closed"), f"{m.name} did not close its consumer"
        return keys
    finally:
        close_all(members)


def test_group_resumes_after_all_members_restart(broker, tmp_path):
    topic, group = unique_topic("grp"), _group("resume")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    first = produce(broker.bootstrap, topic, PARTITIONS, 200, "one")
    _phase(tmp_path, broker, topic, group, ["a1", "a2"], first, "first members")
    second = produce(broker.bootstrap, topic, PARTITIONS, 200, "two")
    _phase(tmp_path, broker, topic, group, ["b1", "b2"], second, "restarted members")


@pytest.mark.shared_broker(False)  # it restarts the broker
def test_group_resumes_after_broker_restart(broker, tmp_path, storage):
    topic, group = unique_topic("grp"), _group("brestart")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    first = produce(broker.bootstrap, topic, PARTITIONS, 200, "one")
    _phase(tmp_path, broker, topic, group, ["a1", "a2"], first, "before broker restart")
    broker.restart()
    second = produce(broker.bootstrap, topic, PARTITIONS, 200, "two")
    _phase(tmp_path, broker, topic, group, ["b1", "b2"], second, "after broker restart")
