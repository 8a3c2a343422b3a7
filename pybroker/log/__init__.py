"""The segmented partition log, in Kafka's on-disk layout (see docs/internals.md)."""

from pybroker.log.descriptors import FileSlice
from pybroker.log.leader_epoch import EpochEntry, LeaderEpochCache
from pybroker.log.manager import LogManager
from pybroker.log.partition_log import AppendInfo, LogConfig, PartitionLog
from pybroker.log.producer_state import ProducerStateManager
from pybroker.log.segment import LogSegment

__all__ = [
    "AppendInfo",
    "EpochEntry",
    "FileSlice",
    "LeaderEpochCache",
    "LogConfig",
    "LogManager",
    "LogSegment",
    "PartitionLog",
    "ProducerStateManager",
]
