"""DeleteRecords (key 21): request and response layouts, versions 0-2.

Kafka's spec: validVersions 0-2.
"""

from pybroker.wire.schema import F, api, declare

DELETE_RECORDS = declare(
    api(
        21,
        "DeleteRecords",
        versions="0-2",
        flexible="2+",
        request=[
            F(
                "topics",
                "[]DeleteRecordsTopic",
                "0+",
                F("name", "string", "0+"),
                F(
                    "partitions",
                    "[]DeleteRecordsPartition",
                    "0+",
                    F("partition_index", "int32", "0+"),
                    F("offset", "int64", "0+"),
                ),
            ),
            F("timeout_ms", "int32", "0+"),
        ],
        response=[
            F("throttle_time_ms", "int32", "0+"),
            F(
                "topics",
                "[]DeleteRecordsTopicResult",
                "0+",
                F("name", "string", "0+"),
                F(
                    "partitions",
                    "[]DeleteRecordsPartitionResult",
                    "0+",
                    F("partition_index", "int32", "0+"),
                    F("low_watermark", "int64", "0+"),
                    F("error_code", "int16", "0+"),
                ),
            ),
        ],
    )
)
