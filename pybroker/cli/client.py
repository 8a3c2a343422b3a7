"""A small blocking Kafka client for the admin CLI, speaking only the Kafka protocol.

Frames are built and parsed by pybroker's own codec (pybroker.wire.codec), so the client works
against pybroker and any Kafka broker alike.  Contract:

* :class:`Connection`: one TCP connection, one request in flight, correlation ids checked.
  ``connect()`` negotiates versions with ApiVersions; ``request(api, body)`` sends at the
  highest version both sides support (the codec's declared range intersected with the
  broker's), or at ``version`` if given.
* :class:`Client`: bootstrap through the first reachable ``host:port`` of the list, Metadata
  for brokers and partition leaders, one cached connection per node, FindCoordinator for a
  group's coordinator.  ``leaders(topic)`` and ``coordinator(group)`` route;
  ``group_request`` retries while the coordinator moves or loads.
* Failures: :class:`KafkaCliError` carries a Kafka error code (its name is the first word of the
  message); :class:`ClientError` is anything else (unreachable broker, protocol mismatch).
"""

from __future__ import annotations

import itertools
import socket
import ssl
import time
from collections.abc import Iterator
from typing import Any

from pybroker.errors import ErrorCode
from pybroker.security.scram import AuthenticationFailed, ScramClient
from pybroker.wire import codec
from pybroker.wire.primitives import DecodeError
from pybroker.wire.schema import SCHEMAS

CLIENT_ID = "pybroker-cli"
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"

API_VERSIONS = 18
METADATA = 3
FIND_COORDINATOR = 10
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
COORDINATOR_RETRY = {
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.NOT_COORDINATOR,
}
COORDINATOR_WAIT = {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}


class ClientError(Exception):
    """Not a Kafka error code: the broker cannot be reached or speaks an unexpected protocol."""


class _Closed(Exception):
    """The broker closed the connection (EOF or reset) while a response was awaited."""


SECURITY_HINT = (
    "pass --command-config FILE or -X security.protocol=SSL|SASL_PLAINTEXT|SASL_SSL "
    "(with ssl.ca.location, sasl.mechanism, sasl.username, sasl.password; see docs/cli.md)"
)


def _is_tls_record(head: bytes) -> bool:
    """A TLS record header (alert 0x15 or handshake 0x16, version 3.x), not a Kafka size."""
    return len(head) >= 3 and head[0] in (0x15, 0x16) and head[1] == 0x03 and head[2] <= 0x04


class UsageError(Exception):
    """A command line that parses but cannot be run as given (exit code 2)."""


class KafkaCliError(Exception):
    """A Kafka error code answered by a broker, with the broker's (or our) message."""

    def __init__(self, code: int, message: str | None = None) -> None:
        self.code = code
        self.name = error_name(code)
        self.detail = message or ""
        super().__init__(f"{self.name}: {message}" if message else self.name)


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"UNKNOWN_ERROR_CODE_{code}"


def check(code: int, message: str | None = None) -> None:
    """Raise KafkaCliError unless ``code`` is 0."""
    if code:
        raise KafkaCliError(code, message)


def _error_codes(obj: Any) -> Iterator[int]:
    """Every error_code of a decoded response, at any depth."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == "error_code":
                yield v
            elif isinstance(v, (dict, list)):
                yield from _error_codes(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _error_codes(v)


def _software_version() -> str:
    """This package's version (KIP-511 wants a non-empty [a-zA-Z0-9.-] string)."""
    try:
        from importlib.metadata import version

        return version("pybroker")
    except Exception:  # not installed: any valid string will do
        return "0"


def parse_address(text: str) -> tuple[str, int]:
    """'host:port' (IPv6 as '[::1]:9092'); a bare host gets port 9092."""
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest.lstrip(":") or "9092"
    elif text.count(":") == 1:
        host, port = text.split(":")
    else:
        host, port = text, "9092"
    if not host or not port.isdigit():
        raise ValueError(f"expected host:port, got {text!r}")
    return host, int(port)


