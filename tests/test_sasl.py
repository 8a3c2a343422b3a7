"""SASL listeners configured with Kafka's names (pybroker/security/): PLAIN users from the
listener's JAAS entry, SCRAM-SHA-256/512 credentials in the metadata store managed with
AlterUserScramCredentials, what an unauthenticated connection may do, failed logins, bad
input, KIP-368 re-authentication.  Clients: kafka-python, and raw frames where the exchange
itself is what is checked."""

from __future__ import annotations

import socket
import struct
import time
from itertools import islice

import pytest
from broker_fixture import Client, free_port, unique_topic
from scram_clients import librdkafka_2_0_final

from pybroker.security.scram import ScramClient

METADATA, SASL_HANDSHAKE, SASL_AUTHENTICATE, API_VERSIONS = 3, 17, 36, 18
DESCRIBE_SCRAM, ALTER_SCRAM = 50, 51
NONE, UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE, SASL_AUTHENTICATION_FAILED = 0, 33, 34, 58
RESOURCE_NOT_FOUND, UNACCEPTABLE_CREDENTIAL = 91, 93

PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" '
    'user_admin="admin-secret" user_alice="alice-secret";'
)


def sasl_settings(port: int, **extra: str) -> dict[str, str]:
    return {
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
        "security.inter.broker.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        **extra,
    }


@pytest.fixture
def sasl_broker(start_broker):
    port = free_port()
    b = start_broker(**sasl_settings(port))
    b.port = port
    return b


def login(c: Client, mechanism: str, user: str, password: str, version: int = 1) -> dict:
    """SaslHandshake v1 + SaslAuthenticate; the last SaslAuthenticate answer."""
    r = c.request(SASL_HANDSHAKE, 1, {"mechanism": mechanism})
    assert r["error_code"] == NONE, r
    if mechanism == "PLAIN":
        token = b"\x00" + user.encode() + b"\x00" + password.encode()
        return c.request(SASL_AUTHENTICATE, version, {"auth_bytes": token})
    sc = ScramClient(mechanism, user, password)
    first = c.request(SASL_AUTHENTICATE, version, {"auth_bytes": sc.first()})
    if first["error_code"] != NONE:
        return first
    final = c.request(SASL_AUTHENTICATE, version, {"auth_bytes": sc.final(first["auth_bytes"])})
    if final["error_code"] == NONE:
        sc.check(final["auth_bytes"])
    return final


def add_scram(b, user: str, password: str, mechanism: str = "SCRAM-SHA-256") -> None:
    """Through the API, as kafka-configs --alter --add-config does (logged in as admin)."""
    from kafka import KafkaAdminClient
    from kafka.admin._users import UserScramCredentialUpsertion

    admin = KafkaAdminClient(
        bootstrap_servers=f"127.0.0.1:{b.port}",
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username="admin",
        sasl_plain_password="admin-secret",
    )
    try:
        got = admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion(user, mechanism, password)]
        )
        assert got == {user: None}, got
    finally:
        admin.close()


def roundtrip(port: int, **auth: object) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer

    topic = unique_topic("sasl")
    conf = {"bootstrap_servers": f"127.0.0.1:{port}", "security_protocol": "SASL_PLAINTEXT"}
    producer = KafkaProducer(max_block_ms=20000, **conf, **auth)
    try:
        producer.send(topic, b"secret").get(timeout=30)
    finally:
        producer.close()
    consumer = KafkaConsumer(
        topic, auto_offset_reset="earliest", consumer_timeout_ms=10000, **conf, **auth
    )
    try:  # the first record, not an idle consumer_timeout_ms after it
        return [m.value for m in islice(consumer, 1)]
    finally:
        consumer.close()


def test_kafka_python_plain_and_scram_logins(sasl_broker):
    b = sasl_broker
    plain = {"sasl_mechanism": "PLAIN", "sasl_plain_username": "alice"}
    assert roundtrip(b.port, **plain, sasl_plain_password="alice-secret") == [b"secret"]
    add_scram(b, "bob", "bob-secret", "SCRAM-SHA-256")
    add_scram(b, "carol", "carol-secret", "SCRAM-SHA-512")
    for mech, user in (("SCRAM-SHA-256", "bob"), ("SCRAM-SHA-512", "carol")):
        auth = {
            "sasl_mechanism": mech,
            "sasl_plain_username": user,
            "sasl_plain_password": f"{user}-secret",
        }
        assert roundtrip(b.port, **auth) == [b"secret"]


