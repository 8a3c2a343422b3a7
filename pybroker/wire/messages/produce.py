"""Produce (key 0): request and response layouts, versions 0-12.

Kafka's spec: validVersions 3-13.

Kafka 4.0 dropped versions 0-2 from ProduceRequest.json/ProduceResponse.json (the spec
kafka-python ships starts at 3); we still declare them because older clients send them. They
are taken from Kafka 3.x's specs, whose field version ranges the 4.x spec kept unchanged (v0-2
have no transactional_id; throttle_time_ms comes in v1 and log_append_time_ms in v2), so every
field below has exactly Kafka 3.x's versions; tests/test_schema_crosscheck.py also checks these
old versions against kafka-python's legacy kafka.protocol.old classes.
"""

from pybroker.wire.messages.common_structs import current_leader, node_endpoints
from pybroker.wire.schema import F, api, declare

PRODUCE = declare(
    api(
        0,
        "Produce",
        versions="0-12",
        flexible="9+",
        request=[
            F("transactional_id", "string", "3+", nullable="3+", default=None),
            F("acks", "int16", "0+"),
            F("timeout_ms", "int32", "0+"),
            F(
                "topic_data",
                "[]TopicProduceData",
                "0+",
                F("name", "string", "0-12"),
                F("topic_id", "uuid", "13+"),
                F(
                    "partition_data",
                    "[]PartitionProduceData",
                    "0+",
                    F("index", "int32", "0+"),
                    F("records", "records", "0+", nullable="0+"),
                ),
            ),
        ],
        response=[
            F(
                "responses",
                "[]TopicProduceResponse",
                "0+",
                F("name", "string", "0-12"),
                F("topic_id", "uuid", "13+"),
                F(
                    "partition_responses",
                    "[]PartitionProduceResponse",
                    "0+",
                    F("index", "int32", "0+"),
                    F("error_code", "int16", "0+"),
                    F("base_offset", "int64", "0+"),
                    F("log_append_time_ms", "int64", "2+", default=-1),
                    F("log_start_offset", "int64", "5+", default=-1),
                    F(
                        "record_errors",
                        "[]BatchIndexAndErrorMessage",
                        "8+",
                        F("batch_index", "int32", "8+"),
                        F("batch_index_error_message", "string", "8+", nullable="8+", default=None),
                    ),
                    F("error_message", "string", "8+", nullable="8+", default=None),
                    current_leader("10+", default=-1, tag=0),
                ),
            ),
            F("throttle_time_ms", "int32", "1+", default=0),
            node_endpoints("10+", tag=0),
        ],
    )
)
