"""DeleteTopics (key 20): request and response layouts, versions 0-6.

Kafka's spec: validVersions 1-6.

Kafka 4.0 dropped versions 0 from DeleteTopicsRequest.json/DeleteTopicsResponse.json (the spec
kafka-python ships starts at 1); we still declare them because older clients send them. They
are taken from Kafka 3.x's specs, whose field version ranges the 4.x spec kept unchanged (v0 is
v1 without throttle_time_ms in the response), so every field below has exactly Kafka 3.x's
versions; tests/test_schema_crosscheck.py also checks these old versions against kafka-python's
legacy kafka.protocol.old classes.
"""

from pybroker.wire.schema import F, api, declare

DELETE_TOPICS = declare(
    api(
        20,
        "DeleteTopics",
        versions="0-6",
        flexible="4+",
        request=[
            F(
                "topics",
                "[]DeleteTopicState",
                "6+",
                F("name", "string", "6+", nullable="6+", default=None),
                F("topic_id", "uuid", "6+"),
            ),
            F("topic_names", "[]string", "0-5"),
            F("timeout_ms", "int32", "0+"),
        ],
        response=[
            F("throttle_time_ms", "int32", "1+"),
            F(
                "responses",
                "[]DeletableTopicResult",
                "0+",
                F("name", "string", "0+", nullable="6+"),
                F("topic_id", "uuid", "6+"),
                F("error_code", "int16", "0+"),
                F("error_message", "string", "5+", nullable="5+", default=None),
            ),
        ],
    )
)
