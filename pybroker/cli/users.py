"""``pybroker users list|describe|add|remove``: SCRAM credentials over
DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554), as ``kafka-configs
--entity-type users --alter --add-config 'SCRAM-SHA-256=[iterations=8192,password=...]'`` and
``--delete-config 'SCRAM-SHA-256'`` manage them.

add: the credential of each mechanism given, either in kafka-configs' syntax
(``'SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=...]'``, one
or more arguments) or with ``--mechanism``/``--password``/``--iterations``; iterations default
to Kafka's 4096 and must lie in 4096..16384.  The client salts and hashes the password (a random
salt, PBKDF2 as the mechanism says), so the password never reaches the broker, as Kafka's admin
client does.  A credential of the same user and mechanism is replaced.  Each credential is its
own AlterUserScramCredentials request (a KRaft controller takes one alteration per user and
request).  remove: the credentials of
``--mechanism`` (repeatable), or of every mechanism the user has.  list: every user with SCRAM
credentials; describe: the users named (RESOURCE_NOT_FOUND for one without any).
"""

from __future__ import annotations

import argparse
import re
import secrets

from pybroker.cli.client import Client, KafkaCliError, UsageError, check
from pybroker.cli.output import emit, table
from pybroker.errors import ErrorCode
from pybroker.security import scram

DESCRIBE_USER_SCRAM_CREDENTIALS = 50
ALTER_USER_SCRAM_CREDENTIALS = 51
MECHANISMS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}  # Kafka's ScramMechanism type ids
MECHANISM_NAMES = {v: k for k, v in MECHANISMS.items()}
_SPEC = re.compile(r"(SCRAM-SHA-256|SCRAM-SHA-512)=\[([^\]]*)\]", re.IGNORECASE)


