"""``pybroker topics list|describe|create|delete|alter-config``.

list: Metadata (every topic; internal ones with --internal).  describe: Metadata, DescribeConfigs
(the topic's configs with their source) and ListOffsets (log start and high watermark of each
partition).  create: CreateTopics.  delete: DeleteTopics.  alter-config:
IncrementalAlterConfigs (SET and DELETE).
"""

from __future__ import annotations

import argparse
import uuid

from pybroker.cli.client import Client, KafkaCliError, UsageError, check
from pybroker.cli.offsets import EARLIEST, LATEST, list_offsets
from pybroker.cli.output import emit, section, table
from pybroker.wire.messages.describe_configs import config_source_name

CREATE_TOPICS = 19
DELETE_TOPICS = 20
DESCRIBE_CONFIGS = 32
INCREMENTAL_ALTER_CONFIGS = 44
RESOURCE_TOPIC = 2
OP_SET, OP_DELETE = 0, 1
TIMEOUT_MS = 60_000


def key_value(text: str) -> tuple[str, str]:
    """argparse type for key=value."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key, value


def add_parser(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("topics", help="list, describe, create, delete topics; alter configs")
    ts = p.add_subparsers(dest="action", required=True)
    ls = ts.add_parser("list", parents=[common], help="topics with partition and replica counts")
    ls.add_argument("-i", "--internal", action="store_true", help="include internal topics")
    d = ts.add_parser("describe", parents=[common], help="partitions, offsets and configs")
    d.add_argument("name")
    c = ts.add_parser("create", parents=[common], help="create a topic")
    c.add_argument("name")
    c.add_argument("-p", "--partitions", type=int, default=-1, help="default: the broker's")
    c.add_argument("-r", "--replicas", type=int, default=-1, help="default: the broker's")
    c.add_argument(
        "-c", "--config", type=key_value, action="append", default=[], metavar="KEY=VALUE"
    )
    rm = ts.add_parser("delete", parents=[common], help="delete a topic")
    rm.add_argument("name")
    a = ts.add_parser("alter-config", parents=[common], help="set or delete topic configs")
    a.add_argument("name")
    a.add_argument("--set", type=key_value, action="append", default=[], metavar="KEY=VALUE")
    a.add_argument("--delete", action="append", default=[], metavar="KEY")


def run(client: Client, args: argparse.Namespace) -> int:
    return {
        "list": _list,
        "describe": _describe,
        "create": _create,
        "delete": _delete,
        "alter-config": _alter,
    }[args.action](client, args)


def _list(client: Client, args: argparse.Namespace) -> int:
    r = client.metadata(None)
    rows = []
    for t in sorted(r["topics"], key=lambda t: t["name"] or ""):
        if t["is_internal"] and not args.internal:
            continue
        parts = t["partitions"]
        rows.append(
            {
                "name": t["name"],
                "partitions": len(parts),
                "replicas": max((len(p["replica_nodes"]) for p in parts), default=0),
                "internal": t["is_internal"],
            }
        )
    emit(
        args.output,
        rows,
        lambda rs: table(
            ["name", "partitions", "replicas"],
            [(x["name"], x["partitions"], x["replicas"]) for x in rs],
        ),
    )
    return 0


def describe_configs(client: Client, name: str) -> list[dict]:
    """The topic's configs as the broker reports them (name, value, source, flags)."""
    body = {
        "resources": [
            {"resource_type": RESOURCE_TOPIC, "resource_name": name, "configuration_keys": None}
        ],
        "include_synonyms": False,
        "include_documentation": False,
    }
    _, r = client.any().request(DESCRIBE_CONFIGS, body)
    (res,) = r["results"]
    check(res["error_code"], res["error_message"])
    return [
        {
            "name": c["name"],
            "value": None if c["is_sensitive"] else c["value"],
            "source": config_source_name(c["config_source"]),
            "read_only": c["read_only"],
            "sensitive": c["is_sensitive"],
        }
        for c in sorted(res["configs"], key=lambda c: c["name"])
    ]


