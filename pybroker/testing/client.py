"""A small blocking admin client over the Kafka protocol, built on pybroker's own codec.

It is what the pytest plugin uses to check that a broker is ready and to create and delete
test topics, against a pybroker or any Kafka broker (no client library needed)::

    with AdminClient("127.0.0.1:9092") as admin:
        admin.metadata()                                   # brokers, controller, topics
        admin.create_topic("orders", partitions=3, configs={"cleanup.policy": "compact"})
        admin.delete_topic("orders")

Versions are negotiated: each request goes at the highest version both the broker
(ApiVersions) and pybroker's declarations support.  CreateTopics and DeleteTopics go to the
controller named by Metadata, as Kafka requires.  ``create_topic`` returns once every broker
in the cluster reports a leader for each partition, so any client can use the topic at once.
A Kafka error code is raised as :class:`KafkaError` with Kafka's name and message.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pybroker.cli.client import ClientError, error_name
from pybroker.cli.client import Connection as WireConnection
from pybroker.wire.legacy_records import LegacyMessage, parse_message_set

METADATA, CREATE_TOPICS, DELETE_TOPICS = 3, 19, 20
IO_TIMEOUT_S = 15.0
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_CONTROLLER = 41
# a broker that cannot be reached or answers nonsense
UNREACHABLE = (OSError, ConnectionError, ClientError)


class KafkaError(Exception):
    """A Kafka error code in an answer: ``code``, ``name`` and the broker's message."""

    def __init__(self, code: int, what: str, message: str | None = None) -> None:
        self.code = code
        self.name = error_name(code)
        detail = f": {message}" if message else ""
        super().__init__(f"{what}: {self.name} ({code}){detail}")


@dataclass(frozen=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class Metadata:
    """What a Metadata request answered: brokers by id, the controller, and per topic its
    error code and {partition: leader id} (-1: no leader)."""

    brokers: dict[int, BrokerInfo]
    controller_id: int
    cluster_id: str | None
    topics: dict[str, tuple[int, dict[int, int]]]


def parse_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    """ "host:port,host:port" -> [(host, port), ...]."""
    out = []
    for item in bootstrap.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"expected HOST:PORT, got {item!r}")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError(f"no HOST:PORT in {bootstrap!r}")
    return out


class Connection(WireConnection):
    """The CLI's blocking connection (pybroker/cli/client.py: ApiVersions negotiation, one
    request at a time), connected at once, with Metadata as the plugin reads it."""

    def __init__(self, host: str, port: int, timeout: float = IO_TIMEOUT_S) -> None:
        super().__init__(host, port, timeout_s=timeout)
        self.connect()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def metadata(self, topics: list[str] | None = None) -> Metadata:
        v = self.version(METADATA)
        body: dict[str, Any] = {"allow_auto_topic_creation": False}
        if topics is None:
            body["topics"] = None if v >= 1 else []
        else:
            body["topics"] = [{"name": t} for t in topics]
        _, answer = self.request(METADATA, body, version=v)
        brokers = {
            b["node_id"]: BrokerInfo(b["node_id"], b["host"], b["port"]) for b in answer["brokers"]
        }
        found = {
            t["name"]: (
                t["error_code"],
                {p["partition_index"]: p["leader_id"] for p in t["partitions"]},
            )
            for t in answer["topics"]
        }
        return Metadata(brokers, answer.get("controller_id", -1), answer.get("cluster_id"), found)


