"""Replication throttles (KIP-73), as Kafka's ReplicationQuotaManager applies them.

Which replicas are throttled: the topic configs ``leader.replication.throttled.replicas`` and
``follower.replication.throttled.replicas``, each ``*`` (every replica of the topic) or a list
``partition:broker,...``.  This broker throttles a partition as leader when the leader list
names (partition, this broker), and as follower when the follower list does.

How much: the broker configs ``leader.replication.throttled.rate`` and
``follower.replication.throttled.rate`` (bytes/s, default Long.MAX: unlimited), read from
``services.config`` at every check, so a dynamic change applies at once.  The rate is Kafka's
windowed one (``replication.quota.window.num`` = 11 samples of
``replication.quota.window.size.seconds`` = 1 s; the elapsed time counts at least 10 full
windows).  A quota is exceeded while the measured rate is above the configured one.

Where: a leader answering a follower's fetch leaves out the records of throttled partitions
while the leader quota is exceeded, and records the bytes it answered for throttled
partitions; a follower leaves throttled partitions out of its fetch while the follower quota
is exceeded, and records the throttled partitions' bytes it received.  As in Kafka, a replica
in the ISR is never throttled (only replicas catching up, as in a reassignment, are).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pybroker.quotas.rate import WindowedRate

if TYPE_CHECKING:
    from pybroker.clock import Clock
    from pybroker.config import Config
    from pybroker.coord.metadata.cluster import Cluster

LONG_MAX = 2**63 - 1
NUM_SAMPLES = 11  # Kafka's replication.quota.window.num
WINDOW_MS = 1000  # Kafka's replication.quota.window.size.seconds (the client quotas' class)
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"


def throttled_partitions(value: str | None, broker_id: int) -> set[int] | None:
    """The partitions a throttled-replicas config throttles on ``broker_id``: None for ``*``
    (all of them), else the partitions listed with this broker."""
    if value is None:
        return set()
    value = value.strip()
    if value == "*":
        return None
    out: set[int] = set()
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        p, _, b = item.partition(":")
        try:
            if int(b) == broker_id:
                out.add(int(p))
        except ValueError:
            continue
    return out


class ReplicationThrottles:
    """The leader and follower quotas of one broker (see the module docstring)."""

    def __init__(
        self,
        config: Callable[[], Config],
        cluster: Cluster,
        broker_id: int,
        clock: Clock,
        now_ms: Callable[[], int] | None = None,
    ) -> None:
        """``config``: gives the broker's Config, whose throttle rates are read at each check
        (dynamic broker configs change them at run time)."""
        self._config = config
        self.cluster = cluster
        self.broker_id = broker_id
        self._now = now_ms or (lambda: int(clock.monotonic() * 1000))
        self.leader_rate = WindowedRate(NUM_SAMPLES, WINDOW_MS)
        self.follower_rate = WindowedRate(NUM_SAMPLES, WINDOW_MS)
        self._parsed: dict[tuple[str, str, str], set[int] | None] = {}

    def _throttled(self, key: str, topic: str, partition: int) -> bool:
        info = self.cluster.topics.get(topic)
        if info is None:
            return False
        value = info.configs.get(key)
        if not value:
            return False
        cache_key = (key, topic, value)
        parts = self._parsed.get(cache_key, ())
        if parts == ():
            if len(self._parsed) > 10000:
                self._parsed.clear()
            parts = self._parsed[cache_key] = throttled_partitions(value, self.broker_id)
        return parts is None or partition in parts

    def leader_throttled(self, topic: str, partition: int) -> bool:
        return self._throttled(LEADER_REPLICAS, topic, partition)

    def follower_throttled(self, topic: str, partition: int) -> bool:
        return self._throttled(FOLLOWER_REPLICAS, topic, partition)

    def leader_exceeded(self) -> bool:
        limit = getattr(self._config(), "leader_replication_throttled_rate", LONG_MAX)
        return limit < LONG_MAX and self.leader_rate.measure(self._now()) > limit

    def follower_exceeded(self) -> bool:
        limit = getattr(self._config(), "follower_replication_throttled_rate", LONG_MAX)
        return limit < LONG_MAX and self.follower_rate.measure(self._now()) > limit

    def record_leader(self, nbytes: int) -> None:
        if nbytes:
            self.leader_rate.record(nbytes, self._now())

    def record_follower(self, nbytes: int) -> None:
        if nbytes:
            self.follower_rate.record(nbytes, self._now())
