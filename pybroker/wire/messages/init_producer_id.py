"""InitProducerId (key 22): request and response layouts, versions 0-5.

Kafka's spec: validVersions 0-6.
"""

from pybroker.wire.schema import F, api, declare

INIT_PRODUCER_ID = declare(
    api(
        22,
        "InitProducerId",
        versions="0-5",
        flexible="2+",
        request=[
            F("transactional_id", "string", "0+", nullable="0+"),
            F("transaction_timeout_ms", "int32", "0+"),
            F("producer_id", "int64", "3+", default=-1),
            F("producer_epoch", "int16", "3+", default=-1),
            F("enable2_pc", "bool", "6+", default=False),
            F("keep_prepared_txn", "bool", "6+", default=False),
        ],
        response=[
            F("throttle_time_ms", "int32", "0+"),
            F("error_code", "int16", "0+"),
            F("producer_id", "int64", "0+", default=-1),
            F("producer_epoch", "int16", "0+"),
            F("ongoing_txn_producer_id", "int64", "6+", default=-1),
            F("ongoing_txn_producer_epoch", "int16", "6+", default=-1),
        ],
    )
)
