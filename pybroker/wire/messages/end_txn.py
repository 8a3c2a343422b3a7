"""EndTxn (key 26): request and response layouts, versions 0-4.

Kafka's spec: validVersions 0-5, flexible from 3 (v4 allows TRANSACTION_ABORTABLE, v5 is
KIP-890's transaction version 2, which answers the bumped producer id and epoch).
"""

from pybroker.wire.schema import F, api, declare

END_TXN = declare(
    api(
        26,
        "EndTxn",
        versions="0-4",
        flexible="3+",
        request=[
            F("transactional_id", "string", "0+"),
            F("producer_id", "int64", "0+"),
            F("producer_epoch", "int16", "0+"),
            F("committed", "bool", "0+"),
        ],
        response=[
            F("throttle_time_ms", "int32", "0+"),
            F("error_code", "int16", "0+"),
        ],
    )
)
