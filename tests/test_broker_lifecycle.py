"""The composition root's start and stop (pybroker/broker.py, pybroker/builder.py): the parts
stop in reverse of the order they started, a stop that fails or hangs does not hold up the
others, and a start that fails part-way stops what it started."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from broker_fixture import BrokerHarness, free_port

from pybroker.log.checkpoints import CLEAN_SHUTDOWN_FILE
from pybroker.stops import Stops

# Broker.stop's order after the controlled shutdown (the listeners first, then what stands on
# the parts below it, the metadata store and the loop monitor last)
STOP_ORDER = [
    "console",
    "HTTP listener",
    "listeners",
    "log cleaner",
    "authorizer",
    "quota store",
    "transaction coordinator",
    "__consumer_offsets loading",  # (offsets.storage=zookeeper: the drain of a leftover topic)
    "transaction marker sender",
    "share-partitions",
    "share-group coordinator",
    "group coordinator",
    "group commit counts",  # (a log line: the coordinators' merged metadata-store writes)
    "log dir mover",
    "replica manager",
    "flusher",
    "cluster membership",
    "logs",
    "metadata store",
    "loop monitor",
]


def test_stops_run_last_pushed_first_and_bump_moves_one_to_the_top():
    ran: list[str] = []

    async def stop(name: str) -> None:
        ran.append(name)

    stops = Stops()
    for name in ("a", "b", "c"):
        stops.push(name, lambda name=name: stop(name))
    stops.push("sync", lambda: ran.append("sync"), bounded=False)
    stops.bump("a")
    assert stops.order == ["a", "sync", "c", "b"]
    asyncio.run(stops.run())
    assert ran == ["a", "sync", "c", "b"] and stops.order == []


def test_a_failing_stop_is_logged_and_the_others_still_run(caplog):
    ran: list[str] = []

    async def broken() -> None:
        raise OSError("disk gone")

    async def fine() -> None:
        ran.append("fine")

    stops = Stops()
    stops.push("fine", fine)
    stops.push("broken", broken)
    asyncio.run(stops.run())
    assert ran == ["fine"]
    assert "broken failed to stop" in caplog.text


def test_a_started_broker_stops_its_parts_in_reverse(tmp_path):
    b = BrokerHarness(
        tmp_path / "b",
        {
            "metrics.listener": f"http://127.0.0.1:{free_port()}",
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "allow.everyone.if.no.acl.found": "true",
        },
    ).start()
    try:
        assert b.broker._stops.order == STOP_ORDER
    finally:
        b.stop()
    assert (tmp_path / "b" / CLEAN_SHUTDOWN_FILE).exists()


def test_a_start_that_fails_at_the_listeners_stops_what_it_started(tmp_path):
    """The port is taken: the start stops at the bind, before the metadata store, and the
    logs it loaded are closed clean all the same."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        b = BrokerHarness(tmp_path / "b", {})
        b.port = taken.getsockname()[1]
        b.settings["listeners"] = f"PLAINTEXT://127.0.0.1:{b.port}"
        with pytest.raises(Exception, match="listeners"):
            b.start()
    finally:
        taken.close()
    assert (tmp_path / "b" / CLEAN_SHUTDOWN_FILE).exists()
    assert not (tmp_path / "b" / "__cluster_metadata").exists()


# A broker on the unit tests' harness (its own loop thread, stopped right after Broker.stop)
# with two client connections: one idle, one in a Fetch long poll.  Every connection's task
# must have ended inside Broker.stop: a task still pending when the loop is closed is reported
# at garbage collection as "Task was destroyed but it is pending!" (on stderr).
_STOP_WITH_OPEN_CONNECTIONS = r"""
import gc, sys
from pathlib import Path
from broker_fixture import FETCH, BrokerHarness, fetch_body

b = BrokerHarness(Path(sys.argv[1]), {}).start()
idle, polling = b.client(), b.client()
polling.create_topic("t")
polling.send(FETCH, 11, fetch_body([("t", 0, 0, 1024)], max_wait_ms=30000, min_bytes=1))
b.run(__import__("asyncio").sleep(0.5))  # the Fetch is waiting for records
b.stop()
gc.collect()
print("stopped")
"""


def test_stop_ends_every_connections_task(tmp_path):
    """Server.stop closes the connections and waits (bounded) for their tasks to end."""
    tests = str(Path(__file__).parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, "-c", _STOP_WITH_OPEN_CONNECTIONS, str(tmp_path / "b")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and "stopped" in out.stdout, out.stderr
    assert "Task was destroyed but it is pending" not in out.stderr, out.stderr
