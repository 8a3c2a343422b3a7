"""The pieces of the scale scenarios (issue 27) that bench/scale/ (W21-W24, timed, beside
Kafka) and tests/test_scale.py (the same scenarios at 1/20 of the size, asserting correctness)
share: a blocking protocol client that speaks to Kafka and pybroker alike, topic creation in
batches, "every partition answers ListOffsets at its leader", a produce to every partition,
and many raw client connections driven by one selector.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pybroker.wire.messages  # noqa: F401  (declares every API's schema)
from pybroker.cli.client import ClientError
from pybroker.cli.client import Connection as WireConnection
from pybroker.wire import codec
from pybroker.wire.records import build_batch

HOST = "127.0.0.1"
PRODUCE, LIST_OFFSETS, METADATA, API_VERSIONS, CREATE_TOPICS = 0, 2, 3, 18, 19
PER_TOPIC = 100
CREATE_BATCH = 50  # topics per CreateTopics request
UNREACHABLE = (OSError, ClientError, ConnectionError)


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


# ------------------------------------------------------------------------------------------
# a blocking protocol client (pybroker's codec; speaks to Kafka and pybroker alike)
# ------------------------------------------------------------------------------------------


class Conn(WireConnection):
    """One connection; ``bytes_in`` counts what the broker sent (frames included)."""

    def __init__(self, host: str, port: int, timeout_s: float = 120.0) -> None:
        super().__init__(host, port, timeout_s=timeout_s)
        self.bytes_in = 0
        self.connect()

    def _read(self, n: int) -> bytes:
        data = super()._read(n)
        self.bytes_in += len(data)
        return data

    def exchange_frame(self, frame: bytes) -> bytes:
        """One encoded request frame sent; the response frame's payload, not decoded (a bench
        times the wire apart from the decode)."""
        if self._sock is None:
            self.connect()
        assert self._sock is not None
        self._sock.sendall(frame)
        return self._read(int.from_bytes(self._read(4), "big"))

    def __enter__(self) -> Conn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class PartitionInfo:
    leader: int
    replicas: list[int]
    isr: list[int]
    error: int


@dataclass
class ClusterMetadata:
    brokers: dict[int, tuple[str, int]]
    controller: int
    topics: dict[str, dict[int, PartitionInfo]]
    response_bytes: int = 0
    seconds: float = 0.0

    def partitions(self) -> Iterator[tuple[str, int, PartitionInfo]]:
        for t, parts in self.topics.items():
            for p, info in parts.items():
                yield t, p, info


def metadata(conn: Conn, topics: list[str] | None = None) -> ClusterMetadata:
    v = conn.version(METADATA)
    body: dict[str, Any] = {"allow_auto_topic_creation": False}
    body["topics"] = None if topics is None else [{"name": t} for t in topics]
    before = conn.bytes_in
    t0 = time.perf_counter()
    _, answer = conn.request(METADATA, body, version=v)
    took = time.perf_counter() - t0
    brokers = {b["node_id"]: (b["host"], b["port"]) for b in answer["brokers"]}
    out: dict[str, dict[int, PartitionInfo]] = {}
    for t in answer["topics"]:
        out[t["name"]] = {
            p["partition_index"]: PartitionInfo(
                p["leader_id"], list(p["replica_nodes"]), list(p["isr_nodes"]), p["error_code"]
            )
            for p in t["partitions"]
        }
    return ClusterMetadata(
        brokers, answer.get("controller_id", -1), out, conn.bytes_in - before, took
    )


def create_topics(
    bootstrap: tuple[str, int], names: list[str], partitions: int, rf: int, timeout_s: float
) -> None:
    """CreateTopics, CREATE_BATCH topics a request, to the controller."""
    deadline = time.monotonic() + timeout_s
    pending = list(names)
    while pending:
        with Conn(*bootstrap) as c:
            md = metadata(c, [])
        ctrl = md.brokers.get(md.controller)
        if ctrl is None:
            time.sleep(0.2)
            continue
        with Conn(*ctrl, timeout_s=timeout_s) as c:
            while pending:
                batch, rest = pending[:CREATE_BATCH], pending[CREATE_BATCH:]
                body = {
                    "topics": [
                        {
                            "name": n,
                            "num_partitions": partitions,
                            "replication_factor": rf,
                            "assignments": [],
                            "configs": [],
                        }
                        for n in batch
                    ],
                    "timeout_ms": int(timeout_s * 1000),
                    "validate_only": False,
                }
                _, ans = c.request(CREATE_TOPICS, body)
                codes = {t["name"]: t["error_code"] for t in ans["topics"]}
                bad = {n: e for n, e in codes.items() if e not in (0, 36)}  # 36: exists
                if any(e == 41 for e in bad.values()):  # NOT_CONTROLLER: ask again
                    break
                if bad:
                    raise RuntimeError(f"CreateTopics failed: {list(bad.items())[:5]}")
                pending = rest
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(pending)} topics not created within {timeout_s}s")


def topic_names(n_partitions: int, prefix: str = "s") -> list[str]:
    return [f"{prefix}{i:05d}" for i in range(max(1, n_partitions // PER_TOPIC))]


def unanswered(
    addresses: dict[int, tuple[str, int]], md: ClusterMetadata, chunk: int = 5000
) -> int:
    """How many partitions of ``md`` do not answer ListOffsets (latest) at their leader."""
    return len(not_answering(addresses, md, chunk))


def not_answering(
    addresses: dict[int, tuple[str, int]], md: ClusterMetadata, chunk: int = 5000
) -> set[tuple[str, int]]:
    """The partitions of ``md`` that do not answer ListOffsets (latest) at their leader."""
    by_leader: dict[int, list[tuple[str, int]]] = {}
    missing: set[tuple[str, int]] = set()
    for t, p, info in md.partitions():
        if info.leader < 0 or info.leader not in addresses:
            missing.add((t, p))
        else:
            by_leader.setdefault(info.leader, []).append((t, p))
    for leader, tps in by_leader.items():
        try:
            with Conn(*addresses[leader]) as c:
                for i in range(0, len(tps), chunk):
                    part = tps[i : i + chunk]
                    topics: dict[str, list[int]] = {}
                    for t, p in part:
                        topics.setdefault(t, []).append(p)
                    body = {
                        "replica_id": -1,
                        "isolation_level": 0,
                        "topics": [
                            {
                                "name": t,
                                "partitions": [{"partition_index": p, "timestamp": -1} for p in ps],
                            }
                            for t, ps in topics.items()
                        ],
                        "timeout_ms": 30000,
                    }
                    _, ans = c.request(LIST_OFFSETS, body)
                    ok = {
                        (t["name"], p["partition_index"])
                        for t in ans["topics"]
                        for p in t["partitions"]
                        if p["error_code"] == 0
                    }
                    missing.update(tp for tp in part if tp not in ok)
        except UNREACHABLE:
            missing.update(tps)
    return missing


def wait_all_answer(
    address: tuple[str, int], names: list[str], partitions: int, timeout_s: float, poll_s=2.0
) -> float:
    """Seconds until every partition of ``names`` answers ListOffsets at its leader.  A
    partition that answered is not asked again, nor a topic whose partitions all did: a
    poll of every partition every ``poll_s`` made the probe's own work on the broker grow as
    the partitions times the wait (W21's creation at 100,000, docs/scale.md)."""
    t0 = time.monotonic()
    pending = list(names)  # topics with a partition not seen answering yet
    answered: dict[str, set[int]] = {}
    while True:
        try:
            with Conn(*address) as c:
                md = metadata(c, pending)
            asked = ClusterMetadata(
                md.brokers,
                md.controller,
                {
                    t: {p: i for p, i in ps.items() if p not in answered.get(t, ())}
                    for t, ps in md.topics.items()
                },
            )
            failed = not_answering(md.brokers, asked)
            for t, p, _ in asked.partitions():
                if (t, p) not in failed:
                    answered.setdefault(t, set()).add(p)
            pending = [t for t in pending if len(answered.get(t, ())) < partitions]
            if not pending:
                return time.monotonic() - t0
        except UNREACHABLE:
            pass
        if time.monotonic() - t0 > timeout_s:
            raise TimeoutError(f"not every partition answered within {timeout_s}s")
        time.sleep(poll_s)


def produce_everywhere(
    address: tuple[str, int], md: ClusterMetadata, value: bytes = b"x" * 100
) -> int:
    """One record to every partition (acks=1), one Produce per leader; the partitions that
    failed (an error code, or their leader unreachable)."""
    record = build_batch([(None, value, [])])
    by_leader: dict[int, dict[str, list[int]]] = {}
    failed = 0
    for t, p, info in md.partitions():
        if info.leader not in md.brokers:
            failed += 1
            continue
        by_leader.setdefault(info.leader, {}).setdefault(t, []).append(p)
    for leader, topics in by_leader.items():
        n = sum(len(ps) for ps in topics.values())
        try:
            with Conn(*md.brokers[leader]) as c:
                body = {
                    "transactional_id": None,
                    "acks": 1,
                    "timeout_ms": 30000,
                    "topic_data": [
                        {
                            "name": t,
                            "partition_data": [{"index": p, "records": record} for p in ps],
                        }
                        for t, ps in topics.items()
                    ],
                }
                _, ans = c.request(PRODUCE, body)
                ok = sum(
                    1
                    for t in ans["responses"]
                    for p in t["partition_responses"]
                    if p["error_code"] == 0
                )
                failed += n - ok
        except UNREACHABLE:
            failed += n
    return failed


# ------------------------------------------------------------------------------------------
# many raw client connections
# ------------------------------------------------------------------------------------------


class Clients:
    """``n`` raw client connections driven by one selector: each connects, sends ApiVersions
    v3 and reads its answer; ``tick`` sends one more on every connection."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.address = address
        self.sel = selectors.DefaultSelector()
        self.frame = codec.encode_request(
            API_VERSIONS,
            3,
            1,
            "w23",
            {"client_software_name": "w23", "client_software_version": "1"},
        )
        self.socks: list[socket.socket] = []
        self.pending: dict[socket.socket, int] = {}  # answers still expected
        self.buf: dict[socket.socket, bytearray] = {}
        self.answered = 0
        self.failed = 0

    def open(self, n: int, spread_s: float = 0.0) -> float:
        """Connect n more (evenly over ``spread_s``), each asking ApiVersions; seconds until
        every one of them is answered."""
        t0 = time.monotonic()
        want = self.answered + n
        for i in range(n):
            if spread_s:
                delay = t0 + spread_s * i / n - time.monotonic()
                if delay > 0:
                    self.poll(delay)
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(self.address)
            self.socks.append(s)
            self.pending[s] = 1
            self.buf[s] = bytearray()
            self.sel.register(s, selectors.EVENT_WRITE | selectors.EVENT_READ)
        while self.answered + self.failed < want and time.monotonic() - t0 < 300:
            self.poll(0.05)
        return time.monotonic() - t0

    def poll(self, timeout: float) -> None:
        for key, events in self.sel.select(timeout):
            s = key.fileobj
            if events & selectors.EVENT_WRITE:
                if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                    self.failed += 1
                    self.sel.unregister(s)
                    continue
                s.sendall(self.frame)
                self.sel.modify(s, selectors.EVENT_READ)
                continue
            try:
                data = s.recv(65536)
            except OSError:
                data = b""
            if not data:
                self.failed += 1
                self.sel.unregister(s)
                continue
            b = self.buf[s]
            b += data
            while len(b) >= 4:
                size = int.from_bytes(b[:4], "big")
                if len(b) < 4 + size:
                    break
                del b[: 4 + size]
                self.answered += 1
                self.pending[s] -= 1

    def tick(self, part: int = 0, parts: int = 1) -> None:
        """One more ApiVersions on every open connection (with ``parts``: on every
        ``parts``-th one from ``part``, so that a second's requests can be spread)."""
        for s in self.socks[part::parts]:
            if self.pending.get(s, 0) >= 0:
                try:
                    s.send(self.frame)
                    self.pending[s] += 1
                except OSError:
                    pass

    def close(self) -> None:
        for s in self.socks:
            with contextlib.suppress(OSError):
                s.close()
        self.sel.close()
