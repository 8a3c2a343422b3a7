"""Command line: ``pybroker serve [server.properties] [--override key=value ...]``.

With no arguments the broker listens on 127.0.0.1:9092, keeps its data in ./pybroker-data
(named on start) and its metadata in the embedded store there.  Set zookeeper.connect to use
ZooKeeper instead.  SIGTERM and SIGINT shut it down cleanly.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from pybroker import logthrottle
from pybroker.broker import Broker, describe
from pybroker.config import ConfigError, build_config, parse_properties, with_defaults_for_cli

DEFAULT_DATA_DIR = "pybroker-data"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pybroker", description="A Kafka broker written in Python.")
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
    return p


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


async def _serve(broker: Broker) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await broker.start()
    except BaseException:
        await broker.stop()
        raise
    info = describe(broker)
    print(
        "pybroker started (" + ", ".join(f"{k}={v}" for k, v in info.items()) + ")",
        file=sys.stderr,
        flush=True,
    )
    await stop.wait()
    logging.getLogger("pybroker").info("shutting down")
    await broker.stop()
    print("pybroker stopped", file=sys.stderr, flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
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
    try:
        return asyncio.run(_serve(Broker(config)))
    except Exception as e:  # start-up failures: say what and exit non-zero
        logging.getLogger("pybroker").error(
            "fatal: %s", e, exc_info=logging.getLogger().isEnabledFor(logging.DEBUG)
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
