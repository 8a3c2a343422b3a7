"""``pybroker groups`` for share groups (KIP-932), called by pybroker/cli/groups.py when the
group is one (ShareGroupDescribe knows it).

describe: ShareGroupDescribe (state, epochs, members and their assignments) and
DescribeShareGroupOffsets v1 (each share-partition's start offset and lag, as
kafka-share-groups --describe shows them).  reset-offsets: only for a group without members,
as Kafka's tool requires; new start offsets from ListOffsets (or --to-offset, or --shift-by from
the current start offset), then AlterShareGroupOffsets unless --dry-run.  delete-offsets:
DeleteShareGroupOffsets of whole topics.  delete: DeleteGroups, as for any group.
"""

from __future__ import annotations

import argparse
from typing import Any

from pybroker.cli import reset_offsets
from pybroker.cli.client import Client, ClientError, KafkaCliError, check
from pybroker.cli.output import assignment_text, emit, section, table
from pybroker.errors import ErrorCode

SHARE_GROUP_DESCRIBE = 77
DESCRIBE_SHARE_GROUP_OFFSETS = 90
ALTER_SHARE_GROUP_OFFSETS = 91
DELETE_SHARE_GROUP_OFFSETS = 92


def describe(client: Client, group: str) -> dict[str, Any] | None:
    """The share group's description; None when the group is not a share group (or the
    coordinator does not serve share groups)."""
    coord = client.coordinator(group)
    if SHARE_GROUP_DESCRIBE not in coord.versions:
        return None
    _, r = client.group_request(
        group, SHARE_GROUP_DESCRIBE, {"group_ids": [group], "include_authorized_operations": False}
    )
    (g,) = r["groups"]
    if g["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND:
        return None
    check(g["error_code"], g.get("error_message"))
    node = client.coordinator_id(group)
    host, port, _ = client.brokers.get(node, (coord.host, coord.port, None))
    return {
        "group": g["group_id"],
        "type": "share",
        "coordinator": {"id": node, "host": host, "port": port},
        "state": g["group_state"],
        "group_epoch": g["group_epoch"],
        "assignment_epoch": g["assignment_epoch"],
        "assignor": g["assignor_name"],
        "members": [
            {
                "member_id": m["member_id"],
                "client_id": m["client_id"],
                "host": m["client_host"],
                "member_epoch": m["member_epoch"],
                "subscribed": m["subscribed_topic_names"],
                "assignment": [
                    {"topic": t["topic_name"], "partitions": sorted(t["partitions"])}
                    for t in m["assignment"]["topic_partitions"]
                ],
            }
            for m in g["members"]
        ],
    }


def start_offsets(client: Client, group: str) -> list[dict[str, Any]]:
    """Each share-partition's start offset and lag (DescribeShareGroupOffsets, all topics)."""
    _, r = client.group_request(
        group, DESCRIBE_SHARE_GROUP_OFFSETS, {"groups": [{"group_id": group, "topics": None}]}
    )
    (g,) = r["groups"]
    check(g["error_code"], g.get("error_message"))
    rows = []
    for t in g["topics"]:
        for p in t["partitions"]:
            check(p["error_code"], p.get("error_message"))
            rows.append(
                {
                    "topic": t["topic_name"],
                    "partition": p["partition_index"],
                    "start_offset": p["start_offset"] if p["start_offset"] >= 0 else None,
                    "lag": p.get("lag", -1) if p.get("lag", -1) >= 0 else None,
                }
            )
    return sorted(rows, key=lambda r: (r["topic"], r["partition"]))


def run_describe(client: Client, args: argparse.Namespace, g: dict[str, Any]) -> int:
    g["offsets"] = start_offsets(client, args.group)
    g["total_lag"] = sum(r["lag"] for r in g["offsets"] if r["lag"] is not None)
    emit(args.output, g, _describe_text)
    return 0


def _describe_text(g: dict) -> str:
    c = g["coordinator"]
    summary = table(
        ["group", "type", "coordinator", "address", "state", "group-epoch", "members",
         "total-lag"],
        [(g["group"], "share", c["id"], f"{c['host']}:{c['port']}", g["state"],
          g["group_epoch"], len(g["members"]), g["total_lag"])],
    )  # fmt: skip
    members = table(
        ["member-id", "client-id", "host", "epoch", "assignment"],
        [
            (
                m["member_id"],
                m["client_id"],
                m["host"],
                m["member_epoch"],
                assignment_text(m["assignment"]),
            )
            for m in g["members"]
        ],
    )
    offsets = table(
        ["topic", "partition", "start-offset", "lag"],
        [(r["topic"], r["partition"], r["start_offset"], r["lag"]) for r in g["offsets"]],
    )
    return "\n".join(
        [section("GROUP", summary), section("MEMBERS", members), section("OFFSETS", offsets)]
    )


def run_reset(
    client: Client,
    args: argparse.Namespace,
    g: dict[str, Any],
    specs: list[tuple[str, list[int] | None]],
    target_ts: int | None,
) -> int:
    if g["state"] not in ("Empty", "Dead"):
        raise ClientError(f"Share group '{args.group}' is not empty.")
    current = {(r["topic"], r["partition"]): r["start_offset"] for r in start_offsets(
        client, args.group)}  # fmt: skip
    rows = reset_offsets.plan(
        client,
        args,
        specs,
        target_ts,
        current,
        "cannot shift the start offset of {tp}: the share group has none there",
    )
    if not args.dry_run:
        by_topic: dict[str, list[dict]] = {}
        for r in rows:
            by_topic.setdefault(r["topic"], []).append(
                {"partition_index": r["partition"], "start_offset": r["new"]}
            )
        _, resp = client.group_request(
            args.group,
            ALTER_SHARE_GROUP_OFFSETS,
            {
                "group_id": args.group,
                "topics": [{"topic_name": t, "partitions": ps} for t, ps in by_topic.items()],
            },
        )
        check(resp["error_code"], resp.get("error_message"))
        for t in resp["responses"]:
            for p in t["partitions"]:
                check(p["error_code"], f"{t['topic_name']}-{p['partition_index']}")
    reset_offsets.show(args, rows, "start-offset", "nothing changed")
    return 0


def run_delete_offsets(client: Client, args: argparse.Namespace) -> int:
    _, r = client.group_request(
        args.group,
        DELETE_SHARE_GROUP_OFFSETS,
        {"group_id": args.group, "topics": [{"topic_name": t} for t in args.topic]},
    )
    if r["error_code"] == ErrorCode.NON_EMPTY_GROUP:
        raise KafkaCliError(r["error_code"], f"Share group '{args.group}' is not empty.")
    check(r["error_code"], r.get("error_message"))
    rows = [
        {
            "topic": t["topic_name"],
            "status": "OK" if t["error_code"] == 0 else ErrorCode(t["error_code"]).name,
        }
        for t in r["responses"]
    ]
    emit(args.output, rows, lambda rs: table(["topic", "status"],
                                             [(x["topic"], x["status"]) for x in rs]))  # fmt: skip
    return 0 if all(x["status"] == "OK" for x in rows) else 1