class AdminClient:
    """Topic administration against a bootstrap list (see the module docstring)."""

    def __init__(self, bootstrap_servers: str, timeout: float = IO_TIMEOUT_S) -> None:
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.timeout = timeout
        self._conns: dict[tuple[str, int], Connection] = {}

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for c in self._conns.values():
            c.close()
        self._conns.clear()

    def _conn(self, host: str, port: int) -> Connection:
        c = self._conns.get((host, port))
        if c is None:
            c = self._conns[(host, port)] = Connection(host, port, self.timeout)
        return c

    def _drop(self, host: str, port: int) -> None:
        c = self._conns.pop((host, port), None)
        if c is not None:
            c.close()

    def metadata(self, topics: list[str] | None = None) -> Metadata:
        """Metadata from the first bootstrap broker that answers."""
        last: Exception | None = None
        for host, port in self.bootstrap:
            try:
                return self._conn(host, port).metadata(topics)
            except UNREACHABLE as e:
                self._drop(host, port)
                last = e
        raise ConnectionError(f"no bootstrap broker answered Metadata: {last}")

    def _to_controller(self, api_key: int, make_body: Any, deadline: float) -> dict[str, Any]:
        """Send to the controller; on NOT_CONTROLLER (it moved) ask Metadata again."""
        while True:
            md = self.metadata([])
            controller = md.brokers.get(md.controller_id)
            if controller is None:  # no controller elected yet
                if time.monotonic() > deadline:
                    raise ConnectionError(f"no controller in {md}")
                time.sleep(0.05)
                continue
            conn = self._conn(controller.host, controller.port)
            v = conn.version(api_key)
            _, answer = conn.request(api_key, make_body(v), version=v)
            codes = [r["error_code"] for r in answer.get("topics", answer.get("responses", []))]
            if NOT_CONTROLLER in codes and time.monotonic() < deadline:
                time.sleep(0.05)
                continue
            return answer

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 1,
        configs: dict[str, str] | None = None,
        timeout: float = 30.0,
    ) -> None:
        """CreateTopics, then wait until every broker knows a leader for each partition."""
        deadline = time.monotonic() + timeout
        body = create_topics_body(
            name, partitions, replication_factor, configs, timeout_ms=int(timeout * 1000)
        )
        answer = self._to_controller(CREATE_TOPICS, lambda _v: body, deadline)
        (result,) = answer["topics"]
        if result["error_code"]:
            raise KafkaError(
                result["error_code"], f"CreateTopics {name!r}", result.get("error_message")
            )
        self.wait_for_leaders(name, partitions, deadline)

    def wait_for_leaders(self, name: str, partitions: int, deadline: float) -> None:
        """Until each broker in the cluster answers Metadata with a leader for every
        partition of the topic."""
        while True:
            md = self.metadata([name])
            pending = [
                b.address for b in md.brokers.values() if not self._knows(b, name, partitions)
            ]
            if not pending:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {name!r} has no leader yet on brokers {pending}")
            time.sleep(0.02)

    def _knows(self, broker: BrokerInfo, name: str, partitions: int) -> bool:
        try:
            md = self._conn(broker.host, broker.port).metadata([name])
        except UNREACHABLE:
            self._drop(broker.host, broker.port)
            return False
        error, leaders = md.topics.get(name, (UNKNOWN_TOPIC_OR_PARTITION, {}))
        return error == 0 and len(leaders) == partitions and all(x >= 0 for x in leaders.values())

    def delete_topic(self, name: str, timeout: float = 30.0, missing_ok: bool = True) -> None:
        """DeleteTopics; a topic that no longer exists is fine when missing_ok."""

        def body(version: int) -> dict[str, Any]:
            if version >= 6:
                return {"topics": [{"name": name}], "timeout_ms": int(timeout * 1000)}
            return {"topic_names": [name], "timeout_ms": int(timeout * 1000)}

        answer = self._to_controller(DELETE_TOPICS, body, time.monotonic() + timeout)
        (result,) = answer["responses"]
        code = result["error_code"]
        if code and not (missing_ok and code == UNKNOWN_TOPIC_OR_PARTITION):
            raise KafkaError(code, f"DeleteTopics {name!r}", result.get("error_message"))


def broker_ready(host: str, port: int, timeout: float = 2.0) -> bool:
    """True once host:port answers ApiVersions and a Metadata naming a live controller."""
    try:
        with Connection(host, port, timeout) as c:  # (connecting asks ApiVersions)
            md = c.metadata([])
        return md.controller_id in md.brokers
    except Exception:  # refused, reset, no controller yet, an answer the codec cannot decode
        return False


def whole_messages(data: bytes) -> Iterator[LegacyMessage]:
    """The (outer) messages of a v0/v1 message set as an old client reads them: whole entries
    only, a partial one at the end skipped."""
    pos = 0
    while len(data) - pos >= 12:
        _, size = struct.unpack_from(">qi", data, pos)
        if size < 0 or pos + 12 + size > len(data):
            break
        yield from parse_message_set(data[pos : pos + 12 + size])
        pos += 12 + size


def create_topics_body(
    name: str,
    partitions: int = 1,
    replication_factor: int = 1,
    configs: dict[str, Any] | None = None,
    *,
    timeout_ms: int = 30000,
) -> dict:
    """A CreateTopics request body for one topic (config values as strings, None kept)."""
    return {
        "topics": [
            {
                "name": name,
                "num_partitions": partitions,
                "replication_factor": replication_factor,
                "assignments": [],
                "configs": [
                    {"name": k, "value": None if v is None else str(v)}
                    for k, v in (configs or {}).items()
                ],
            }
        ],
        "timeout_ms": timeout_ms,
        "validate_only": False,
    }
