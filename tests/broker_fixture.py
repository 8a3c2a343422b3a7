"""A real in-process broker for protocol-level tests, and a small blocking raw client.

``BrokerHarness`` runs a ``pybroker.broker.Broker`` on its own asyncio loop (debug mode) in a
background thread, listening on a free loopback port with ``log.dirs`` under the test's tmp
dir and the embedded metadata store.  ``stop()`` is a clean stop; ``start()`` again reuses the
same port and data dir (a restart).  Tests talk to it over real TCP sockets with frames built
by ``pybroker.wire.codec.encode_request`` and parsed by ``codec.decode_response``.

Use it through a fixture defined in each test module::

    @pytest.fixture
    def start_broker(tmp_path):
        with BrokerFactory(tmp_path) as factory:
            yield factory

    def test_x(start_broker):
        b = start_broker(**{"num.partitions": "3"})
        with b.client() as c:
            body = c.request(3, 1, {"topics": None})
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from pybroker import event_loop
from pybroker.broker import Broker
from pybroker.config import build_config
from pybroker.coord.metadata import paths
from pybroker.testing.process import TEST_EVENT_LOOP
from pybroker.testing.procutil import free_port
from pybroker.testing.rawkafka import closed_by_peer
from pybroker.wire import codec
from pybroker.wire.record_walker import decode_records
from pybroker.wire.records import LOG_OVERHEAD, build_batch, unpack_header

START_TIMEOUT_S = 20.0
IO_TIMEOUT_S = 15.0

# Kafka error codes used by the tests (org.apache.kafka.common.protocol.Errors).
NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
MESSAGE_TOO_LARGE = 10
INVALID_TOPIC_EXCEPTION = 17
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_CONFIG = 40
INVALID_REQUEST = 42
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
FETCH_SESSION_ID_NOT_FOUND = 70
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
UNSUPPORTED_COMPRESSION_TYPE = 76

# API keys
PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
API_VERSIONS, CREATE_TOPICS, INIT_PRODUCER_ID = 18, 19, 22

_topic_counter = itertools.count()


# every event loop (event.loop) this machine can run, as pytest parameters
LOOPS = [
    pytest.param(
        name,
        marks=pytest.mark.skipif(not event_loop.available(name), reason=f"{name} not installed"),
    )
    for name in event_loop.LOOPS
]


def unique_topic(prefix: str = "t") -> str:
    return f"{prefix}-{next(_topic_counter)}-{uuid.uuid4().hex[:6]}"


class ConnectionClosed(Exception):
    pass


class Client:
    """Blocking Kafka client over one TCP connection: frames via the project's codec."""

    def __init__(self, host: str, port: int, client_id: str = "protocol-tests") -> None:
        self.sock = socket.create_connection((host, port), timeout=IO_TIMEOUT_S)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_id = client_id
        self._corr = itertools.count(1)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    # -- raw frames -----------------------------------------------------------------------
    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionClosed(f"peer closed after {len(buf)} of {n} bytes")
            buf += chunk
        return bytes(buf)

    def recv_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self._recv_exact(4))
        return self._recv_exact(size)

    def closed_by_peer(self, timeout: float = IO_TIMEOUT_S) -> bool:
        """True if the broker closes the connection (EOF or reset) without sending anything."""
        try:
            return closed_by_peer(self.sock, timeout)
        finally:
            self.sock.settimeout(IO_TIMEOUT_S)

    # -- codec round trips ----------------------------------------------------------------
    def send(self, api_key: int, version: int, body: dict) -> int:
        corr = next(self._corr)
        self.send_raw(codec.encode_request(api_key, version, corr, self.client_id, body))
        return corr

    def receive(self, api_key: int, version: int, corr: int) -> dict:
        got, body = codec.decode_response(api_key, version, self.recv_frame())
        assert got == corr, f"correlation id {got}, expected {corr}"
        return body

    def request(self, api_key: int, version: int, body: dict) -> dict:
        return self.receive(api_key, version, self.send(api_key, version, body))

    # -- convenience wrappers (Kafka's request shapes) ------------------------------------
    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 1,
        configs: dict[str, str] | None = None,
        version: int = 5,
    ) -> dict:
        body = self.request(
            CREATE_TOPICS,
            version,
            {
                "topics": [
                    {
                        "name": name,
                        "num_partitions": partitions,
                        "replication_factor": replication_factor,
                        "assignments": [],
                        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
                    }
                ],
                "timeout_ms": 10000,
                "validate_only": False,
            },
        )
        (result,) = body["topics"]
        assert result["error_code"] == NONE, result
        return result

    def produce(
        self,
        topic: str,
        partition: int,
        records: bytes | None,
        *,
        acks: int = -1,
        version: int = 8,
    ) -> dict:
        """One partition's Produce response (acks 1/-1)."""
        body = self.request(PRODUCE, version, produce_body(topic, partition, records, acks))
        (t,) = body["responses"]
        assert t["name"] == topic
        (p,) = t["partition_responses"]
        assert p["index"] == partition
        return p

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        version: int = 11,
        max_wait_ms: int = 0,
        min_bytes: int = 0,
        max_bytes: int = 50 * 1024 * 1024,
        partition_max_bytes: int = 10 * 1024 * 1024,
        **extra: Any,
    ) -> dict:
        """One partition's Fetch response data."""
        body = self.request(
            FETCH,
            version,
            fetch_body(
                [(topic, partition, offset, partition_max_bytes)],
                max_wait_ms=max_wait_ms,
                min_bytes=min_bytes,
                max_bytes=max_bytes,
                **extra,
            ),
        )
        assert body.get("error_code", NONE) == NONE, body  # top-level error from v7
        (t,) = body["responses"]
        (p,) = t["partitions"]
        assert p["partition_index"] == partition
        return p

    def list_offset(self, topic: str, partition: int, timestamp: int, *, version: int = 5) -> dict:
        body = self.request(
            LIST_OFFSETS,
            version,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": topic,
                        "partitions": [{"partition_index": partition, "timestamp": timestamp}],
                    }
                ],
            },
        )
        (t,) = body["topics"]
        (p,) = t["partitions"]
        assert p["partition_index"] == partition
        return p

    def metadata(self, topics: list[str] | None, *, version: int = 9, **extra: Any) -> dict:
        req_topics = None if topics is None else [{"name": n} for n in topics]
        return self.request(METADATA, version, {"topics": req_topics, **extra})

    def init_producer_id(self, version: int = 4) -> dict:
        body = self.request(
            INIT_PRODUCER_ID,
            version,
            {"transactional_id": None, "transaction_timeout_ms": 60000},
        )
        assert body["error_code"] == NONE, body
        return body


