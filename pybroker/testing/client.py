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

import itertools
import socket
import struct
import time
from dataclasses import dataclass
from typing import Any

from pybroker.wire import codec
from pybroker.wire.schema import SCHEMAS

API_VERSIONS, METADATA, CREATE_TOPICS, DELETE_TOPICS = 18, 3, 19, 20
IO_TIMEOUT_S = 15.0

# the Kafka error codes this client names (org.apache.kafka.common.protocol.Errors)
ERROR_NAMES = {
    3: "UNKNOWN_TOPIC_OR_PARTITION",
    5: "LEADER_NOT_AVAILABLE",
    7: "REQUEST_TIMED_OUT",
    17: "INVALID_TOPIC_EXCEPTION",
    29: "TOPIC_AUTHORIZATION_FAILED",
    31: "CLUSTER_AUTHORIZATION_FAILED",
    35: "UNSUPPORTED_VERSION",
    36: "TOPIC_ALREADY_EXISTS",
    37: "INVALID_PARTITIONS",
    38: "INVALID_REPLICATION_FACTOR",
    39: "INVALID_REPLICA_ASSIGNMENT",
    40: "INVALID_CONFIG",
    41: "NOT_CONTROLLER",
    42: "INVALID_REQUEST",
    44: "POLICY_VIOLATION",
    73: "TOPIC_DELETION_DISABLED",
}
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_CONTROLLER = 41


class KafkaError(Exception):
    """A Kafka error code in an answer: ``code``, ``name`` and the broker's message."""

    def __init__(self, code: int, what: str, message: str | None = None) -> None:
        self.code = code
        self.name = ERROR_NAMES.get(code, f"error {code}")
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


class Connection:
    """One blocking TCP connection to one broker; requests at negotiated versions."""

    def __init__(
        self, host: str, port: int, timeout: float = IO_TIMEOUT_S, client_id: str = "pytest"
    ) -> None:
        self.host, self.port = host, port
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_id = client_id
        self._corr = itertools.count(1)
        self._versions: dict[int, int] | None = None

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError(f"{self.host}:{self.port} closed the connection")
            buf += chunk
        return bytes(buf)

    def request(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        corr = next(self._corr)
        self.sock.sendall(codec.encode_request(api_key, version, corr, self.client_id, body))
        (size,) = struct.unpack(">i", self._recv_exact(4))
        got, answer = codec.decode_response(api_key, version, self._recv_exact(size))
        if got != corr:
            raise ConnectionError(f"correlation id {got} in the answer to {corr}")
        return answer

    def api_versions(self) -> dict[int, tuple[int, int]]:
        """{api key: (min, max)} from an ApiVersions v0 round trip."""
        answer = self.request(API_VERSIONS, 0, {})
        if answer["error_code"]:
            raise KafkaError(answer["error_code"], "ApiVersions")
        return {a["api_key"]: (a["min_version"], a["max_version"]) for a in answer["api_keys"]}

    def version(self, api_key: int) -> int:
        """The highest version of api_key both sides support."""
        if self._versions is None:
            ours = {k: a.request.versions for k, a in SCHEMAS.by_key.items()}
            self._versions = {}
            for key, (lo, hi) in self.api_versions().items():
                if key in ours:
                    top = min(hi, ours[key].hi)
                    if top >= max(lo, ours[key].lo):
                        self._versions[key] = top
        if api_key not in self._versions:
            raise KafkaError(35, f"api key {api_key} on {self.host}:{self.port}")
        return self._versions[api_key]

    def metadata(self, topics: list[str] | None = None) -> Metadata:
        v = self.version(METADATA)
        body: dict[str, Any] = {"allow_auto_topic_creation": False}
        if topics is None:
            body["topics"] = None if v >= 1 else []
        else:
            body["topics"] = [{"name": t} for t in topics]
        answer = self.request(METADATA, v, body)
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
            except (OSError, ConnectionError) as e:
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
            answer = conn.request(api_key, conn.version(api_key), make_body(conn.version(api_key)))
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
        body = {
            "topics": [
                {
                    "name": name,
                    "num_partitions": partitions,
                    "replication_factor": replication_factor,
                    "assignments": [],
                    "configs": [{"name": k, "value": str(v)} for k, v in (configs or {}).items()],
                }
            ],
            "timeout_ms": int(timeout * 1000),
            "validate_only": False,
        }
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
        except (OSError, ConnectionError):
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
        with Connection(host, port, timeout) as c:
            c.api_versions()
            md = c.metadata([])
        return md.controller_id in md.brokers
    except Exception:  # refused, reset, no controller yet, an answer the codec cannot decode
        return False
