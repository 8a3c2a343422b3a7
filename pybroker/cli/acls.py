"""``pybroker acls list|add|remove``: Kafka's ``kafka-acls`` over DescribeAcls, CreateAcls and
DeleteAcls, with its options and rules (kafka.admin.AclCommand).

The action is a word (``pybroker acls add ...``) or kafka-acls' flag (``--add``, ``--remove``,
``--list``).  Resources: ``--topic``, ``--group``, ``--transactional-id``, ``--delegation-token``,
``--user-principal`` (repeatable) and ``--cluster``, with ``--resource-pattern-type``
(``literal`` by default; ``prefixed`` too when adding; ``any`` and ``match`` filter when listing
or removing; ``--cluster`` counts only with ``literal``, as in kafka-acls).  Entries: every
combination of ``--allow-principal`` x ``--allow-host`` (default ``*``) and ``--deny-principal`` x
``--deny-host`` with every ``--operation`` (default ``All``); ``--producer`` (Write, Describe and
Create on topics; Write and Describe on transactional ids; IdempotentWrite on the cluster with
``--idempotent``) and ``--consumer`` (Read and Describe on topics, Read on groups) stand for
operations.

add: CreateAcls of the entries on every resource.  remove: DeleteAcls with one filter per entry
on every resource, or every entry of the resource when no principal is given (asked first on a
terminal, unless ``--force``).  list: DescribeAcls of each resource filter (every ACL without a
resource), then only the entries of the ``--principal`` given, if any.
"""

from __future__ import annotations

import argparse
import sys
from itertools import product

from pybroker.cli.client import Client, KafkaCliError, UsageError, check
from pybroker.cli.output import emit, table
from pybroker.security.acl import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

DESCRIBE_ACLS = 29
CREATE_ACLS = 30
DELETE_ACLS = 31
ACTIONS = ("list", "add", "remove")
WILDCARD_HOST = "*"

#: name (any case, underscores optional: Read, READ, IdempotentWrite, IDEMPOTENT_WRITE) -> code
OPERATIONS = {
    op.name.replace("_", ""): op for op in Operation if op not in (Operation.UNKNOWN, Operation.ANY)
}
PATTERN_TYPES = {"any", "match", "literal", "prefixed"}
RESOURCE_OPTIONS = {
    "topic": ResourceType.TOPIC,
    "group": ResourceType.GROUP,
    "transactional_id": ResourceType.TRANSACTIONAL_ID,
    "delegation_token": ResourceType.DELEGATION_TOKEN,
    "user_principal": ResourceType.USER,
}


def _pascal(name: str) -> str:
    return "".join(w.capitalize() for w in name.split("_"))


def add_parser(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "acls",
        parents=[common],
        help="list, add, remove ACLs (kafka-acls' options)",
        description="kafka-acls over the Kafka protocol: pybroker acls list|add|remove "
        "(or --list|--add|--remove) with kafka-acls' options.",
    )
    p.add_argument("action", nargs="?", choices=ACTIONS, help="or --list, --add, --remove")
    for action in ACTIONS:
        p.add_argument(f"--{action}", dest=f"flag_{action}", action="store_true")
    for option in RESOURCE_OPTIONS:
        p.add_argument("--" + option.replace("_", "-"), dest=option, action="append", default=[])
    p.add_argument("--cluster", action="store_true", help="the cluster resource")
    p.add_argument(
        "--resource-pattern-type",
        type=str.lower,
        choices=sorted(PATTERN_TYPES),
        default="literal",
        help="literal (default) or prefixed; any or match to filter list and remove",
    )
    for option in ("allow-principal", "deny-principal", "allow-host", "deny-host"):
        p.add_argument(f"--{option}", action="append", default=[], metavar=option.upper())
    p.add_argument(
        "--operation",
        action="append",
        default=[],
        help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
        "AlterConfigs, IdempotentWrite, CreateTokens, DescribeTokens, All (default)",
    )
    p.add_argument("--principal", action="append", default=[], help="list: only this principal")
    p.add_argument("--producer", action="store_true", help="Write, Describe, Create on topics")
    p.add_argument(
        "--consumer", action="store_true", help="Read, Describe on topics; Read on groups"
    )
    p.add_argument("--idempotent", action="store_true", help="with --producer: IdempotentWrite")
    p.add_argument("--force", action="store_true", help="remove without asking")


# -- the command line, checked as kafka-acls checks it ------------------------------------------


def _action(args: argparse.Namespace) -> str:
    chosen = {args.action} if args.action else set()
    chosen |= {a for a in ACTIONS if getattr(args, f"flag_{a}")}
    if len(chosen) != 1:
        raise UsageError("Command must include exactly one action: --list, --add, --remove.")
    return chosen.pop()