def produce_body(topic: str, partition: int, records: bytes | None, acks: int = -1) -> dict:
    return {
        "transactional_id": None,
        "acks": acks,
        "timeout_ms": 10000,
        "topic_data": [
            {"name": topic, "partition_data": [{"index": partition, "records": records}]}
        ],
    }


def fetch_body(
    partitions: list[tuple[str, int, int, int]],
    *,
    max_wait_ms: int = 0,
    min_bytes: int = 0,
    max_bytes: int = 50 * 1024 * 1024,
    **extra: Any,
) -> dict:
    """partitions: (topic, partition, fetch_offset, partition_max_bytes)."""
    current_leader_epoch = extra.pop("current_leader_epoch", -1)
    topics: dict[str, list[dict]] = {}
    for topic, partition, offset, pmax in partitions:
        topics.setdefault(topic, []).append(
            {
                "partition": partition,
                "current_leader_epoch": current_leader_epoch,
                "fetch_offset": offset,
                "log_start_offset": -1,
                "partition_max_bytes": pmax,
            }
        )
    return {
        "replica_id": -1,
        "max_wait_ms": max_wait_ms,
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
        "forgotten_topics_data": [],
        "rack_id": "",
        **extra,
    }


def split_batches(data: bytes) -> list[bytes]:
    """Whole record batches of a fetched records blob (asserting nothing partial)."""
    out = []
    pos = 0
    data = bytes(data or b"")
    while pos < len(data):
        (length,) = struct.unpack_from(">i", data, pos + 8)
        end = pos + LOG_OVERHEAD + length
        assert end <= len(data), "partial batch in a fetch response"
        out.append(data[pos:end])
        pos = end
    return out


