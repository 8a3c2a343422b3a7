"""AddOffsetsToTxn (key 25): request and response layouts, versions 0-4.

Kafka's spec: validVersions 0-4, flexible from 3 (v4 only allows KIP-890's
TRANSACTION_ABORTABLE error).
"""

from pybroker.wire.schema import F, api, declare

ADD_OFFSETS_TO_TXN = declare(
    api(
        25,
        "AddOffsetsToTxn",
        versions="0-4",
        flexible="3+",
        request=[
            F("transactional_id", "string", "0+"),
            F("producer_id", "int64", "0+"),
            F("producer_epoch", "int16", "0+"),
            F("group_id", "string", "0+"),
        ],
        response=[
            F("throttle_time_ms", "int32", "0+"),
            F("error_code", "int16", "0+"),
        ],
    )
)
