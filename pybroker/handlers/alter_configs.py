"""AlterConfigs (key 33), versions 0-2: the legacy, full-replace form of
IncrementalAlterConfigs.

Topics: the configs given become the topic's whole set of overrides in /config/topics/<t>
(anything not named goes back to its default), after Kafka's checks over the broker defaults
(worded as IncrementalAlterConfigs words them), written with compare-and-set;
validate_only writes nothing.  Brokers (4): the configs given become the entity's whole set of
dynamic configs (handlers/_broker_configs.py).  Per resource errors: INVALID_REQUEST for a
resource named twice, a config named twice, a null value, the default topic resource, broker
loggers ("Unknown resource type 8": KIP-412 is IncrementalAlterConfigs only) and other types;
UNKNOWN_TOPIC_OR_PARTITION; INVALID_CONFIG.
"""

from __future__ import annotations

from pybroker.errors import KafkaError
from pybroker.handlers._broker_configs import alter_broker
from pybroker.handlers.context import RequestContext
from pybroker.handlers.incremental_alter_configs import (
    BROKER,
    alter_topic,
    authorize_alter,
    message,
    preprocess,
    result,
)
from pybroker.registry import handler


@handler(33, 0, 2)
async def alter_configs(ctx: RequestContext, req: dict) -> dict:
    resources = req["resources"]
    results = preprocess(resources, lambda c: False, loggers=False)
    authorize_alter(ctx, resources, results)
    for i, r in enumerate(resources):
        if i not in results:
            wanted = {c["name"]: c["value"] for c in r["configs"]}

            def replace(current: dict[str, str], wanted: dict[str, str] = wanted) -> dict[str, str]:
                return dict(wanted)

            if r["resource_type"] == BROKER:
                try:
                    await alter_broker(
                        ctx, r["resource_name"], lambda _c, w=wanted: dict(w), req["validate_only"]
                    )
                    results[i] = result(r)
                except KafkaError as e:
                    results[i] = result(r, e.code, message(e))
                continue
            results[i] = await alter_topic(ctx, r, replace, req["validate_only"])
    return {"throttle_time_ms": 0, "responses": [results[i] for i in range(len(resources))]}