def fetched_values(data: bytes) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record of a fetched records blob."""
    out = []
    for batch in split_batches(data):
        for r in decode_records(batch):
            out.append((r.offset, r.value))
    return out


def batch(values: list[bytes], **kw: Any) -> bytes:
    return build_batch([(None, v, []) for v in values], **kw)


def header(batch_bytes: bytes):
    return unpack_header(batch_bytes)


def wait_until(cond: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05) -> Any:
    """Poll ``cond`` until truthy (returned) or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


class BrokerHarness:
    """One broker on its own loop thread; start/stop/restart on the same dir and port."""

    def __init__(self, log_dir: Path, overrides: dict[str, Any]) -> None:
        self.host = "127.0.0.1"
        self.port = free_port()
        self.log_dir = log_dir
        self.settings = {
            "broker.id": "0",
            "listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "log.dirs": str(log_dir),
            **({"event.loop": TEST_EVENT_LOOP} if TEST_EVENT_LOOP else {}),
            **{k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in overrides.items()},
        }
        self.broker: Broker | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        self.loop_errors: list[dict] = []

    @property
    def broker_id(self) -> int:
        return int(self.settings["broker.id"])

    def start(self) -> BrokerHarness:
        assert self.broker is None, "already running"
        config = build_config(self.settings)
        name = event_loop.configured(config.event_loop, "event.loop" in config.explicit_keys)
        loop = (event_loop.loop_factory(name) or asyncio.new_event_loop)()
        loop.set_debug(True)
        loop.slow_callback_duration = 1.0  # debug mode: only report truly blocking callbacks
        loop.set_exception_handler(self._on_loop_error)
        self.loop = loop
        self.thread = threading.Thread(target=loop.run_forever, name="broker-loop", daemon=True)
        self.thread.start()
        self.broker = Broker(config)
        try:
            self.run(self.broker.start(), timeout=START_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise
        return self

    def _on_loop_error(self, loop: asyncio.AbstractEventLoop, context: dict) -> None:
        self.loop_errors.append(context)
        loop.default_exception_handler(context)

    def run(self, coro: Coroutine, timeout: float = IO_TIMEOUT_S) -> Any:
        """Run a coroutine on the broker's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        """Clean stop (as on SIGTERM); the loop thread ends."""
        if self.loop is None:
            return
        try:
            if self.broker is not None:
                self.run(self.broker.stop(), timeout=START_TIMEOUT_S)
        finally:
            self.broker = None
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            if not self.loop.is_running():
                self.loop.close()
            self.loop = None
            self.thread = None

    def restart(self) -> BrokerHarness:
        self.stop()
        return self.start()

    def client(self) -> Client:
        return Client(self.host, self.port)

    def set_leader_epoch(self, topic: str, partition: int, epoch: int) -> None:
        """Write a new leader epoch into the partition's state znode in the metadata store,
        as a controller (another broker, or an admin tool) does on a leader election."""
        path = paths.partition_state(topic, partition)
        store = self.broker.store

        async def bump() -> None:
            data, _ = await store.get(path)
            st = paths.decode_partition_state(data)
            await store.set(
                path,
                paths.encode_partition_state(
                    st["leader"], epoch, st["isr"], st["controller_epoch"]
                ),
            )

        self.run(bump())


class BrokerFactory:
    """``factory(**overrides)`` starts a broker; every broker is stopped on exit."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.brokers: list[BrokerHarness] = []

    def __call__(self, **overrides: Any) -> BrokerHarness:
        d = self.tmp_path / f"broker-{len(self.brokers)}"
        overrides.setdefault("log.retention.check.interval.ms", 300000)
        b = BrokerHarness(d, overrides)
        self.brokers.append(b)
        return b.start()

    def __enter__(self) -> BrokerFactory:
        return self

    def __exit__(self, *exc: Any) -> None:
        errors = []
        for b in self.brokers:
            try:
                b.stop()
            except Exception as e:  # keep stopping the others
                errors.append(e)
        if errors and exc[0] is None:
            raise errors[0]
        if exc[0] is None:
            for b in self.brokers:
                assert not b.loop_errors, f"errors on the broker's loop: {b.loop_errors}"
