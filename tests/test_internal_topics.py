"""The internal topics at the wire (a broker in process, pybroker/internal_topics.py): created
with the coordinator's settings however they are first asked for, marked internal, never
written by clients, and not created at all while pybroker keeps offsets and transaction state
in the metadata store."""

from __future__ import annotations

import pytest
from broker_fixture import (
    INVALID_TOPIC_EXCEPTION,
    METADATA,
    NONE,
    PRODUCE,
    UNKNOWN_TOPIC_OR_PARTITION,
    BrokerFactory,
)

from pybroker.wire.records import build_batch

KAFKA_STORAGE = {
    "offsets.storage": "kafka",
    "transaction.state.storage": "kafka",
    "offsets.topic.replication.factor": 1,
    "offsets.topic.num.partitions": 7,
    "transaction.state.log.replication.factor": 1,
    "transaction.state.log.min.isr": 1,
    "transaction.state.log.num.partitions": 3,
}
FIND_COORDINATOR = 10


@pytest.fixture
def start_broker(tmp_path):
    with BrokerFactory(tmp_path) as factory:
        yield factory


def _metadata(c, topics: list[str]) -> dict:
    body = c.request(
        METADATA, 9, {"topics": [{"name": t} for t in topics], "allow_auto_topic_creation": True}
    )
    return {t["name"]: t for t in body["topics"]}


def test_internal_topics_get_the_coordinators_settings(start_broker):
    b = start_broker(**KAFKA_STORAGE)
    with b.client() as c:
        # asked for by name first (a console consumer on the topic): created as the
        # coordinator creates it, not with the broker's num.partitions
        got = _metadata(c, ["__consumer_offsets", "__transaction_state"])
        assert {t: (v["is_internal"], len(v["partitions"])) for t, v in got.items()} == {
            "__consumer_offsets": (True, 7),
            "__transaction_state": (True, 3),
        }
        info = b.broker.cluster.topics["__consumer_offsets"]
        assert info.configs["cleanup.policy"] == "compact"
        assert b.broker.cluster.topics["__transaction_state"].configs["min.insync.replicas"] == "1"
        found = c.request(FIND_COORDINATOR, 1, {"key": "g", "key_type": 0})
        assert (found["error_code"], found["node_id"]) == (NONE, 0)  # the partition leader
        batch = build_batch([(b"k", b"v", [])])
        resp = c.request(
            PRODUCE,
            9,
            {
                "transactional_id": None,
                "acks": -1,
                "timeout_ms": 5000,
                "topic_data": [
                    {
                        "name": "__consumer_offsets",
                        "partition_data": [{"index": 0, "records": batch}],
                    }
                ],
            },
        )
        code = resp["responses"][0]["partition_responses"][0]["error_code"]
        assert code == INVALID_TOPIC_EXCEPTION


def test_internal_topics_are_not_created_with_the_metadata_store_storages(start_broker):
    b = start_broker()
    with b.client() as c:
        got = _metadata(c, ["__consumer_offsets", "__transaction_state"])
        assert {t: v["error_code"] for t, v in got.items()} == {
            "__consumer_offsets": UNKNOWN_TOPIC_OR_PARTITION,
            "__transaction_state": UNKNOWN_TOPIC_OR_PARTITION,
        }
    assert "__consumer_offsets" not in b.broker.cluster.topics