class Connection:
    """One blocking connection to one broker."""

    def __init__(
        self, host: str, port: int, *, timeout_s: float = 30.0, security: Any = None
    ) -> None:
        self.host = host
        self.port = port
        self.timeout_s = timeout_s
        self.security = security  # pybroker.cli.security.Security, or None: PLAINTEXT
        self._sock: socket.socket | None = None
        self._ids = itertools.count(1)
        self.versions: dict[int, tuple[int, int]] = {}
        self._answered: list[int] = []  # api keys answered on this connection, in order

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def connect(self) -> None:
        try:
            self._sock = socket.create_connection((self.host, self.port), timeout=self.timeout_s)
        except OSError as e:
            raise ClientError(f"cannot connect to {self.address}: {e.strerror or e}") from e
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._answered = []
        sec = self.security
        if sec is not None and sec.ssl is not None:
            try:
                self._sock = sec.ssl.wrap_socket(self._sock, server_hostname=self.host)
            except (OSError, ssl.SSLError) as e:
                self.close()
                hint = ""
                if isinstance(e, (ssl.SSLEOFError, ConnectionResetError)) or "WRONG_VERSION" in str(
                    e
                ):  # a plaintext listener reads the ClientHello as a huge frame and closes
                    hint = (
                        f"; the listener at {self.address} may not use TLS: check its port and "
                        "security.protocol (PLAINTEXT or SASL_PLAINTEXT for a plaintext listener)"
                    )
                raise ClientError(f"TLS handshake with {self.address} failed: {e}{hint}") from e
        # ApiVersions v3 (KIP-511); a broker that does not know v3 answers in v0 with
        # UNSUPPORTED_VERSION and its ranges, so ask again at v0.
        r = self._roundtrip(
            API_VERSIONS,
            3,
            {"client_software_name": CLIENT_ID, "client_software_version": _software_version()},
        )
        if r["error_code"] == ErrorCode.UNSUPPORTED_VERSION:
            r = self._roundtrip(API_VERSIONS, 0, {})
        check(r["error_code"], "ApiVersions")
        self.versions = {k["api_key"]: (k["min_version"], k["max_version"]) for k in r["api_keys"]}
        if sec is not None and sec.sasl is not None:
            self._login(*sec.sasl)

    def _login(self, mechanism: str, username: str, password: str) -> None:
        """SaslHandshake then SaslAuthenticate (KIP-152), as Kafka's clients log in."""
        _, r = self.request(SASL_HANDSHAKE, {"mechanism": mechanism})
        if r["error_code"] == ErrorCode.ILLEGAL_SASL_STATE:  # Kafka's answer on a non-SASL one
            raise KafkaCliError(
                r["error_code"],
                f"the listener at {self.address} does not use SASL: check its port and "
                "security.protocol (PLAINTEXT or SSL for a listener without SASL)",
            )
        if r["error_code"]:
            enabled = ", ".join(r.get("mechanisms") or [])
            raise KafkaCliError(
                r["error_code"], f"{mechanism} is not enabled (the broker offers: {enabled})"
            )

        def token(data: bytes) -> bytes:
            _, r = self.request(SASL_AUTHENTICATE, {"auth_bytes": data})
            check(r["error_code"], r.get("error_message"))
            return bytes(r["auth_bytes"])

        if mechanism == "PLAIN":
            token(b"\x00" + username.encode() + b"\x00" + password.encode())
            return
        client = ScramClient(mechanism, username, password)
        server_first = token(client.first())
        try:
            client.check(token(client.final(server_first)))
        except AuthenticationFailed as e:
            raise KafkaCliError(ErrorCode.SASL_AUTHENTICATION_FAILED, str(e)) from e

    def version(self, api_key: int) -> int:
        """The highest version of ``api_key`` that both the codec and the broker support."""
        ours = SCHEMAS.by_key[api_key].request.versions
        theirs = self.versions.get(api_key)
        name = SCHEMAS.by_key[api_key].name
        if theirs is None:
            raise ClientError(f"broker {self.address} does not support {name}")
        hi = min(ours.hi, theirs[1])
        if hi < max(ours.lo, theirs[0]):
            raise ClientError(
                f"no common version of {name}: broker {theirs[0]}-{theirs[1]}, "
                f"client {ours.lo}-{ours.hi}"
            )
        return hi

    def request(
        self,
        api_key: int,
        body: dict,
        *,
        version: int | None = None,
        timeout_s: float | None = None,
        expect_response: bool = True,
    ) -> tuple[int, dict]:
        """(version used, response body).  With ``expect_response=False`` (Produce acks=0)
        nothing is read and the body is empty."""
        if self._sock is None:
            self.connect()
        v = self.version(api_key) if version is None else version
        return v, self._roundtrip(api_key, v, body, timeout_s, expect_response)

    def _roundtrip(
        self,
        api_key: int,
        version: int,
        body: dict,
        timeout_s: float | None = None,
        expect_response: bool = True,
    ) -> dict:
        sock = self._sock
        assert sock is not None
        cid = next(self._ids) & 0x7FFFFFFF
        frame = codec.encode_request(api_key, version, cid, CLIENT_ID, body)
        try:
            sock.settimeout(timeout_s or self.timeout_s)
            sock.sendall(frame)
            if not expect_response:
                return {}
            head = self._read(4)
            if _is_tls_record(head) and not self._tls:
                raise ClientError(
                    f"the listener at {self.address} answered in TLS: it requires TLS; "
                    f"{SECURITY_HINT}"
                )
            size = int.from_bytes(head, "big", signed=True)
            if size < 4:
                raise ClientError(f"bad frame size {size} from {self.address}")
            data = self._read(size)
            got, response = codec.decode_response(api_key, version, data)
        except _Closed as e:
            self.close()
            raise ClientError(self._closed_message()) from e
        except (OSError, DecodeError) as e:
            self.close()
            raise ClientError(f"request to {self.address} failed: {e}") from e
        if got != cid:
            self.close()
            raise ClientError(f"{self.address} answered correlation id {got}, expected {cid}")
        self._answered.append(api_key)
        return response

    @property
    def _tls(self) -> bool:
        return self.security is not None and self.security.ssl is not None

    @property
    def _sasl(self) -> bool:
        return self.security is not None and self.security.sasl is not None

    def _closed_message(self) -> str:
        """Why the broker may have closed the connection: a TLS listener closes a plaintext
        client at its first request; a SASL listener answers ApiVersions and closes at the
        first request other than the SASL ones (as Kafka's SaslServerAuthenticator does)."""
        if not self._answered and not self._tls:
            need = "TLS or SASL"
        elif self._answered and set(self._answered) == {API_VERSIONS} and not self._sasl:
            need = "SASL"
        else:
            return f"the broker at {self.address} closed the connection"
        return (
            f"the broker closed the connection: the listener at {self.address} may require "
            f"{need}; {SECURITY_HINT}"
        )

    def _read(self, n: int) -> bytes:
        assert self._sock is not None
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self._sock.recv(min(n - len(buf), 1 << 20))
            except ConnectionResetError as e:
                raise _Closed() from e
            if not chunk:
                raise _Closed()
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


