"""event.loop (pybroker/event_loop.py): the broker on asyncio's loop or on uvloop's, which has
no ``loop.sendfile``: a fetch answer's log regions go onto the socket with ``os.sendfile`` on
both, behind whatever the transport still buffers.  uvloop is the default; the whole suite runs
on asyncio's loop with PYBROKER_TEST_EVENT_LOOP=asyncio (docs/testing.md)."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from dataclasses import dataclass
from typing import Any

import pytest
from broker_fixture import LOOPS, Client, batch, fetched_values, unique_topic, wait_until

from pybroker import event_loop
from pybroker.config import ConfigError, build_config
from pybroker.connection import KafkaConnection
from pybroker.testing.process import BrokerProcess


@dataclass
class _Region:  # what PartitionLog.read hands out: a file region for sendfile
    file: Any
    position: int
    size: int


@pytest.mark.parametrize("name", LOOPS)
def test_a_region_behind_buffered_bytes_arrives_whole_and_in_order(tmp_path, name):
    """An answer with a log region sent while the transport still holds earlier bytes (a
    pipelining client that reads slowly): onto the socket once those bytes are out."""
    region = bytes(range(256)) * 4096  # 1 MiB
    path = tmp_path / "segment.log"
    path.write_bytes(region)
    earlier = b"e" * (4 << 20)  # more than the socket buffers: the transport keeps the rest
    received = bytearray()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair()
        conn = KafkaConnection(services=None, max_request_bytes=1 << 20)
        await loop.connect_accepted_socket(lambda: conn, ours)
        conn.transport.write(earlier)
        assert conn.transport.get_write_buffer_size() > 0

        def read() -> None:
            with theirs:
                while chunk := theirs.recv(1 << 20):
                    received.extend(chunk)

        reader = threading.Thread(target=read)
        reader.start()
        with path.open("rb") as f:
            await asyncio.wait_for(conn._send([b"head", _Region(f, 0, len(region))]), 30)
        conn.close()
        await asyncio.to_thread(reader.join, 30)

    event_loop.run(main(), name)
    assert len(received) == len(earlier) + 4 + len(region)
    assert received == earlier + b"head" + region


@pytest.mark.parametrize("name", LOOPS)
def test_a_broker_on_each_loop_answers_pipelined_fetches(start_broker, name):
    """Fetch answers (log regions) pipelined on one connection, read only once all were
    sent: the later ones go out behind buffered bytes."""
    b = start_broker(**{"event.loop": name})
    expected = "uvloop" if name == "uvloop" else "asyncio"
    assert type(b.loop).__module__.split(".")[0] == expected
    topic = unique_topic()
    values = [bytes([i % 256]) * 1000 for i in range(200)]
    with Client(b.host, b.port) as c:
        c.create_topic(topic)
        for i in range(0, len(values), 20):
            assert c.produce(topic, 0, batch(values[i : i + 20]))["error_code"] == 0
        corrs = [c.send(1, 11, _fetch(topic)) for _ in range(50)]
        for corr in corrs:
            body = c.receive(1, 11, corr)
            (p,) = body["responses"][0]["partitions"]
            assert p["error_code"] == 0
            assert [v for _, v in fetched_values(p["records"])] == values


def _fetch(topic: str) -> dict:
    return {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 22,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": 0,
                        "current_leader_epoch": -1,
                        "fetch_offset": 0,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 22,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def _serve_and_stop(proc: BrokerProcess) -> str:
    """Start ``proc``, check each of its broker processes comes to answer Metadata with every
    broker (a broker process is ready once it serves; it learns of its sibling from the cluster
    state a moment later, as a Kafka broker learns of the others), stop it (exit 0 required)
    and return its output."""
    proc.start()
    try:
        for port in proc.ports:
            with Client(proc.host, port) as c:

                def every_broker() -> bool:
                    md = c.request(3, 1, {"topics": None})
                    return sorted(b["node_id"] for b in md["brokers"]) == proc.broker_ids

                wait_until(every_broker, 30)
    finally:
        code = proc.stop()
    assert code == 0
    return proc.output(2000)


@pytest.mark.skipif(not event_loop.available("uvloop"), reason="uvloop not installed")
def test_pybroker_serve_and_a_node_run_on_uvloop(tmp_path):
    """``pybroker serve`` with event.loop=uvloop, a node of two broker processes
    (node.cores=2): each serves on uvloop and stops cleanly on SIGTERM."""
    proc = BrokerProcess(tmp_path / "node", overrides={"event.loop": "uvloop", "node.cores": 2})
    out = _serve_and_stop(proc)
    assert out.count("event loop: uvloop (uvloop.Loop)") == 3, out  # supervisor + 2 brokers
    assert "Traceback" not in out, proc.traceback_excerpt()


def test_an_unknown_event_loop_is_a_configuration_error():
    with pytest.raises(ConfigError, match="event.loop"):
        build_config({"event.loop": "trio"})


def test_the_default_loop_is_uvloop():
    """No event.loop set: uvloop (docs/performance.md, "uvloop"), asyncio's when chosen."""
    assert build_config({}).event_loop == "uvloop"
    assert build_config({"event.loop": "asyncio"}).event_loop == "asyncio"
    if event_loop.available("uvloop"):
        assert event_loop.configured("uvloop", explicit=False) == "uvloop"


def test_an_explicit_uvloop_without_the_package_stops_the_start(monkeypatch):
    """event.loop=uvloop set by the user where uvloop cannot be imported: no silent fallback."""
    monkeypatch.setattr(event_loop, "uvloop", None)
    assert event_loop.configured("uvloop", explicit=True) == "uvloop"
    with pytest.raises(RuntimeError, match="uvloop package is not installed"):
        event_loop.loop_factory("uvloop")


class _NoUvloopBroker(BrokerProcess):
    """``pybroker serve`` where ``import uvloop`` fails, event.loop left at its default."""

    def __init__(self, workdir, shadow):
        super().__init__(workdir, overrides={"node.cores": 2})
        self.shadow = shadow

    def settings(self) -> dict[str, str]:
        settings = super().settings()
        settings.pop("event.loop", None)  # PYBROKER_TEST_EVENT_LOOP would set it
        return settings

    def environment(self) -> dict[str, str]:
        env = super().environment()
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(self.shadow), env.get("PYTHONPATH")]))
        return env


def test_without_uvloop_the_default_runs_on_asyncio_with_one_warning(tmp_path):
    """Where uvloop cannot be imported (no wheel for the platform), the default loop falls
    back to asyncio's: a node (node.cores=2) serves, its supervisor and both broker processes
    on asyncio's loop, and says why in one WARN line."""
    shadow = tmp_path / "shadow" / "uvloop"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('no uvloop on this platform')\n")
    proc = _NoUvloopBroker(tmp_path / "broker", shadow.parent)
    out = _serve_and_stop(proc)
    assert out.count("event loop: asyncio") == 3, out  # supervisor + 2 brokers
    warnings = [line for line in out.splitlines() if "cannot be imported" in line]
    assert len(warnings) == 1, out
    assert "WARN" in warnings[0] and "no uvloop on this platform" in warnings[0], warnings
    assert "event loop: asyncio" in out, out
    assert "Traceback" not in out, proc.traceback_excerpt()
