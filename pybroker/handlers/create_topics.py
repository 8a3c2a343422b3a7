"""CreateTopics (key 19), versions 0-7.

Served by the controller (others answer NOT_CONTROLLER).  num_partitions / replication_factor
-1 take num.partitions / default.replication.factor; explicit replica assignments are honoured
when valid (INVALID_REPLICA_ASSIGNMENT otherwise); topic configs are validated as Kafka 3.9
does (every key Kafka defines is accepted: pybroker/topic_config.py; INVALID_CONFIG with
Kafka's message for unknown names or bad values), after the existence check: a topic that
exists answers TOPIC_ALREADY_EXISTS whatever configs the request carries, as Kafka does.  validate_only checks everything and
creates nothing (v1+; v0 has no validate_only).  Errors: TOPIC_ALREADY_EXISTS, INVALID_TOPIC_EXCEPTION, INVALID_PARTITIONS,
INVALID_REPLICATION_FACTOR, INVALID_REQUEST (a name twice in one request).  v5+ answers the
partition count, replication factor and the topic's effective configs with their sources
(as DescribeConfigs, handlers/_topics.topic_config_entries); v7 the topic id.
"""

from __future__ import annotations

import uuid

from pybroker import topic_config
from pybroker.configdef import ConfigException
from pybroker.coord.metadata.topic_rules import validate_topic_name
from pybroker.errors import ErrorCode, KafkaError
from pybroker.handlers._authz import on_cluster, on_topic
from pybroker.handlers._topics import check_configs, topic_config_entries
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation


def _result(name: str, code: int, message: str | None = None) -> dict:
    return {
        "name": name,
        "topic_id": uuid.UUID(int=0),
        "error_code": code,
        "error_message": message,
        "num_partitions": -1,
        "replication_factor": -1,
        "configs": None,
    }


async def _create_one(ctx: RequestContext, t: dict, validate_only: bool) -> dict:
    services = ctx.services
    cfg = services.config
    name = t["name"]
    try:
        if name in services.cluster.topics:
            # first, as Kafka: a program creating its topics idempotently gets this whatever
            # configs it asks for
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        validate_topic_name(name)
        try:
            configs = check_configs(cfg, {c["name"]: c["value"] for c in t["configs"]})
        except (ConfigException, KafkaError) as e:
            raise topic_config.create_error(e) from None
        assignments = None
        if t["assignments"]:
            if t["num_partitions"] != -1 or t["replication_factor"] != -1:
                raise KafkaError(
                    ErrorCode.INVALID_REQUEST,
                    "both replica assignments and partition count or replication factor given",
                )
            assignments = {a["partition_index"]: list(a["broker_ids"]) for a in t["assignments"]}
            if sorted(assignments) != list(range(len(assignments))):
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "partitions must be 0..n-1")
            sizes = {len(r) for r in assignments.values()}
            live = services.cluster.brokers
            if (
                len(sizes) != 1
                or 0 in sizes
                or any(
                    len(set(r)) != len(r) or not set(r) <= set(live) for r in assignments.values()
                )
            ):
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "invalid replica assignment")
            partitions, rf = len(assignments), sizes.pop()
        else:
            partitions = t["num_partitions"] if t["num_partitions"] != -1 else cfg.num_partitions
            rf = (
                t["replication_factor"]
                if t["replication_factor"] != -1
                else cfg.default_replication_factor
            )
        info = await services.cluster.create_topic(
            name,
            partitions,
            rf,
            configs,
            validate_only=validate_only,
            assignments=assignments,
        )
    except KafkaError as e:
        return _result(name, e.code, str(e))
    return {
        "name": name,
        "topic_id": info.topic_id if not validate_only else uuid.UUID(int=0),
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "num_partitions": partitions,
        "replication_factor": rf,
        "configs": [
            {k: e[k] for k in ("name", "value", "read_only", "config_source", "is_sensitive")}
            for e in topic_config_entries(ctx, configs, with_synonyms=False, documentation=False)
        ],
    }


@handler(19, 0, 7)
async def create_topics(ctx: RequestContext, req: dict) -> dict:
    cluster = ctx.services.cluster
    counts: dict[str, int] = {}
    for t in req["topics"]:
        counts[t["name"]] = counts.get(t["name"], 0) + 1
    results = []
    for t in req["topics"]:
        if counts[t["name"]] > 1:
            results.append(
                _result(t["name"], ErrorCode.INVALID_REQUEST, "topic named more than once")
            )
        elif not (on_cluster(ctx, Operation.CREATE) or on_topic(ctx, Operation.CREATE, t["name"])):
            results.append(
                _result(t["name"], ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
            )
        elif cluster.controller_id != ctx.services.config.broker_id:
            results.append(_result(t["name"], ErrorCode.NOT_CONTROLLER))
        else:
            results.append(await _create_one(ctx, t, req.get("validate_only", False)))
    return {"throttle_time_ms": 0, "topics": results}