def test_scram_with_librdkafka_2_0s_repeated_client_nonce(sasl_broker):
    """librdkafka before 2.6.1 (Debian 12's kcat) sends r=<client nonce><server nonce> in its
    client-final message, the server nonce already starting with its own; Kafka 3.8.1+
    accepts a nonce that ends with the server's.  The login succeeds, requests follow."""
    b = sasl_broker
    add_scram(b, "bob", "bob-secret", "SCRAM-SHA-256")
    add_scram(b, "carol", "carol-secret", "SCRAM-SHA-512")
    for mech, user in (("SCRAM-SHA-256", "bob"), ("SCRAM-SHA-512", "carol")):
        with b.client() as c:
            assert c.request(SASL_HANDSHAKE, 1, {"mechanism": mech})["error_code"] == NONE
            first = f"n,,n={user},r=fyko+d2lbbFgONRv9qkxdawL".encode()
            r = c.request(SASL_AUTHENTICATE, 1, {"auth_bytes": first})
            assert r["error_code"] == NONE, r
            final = librdkafka_2_0_final(mech, f"{user}-secret", first, r["auth_bytes"])
            r = c.request(SASL_AUTHENTICATE, 1, {"auth_bytes": final})
            assert r["error_code"] == NONE, r
            assert bytes(r["auth_bytes"]).startswith(b"v=")
            assert c.request(METADATA, 9, {"topics": None})["brokers"][0]["port"] == b.port


def test_wrong_passwords_fail_with_kafkas_error_and_the_connection_closes(sasl_broker):
    b = sasl_broker
    add_scram(b, "bob", "bob-secret")
    for mech, user, pw in (
        ("PLAIN", "alice", "wrong"),
        ("PLAIN", "nobody", "wrong"),
        ("SCRAM-SHA-256", "bob", "wrong"),
        ("SCRAM-SHA-256", "nobody", "wrong"),
    ):
        with b.client() as c:
            r = login(c, mech, user, pw)
            assert r["error_code"] == SASL_AUTHENTICATION_FAILED, (mech, user, r)
            assert "Authentication failed" in r["error_message"]
            assert c.closed_by_peer()


def test_an_unknown_scram_user_looks_like_a_known_one_until_the_proof(sasl_broker):
    """The server-first message has the same shape (salt length, iterations) for a user
    that does not exist, and the same answers twice (no fresh random salt to compare)."""
    b = sasl_broker
    add_scram(b, "bob", "bob-secret")

    def server_first(user: str) -> dict[str, str]:
        with b.client() as c:
            assert c.request(SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"})["error_code"] == 0
            sc = ScramClient("SCRAM-SHA-256", user, "x")
            r = c.request(SASL_AUTHENTICATE, 1, {"auth_bytes": sc.first()})
            assert r["error_code"] == NONE
            return dict(p.split("=", 1) for p in bytes(r["auth_bytes"]).decode().split(","))

    known, unknown = server_first("bob"), server_first("nobody")
    assert set(known) == set(unknown) == {"r", "s", "i"}
    assert len(known["s"]) == len(unknown["s"]) and known["i"] == unknown["i"]
    assert server_first("nobody")["s"] == unknown["s"]


def test_nothing_but_the_sasl_requests_before_login(sasl_broker):
    b = sasl_broker
    with b.client() as c:
        versions = c.request(
            API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}
        )
        assert versions["error_code"] == NONE
        c.send(METADATA, 9, {"topics": None, "allow_auto_topic_creation": False})
        assert c.closed_by_peer()
    with b.client() as c:  # SaslAuthenticate with no handshake
        r = c.request(SASL_AUTHENTICATE, 1, {"auth_bytes": b"\x00a\x00b"})
        assert r["error_code"] == ILLEGAL_SASL_STATE
        assert c.closed_by_peer()
    with b.client() as c:
        r = c.request(SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
        assert r["error_code"] == UNSUPPORTED_SASL_MECHANISM
        assert r["mechanisms"] == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        assert c.closed_by_peer()
    with b.client() as c:
        assert login(c, "PLAIN", "alice", "alice-secret")["error_code"] == NONE
        assert c.request(METADATA, 9, {"topics": None})["brokers"][0]["port"] == b.port
        # a second login on the connection (no re-authentication configured)
        r = c.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        assert r["error_code"] == ILLEGAL_SASL_STATE
        assert c.closed_by_peer()


def test_handshake_v0_bare_tokens(sasl_broker):
    """Old clients: SaslHandshake v0, then the SASL tokens as bare size-prefixed frames."""
    b = sasl_broker
    add_scram(b, "bob", "bob-secret")
    with b.client() as c:
        assert c.request(SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})["error_code"] == NONE
        token = b"\x00alice\x00alice-secret"
        c.send_raw(struct.pack(">i", len(token)) + token)
        assert c.recv_frame() == b""  # PLAIN's empty server token
        assert c.request(METADATA, 9, {"topics": None})["brokers"]
    with b.client() as c:
        assert c.request(SASL_HANDSHAKE, 0, {"mechanism": "SCRAM-SHA-256"})["error_code"] == 0
        sc = ScramClient("SCRAM-SHA-256", "bob", "bob-secret")
        first = sc.first()
        c.send_raw(struct.pack(">i", len(first)) + first)
        final = sc.final(bytes(c.recv_frame()))
        c.send_raw(struct.pack(">i", len(final)) + final)
        sc.check(bytes(c.recv_frame()))
        assert c.request(METADATA, 9, {"topics": None})["brokers"]
    with b.client() as c:  # a wrong password on v0: there is no error frame, only the close
        assert c.request(SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})["error_code"] == NONE
        token = b"\x00alice\x00nope"
        c.send_raw(struct.pack(">i", len(token)) + token)
        assert c.closed_by_peer()


