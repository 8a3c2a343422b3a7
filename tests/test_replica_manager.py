"""pybroker/replica_manager.py's pure part: what a topic's configs ask of the validator."""

from __future__ import annotations

from pybroker.config import Config
from pybroker.log.validator import LONG_MAX
from pybroker.replica_manager import validation_config


def test_broker_defaults_apply_without_topic_configs():
    cfg = validation_config(Config(), {}, "t", 3)
    assert cfg.topic_partition == "t-3"
    assert cfg.max_message_bytes == Config().message_max_bytes
    assert cfg.max_uncompressed_bytes == Config().socket_request_max_bytes
    assert cfg.target_codec is None and not cfg.compacted and not cfg.log_append_time
    assert (cfg.timestamp_before_max_ms, cfg.timestamp_after_max_ms) == (LONG_MAX, LONG_MAX)


def test_topic_configs_win_and_kip937_falls_back_to_difference_max_ms():
    topic = {
        "max.message.bytes": "1000",
        "compression.type": "zstd",
        "cleanup.policy": "delete, compact",
        "message.timestamp.type": "LogAppendTime",
        "message.timestamp.difference.max.ms": "5000",
        "message.timestamp.after.max.ms": "20",
    }
    cfg = validation_config(Config(), topic, "t", 0)
    assert (cfg.max_message_bytes, cfg.target_codec, cfg.compacted) == (1000, 4, True)
    assert cfg.log_append_time
    # before.max.ms is Long.MAX (unset): difference.max.ms applies; after.max.ms is its own
    assert (cfg.timestamp_before_max_ms, cfg.timestamp_after_max_ms) == (5000, 20)