def _check(args: argparse.Namespace, action: str) -> None:
    def given(*names: str) -> list[str]:
        return ["--" + n.replace("_", "-") for n in names if getattr(args, n)]

    if action == "list":
        bad = given("producer", "consumer", "allow_host", "allow_principal", "deny_host",
                    "deny_principal")  # fmt: skip
        if bad:
            raise UsageError(f"Option --list does not accept {', '.join(bad)}")
    for role in ("producer", "consumer"):
        bad = given("operation", "deny_principal", "deny_host") if getattr(args, role) else []
        if bad:
            raise UsageError(f"Option --{role} does not accept {', '.join(bad)}")
    if args.principal and action != "list":
        raise UsageError("The --principal option is only available if --list is set")
    if args.producer and not args.topic:
        raise UsageError("With --producer you must specify a --topic")
    if args.idempotent and not args.producer:
        raise UsageError("The --idempotent option is only available if --producer is set")
    if args.consumer and (
        not args.topic
        or not args.group
        or (not args.producer and (args.cluster or args.transactional_id))
    ):
        raise UsageError(
            "With --consumer you must specify a --topic and a --group and no --cluster or "
            "--transactional-id option should be specified."
        )
    if action == "add" and args.resource_pattern_type not in ("literal", "prefixed"):
        raise UsageError(
            f"A '--resource-pattern-type' value of '{args.resource_pattern_type.upper()}' is "
            "not valid when adding acls."
        )


def parse_principal(text: str) -> str:
    """Kafka's ``Type:name`` (SecurityUtils.parseKafkaPrincipal)."""
    kind, sep, name = text.strip().partition(":")
    if not sep or not kind:
        raise UsageError(f"expected a string in format principalType:principalName but got {text}")
    return f"{kind}:{name}"


def parse_operation(text: str) -> Operation:
    op = OPERATIONS.get(text.strip().replace("_", "").upper())
    if op is None:
        names = ", ".join(_pascal(o.name) for o in OPERATIONS.values())
        raise UsageError(f"unknown operation {text!r}; valid operation names are: {names}")
    return op


Resource = tuple[ResourceType, str, PatternType]
Entry = tuple[str, str, Operation, Permission]  # principal, host, operation, permission


def _resources(args: argparse.Namespace, *, required: bool) -> list[Resource]:
    pattern = PatternType[args.resource_pattern_type.upper()]
    out: list[Resource] = []
    for option, kind in RESOURCE_OPTIONS.items():
        out += [(kind, name.strip(), pattern) for name in getattr(args, option)]
    if pattern == PatternType.LITERAL and (args.cluster or args.idempotent):
        out.append((ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL))
    if not out and required:
        raise UsageError(
            "You must provide at least one resource: --topic <topic> or --cluster or "
            "--group <group> or --delegation-token <Delegation Token ID>"
        )
    return list(dict.fromkeys(out))


def _entries(args: argparse.Namespace, operations: set[Operation]) -> set[Entry]:
    allow = {parse_principal(p) for p in args.allow_principal}
    deny = {parse_principal(p) for p in args.deny_principal}
    allow_hosts = {h.strip() for h in args.allow_host} or ({WILDCARD_HOST} if allow else set())
    deny_hosts = {h.strip() for h in args.deny_host} or ({WILDCARD_HOST} if deny else set())
    out = {(p, h, o, Permission.ALLOW) for p, h, o in product(allow, allow_hosts, operations)}
    out |= {(p, h, o, Permission.DENY) for p, h, o in product(deny, deny_hosts, operations)}
    return out


def bindings(args: argparse.Namespace, *, required: bool = True) -> dict[Resource, set[Entry]]:
    """Resource (pattern or filter) -> entries, as AclCommand.getResourceFilterToAcls."""
    resources = _resources(args, required=required)
    out: dict[Resource, set[Entry]] = {}
    if not args.producer and not args.consumer:
        ops = {parse_operation(o) for o in args.operation} or {Operation.ALL}
        out = {r: _entries(args, ops) for r in resources}
    if args.producer:
        for r in resources:
            if r[0] == ResourceType.TOPIC:
                ops = {Operation.WRITE, Operation.DESCRIBE, Operation.CREATE}
                out[r] = _entries(args, ops)
            elif r[0] == ResourceType.TRANSACTIONAL_ID:
                out[r] = _entries(args, {Operation.WRITE, Operation.DESCRIBE})
        if args.idempotent:
            cluster = (ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL)
            out[cluster] = _entries(args, {Operation.IDEMPOTENT_WRITE})
    if args.consumer:
        for r in resources:
            if r[0] == ResourceType.TOPIC:
                ops = {Operation.READ, Operation.DESCRIBE}
                out[r] = out.get(r, set()) | _entries(args, ops)
            elif r[0] == ResourceType.GROUP:
                out[r] = out.get(r, set()) | _entries(args, {Operation.READ})
    for (kind, _name, _pattern), entries in out.items():
        valid = SUPPORTED_OPERATIONS[kind] | {Operation.ALL}
        if any(op not in valid for _p, _h, op, _perm in entries):
            names = ", ".join(sorted(_pascal(o.name) for o in valid))
            raise UsageError(f"ResourceType {kind.name} only supports operations {names}")
    return out


# -- rendering ----------------------------------------------------------------------------------


