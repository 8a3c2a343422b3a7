"""AddPartitionsToTxn (key 24): request and response layouts, versions 0-5.

Kafka's spec: validVersions 0-5, flexible from 3.  Versions 0-3 are the clients' form (one
transaction); 4-5 are the brokers' batched form of KIP-890 (several transactions, each may be
verify_only), v5 allowing TRANSACTION_ABORTABLE.
"""

from pybroker.wire.schema import F, api, declare


def _topic(name: str, versions: str) -> object:
    return F(
        name,
        "[]AddPartitionsToTxnTopic",
        versions,
        F("name", "string", "0+"),
        F("partitions", "[]int32", "0+"),
    )


def _topic_result(name: str, versions: str) -> object:
    return F(
        name,
        "[]AddPartitionsToTxnTopicResult",
        versions,
        F("name", "string", "0+"),
        F(
            "results_by_partition",
            "[]AddPartitionsToTxnPartitionResult",
            "0+",
            F("partition_index", "int32", "0+"),
            F("partition_error_code", "int16", "0+"),
        ),
    )


ADD_PARTITIONS_TO_TXN = declare(
    api(
        24,
        "AddPartitionsToTxn",
        versions="0-5",
        flexible="3+",
        request=[
            F(
                "transactions",
                "[]AddPartitionsToTxnTransaction",
                "4+",
                F("transactional_id", "string", "4+"),
                F("producer_id", "int64", "4+"),
                F("producer_epoch", "int16", "4+"),
                F("verify_only", "bool", "4+", default=False),
                _topic("topics", "4+"),  # type: ignore[arg-type]
            ),
            F("v3_and_below_transactional_id", "string", "0-3"),
            F("v3_and_below_producer_id", "int64", "0-3"),
            F("v3_and_below_producer_epoch", "int16", "0-3"),
            _topic("v3_and_below_topics", "0-3"),  # type: ignore[list-item]
        ],
        response=[
            F("throttle_time_ms", "int32", "0+"),
            F("error_code", "int16", "4+"),
            F(
                "results_by_transaction",
                "[]AddPartitionsToTxnResult",
                "4+",
                F("transactional_id", "string", "4+"),
                _topic_result("topic_results", "4+"),  # type: ignore[arg-type]
            ),
            _topic_result("results_by_topic_v3_and_below", "0-3"),  # type: ignore[list-item]
        ],
    )
)