def _describe(client: Client, args: argparse.Namespace) -> int:
    t = client.topic(args.name)
    configs = describe_configs(client, args.name)
    # a partition without a leader (its replicas are down) is shown without offsets
    led = [p["partition_index"] for p in t["partitions"] if p["leader_id"] >= 0]
    start = list_offsets(client, t, EARLIEST, led)
    end = list_offsets(client, t, LATEST, led)
    topic_id = t.get("topic_id")
    parts = sorted(t["partitions"], key=lambda p: p["partition_index"])
    result = {
        "name": t["name"],
        "topic_id": str(topic_id) if topic_id and topic_id != uuid.UUID(int=0) else None,
        "internal": t["is_internal"],
        "partitions": [
            {
                "partition": p["partition_index"],
                "leader": p["leader_id"],
                "leader_epoch": p["leader_epoch"],
                "replicas": p["replica_nodes"],
                "isr": p["isr_nodes"],
                "offline_replicas": p["offline_replicas"],
                "log_start_offset": start.get(p["partition_index"], (None,))[0],
                "high_watermark": end.get(p["partition_index"], (None,))[0],
            }
            for p in parts
        ],
        "configs": configs,
    }
    emit(args.output, result, _describe_text)
    return 0


def _ids(nodes: list[int]) -> str:
    return ",".join(map(str, nodes))


def _describe_text(r: dict) -> str:
    parts = r["partitions"]
    summary = table(
        ["name", "topic-id", "internal", "partitions", "replicas"],
        [
            (
                r["name"],
                r["topic_id"],
                str(r["internal"]).lower(),
                len(parts),
                max((len(p["replicas"]) for p in parts), default=0),
            )
        ],
    )
    configs = table(
        ["key", "value", "source"],
        [
            (c["name"], c["value"] if c["value"] is not None else "", c["source"])
            for c in r["configs"]
        ],
    )
    partitions = table(
        ["partition", "leader", "epoch", "replicas", "isr", "log-start", "high-watermark"],
        [
            (
                p["partition"],
                p["leader"],
                p["leader_epoch"],
                _ids(p["replicas"]),
                _ids(p["isr"]),
                p["log_start_offset"],
                p["high_watermark"],
            )
            for p in parts
        ],
    )
    return "\n".join(
        [
            section("SUMMARY", summary),
            section("CONFIGS", configs),
            section("PARTITIONS", partitions),
        ]
    )


def _create(client: Client, args: argparse.Namespace) -> int:
    body = {
        "topics": [
            {
                "name": args.name,
                "num_partitions": args.partitions,
                "replication_factor": args.replicas,
                "assignments": [],
                "configs": [{"name": k, "value": v} for k, v in args.config],
            }
        ],
        "timeout_ms": TIMEOUT_MS,
        "validate_only": False,
    }
    version, r = client.controller().request(CREATE_TOPICS, body)
    (t,) = r["topics"]
    check(t["error_code"], t["error_message"])
    result = {"topic": t["name"], "status": "OK"}
    if version >= 5:
        result["partitions"] = t["num_partitions"]
        result["replication_factor"] = t["replication_factor"]
    if version >= 7 and t["topic_id"] != uuid.UUID(int=0):
        result["topic_id"] = str(t["topic_id"])
    emit(args.output, result, lambda x: table(["topic", "status"], [(x["topic"], x["status"])]))
    return 0


def _delete(client: Client, args: argparse.Namespace) -> int:
    body = {
        "topics": [{"name": args.name}],
        "topic_names": [args.name],
        "timeout_ms": TIMEOUT_MS,
    }
    _, r = client.controller().request(DELETE_TOPICS, body)
    (t,) = r["responses"]
    if t["error_code"] == 3:  # Kafka's message is empty here; say which topic
        raise KafkaCliError(3, t.get("error_message") or f"Topic '{args.name}' does not exist.")
    check(t["error_code"], t.get("error_message"))
    result = {"topic": args.name, "status": "OK"}
    emit(args.output, result, lambda x: table(["topic", "status"], [(x["topic"], x["status"])]))
    return 0


def _alter(client: Client, args: argparse.Namespace) -> int:
    if not args.set and not args.delete:
        raise UsageError("alter-config needs at least one --set KEY=VALUE or --delete KEY")
    configs = [{"name": k, "config_operation": OP_SET, "value": v} for k, v in args.set]
    configs += [{"name": k, "config_operation": OP_DELETE, "value": None} for k in args.delete]
    body = {
        "resources": [
            {"resource_type": RESOURCE_TOPIC, "resource_name": args.name, "configs": configs}
        ],
        "validate_only": False,
    }
    _, r = client.any().request(INCREMENTAL_ALTER_CONFIGS, body)
    (res,) = r["responses"]
    check(res["error_code"], res["error_message"])
    result = {
        "topic": args.name,
        "set": dict(args.set),
        "deleted": list(args.delete),
        "status": "OK",
    }
    emit(
        args.output,
        result,
        lambda x: table(
            ["topic", "key", "change"],
            [(x["topic"], k, f"set to {v}") for k, v in x["set"].items()]
            + [(x["topic"], k, "deleted") for k in x["deleted"]],
        ),
    )
    return 0
