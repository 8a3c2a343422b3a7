"""The admin CLI (``pybroker topics|groups|produce|consume|cluster|acls|users``): a Kafka client
over the project's own codec, for pybroker and any Kafka broker.

``add_parsers(sub, common)`` registers the commands on the ``pybroker`` parser; ``run(args)``
runs the one parsed and returns the exit code: 0 on success, 1 on a Kafka error (one line on
stderr: ``error: NAME: message``) or when no broker answers, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import os
import sys

from pybroker.cli import acls, cluster, consume, groups, produce, security, topics, users
from pybroker.cli.client import DEFAULT_BOOTSTRAP, Client, ClientError, KafkaCliError, UsageError

MODULES = {
    "topics": topics,
    "groups": groups,
    "produce": produce,
    "consume": consume,
    "cluster": cluster,
    "acls": acls,
    "users": users,
}
ENV_BOOTSTRAP = "PYBROKER_BOOTSTRAP"


def common_options() -> argparse.ArgumentParser:
    """-b/--bootstrap-server and --output, accepted before or after the command (defaults are
    applied by ``run``, so a value given anywhere wins)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-b",
        "--bootstrap-server",
        default=argparse.SUPPRESS,
        metavar="HOST:PORT[,...]",
        help=f"brokers to bootstrap from (${ENV_BOOTSTRAP}, default {DEFAULT_BOOTSTRAP})",
    )
    common.add_argument(
        "-X",
        dest="client_settings",
        action="append",
        default=argparse.SUPPRESS,
        metavar="KEY=VALUE",
        help="a client setting (TLS, SASL; kcat's and Kafka's names; see docs/cli.md)",
    )
    common.add_argument(
        "--command-config",
        default=argparse.SUPPRESS,
        metavar="FILE",
        help="Kafka client properties (security.protocol, sasl.*, ssl.*)",
    )
    common.add_argument(
        "--output",
        choices=["table", "json"],
        default=argparse.SUPPRESS,
        help="human tables (default) or JSON",
    )
    return common


def add_parsers(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    for module in MODULES.values():
        module.add_parser(sub, common)


def run(args: argparse.Namespace) -> int:
    args.output = getattr(args, "output", None) or "table"
    bootstrap = (
        getattr(args, "bootstrap_server", None)
        or os.environ.get(ENV_BOOTSTRAP)
        or DEFAULT_BOOTSTRAP
    )
    client = None
    try:
        settings = security.load(
            getattr(args, "command_config", None), getattr(args, "client_settings", None) or []
        )
        args.client_config = settings.commands  # batch.size, isolation.level
        client = Client(bootstrap, security=settings.security, timeout_s=settings.timeout_s or 30.0)
        return MODULES[args.command].run(client, args)
    except UsageError as e:
        print(f"pybroker {args.command}: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader went away (| head): not an error; keep Python from complaining at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (KafkaCliError, ClientError, OSError) as e:  # OSError: a file of the settings
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        if client is not None:
            client.close()
