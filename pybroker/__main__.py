"""Command line: ``pybroker serve [server.properties] [--override key=value ...]``.

``pybroker topics|groups|produce|consume|cluster|acls|users ...`` is the admin CLI (pybroker.cli),
a Kafka client that works against pybroker and any Kafka broker.

``pybroker add-scram [server.properties] [--override ...] 'SCRAM-SHA-256=[name=alice,
password=alice-secret]' ...`` writes SCRAM credentials into the broker's metadata store
before it starts (as Kafka's ``kafka-storage format --add-scram`` does for KRaft, or
``kafka-configs --zookeeper`` on ZooKeeper), for the first users of a SCRAM-only cluster;
afterwards AlterUserScramCredentials (kafka-configs --bootstrap-server) manages them.

With no arguments the broker listens on 127.0.0.1:9092, keeps its data in ./pybroker-data
(named on start) and its metadata in the embedded store there.  Set zookeeper.connect to use
ZooKeeper instead.  SIGTERM and SIGINT shut it down cleanly.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import signal
import sys
from pathlib import Path

from pybroker import cli, event_loop, logthrottle
from pybroker.broker import Broker, describe
from pybroker.builder import make_store
from pybroker.clock import SYSTEM_CLOCK
from pybroker.config import (
    Config,
    ConfigError,
    build_config,
    parse_properties,
    with_defaults_for_cli,
)
from pybroker.security import scram
from pybroker.security.credentials import CredentialStore

DEFAULT_DATA_DIR = "pybroker-data"


def _parser() -> argparse.ArgumentParser:
    common = cli.common_options()
    p = argparse.ArgumentParser(
        prog="pybroker", description="A Kafka broker written in Python.", parents=[common]
    )
    sub = p.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run a broker")
    serve.add_argument("properties", nargs="?", help="a server.properties file")
    serve.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a configuration key (repeatable); wins over the file",
    )
    serve.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING, ERROR")
    scram = sub.add_parser("add-scram", help="add SCRAM credentials to the metadata store")
    scram.add_argument("properties", nargs="?", help="a server.properties file")
    scram.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    scram.add_argument(
        "credentials",
        nargs="+",
        metavar="MECHANISM=[name=USER,password=PASSWORD(,iterations=N)]",
    )
    scram.add_argument("--log-level", default="WARNING")
    cli.add_parsers(sub, common)
    return p


_SCRAM_SPEC = re.compile(r"^(SCRAM-SHA-256|SCRAM-SHA-512)=\[(.*)\]$")


def parse_scram_spec(spec: str) -> tuple[str, str, str, int]:
    """'SCRAM-SHA-256=[name=alice,password=alice-secret,iterations=8192]' (kafka-storage's
    --add-scram syntax; values may be double-quoted)."""
    m = _SCRAM_SPEC.match(spec.strip())
    if m is None:
        raise ConfigError(f"expected SCRAM-SHA-256|SCRAM-SHA-512=[name=...,password=...]: {spec!r}")
    fields: dict[str, str] = {}
    for part in m.group(2).split(","):
        key, sep, value = part.partition("=")
        if not sep:
            raise ConfigError(f"expected key=value in {spec!r}, got {part!r}")
        fields[key.strip()] = value.strip().strip('"')
    if not fields.get("name") or "password" not in fields:
        raise ConfigError(f"name and password are required: {spec!r}")
    iterations = int(fields.get("iterations", scram.DEFAULT_ITERATIONS))
    if not scram.MIN_ITERATIONS <= iterations <= scram.MAX_ITERATIONS:
        raise ConfigError(
            f"iterations must be between {scram.MIN_ITERATIONS} and {scram.MAX_ITERATIONS}"
        )
    return m.group(1), fields["name"], fields["password"], iterations


async def _add_scram(config: Config, specs: list[tuple[str, str, str, int]]) -> None:
    store = make_store(config, data_dir=config.data_dir, clock=SYSTEM_CLOCK)
    await store.start()
    try:
        creds = CredentialStore(store)
        for mechanism, user, password, iterations in specs:
            cred = scram.make_credential(mechanism, password, iterations)
            await creds.alter(user, {mechanism: cred}, set())
            print(f"added {mechanism} credentials for user {user}", file=sys.stderr)
    finally:
        await store.close()


def load_settings(properties: str | None, overrides: list[str]) -> dict[str, str]:
    settings: dict[str, str] = {}
    if properties:
        settings.update(parse_properties(Path(properties).read_text()))
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--override expects key=value, got {item!r}")
        settings[key.strip()] = value.strip()
    return settings


def _on_stop_signals(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    """SIGTERM and SIGINT set ``stop``.  Python-level handlers (they run in the main thread,
    the loop's, between bytecodes) that queue ``stop.set`` on the loop, rather than asyncio's
    add_signal_handler: that one learns of a signal from a byte its C handler writes to the
    loop's self-pipe, and a self-pipe filled by other threads' wake-ups (a busy loop) drops
    that byte, and with it the SIGTERM.  Here a full pipe costs only the wake-up: the call is
    queued first."""

    def handler(signum: int, frame: object) -> None:
        loop.call_soon_threadsafe(stop.set)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handler)


async def _serve(broker: Broker) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    _on_stop_signals(loop, stop)
    async with broker.serving():
        info = describe(broker)
        print(
            "pybroker started (" + ", ".join(f"{k}={v}" for k, v in info.items()) + ")",
            file=sys.stderr,
            flush=True,
        )
        await stop.wait()
        logging.getLogger("pybroker").info("shutting down")
    print("pybroker stopped", file=sys.stderr, flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command in cli.MODULES:
        return cli.run(args)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logthrottle.install()  # repeated identical warnings and errors: once a minute, counted
    try:
        config = build_config(load_settings(args.properties, args.override))
        config = with_defaults_for_cli(config, DEFAULT_DATA_DIR)
    except (ConfigError, OSError) as e:
        print(f"pybroker: {e}", file=sys.stderr)
        return 2
    for w in config.warnings:
        logging.getLogger("pybroker.config").warning(w)
    if args.command == "add-scram":
        try:
            specs = [parse_scram_spec(c) for c in args.credentials]
        except (ConfigError, ValueError) as e:
            print(f"pybroker: {e}", file=sys.stderr)
            return 2
        try:
            asyncio.run(_add_scram(config, specs))
        except Exception as e:
            print(f"pybroker: {e}", file=sys.stderr)
            return 1
        return 0
    try:
        loop = event_loop.configured(config.event_loop, "event.loop" in config.explicit_keys)
        if config.node_cores != 1:  # one broker process per core (docs/multicore.md)
            from pybroker.node.supervisor import serve_node  # (a node's processes only)

            settings = load_settings(args.properties, args.override)
            # the node's broker processes run on the supervisor's loop (a fallback: one WARN)
            settings.setdefault("event.loop", loop)
            if "log.dirs" not in settings and "log.dir" not in settings:
                settings["log.dirs"] = str(config.data_dir)
            return event_loop.run(serve_node(config, settings, args.log_level), loop)
        return event_loop.run(_serve(Broker(config)), loop)
    except Exception as e:  # start-up failures: say what and exit non-zero
        logging.getLogger("pybroker").error(
            "fatal: %s", e, exc_info=logging.getLogger().isEnabledFor(logging.DEBUG)
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
