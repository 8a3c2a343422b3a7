"""SSL listeners configured with Kafka's names (pybroker/security/tls.py): clients connect with TLS
(server-authenticated or mutual), a PLAINTEXT listener of the same broker keeps working, and
what cannot be served (other store types, Kerberos, a missing key) stops
the broker at start naming the key."""

from __future__ import annotations

import socket
import ssl

import pytest
from broker_fixture import free_port, unique_topic
from tls_certs import make_certs

from pybroker.config import ConfigError, build_config
from pybroker.security.listeners import inter_broker_ssl_context


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


def ssl_settings(certs, plain: int, secure: int, **extra: str) -> dict[str, str]:
    return {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{secure}",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs.server),
        **extra,
    }


def roundtrip(bootstrap: str, **tls: object) -> list[bytes]:
    """kafka-python: produce one record and read it back over ``bootstrap``."""
    from kafka import KafkaConsumer, KafkaProducer

    topic = unique_topic("tls")
    producer = KafkaProducer(bootstrap_servers=bootstrap, max_block_ms=20000, **tls)
    try:
        producer.send(topic, b"secret").get(timeout=30)
    finally:
        producer.close()
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=10000,
        **tls,
    )
    try:
        for m in consumer:  # (ends after 10 s without a record)
            return [m.value]
        return []
    finally:
        consumer.close()


def test_kafka_python_over_ssl_and_plaintext_side_by_side(start_broker, certs):
    plain, secure = free_port(), free_port()
    start_broker(**ssl_settings(certs, plain, secure))
    tls = {"security_protocol": "SSL", "ssl_cafile": str(certs.ca)}
    assert roundtrip(f"localhost:{secure}", **tls) == [b"secret"]
    assert roundtrip(f"127.0.0.1:{plain}") == [b"secret"]


def test_the_ssl_listener_speaks_only_tls(start_broker, certs):
    """A plaintext Kafka request to the SSL port gets no Kafka answer (the TLS layer fails),
    and a client that does not trust the broker's CA fails its handshake."""
    plain, secure = free_port(), free_port()
    start_broker(**ssl_settings(certs, plain, secure))
    with socket.create_connection(("127.0.0.1", secure), timeout=10) as s:
        s.sendall(bytes.fromhex("0000000a00120000000000010000"))  # ApiVersions v0
        got = b""
        try:
            while chunk := s.recv(4096):
                got += chunk
        except OSError:
            pass
    assert not got.startswith(b"\x00\x00\x00")  # no Kafka frame back
    wrong = ssl.create_default_context(cafile=str(certs.other_ca))
    with socket.create_connection(("127.0.0.1", secure), timeout=10) as raw:
        with pytest.raises(ssl.SSLCertVerificationError):
            wrong.wrap_socket(raw, server_hostname="localhost")


def test_confluent_kafka_over_ssl(start_broker, certs):
    from confluent_kafka import Consumer, Producer

    plain, secure = free_port(), free_port()
    start_broker(**ssl_settings(certs, plain, secure))
    conf = {
        "bootstrap.servers": f"localhost:{secure}",
        "security.protocol": "SSL",
        "ssl.ca.location": str(certs.ca),
    }
    topic = unique_topic("tls-rdkafka")
    errors: list = []
    p = Producer(conf)
    p.produce(topic, b"via librdkafka", on_delivery=lambda e, m: errors.append(e))
    assert p.flush(30) == 0 and errors == [None]
    c = Consumer({**conf, "group.id": unique_topic("g"), "auto.offset.reset": "earliest"})
    try:
        c.subscribe([topic])
        got = None
        for _ in range(60):
            msg = c.poll(0.5)
            if msg is not None and msg.error() is None:
                got = msg.value()
                break
        assert got == b"via librdkafka"
    finally:
        c.close()


