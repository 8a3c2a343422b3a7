"""The broker's Python work per OffsetCommit, without sockets: the connection's request path
(data_received, decode, handler, coordinator, the __consumer_offsets append, encode, the
answer's write) driven in-process, so that a change to it is measured on a loaded machine.

    PYTHONPATH=<tree> python -m bench.commit_path [--groups 32] [--rounds 100] [--trials 10]
                                                  [--loop asyncio|uvloop]

One pybroker (embedded metadata store, ``offsets.storage=kafka``, replication factor 1) on
this process's event loop; ``--groups`` connections (KafkaConnection over a transport that
counts its writes), each committing offset n+1 of partition 0 for its own group as a simple
consumer (what bench/commit_cost.py's clients send).  A round gives every connection one
commit frame, then runs loop steps until all of them are answered.  The figure is the
process CPU time (time.process_time) per commit, the minimum over ``--trials`` trials of
``--rounds`` rounds (the least disturbed by other processes): the socket system calls and the
clients are not in it (bench/commit_cost.py has them).  Compare trees alternately: this file
run with each tree's PYTHONPATH (``PYTHONPATH=<old> python bench/commit_path.py`` for a tree
without it).  Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import socket
import sys
import tempfile
import time
from typing import Any

from bench.commit_cost import TOPIC, Conn, commit_body
from pybroker import event_loop
from pybroker.broker import Broker
from pybroker.config import build_config
from pybroker.connection import KafkaConnection
from pybroker.event_loop import LOOPS
from pybroker.wire import codec


class CountingTransport:
    """A transport that only counts the answers written to it."""

    def __init__(self) -> None:
        self.answers = 0

    def write(self, data: Any) -> None:
        self.answers += 1

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _ready(port: int, groups: int) -> None:
    """The topic, and each group's coordinator loaded (a first commit over TCP)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    c = Conn(reader, writer)
    topic = {"name": TOPIC, "num_partitions": 1, "replication_factor": 1}
    await c.request(19, 4, {"topics": [{**topic, "assignments": [], "configs": []}],
                            "timeout_ms": 30000})  # fmt: skip
    for i in range(groups):
        while True:
            fc = await c.request(10, 3, {"key": f"path-{i}", "key_type": 0})
            if fc["error_code"] == 0:
                r = await c.request(8, 8, commit_body(f"path-{i}", 1))
                if r["topics"][0]["partitions"][0]["error_code"] == 0:
                    break
            await asyncio.sleep(0.1)
    writer.close()


async def measure(groups: int, rounds: int, trials: int) -> dict:
    port = _free_port()
    settings = {
        "broker.id": "0",
        "listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "log.dirs": tempfile.mkdtemp(prefix="commit-path-"),
        "offsets.storage": "kafka",
        "offsets.topic.replication.factor": "1",
    }
    broker = Broker(build_config(settings))
    await broker.start()
    try:
        await _ready(port, groups)
        conns = []
        for _ in range(groups):
            conn = KafkaConnection(broker, 100 << 20)
            transport = CountingTransport()
            conn.connection_made(transport)  # type: ignore[arg-type]
            conns.append((conn, transport))
        offset = 2
        best = None
        for trial in range(trials + 2):  # two to warm up
            frames = []
            for _ in range(rounds):
                offset += 1
                frames.append(
                    [
                        codec.encode_request(8, 8, offset, "path", commit_body(f"path-{i}", offset))
                        for i in range(groups)
                    ]
                )
            started = time.process_time()
            for batch in frames:
                want = [t.answers + 1 for _, t in conns]
                for (conn, _), frame in zip(conns, batch, strict=True):
                    conn.data_received(frame)
                for _ in range(100):
                    if all(t.answers >= w for (_, t), w in zip(conns, want, strict=True)):
                        break
                    await asyncio.sleep(0)
                else:
                    raise RuntimeError("commits not answered")
            us = (time.process_time() - started) / (rounds * groups) * 1e6
            if trial >= 2:
                best = us if best is None else min(best, us)
        for conn, _ in conns:
            if conn.task is not None:
                conn.task.cancel()
    finally:
        await broker.stop()
    return {"us/commit (min)": round(best or 0.0, 2), "load": os.getloadavg()}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--loop", default="asyncio", choices=LOOPS, help="the event loop (event.loop)")
    args = ap.parse_args()
    logging.disable(logging.WARNING)  # (the loop monitor's stalls on a loaded machine)
    got = event_loop.run(measure(args.groups, args.rounds, args.trials), args.loop)
    print(json.dumps({**got, "loop": args.loop}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
