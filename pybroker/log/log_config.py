"""A partition log's settings (Kafka's LogConfig): the topic-level configs the log layer reads,
with Kafka's defaults.  PartitionLog (partition_log.py) and the cleaner read them; the handlers
build them from a topic's configs (handlers/_topics.py)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class LogConfig:
    """Kafka's topic-level names: segment.bytes, segment.ms, segment.jitter.ms, retention.ms,
    retention.bytes, index.interval.bytes, segment.index.bytes, message.timestamp.type,
    file.delete.delay.ms (segment files renamed ``.deleted`` are unlinked that long after),
    and compaction's cleanup.policy, delete.retention.ms, min.cleanable.dirty.ratio,
    min.compaction.lag.ms, max.compaction.lag.ms (pybroker/log/cleaner.py).
    A negative retention disables that kind of retention; time and size retention apply only
    when cleanup.policy holds ``delete`` (a compact-only log loses records only to the cleaner
    and to DeleteRecords)."""

    segment_bytes: int = 1024 * 1024 * 1024
    roll_ms: int = 7 * 24 * 3600 * 1000
    roll_jitter_ms: int = 0  # segment.jitter.ms
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    index_interval_bytes: int = 4096
    max_index_bytes: int = 10 * 1024 * 1024
    message_timestamp_type: str = "CreateTime"
    file_delete_delay_ms: int = 60_000
    cleanup_policy: str = "delete"  # "delete", "compact", "compact,delete" (either order), ""
    delete_retention_ms: int = 86_400_000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = 2**63 - 1

    @property
    def compact(self) -> bool:
        return "compact" in _policies(self.cleanup_policy)

    @property
    def delete(self) -> bool:
        return "delete" in _policies(self.cleanup_policy)

    @property
    def max_segment_ms(self) -> int:
        """Kafka's LogConfig.maxSegmentMs: a compacted log also rolls its active segment
        when max.compaction.lag.ms passes, so that the cleaner can reach its records."""
        if self.compact and self.max_compaction_lag_ms > 0:
            return min(self.max_compaction_lag_ms, self.roll_ms)
        return self.roll_ms


@lru_cache(maxsize=64)
def _policies(cleanup_policy: str) -> frozenset[str]:
    """cleanup.policy's parts, remembered: every append asks ``max_segment_ms``."""
    return frozenset(cleanup_policy.split(","))