def _row(kind: int, name: str, pattern: int, principal: str, host: str, op: int, perm: int):
    return {
        "resource_type": ResourceType(kind).name,
        "name": name,
        "pattern_type": PatternType(pattern).name,
        "principal": principal,
        "host": host,
        "operation": Operation(op).name,
        "permission": Permission(perm).name,
    }


COLUMNS = ["resource-type", "name", "pattern-type", "principal", "host", "operation", "permission"]


def _table(rows: list[dict]) -> str:
    keys = [c.replace("-", "_") for c in COLUMNS]
    return table(COLUMNS, [[r[k] for k in keys] for r in rows])


def _sorted(rows: list[dict]) -> list[dict]:
    order = ("resource_type", "name", "pattern_type", "principal", "host", "operation")
    return sorted(rows, key=lambda r: tuple(r[k] for k in order) + (r["permission"],))


# -- the requests -------------------------------------------------------------------------------


def describe(client: Client, resource: Resource | None) -> list[dict]:
    """Every ACL matching a resource filter (None: every ACL), as rows."""
    kind, name, pattern = resource or (ResourceType.ANY, None, PatternType.ANY)
    body = {
        "resource_type_filter": kind,
        "resource_name_filter": name,
        "pattern_type_filter": pattern,
        "principal_filter": None,
        "host_filter": None,
        "operation": Operation.ANY,
        "permission_type": Permission.ANY,
    }
    _, r = client.any().request(DESCRIBE_ACLS, body)
    check(r["error_code"], r.get("error_message"))
    return [
        _row(
            res["resource_type"],
            res["resource_name"],
            res["pattern_type"],
            a["principal"],
            a["host"],
            a["operation"],
            a["permission_type"],
        )  # fmt: skip
        for res in r["resources"]
        for a in res["acls"]
    ]


def _list(client: Client, args: argparse.Namespace) -> int:
    resources = _resources(args, required=False)
    rows: list[dict] = []
    for resource in resources or [None]:
        rows += describe(client, resource)
    principals = {parse_principal(p) for p in args.principal}
    if principals:
        rows = [r for r in rows if r["principal"] in principals]
    rows = _sorted(list({tuple(r.items()): r for r in rows}.values()))
    emit(args.output, rows, _table)
    return 0


def _add(client: Client, args: argparse.Namespace) -> int:
    wanted = bindings(args)
    if any(not entries for entries in wanted.values()):
        raise UsageError(
            "You must specify one of: --allow-principal, --deny-principal when trying to add ACLs."
        )
    creations = [
        {
            "resource_type": kind,
            "resource_name": name,
            "resource_pattern_type": pattern,
            "principal": principal,
            "host": host,
            "operation": op,
            "permission_type": perm,
        }
        for (kind, name, pattern), entries in wanted.items()
        for principal, host, op, perm in sorted(entries)
    ]
    _, r = client.any().request(CREATE_ACLS, {"creations": creations})
    for c, result in zip(creations, r["results"], strict=True):
        if result["error_code"]:
            row = _row(*c.values())
            what = " ".join(
                row[k] for k in ("permission", "principal", "operation", "resource_type", "name")
            )
            raise KafkaCliError(result["error_code"], result["error_message"] or what)
    rows = _sorted([_row(*c.values()) for c in creations])
    emit(args.output, rows, _table)
    return 0


def _confirm(question: str) -> bool:
    if not sys.stdin.isatty():
        return True
    sys.stderr.write(f"{question} (y/n) ")
    sys.stderr.flush()
    return sys.stdin.readline().strip().lower() == "y"


def _remove(client: Client, args: argparse.Namespace) -> int:
    wanted = bindings(args)
    filters = []
    for (kind, name, pattern), entries in wanted.items():
        if not entries:  # every entry of the resource
            filters.append((kind, name, pattern, None, None, Operation.ANY, Permission.ANY))
        else:
            filters += [(kind, name, pattern, *e) for e in sorted(entries)]
    if not args.force:
        what = ", ".join(f"{k.name} {n} ({p.name})" for k, n, p in wanted)
        if not _confirm(f"Are you sure you want to remove ACLs from {what}?"):
            print("nothing removed", file=sys.stderr)
            return 0
    body = {
        "filters": [
            {
                "resource_type_filter": kind,
                "resource_name_filter": name,
                "pattern_type_filter": pattern,
                "principal_filter": principal,
                "host_filter": host,
                "operation": op,
                "permission_type": perm,
            }
            for kind, name, pattern, principal, host, op, perm in filters
        ]
    }
    _, r = client.any().request(DELETE_ACLS, body)
    rows = []
    for result in r["filter_results"]:
        check(result["error_code"], result.get("error_message"))
        for m in result["matching_acls"]:
            check(m["error_code"], m.get("error_message"))
            rows.append(
                _row(
                    m["resource_type"],
                    m["resource_name"],
                    m["pattern_type"],
                    m["principal"],
                    m["host"],
                    m["operation"],
                    m["permission_type"],
                )  # fmt: skip
            )
    emit(args.output, _sorted(rows), _table)
    return 0


def run(client: Client, args: argparse.Namespace) -> int:
    action = _action(args)
    _check(args, action)
    return {"list": _list, "add": _add, "remove": _remove}[action](client, args)
