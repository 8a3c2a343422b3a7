"""The controller's leader-election rules, as pure functions over a partition state read from
the store (:class:`StoredState`), its replicas and the live brokers; a :class:`Decision` is
what to write to the state znode, or an (error code, message) answers an ElectLeaders request.
Kafka's rules: a new leader is the first live ISR member in replica order (clean), else, with
``unclean.leader.election.enable``, the first live replica; else the partition goes offline
(leader -1, ISR kept).  Every leader change bumps the leader epoch; the ISR never becomes
empty; a broker in controlled shutdown is never elected.  The rules in full:
docs/internals.md ("pybroker/coord/controller/election.py").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pybroker.coord.metadata.model import TopicPartition
from pybroker.errors import ErrorCode

ElectionResult = tuple[ErrorCode, str | None]


@dataclass(frozen=True)
class StoredState:
    """A partition state znode as read: its content and znode version."""

    leader: int
    leader_epoch: int
    isr: list[int]
    controller_epoch: int
    zk_version: int


@dataclass(frozen=True)
class Decision:
    """What to write to a partition state znode."""

    leader: int
    leader_epoch: int
    isr: list[int]
    reason: str


def is_unclean_allowed(topic_configs: dict[str, str], default: bool) -> bool:
    value = topic_configs.get("unclean.leader.election.enable")
    if value is None:
        return default
    return value.strip().lower() == "true"


def decide_for_live_set(
    st: StoredState,
    replicas: list[int],
    live: set[int],
    unclean: bool,
    shutting_down: frozenset[int] | set[int] = frozenset(),
) -> Decision | None:
    """The controller's automatic rule (broker loss / return, controlled shutdown); None when
    nothing changes.  A broker in ``shutting_down`` (live, in controlled shutdown) is never
    elected and leaves every ISR; a partition it leads moves to the first other replica that is
    in the ISR and live (Kafka's ControlledShutdownPartitionLeaderElectionStrategy), and stays
    with it when there is none."""
    eligible = live - set(shutting_down)
    if st.leader >= 0 and st.leader in live:
        if st.leader in shutting_down:
            others = [r for r in replicas if r in st.isr and r in eligible]
            if others:
                isr = [b for b in st.isr if b in eligible]
                return Decision(others[0], st.leader_epoch + 1, isr, "controlled shutdown")
        # leader alive: only drop dead (or shutting-down) followers from the ISR, never the
        # leader itself
        isr = [b for b in st.isr if b in eligible or b == st.leader]
        if isr and isr != st.isr:
            why = "dead followers leave the ISR"
            if any(b in shutting_down for b in st.isr if b != st.leader):
                why = "followers in controlled shutdown leave the ISR"
            return Decision(st.leader, st.leader_epoch, isr, why)
        return None
    live_isr = [r for r in replicas if r in st.isr and r in eligible]
    if live_isr:
        isr = [b for b in st.isr if b in eligible]
        return Decision(live_isr[0], st.leader_epoch + 1, isr, "clean election")
    if unclean:
        live_replicas = [r for r in replicas if r in eligible]
        if live_replicas:
            leader = live_replicas[0]
            return Decision(leader, st.leader_epoch + 1, [leader], "UNCLEAN election")
    if st.leader == -1:
        return None  # already offline, nobody eligible yet
    return Decision(-1, st.leader_epoch + 1, list(st.isr), "offline: no eligible leader")


def imbalanced_partitions(
    assignments: Iterable[tuple[TopicPartition, list[int], int]],
    percentage: int,
    eligible: set[int],
) -> dict[int, tuple[float, list[TopicPartition]]]:
    """Kafka's checkAndTriggerAutoLeaderRebalance selection.  ``assignments``: (partition,
    replicas, current leader).  Partitions are grouped by their preferred (first) replica; a
    broker whose share of such partitions led by another broker exceeds ``percentage`` % gets
    back those of them it can lead (it is eligible: live, not shutting down).  Returns
    {preferred broker: (imbalance ratio, partitions to elect it for)} for the brokers over the
    limit."""
    by_preferred: dict[int, list[tuple[TopicPartition, int]]] = {}
    for tp, replicas, leader in assignments:
        if replicas:
            by_preferred.setdefault(replicas[0], []).append((tp, leader))
    out: dict[int, tuple[float, list[TopicPartition]]] = {}
    for broker, tps in sorted(by_preferred.items()):
        elsewhere = [tp for tp, leader in tps if leader != broker]
        ratio = len(elsewhere) / len(tps)
        if ratio > percentage / 100.0 and broker in eligible:
            out[broker] = (ratio, elsewhere)
    return out


def decide_preferred(
    st: StoredState, replicas: list[int], live: set[int]
) -> Decision | ElectionResult:
    """Preferred election: the first replica leads if it is live and in the ISR."""
    if not replicas:
        return (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, "the partition has no replicas")
    preferred = replicas[0]
    if st.leader == preferred:
        return (ErrorCode.ELECTION_NOT_NEEDED, "the preferred replica is already the leader")
    if preferred not in live or preferred not in st.isr:
        return (
            ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
            f"Failed to elect leader for partition: preferred replica {preferred} is "
            f"{'not in the ISR' if preferred in live else 'not live'}",
        )
    isr = [b for b in st.isr if b in live]
    return Decision(preferred, st.leader_epoch + 1, isr, "preferred election")


def decide_unclean(
    st: StoredState, replicas: list[int], live: set[int]
) -> Decision | ElectionResult:
    """ElectLeaders UNCLEAN: only for partitions without a live leader; a live ISR member is
    still preferred, else any live replica."""
    if st.leader >= 0 and st.leader in live:
        return (ErrorCode.ELECTION_NOT_NEEDED, "the partition has a live leader")
    d = decide_for_live_set(st, replicas, live, True)
    if d is None or d.leader < 0:
        return (ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, "no live replica can lead")
    return d
