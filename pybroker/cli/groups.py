"""``pybroker groups list|describe|reset-offsets|delete``.

list: ListGroups on every broker (each coordinator knows only its own groups).
describe: FindCoordinator, DescribeGroups (state, members, their consumer-protocol assignment),
OffsetFetch of every committed partition, ListOffsets latest (read_uncommitted, as Kafka's
kafka-consumer-groups) for the log end; lag = log end - committed offset, per partition and in
total.  A partition assigned but never committed shows no current offset and no lag.
reset-offsets: only for a group without members (Empty, or unknown: Dead), as Kafka's tool
requires; new offsets from ListOffsets, then OffsetCommit with generation -1 (an admin
commit) unless --dry-run.  delete: DeleteGroups.  Share groups (KIP-932): describe,
reset-offsets and delete-offsets speak the share-group APIs (pybroker/cli/share_groups.py).
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from datetime import datetime

from pybroker.cli import reset_offsets, share_groups
from pybroker.cli.client import Client, ClientError, KafkaCliError, UsageError, check
from pybroker.cli.offsets import LATEST, list_offsets
from pybroker.cli.output import assignment_text, emit, section, table
from pybroker.errors import ErrorCode
from pybroker.wire.primitives import DecodeError, Reader

OFFSET_COMMIT = 8
OFFSET_FETCH = 9
LIST_GROUPS = 16
DESCRIBE_GROUPS = 15
DELETE_GROUPS = 42


def add_parser(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("groups", help="list, describe, reset offsets of and delete groups")
    gs = p.add_subparsers(dest="action", required=True)
    gs.add_parser("list", parents=[common], help="every group of every broker")
    d = gs.add_parser("describe", parents=[common], help="members, offsets and lag")
    d.add_argument("group")
    r = gs.add_parser("reset-offsets", parents=[common], help="move committed offsets")
    r.add_argument("group")
    r.add_argument(
        "--topic",
        required=True,
        action="append",
        metavar="TOPIC[:P,P...]",
        help="a topic, or some of its partitions (repeatable)",
    )
    to = r.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-datetime", metavar="ISO", help="e.g. 2026-11-25T10:00:00 (local time)")
    to.add_argument("--to-offset", type=int, metavar="N")
    to.add_argument("--shift-by", type=int, metavar="N", help="from the committed offset")
    r.add_argument("--dry-run", action="store_true", help="show the new offsets, commit nothing")
    r.add_argument(
        "--type",
        choices=["consumer", "share"],
        help="the kind of group to create when it does not exist yet (default: consumer)",
    )
    rm = gs.add_parser("delete", parents=[common], help="delete a group without members")
    rm.add_argument("group")
    do = gs.add_parser(
        "delete-offsets", parents=[common], help="a share group's start offsets of some topics"
    )
    do.add_argument("group")
    do.add_argument("--topic", required=True, action="append", metavar="TOPIC")


def run(client: Client, args: argparse.Namespace) -> int:
    return {
        "list": _list,
        "describe": _describe,
        "reset-offsets": _reset,
        "delete": _delete,
        "delete-offsets": share_groups.run_delete_offsets,
    }[args.action](client, args)


# -- list -------------------------------------------------------------------------------------


def _list(client: Client, args: argparse.Namespace) -> int:
    groups: dict[str, dict] = {}
    for node in client.all_brokers():
        _, r = client.request_to(node, LIST_GROUPS, {"states_filter": [], "types_filter": []})
        check(r["error_code"], f"ListGroups on broker {node}")
        for g in r["groups"]:
            groups[g["group_id"]] = {
                "group": g["group_id"],
                "coordinator": node,
                "state": g.get("group_state") or None,
                "protocol_type": g["protocol_type"],
                "type": g.get("group_type") or None,
            }
    rows = [groups[k] for k in sorted(groups)]
    emit(
        args.output,
        rows,
        lambda rs: table(
            ["group", "coordinator", "state", "protocol-type", "type"],
            [(g["group"], g["coordinator"], g["state"], g["protocol_type"], g["type"]) for g in rs],
        ),
    )
    return 0


# -- describe ---------------------------------------------------------------------------------


def decode_assignment(data: bytes) -> list[tuple[str, list[int]]]:
    """The partitions of a consumer-protocol assignment (ConsumerProtocolAssignment: int16
    version, [topic string, [int32 partition]], user data); every version starts so."""
    r = Reader(bytes(data))
    if r.int16() < 0:
        raise DecodeError("negative assignment version")
    out = []
    for _ in range(max(r.array_length(2), 0)):
        topic = r.string()
        out.append((topic, [r.int32() for _ in range(max(r.array_length(4), 0))]))
    return out


def describe_group(client: Client, group: str) -> dict:
    _, r = client.group_request(group, DESCRIBE_GROUPS, {"groups": [group]})
    (g,) = r["groups"]
    check(g["error_code"], g.get("error_message"))
    members = []
    for m in g["members"]:
        assigned: list[tuple[str, list[int]]] = []
        if g["protocol_type"] == "consumer" and m["member_assignment"]:
            try:
                assigned = decode_assignment(m["member_assignment"])
            except (DecodeError, IndexError):
                assigned = []
        members.append(
            {
                "member_id": m["member_id"],
                "group_instance_id": m.get("group_instance_id"),
                "client_id": m["client_id"],
                "host": m["client_host"],
                "assignment": [{"topic": t, "partitions": sorted(ps)} for t, ps in assigned],
            }
        )
    node = client.coordinator_id(group)
    coord = client.coordinator(group)
    host, port, _ = client.brokers.get(node, (coord.host, coord.port, None))
    return {
        "group": g["group_id"],
        "coordinator": {"id": node, "host": host, "port": port},
        "state": g["group_state"],
        "protocol_type": g["protocol_type"],
        "protocol": g["protocol_data"],
        "members": members,
    }


def committed_offsets(client: Client, group: str) -> dict[tuple[str, int], int]:
    """Every committed offset of the group (OffsetFetch with all topics)."""
    body = {
        "group_id": group,
        "topics": None,
        "groups": [{"group_id": group, "topics": None}],
        "require_stable": False,
    }
    version, r = client.group_request(group, OFFSET_FETCH, body)
    if version >= 8:
        (res,) = r["groups"]
    else:
        res = r
    check(res.get("error_code", 0), f"OffsetFetch for group {group!r}")
    out = {}
    for t in res["topics"]:
        for p in t["partitions"]:
            check(p["error_code"], f"OffsetFetch {t['name']}-{p['partition_index']}")
            if p["committed_offset"] >= 0:
                out[(t["name"], p["partition_index"])] = p["committed_offset"]
    return out


def _log_ends(client: Client, partitions: set[tuple[str, int]]) -> dict[tuple[str, int], int]:
    by_topic: dict[str, set[int]] = defaultdict(set)
    for t, p in partitions:
        by_topic[t].add(p)
    out = {}
    for t, ps in by_topic.items():
        try:
            meta = client.topic(t)
        except KafkaCliError as e:
            if e.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                continue  # committed offsets of a deleted topic: no log end
            raise
        known = {p["partition_index"] for p in meta["partitions"]}
        for p, (offset, _) in list_offsets(client, meta, LATEST, ps & known).items():
            out[(t, p)] = offset
    return out


def _describe(client: Client, args: argparse.Namespace) -> int:
    share = share_groups.describe(client, args.group)
    if share is not None:
        return share_groups.run_describe(client, args, share)
    g = describe_group(client, args.group)
    committed = committed_offsets(client, args.group)
    if g["state"] == "Dead" and not committed:
        raise KafkaCliError(
            ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer group '{args.group}' does not exist."
        )
    owner: dict[tuple[str, int], dict] = {}
    for m in g["members"]:
        for a in m["assignment"]:
            for p in a["partitions"]:
                owner[(a["topic"], p)] = m
    tps = set(committed) | set(owner)
    ends = _log_ends(client, tps)
    rows = []
    for tp in sorted(tps):
        cur, end, m = committed.get(tp), ends.get(tp), owner.get(tp)
        rows.append(
            {
                "topic": tp[0],
                "partition": tp[1],
                "current_offset": cur,
                "log_end_offset": end,
                "lag": end - cur if cur is not None and end is not None else None,
                "member_id": m["member_id"] if m else None,
                "client_id": m["client_id"] if m else None,
                "host": m["host"] if m else None,
            }
        )
    g["offsets"] = rows
    g["total_lag"] = sum(r["lag"] for r in rows if r["lag"] is not None)
    emit(args.output, g, _describe_text)
    return 0


def _describe_text(g: dict) -> str:
    c = g["coordinator"]
    summary = table(
        [
            "group",
            "coordinator",
            "address",
            "state",
            "protocol-type",
            "protocol",
            "members",
            "total-lag",
        ],
        [
            (
                g["group"],
                c["id"],
                f"{c['host']}:{c['port']}",
                g["state"],
                g["protocol_type"] or None,
                g["protocol"] or None,
                len(g["members"]),
                g["total_lag"],
            )
        ],
    )
    members = table(
        ["member-id", "client-id", "host", "assignment"],
        [
            (
                m["member_id"],
                m["client_id"],
                m["host"],
                assignment_text(m["assignment"]),
            )
            for m in g["members"]
        ],
    )
    offsets = table(
        ["topic", "partition", "current-offset", "log-end-offset", "lag", "member-id"],
        [
            (
                r["topic"],
                r["partition"],
                r["current_offset"],
                r["log_end_offset"],
                r["lag"],
                r["member_id"],
            )
            for r in g["offsets"]
        ],
    )
    return "\n".join(
        [section("GROUP", summary), section("MEMBERS", members), section("OFFSETS", offsets)]
    )


# -- reset-offsets ----------------------------------------------------------------------------


def _topic_spec(text: str) -> tuple[str, list[int] | None]:
    name, sep, parts = text.partition(":")
    if not name:
        raise UsageError(f"--topic: expected TOPIC or TOPIC:P,P..., got {text!r}")
    if not sep:
        return name, None
    try:
        return name, sorted({int(p) for p in parts.split(",") if p.strip()})
    except ValueError:
        raise UsageError(f"--topic: partitions must be numbers, got {text!r}") from None


def _datetime_ms(text: str) -> int:
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--to-datetime: not an ISO 8601 date-time: {text!r}") from None
    return int(dt.timestamp() * 1000)  # a naive time is local time, as Kafka's tool reads it


def _reset(client: Client, args: argparse.Namespace) -> int:
    specs = [_topic_spec(t) for t in args.topic]
    target_ts = _datetime_ms(args.to_datetime) if args.to_datetime else None
    share = share_groups.describe(client, args.group)
    if share is None and args.type == "share":
        share = {"state": "Dead"}  # a share group that does not exist yet: created
    if share is not None:
        return share_groups.run_reset(client, args, share, specs, target_ts)
    g = describe_group(client, args.group)
    if g["state"] not in ("Empty", "Dead"):
        raise ClientError(
            f"Assignments can only be reset if the group '{args.group}' is inactive, "
            f"but the current state is {g['state']}."
        )
    committed = committed_offsets(client, args.group)
    rows = reset_offsets.plan(
        client,
        args,
        specs,
        target_ts,
        committed,
        "cannot shift the offset of {tp}: the group has no committed offset there",
    )
    if not args.dry_run:
        by_topic: dict[str, list[dict]] = defaultdict(list)
        for r in rows:
            by_topic[r["topic"]].append(
                {
                    "partition_index": r["partition"],
                    "committed_offset": r["new"],
                    "committed_leader_epoch": -1,
                    "committed_metadata": "",
                }
            )
        body = {
            "group_id": args.group,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
        }
        _, r = client.group_request(args.group, OFFSET_COMMIT, body)
        for t in r["topics"]:
            for p in t["partitions"]:
                check(p["error_code"], f"OffsetCommit {t['name']}-{p['partition_index']}")
    reset_offsets.show(args, rows, "offset", "nothing committed")
    return 0


# -- delete -----------------------------------------------------------------------------------


def _delete(client: Client, args: argparse.Namespace) -> int:
    _, r = client.group_request(args.group, DELETE_GROUPS, {"groups_names": [args.group]})
    (res,) = r["results"]
    code = res["error_code"]
    if code == ErrorCode.GROUP_ID_NOT_FOUND:
        raise KafkaCliError(code, f"Group '{args.group}' does not exist.")
    if code == ErrorCode.NON_EMPTY_GROUP:
        raise KafkaCliError(code, f"Group '{args.group}' has members; only empty groups can go.")
    check(code, f"Group '{args.group}' could not be deleted.")
    result = {"group": args.group, "status": "OK"}
    emit(args.output, result, lambda x: table(["group", "status"], [(x["group"], x["status"])]))
    return 0
