"""This broker's replica of a partition as the replica manager holds it (role, leader, ISR,
followers' fetch positions) and the purgatory keys its waiters park on."""

from __future__ import annotations

from dataclasses import dataclass, field

from pybroker.log import PartitionLog
from pybroker.replication.changes import IdleFetches

LEADER, FOLLOWER, OFFLINE = "leader", "follower", "offline"


def hw_key(topic: str, partition: int) -> tuple:
    """Purgatory key notified when a partition's high watermark advances (acks=all waits)."""
    return ("hw", topic, partition)


def leo_key(topic: str, partition: int) -> tuple:
    """Purgatory key notified on every leader append (follower fetches long-poll on it)."""
    return ("leo", topic, partition)


def followers_append_key() -> tuple:
    """Purgatory key notified on every leader append: followers' fetch sessions that read
    only what changed (replication/changes.py) park on it instead of one key per partition."""
    return ("leo",)


def follower_key(broker_id: int) -> tuple:
    """Purgatory key notified when a follower's parked fetches should be answered at once: it
    owes a new leader here its first fetch (see ReplicaManager.owes_fetch)."""
    return ("follower", broker_id)


def consumer_key(topic: str, partition: int) -> tuple:
    """Purgatory key notified when records become visible to consumers (the HW moved)."""
    return (topic, partition)


@dataclass
class FollowerState:
    log_end_offset: int = -1
    last_caught_up_ms: int = 0
    # set while the follower's fetch session skips this partition as unchanged: each of its
    # rounds is a fetch at the log end (replication/changes.py)
    idle: IdleFetches | None = None

    def caught_up_ms(self) -> int:
        """Kafka's lastCaughtUpTimeMs: the last fetch that found the follower at the log
        end, counting its session's rounds that skipped this partition as unchanged."""
        idle = self.idle
        if idle is not None and idle.last_ms > self.last_caught_up_ms:
            return idle.last_ms
        return self.last_caught_up_ms

    def settle_idle(self) -> None:
        """The session reads this partition again: its idle rounds so far are recorded, and
        the next ones no longer count until it is skipped again."""
        idle = self.idle
        if idle is not None:
            self.last_caught_up_ms = max(self.last_caught_up_ms, idle.last_ms)
            self.idle = None


@dataclass
class Replica:
    """This broker's replica of one partition."""

    topic: str
    partition: int
    log: PartitionLog
    role: str = OFFLINE
    leader: int = -1
    leader_epoch: int = -1
    isr: list[int] = field(default_factory=list)
    replicas: list[int] = field(default_factory=list)
    followers: dict[int, FollowerState] = field(default_factory=dict)
    isr_change_in_flight: bool = False
    # As leader: the ISR that change is to write (None when none is in flight)
    pending_isr: list[int] | None = None
    # As leader: the log end offset when this leader epoch began (Kafka's
    # leaderEpochStartOffsetOpt); -1 otherwise.
    leader_epoch_start_offset: int = -1
    # As leader: the epoch this broker's uninterrupted leadership began in (a same-leader epoch
    # bump keeps it): acks=all produces appended since then settle by the high watermark.
    leadership_epoch: int = -1
    # As leader: when this leader epoch began (ms, the injected clock), for the log line that
    # tells how long the high watermark stayed below the epoch start
    leader_since_ms: int = 0
    # the TopicInfo this replica's log was last found to belong to (cluster metadata replaces
    # TopicInfo objects when a topic changes): an identity check per request instead of
    # comparing topic ids
    checked_info: object = field(default=None, repr=False, compare=False)

    def high_watermark_lagging(self) -> bool:
        """A new leader's high watermark starts where its follower knew it, which can be
        below what the previous leader showed clients: until it reaches the start of this
        leader epoch, offsets answered from it could go back (KIP-207)."""
        return self.log.high_watermark < self.leader_epoch_start_offset