def test_bad_input_before_login_gets_a_close_and_others_are_served(sasl_broker):
    b = sasl_broker
    # a 100 MB token: refused at its size (sasl.server.max.receive.size), nothing read
    with b.client() as c:
        assert c.request(SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})["error_code"] == NONE
        c.send_raw(struct.pack(">i", 100 * 1024 * 1024) + b"\x00" * 4096)
        assert c.closed_by_peer()
    # a SCRAM exchange out of order: the final message first
    with b.client() as c:
        assert c.request(SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-512"})["error_code"] == 0
        r = c.request(SASL_AUTHENTICATE, 1, {"auth_bytes": b"c=biws,r=abc,p=AAAA"})
        assert r["error_code"] == SASL_AUTHENTICATION_FAILED
        assert c.closed_by_peer()
    # garbage tokens
    for junk in (b"", b"\xff\xfe", b"n,,", b"x" * 5000):
        with b.client() as c:
            assert c.request(SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"})["error_code"] == 0
            r = c.request(SASL_AUTHENTICATE, 2, {"auth_bytes": junk})
            assert r["error_code"] == SASL_AUTHENTICATION_FAILED
            assert c.closed_by_peer()
    # a client that connects and sends half a frame is left waiting; others are served
    idle = socket.create_connection(("127.0.0.1", b.port), timeout=5)
    idle.sendall(b"\x00\x00\x00\x40\x00\x11")
    with b.client() as c:
        assert login(c, "PLAIN", "alice", "alice-secret")["error_code"] == NONE
    idle.close()


def test_reauthentication_kip_368(start_broker):
    port = free_port()
    b = start_broker(**sasl_settings(port, **{"connections.max.reauth.ms": "1500"}))
    with Client("127.0.0.1", port) as c:
        r = login(c, "PLAIN", "alice", "alice-secret")
        assert r["error_code"] == NONE and 0 < r["session_lifetime_ms"] <= 1500
        # re-authenticating on the same connection, same principal: a new lifetime
        r = login(c, "PLAIN", "alice", "alice-secret")
        assert r["error_code"] == NONE and r["session_lifetime_ms"] > 0
        assert c.request(METADATA, 9, {"topics": None})["brokers"]
        time.sleep(1.6)  # the session's end passes without a re-authentication
        c.send(METADATA, 9, {"topics": None})
        assert c.closed_by_peer()
    with Client("127.0.0.1", port) as c:  # a re-authentication may not change the principal
        assert login(c, "PLAIN", "alice", "alice-secret")["error_code"] == NONE
        r = login(c, "PLAIN", "admin", "admin-secret")
        assert r["error_code"] == SASL_AUTHENTICATION_FAILED
        assert c.closed_by_peer()
    assert b.broker is not None


def test_scram_credentials_api(sasl_broker):
    b = sasl_broker
    with b.client() as c:
        assert login(c, "PLAIN", "admin", "admin-secret")["error_code"] == NONE
        import hashlib

        salted = hashlib.pbkdf2_hmac("sha512", b"pw", b"salt", 8192)
        r = c.request(
            ALTER_SCRAM,
            0,
            {
                "deletions": [{"name": "dave", "mechanism": 1}],
                "upsertions": [
                    {"name": "erin", "mechanism": 2, "iterations": 8192, "salt": b"salt",
                     "salted_password": salted},
                    {"name": "frank", "mechanism": 1, "iterations": 100, "salt": b"s",
                     "salted_password": b"x"},
                ],
            },
        )  # fmt: skip
        codes = {x["user"]: x["error_code"] for x in r["results"]}
        assert codes == {"dave": RESOURCE_NOT_FOUND, "erin": NONE, "frank": UNACCEPTABLE_CREDENTIAL}
        d = c.request(DESCRIBE_SCRAM, 0, {"users": [{"name": "erin"}, {"name": "frank"}]})
        got = {x["user"]: (x["error_code"], x["credential_infos"]) for x in d["results"]}
        assert got == {
            "erin": (NONE, [{"mechanism": 2, "iterations": 8192}]),
            "frank": (RESOURCE_NOT_FOUND, []),
        }
    with b.client() as c:  # erin logs in with the password behind the salted one
        assert login(c, "SCRAM-SHA-512", "erin", "pw")["error_code"] == NONE
