"""ListTransactions (key 66): request and response layouts, versions 0-1.

Kafka's spec: validVersions 0-2 (v2 adds a transactional id pattern filter, newer than the
clients pybroker targets).
"""

from pybroker.wire.schema import F, api, declare

LIST_TRANSACTIONS = declare(
    api(
        66,
        "ListTransactions",
        versions="0-1",
        flexible="0+",
        request=[
            F("state_filters", "[]string", "0+"),
            F("producer_id_filters", "[]int64", "0+"),
            F("duration_filter", "int64", "1+", default=-1),
        ],
        response=[
            F("throttle_time_ms", "int32", "0+"),
            F("error_code", "int16", "0+"),
            F("unknown_state_filters", "[]string", "0+"),
            F(
                "transaction_states",
                "[]TransactionState",
                "0+",
                F("transactional_id", "string", "0+"),
                F("producer_id", "int64", "0+"),
                F("transaction_state", "string", "0+"),
            ),
        ],
    )
)