def test_mutual_tls_required(start_broker, certs):
    plain, secure = free_port(), free_port()
    start_broker(
        **ssl_settings(
            certs,
            plain,
            secure,
            **{
                "ssl.client.auth": "required",
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(certs.ca),
            },
        )
    )
    mutual = {
        "security_protocol": "SSL",
        "ssl_cafile": str(certs.ca),
        "ssl_certfile": str(certs.client_cert),
        "ssl_keyfile": str(certs.client_key),
    }
    assert roundtrip(f"localhost:{secure}", **mutual) == [b"secret"]
    # without a client certificate the handshake is refused
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    with socket.create_connection(("127.0.0.1", secure), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            with pytest.raises((ssl.SSLError, ConnectionError)):
                s.sendall(bytes.fromhex("0000000a00120000000000010000"))
                assert s.recv(4) == b""  # TLS 1.3: the refusal arrives with the first read
                raise ConnectionError("closed")


def test_a_per_listener_inline_pem_key_store(start_broker, certs):
    """listener.name.<name>.ssl.* overrides ssl.*; the key and chain may be given as text."""
    plain, secure = free_port(), free_port()
    start_broker(
        **{
            "listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{secure}",
            "ssl.keystore.type": "JKS",  # overridden for the listener
            "listener.name.ssl.ssl.keystore.type": "PEM",
            "listener.name.ssl.ssl.keystore.key": certs.server_key,
            "listener.name.ssl.ssl.keystore.certificate.chain": certs.server_chain,
        }
    )
    tls = {"security_protocol": "SSL", "ssl_cafile": str(certs.ca)}
    assert roundtrip(f"localhost:{secure}", **tls) == [b"secret"]


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ({"ssl.keystore.type": "JKS"}, "ssl.keystore.type"),
        ({"ssl.keystore.location": "/nonexistent.pem"}, "ssl.keystore.location"),
        ({"ssl.client.auth": "required"}, "ssl.client.auth"),  # no trust store
        ({"ssl.enabled.protocols": "TLSv1.4"}, "ssl.enabled.protocols"),
        ({"ssl.cipher.suites": "NO-SUCH-CIPHER"}, "ssl.cipher.suites"),
    ],
)
def test_bad_ssl_settings_stop_the_broker_naming_the_key(certs, extra, key):
    settings = ssl_settings(certs, 9092, 9093, **extra)
    with pytest.raises(ConfigError, match=f"'{key}'"):
        build_config(settings)


def test_what_is_not_served_yet_is_still_refused(certs):
    base = ssl_settings(certs, 9092, 9093)
    with pytest.raises(ConfigError, match="'sasl.enabled.mechanisms'"):
        build_config({**base, "listeners": "SASL_SSL://127.0.0.1:9094"})
    with pytest.raises(ConfigError, match="'security.inter.broker.protocol'"):
        build_config({**base, "security.inter.broker.protocol": "SASL_SSL"})
    cfg = build_config(base)
    assert cfg.ssl_listeners == ["SSL"]
    assert not [w for w in cfg.warnings if "ssl." in w]  # the ssl.* keys are in use


def test_garbage_handshakes_are_closed_and_others_are_served(start_broker, certs):
    """Bad input on an SSL listener: random bytes, a truncated ClientHello and a client that
    connects and says nothing get closed connections; meanwhile a TLS client is served and the
    broker's loop reports no error."""
    import os

    plain, secure = free_port(), free_port()
    b = start_broker(**ssl_settings(certs, plain, secure))
    idle = socket.create_connection(("127.0.0.1", secure), timeout=10)  # half-open: silent
    try:
        for payload in (os.urandom(4096), bytes.fromhex("160301020001")):  # noise; cut hello
            with socket.create_connection(("127.0.0.1", secure), timeout=10) as s:
                s.sendall(payload)
                s.shutdown(socket.SHUT_WR)
                try:
                    while s.recv(4096):
                        pass
                except OSError:
                    pass  # reset: closed either way
        tls = {"security_protocol": "SSL", "ssl_cafile": str(certs.ca)}
        assert roundtrip(f"localhost:{secure}", **tls) == [b"secret"]
    finally:
        idle.close()
    assert not b.loop_errors, b.loop_errors


def test_an_ssl_inter_broker_listener_checks_its_peers(certs):
    """Replication over an SSL inter-broker listener: the client side trusts the
    ssl.truststore.* CAs and checks host names unless ssl.endpoint.identification.algorithm
    is empty (Kafka's names)."""
    base = {
        **ssl_settings(certs, 9092, 9093),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs.ca),
        "inter.broker.listener.name": "SSL",
    }
    ctx = inter_broker_ssl_context(build_config(base))
    assert ctx.check_hostname and ctx.verify_mode == ssl.CERT_REQUIRED
    off = build_config({**base, "ssl.endpoint.identification.algorithm": ""})
    assert not inter_broker_ssl_context(off).check_hostname
    with pytest.raises(ConfigError, match="'ssl.endpoint.identification.algorithm'"):
        build_config({**base, "ssl.endpoint.identification.algorithm": "ldap"})
    assert inter_broker_ssl_context(build_config(ssl_settings(certs, 9092, 9093))) is None