class Client:
    """Bootstrap, metadata and routing over one :class:`Connection` per broker."""

    def __init__(self, bootstrap: str, *, timeout_s: float = 30.0, security: Any = None) -> None:
        try:
            self.bootstrap = [parse_address(a) for a in bootstrap.split(",") if a.strip()]
        except ValueError as e:
            raise ClientError(f"--bootstrap-server: {e}") from e
        if not self.bootstrap:
            raise ClientError("--bootstrap-server: no address given")
        self.timeout_s = timeout_s
        self.security = security
        self.brokers: dict[int, tuple[str, int, str | None]] = {}  # id -> host, port, rack
        self._nodes: dict[int, Connection] = {}
        self._any: Connection | None = None
        self._coordinators: dict[str, int] = {}

    # -- connections --------------------------------------------------------------------------

    def any(self) -> Connection:
        """A connection to some broker: the first bootstrap address that answers, then the
        brokers the last Metadata named (the bootstrap broker may have gone)."""
        if self._any is not None:
            return self._any
        errors = []
        known = [(h, p) for h, p, _ in self.brokers.values() if (h, p) not in self.bootstrap]
        for host, port in self.bootstrap + known:
            c = Connection(host, port, timeout_s=self.timeout_s, security=self.security)
            try:
                c.connect()
            except ClientError as e:
                errors.append(str(e))
                continue
            self._any = c
            return c
        raise ClientError("; ".join(errors))

    def node(self, node_id: int) -> Connection:
        c = self._nodes.get(node_id)
        if c is None:
            if node_id not in self.brokers:
                self.metadata([])
            if node_id not in self.brokers:
                raise KafkaCliError(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {node_id} is unknown")
            host, port, _ = self.brokers[node_id]
            c = Connection(host, port, timeout_s=self.timeout_s, security=self.security)
            c.connect()
            self._nodes[node_id] = c
        return c

    def forget(self, node_id: int) -> None:
        """Drop the connection to a node (it failed); the next use connects again."""
        c = self._nodes.pop(node_id, None)
        if c is not None:
            c.close()

    def close(self) -> None:
        for c in self._nodes.values():
            c.close()
        if self._any is not None:
            self._any.close()

    # -- metadata and routing -----------------------------------------------------------------

    def metadata(self, topics: list[str] | None = None) -> dict:
        """A Metadata response (``topics=None``: every topic).  Never creates topics."""
        body = {
            "topics": None if topics is None else [{"name": t} for t in topics],
            "allow_auto_topic_creation": False,
        }
        try:
            _, r = self.any().request(METADATA, body)
        except ClientError:  # that broker went away: ask another one
            self._any = None
            _, r = self.any().request(METADATA, body)
        self.brokers = {b["node_id"]: (b["host"], b["port"], b["rack"]) for b in r["brokers"]}
        return r

    def controller(self) -> Connection:
        """A connection to the controller, which alone answers CreateTopics, DeleteTopics and
        CreatePartitions (others say NOT_CONTROLLER), as Kafka's AdminClient finds it: the
        controller id of a Metadata response."""
        r = self.metadata([])
        controller = r.get("controller_id", -1)
        if controller is None or controller < 0:
            raise KafkaCliError(ErrorCode.NOT_CONTROLLER, "the cluster has no controller now")
        return self.node(controller)

    def topic(self, name: str) -> dict:
        """The Metadata entry of one topic; UNKNOWN_TOPIC_OR_PARTITION if it does not exist."""
        r = self.metadata([name])
        (t,) = [t for t in r["topics"] if t["name"] == name] or [None]
        if t is None:
            raise KafkaCliError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}")
        if t["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise KafkaCliError(t["error_code"], f"Topic '{name}' does not exist.")
        check(t["error_code"], f"topic {name!r}")
        return t

    def leaders(self, topic: dict) -> dict[int, int]:
        """partition -> leader node id of a Metadata topic entry (leaderless partitions: a
        LEADER_NOT_AVAILABLE error)."""
        out = {}
        for p in topic["partitions"]:
            if p["leader_id"] < 0:
                raise KafkaCliError(
                    ErrorCode.LEADER_NOT_AVAILABLE,
                    f"partition {topic['name']}-{p['partition_index']} has no leader",
                )
            out[p["partition_index"]] = p["leader_id"]
        return out

    def coordinator_id(self, group: str) -> int:
        """The node id of the group's coordinator (FindCoordinator, key_type 0; cached)."""
        node = self._coordinators.get(group)
        if node is not None:
            return node
        c = self.any()
        v = c.version(FIND_COORDINATOR)
        deadline = time.monotonic() + self.timeout_s
        while True:
            _, r = c.request(
                FIND_COORDINATOR, {"key": group, "key_type": 0, "coordinator_keys": [group]}
            )
            if v >= 4:
                r = r["coordinators"][0]
            # the offsets topic is created on the first FindCoordinator of a cluster, and
            # loaded after a coordinator moves: wait for it
            if r["error_code"] not in COORDINATOR_WAIT or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        check(r["error_code"], r.get("error_message"))
        node = r["node_id"]
        if node not in self.brokers:
            self.brokers[node] = (r["host"], r["port"], None)
        self._coordinators[group] = node
        return node

    def coordinator(self, group: str) -> Connection:
        return self.node(self.coordinator_id(group))

    def group_request(self, group: str, api_key: int, body: dict) -> tuple[int, dict]:
        """A request to the group's coordinator, sent again (after finding the coordinator
        anew) while any error code in the answer says the coordinator is moving or loading,
        as Kafka's clients do."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            v, r = self.coordinator(group).request(api_key, body)
            codes = set(_error_codes(r))
            if not codes & COORDINATOR_RETRY or time.monotonic() > deadline:
                return v, r
            if ErrorCode.NOT_COORDINATOR in codes:
                self._coordinators.pop(group, None)
            time.sleep(0.2)

    def all_brokers(self) -> list[int]:
        self.metadata([])
        return sorted(self.brokers)

    def request_to(self, node_id: int, api_key: int, body: dict, **kw: Any) -> tuple[int, dict]:
        return self.node(node_id).request(api_key, body, **kw)
