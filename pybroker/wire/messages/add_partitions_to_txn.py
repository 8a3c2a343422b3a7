"""AddPartitionsToTxn (key 24): request and response layouts, versions 0-3.

Kafka's spec: validVersions 0-5, flexible from 3.  Versions 0-3 are the clients' form (one
transaction); 4-5 are the broker-to-coordinator verification form of KIP-890, which pybroker
does not send or serve.
"""

from pybroker.wire.schema import F, api, declare


def _topic(name: str) -> object:
    return F(
        name,
        "[]AddPartitionsToTxnTopic",
        "0+",
        F("name", "string", "0+"),
        F("partitions", "[]int32", "0+"),
    )


ADD_PARTITIONS_TO_TXN = declare(
    api(
        24,
        "AddPartitionsToTxn",
        versions="0-3",
        flexible="3+",
        request=[
            F("v3_and_below_transactional_id", "string", "0+"),
            F("v3_and_below_producer_id", "int64", "0+"),
            F("v3_and_below_producer_epoch", "int16", "0+"),
            _topic("v3_and_below_topics"),  # type: ignore[list-item]
        ],
        response=[
            F("throttle_time_ms", "int32", "0+"),
            F(
                "results_by_topic_v3_and_below",
                "[]AddPartitionsToTxnTopicResult",
                "0+",
                F("name", "string", "0+"),
                F(
                    "results_by_partition",
                    "[]AddPartitionsToTxnPartitionResult",
                    "0+",
                    F("partition_index", "int32", "0+"),
                    F("partition_error_code", "int16", "0+"),
                ),
            ),
        ],
    )
)
