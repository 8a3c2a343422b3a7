"""WriteTxnMarkers (key 27): request and response layouts, versions 0-1.

Kafka's spec: validVersions 0-1 in Kafka 3.9 (v1 is v0 made flexible); Kafka 4.0 removed v0
and added v2 (TransactionVersion, KIP-890).  Brokers send v1 since Kafka 2.8 (IBP >= 2.8);
older coordinators send v0.  Sent by a transaction coordinator to the leaders of a
transaction's partitions.
"""

from pybroker.wire.schema import F, api, declare

WRITE_TXN_MARKERS = declare(
    api(
        27,
        "WriteTxnMarkers",
        versions="0-1",
        flexible="1+",
        request=[
            F(
                "markers",
                "[]WritableTxnMarker",
                "0+",
                F("producer_id", "int64", "0+"),
                F("producer_epoch", "int16", "0+"),
                F("transaction_result", "bool", "0+"),
                F(
                    "topics",
                    "[]WritableTxnMarkerTopic",
                    "0+",
                    F("name", "string", "0+"),
                    F("partition_indexes", "[]int32", "0+"),
                ),
                F("coordinator_epoch", "int32", "0+"),
            ),
        ],
        response=[
            F(
                "markers",
                "[]WritableTxnMarkerResult",
                "0+",
                F("producer_id", "int64", "0+"),
                F(
                    "topics",
                    "[]WritableTxnMarkerTopicResult",
                    "0+",
                    F("name", "string", "0+"),
                    F(
                        "partitions",
                        "[]WritableTxnMarkerPartitionResult",
                        "0+",
                        F("partition_index", "int32", "0+"),
                        F("error_code", "int16", "0+"),
                    ),
                ),
            ),
        ],
    )
)
