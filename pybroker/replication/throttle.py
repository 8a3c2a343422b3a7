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
from typing import Any

LONG_MAX = 2**63 - 1
NUM_SAMPLES = 11  # Kafka's replication.quota.window.num
WINDOW_MS = 1000  # Kafka's replication.quota.window.size.seconds
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"


class WindowedRate:
    """Kafka's Rate over a SampledStat of ``samples`` windows of ``window_ms``: the total of
    the windows still held, over the time they span (at least samples - 1 full windows)."""

    def __init__(self, samples: int = NUM_SAMPLES, window_ms: int = WINDOW_MS) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self._windows: list[list[float]] = []  # [start ms, total]

    def _purge(self, now_ms: float) -> None:
        horizon = now_ms - self.samples * self.window_ms
        self._windows = [w for w in self._windows if w[0] > horizon]

    def record(self, value: float, now_ms: float) -> None:
        self._purge(now_ms)
        if not self._windows or now_ms >= self._windows[-1][0] + self.window_ms:
            self._windows.append([now_ms, 0.0])
        self._windows[-1][1] += value

    def rate(self, now_ms: float) -> float:
        """Units per second."""
        self._purge(now_ms)
        if not self._windows:
            return 0.0
        total = sum(w[1] for w in self._windows)
        elapsed = now_ms - self._windows[0][0]
        full = int(elapsed // self.window_ms)
        minimum = self.samples - 1
        if full < minimum:
            elapsed += (minimum - full) * self.window_ms
        return total / (elapsed / 1000.0)


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
        config: Callable[[], Any],
        cluster: Any,
        broker_id: int,
        clock: Any,
        now_ms: Callable[[], float] | None = None,
    ) -> None:
        """``config``: gives the broker's Config, whose throttle rates are read at each check
        (dynamic broker configs change them at run time)."""
        self._config = config
        self.cluster = cluster
        self.broker_id = broker_id
        self._now = now_ms or (lambda: clock.monotonic() * 1000.0)
        self.leader_rate = WindowedRate()
        self.follower_rate = WindowedRate()
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
        return limit < LONG_MAX and self.leader_rate.rate(self._now()) > limit

    def follower_exceeded(self) -> bool:
        limit = getattr(self._config(), "follower_replication_throttled_rate", LONG_MAX)
        return limit < LONG_MAX and self.follower_rate.rate(self._now()) > limit

    def record_leader(self, nbytes: int) -> None:
        if nbytes:
            self.leader_rate.record(nbytes, self._now())

    def record_follower(self, nbytes: int) -> None:
        if nbytes:
            self.follower_rate.record(nbytes, self._now())
