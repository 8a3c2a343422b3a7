"""Replication throttles (replication/throttle.py): the throttled replica lists, and the topic
config check (Kafka's ThrottledReplicaListValidator).  The windowed rate is the client
quotas' (pybroker/quotas/rate.py, tested there)."""

from __future__ import annotations

import pytest

from pybroker.coord.metadata.topic_rules import validate_topic_configs
from pybroker.errors import ErrorCode, KafkaError
from pybroker.replication.throttle import throttled_partitions


def test_throttled_partitions_of_this_broker():
    assert throttled_partitions("*", 3) is None  # every partition
    assert throttled_partitions("0:1,0:3, 2:3,5:2", 3) == {0, 2}
    assert throttled_partitions("", 3) == set()
    assert throttled_partitions(None, 3) == set()


def test_throttled_replicas_config_check():
    for ok in ("*", "0:1,1:2", "", " 0:1 , 1:2 "):
        validate_topic_configs({"leader.replication.throttled.replicas": ok})
    with pytest.raises(KafkaError) as ei:
        validate_topic_configs({"follower.replication.throttled.replicas": "0-1"})
    assert ei.value.code == ErrorCode.INVALID_CONFIG
    assert str(ei.value) == (  # Kafka's ThrottledReplicaListValidator
        "Invalid value [0-1] for configuration follower.replication.throttled.replicas:"
        " follower.replication.throttled.replicas must be the literal '*' or a list of replicas"
        " in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],..."
    )
