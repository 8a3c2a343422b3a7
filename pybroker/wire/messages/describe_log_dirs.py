"""DescribeLogDirs (key 35): request and response layouts, versions 0-4.

Kafka's spec: validVersions 1-5.

Kafka 4.0 dropped versions 0 from DescribeLogDirsRequest.json/DescribeLogDirsResponse.json (the
spec kafka-python ships starts at 1); we still declare them because older clients send them.
They are taken from Kafka 3.x's specs, whose field version ranges the 4.x spec kept unchanged
(v0 is the same as v1), so every field below has exactly Kafka 3.x's versions;
tests/test_schema_crosscheck.py also checks these old versions against kafka-python's legacy
kafka.protocol.old classes.
"""

from pybroker.wire.schema import F, api, declare

DESCRIBE_LOG_DIRS = declare(
    api(
        35,
        "DescribeLogDirs",
        versions="0-4",
        flexible="2+",
        request=[
            F(
                "topics",
                "[]DescribableLogDirTopic",
                "0+",
                F("topic", "string", "0+"),
                F("partitions", "[]int32", "0+"),
                nullable="0+",
            ),
        ],
        response=[
            F("throttle_time_ms", "int32", "0+"),
            F("error_code", "int16", "3+"),
            F(
                "results",
                "[]DescribeLogDirsResult",
                "0+",
                F("error_code", "int16", "0+"),
                F("log_dir", "string", "0+"),
                F(
                    "topics",
                    "[]DescribeLogDirsTopic",
                    "0+",
                    F("name", "string", "0+"),
                    F(
                        "partitions",
                        "[]DescribeLogDirsPartition",
                        "0+",
                        F("partition_index", "int32", "0+"),
                        F("partition_size", "int64", "0+"),
                        F("offset_lag", "int64", "0+"),
                        F("is_future_key", "bool", "0+"),
                    ),
                ),
                F("total_bytes", "int64", "4+", default=-1),
                F("usable_bytes", "int64", "4+", default=-1),
                F("is_cordoned", "bool", "5+", default=False),
            ),
        ],
    )
)