def add_parser(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("users", help="SCRAM users: list, describe, add, remove")
    us = p.add_subparsers(dest="action", required=True)
    us.add_parser("list", parents=[common], help="users with SCRAM credentials")
    d = us.add_parser("describe", parents=[common], help="the SCRAM credentials of users")
    d.add_argument("names", nargs="+", metavar="USER")
    a = us.add_parser("add", parents=[common], help="add or replace SCRAM credentials")
    a.add_argument("name", metavar="USER")
    a.add_argument(
        "specs",
        nargs="*",
        metavar="'SCRAM-SHA-256=[iterations=N,password=P]'",
        help="kafka-configs' --add-config syntax (several may be comma-separated)",
    )
    a.add_argument("--mechanism", type=str.upper, choices=list(MECHANISMS))
    a.add_argument("--password")
    a.add_argument("--iterations", type=int, default=scram.DEFAULT_ITERATIONS)
    r = us.add_parser(
        "remove", aliases=["delete"], parents=[common], help="remove SCRAM credentials"
    )
    r.add_argument("name", metavar="USER")
    r.add_argument(
        "--mechanism",
        type=str.upper,
        choices=list(MECHANISMS),
        action="append",
        default=[],
        help="default: every mechanism the user has",
    )


def parse_specs(specs: list[str]) -> list[tuple[str, str, int]]:
    """(mechanism, password, iterations) of kafka-configs' SCRAM config syntax."""
    out = []
    for text in specs:
        rest = text.strip()
        found = list(_SPEC.finditer(rest))
        leftover = _SPEC.sub("", rest).replace(",", "").strip()
        if not found or leftover:
            raise UsageError(
                f"expected 'SCRAM-SHA-256=[iterations=N,password=P]' (or SCRAM-SHA-512), got "
                f"{text!r}"
            )
        for m in found:
            fields: dict[str, str] = {}
            for part in m.group(2).split(","):
                key, sep, value = part.partition("=")
                if not sep:
                    raise UsageError(f"expected key=value in {m.group(0)!r}, got {part!r}")
                fields[key.strip().lower()] = value.strip()
            unknown = set(fields) - {"iterations", "password"}
            if unknown or "password" not in fields:
                raise UsageError(f"{m.group(0)!r} needs password= (and optionally iterations=)")
            try:
                iterations = int(fields.get("iterations", scram.DEFAULT_ITERATIONS))
            except ValueError:
                raise UsageError(f"iterations must be a number in {m.group(0)!r}") from None
            out.append((m.group(1).upper(), fields["password"], iterations))
    return out


def _credentials(args: argparse.Namespace) -> list[tuple[str, str, int]]:
    creds = parse_specs(args.specs)
    if args.mechanism or args.password is not None:
        if not args.mechanism or args.password is None:
            raise UsageError("--mechanism and --password go together")
        creds.append((args.mechanism, args.password, args.iterations))
    if not creds:
        raise UsageError(
            "give the credentials: 'SCRAM-SHA-256=[password=...]' or --mechanism and --password"
        )
    for _mechanism, _password, iterations in creds:
        if not scram.MIN_ITERATIONS <= iterations <= scram.MAX_ITERATIONS:
            raise UsageError(
                f"iterations must be between {scram.MIN_ITERATIONS} and {scram.MAX_ITERATIONS}: "
                f"{iterations}"
            )
    return creds


def describe(client: Client, names: list[str] | None) -> list[dict]:
    """Rows (user, mechanism, iterations); ``names=None``: every user."""
    body = {"users": None if names is None else [{"name": n} for n in names]}
    _, r = client.any().request(DESCRIBE_USER_SCRAM_CREDENTIALS, body)
    check(r["error_code"], r.get("error_message"))
    rows = []
    for res in r["results"]:
        check(res["error_code"], res.get("error_message"))
        for c in res["credential_infos"]:
            rows.append(
                {
                    "user": res["user"],
                    "mechanism": MECHANISM_NAMES.get(c["mechanism"], str(c["mechanism"])),
                    "iterations": c["iterations"],
                }
            )
    return sorted(rows, key=lambda x: (x["user"], x["mechanism"]))


def _table(rows: list[dict]) -> str:
    return table(
        ["user", "mechanism", "iterations"],
        [(x["user"], x["mechanism"], x["iterations"]) for x in rows],
    )


def _alter(client: Client, deletions: list[dict], upsertions: list[dict]) -> None:
    """One request per credential: a KRaft controller refuses two alterations of one user in
    a request (DUPLICATE_RESOURCE, ScramControlManager), ZooKeeper-mode Kafka two of one user
    and mechanism; one at a time works with both."""
    for body in [{"deletions": [d], "upsertions": []} for d in deletions] + [
        {"deletions": [], "upsertions": [u]} for u in upsertions
    ]:
        _, r = client.any().request(ALTER_USER_SCRAM_CREDENTIALS, body)
        for res in r["results"]:
            check(res["error_code"], res.get("error_message") or f"user {res['user']}")


def _list(client: Client, args: argparse.Namespace) -> int:
    emit(args.output, describe(client, None), _table)
    return 0


def _describe(client: Client, args: argparse.Namespace) -> int:
    emit(args.output, describe(client, list(dict.fromkeys(args.names))), _table)
    return 0


def _add(client: Client, args: argparse.Namespace) -> int:
    upsertions = []
    for mechanism, password, iterations in _credentials(args):
        salt = secrets.token_bytes(scram.SALT_BYTES)
        upsertions.append(
            {
                "name": args.name,
                "mechanism": MECHANISMS[mechanism],
                "iterations": iterations,
                "salt": salt,
                "salted_password": scram.salted_password(
                    mechanism, password.encode(), salt, iterations
                ),
            }
        )
    _alter(client, [], upsertions)
    rows = [
        {
            "user": args.name,
            "mechanism": MECHANISM_NAMES[u["mechanism"]],
            "iterations": u["iterations"],
        }
        for u in upsertions
    ]
    emit(args.output, rows, _table)
    return 0


def _remove(client: Client, args: argparse.Namespace) -> int:
    mechanisms = list(dict.fromkeys(args.mechanism))
    if not mechanisms:
        mechanisms = [x["mechanism"] for x in describe(client, [args.name])]
    if not mechanisms:  # (a broker that lists a user without credentials)
        raise KafkaCliError(
            ErrorCode.RESOURCE_NOT_FOUND, f"user {args.name} has no SCRAM credentials"
        )
    _alter(client, [{"name": args.name, "mechanism": MECHANISMS[m]} for m in mechanisms], [])
    rows = [{"user": args.name, "mechanism": m, "status": "removed"} for m in mechanisms]
    emit(
        args.output,
        rows,
        lambda rs: table(["user", "mechanism", "status"], [tuple(x.values()) for x in rs]),
    )
    return 0


def run(client: Client, args: argparse.Namespace) -> int:
    action = "remove" if args.action == "delete" else args.action
    return {"list": _list, "describe": _describe, "add": _add, "remove": _remove}[action](
        client, args
    )
