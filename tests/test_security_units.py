"""Sans-I/O pieces of pybroker/security against their specifications: SCRAM-SHA-256 against
RFC 7677's example exchange, Kafka's credential text form, the JAAS parser, the ACL rules
(Kafka's AclAuthorizer semantics), and certificate DN -> principal mapping rules."""

from __future__ import annotations

import base64

import pytest
from scram_clients import librdkafka_2_0_final

from pybroker.security import scram
from pybroker.security.acl import (
    Acls,
    Entry,
    Operation,
    PatternType,
    Permission,
    Resource,
    ResourceType,
    authorize,
    authorize_any,
)
from pybroker.security.jaas import JaasError, parse_jaas
from pybroker.security.sasl import distinguished_name, map_principal, parse_mapping_rules


def test_scram_sha_256_rfc7677_example(monkeypatch):
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    cred = scram.make_credential("SCRAM-SHA-256", "pencil", 4096, salt)
    monkeypatch.setattr(scram.secrets, "token_urlsafe", lambda n: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    server = scram.ScramServer("SCRAM-SHA-256", lambda u: cred if u == "user" else None, b"k")
    first = server.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    final = server.step(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.principal == "user"


def test_scram_client_and_server_agree_and_a_wrong_password_fails():
    for mech in scram.MECHANISMS:
        cred = scram.make_credential(mech, "s3cret")
        for password, ok in (("s3cret", True), ("nope", False)):
            server = scram.ScramServer(mech, lambda u, c=cred: c, b"k")
            client = scram.ScramClient(mech, "bob", password)
            server_first = server.step(client.first())
            final = client.final(server_first)
            if ok:
                client.check(server.step(final))
            else:
                with pytest.raises(scram.AuthenticationFailed, match="invalid credentials"):
                    server.step(final)


def test_scram_final_nonce_may_repeat_the_client_nonce_as_kafka_3_8_1_accepts():
    """Kafka 3.8.1+ (ScramSaslServer) checks only that the client-final nonce ends with the
    server-first nonce; librdkafka < 2.6.1 (Debian 12's kcat) sends its nonce twice."""
    for mech in scram.MECHANISMS:
        cred = scram.make_credential(mech, "s3cret")
        server = scram.ScramServer(mech, lambda u, c=cred: c, b"k")
        first = b"n,,n=bob,r=rdkafkaNonce0123456789"
        server_first = server.step(first)
        final = librdkafka_2_0_final(mech, "s3cret", first, server_first)
        assert final.startswith(b"c=biws,r=rdkafkaNonce0123456789rdkafkaNonce0123456789")
        assert server.step(final).startswith(b"v=")
        assert server.complete and server.principal == "bob"
        # a nonce that does not end with the server's is still refused
        server = scram.ScramServer(mech, lambda u, c=cred: c, b"k")
        server_first = server.step(first)
        bad = librdkafka_2_0_final(mech, "s3cret", first, server_first).replace(b",p=", b"x,p=", 1)
        with pytest.raises(scram.AuthenticationFailed, match="nonce mismatch"):
            server.step(bad)


def test_credentials_round_trip_kafkas_text_form():
    cred = scram.make_credential("SCRAM-SHA-512", "pw", 8192)
    text = scram.credential_to_string(cred)
    assert text.startswith("salt=") and text.endswith(",iterations=8192")
    assert scram.credential_from_string(text) == cred


def test_jaas_parsing():
    module, flag, opts = parse_jaas(
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="a b;c" user_x=y;'
    )
    assert module.endswith("PlainLoginModule") and flag == "required"
    assert opts == {"username": "admin", "password": "a b;c", "user_x": "y"}
    for bad in ("x required a=b", "x bogus a=b;", "x required a=;", 'x required a="b;'):
        with pytest.raises(JaasError):
            parse_jaas(bad)


def _acls(*bindings):
    out: dict = {}
    for r, e in bindings:
        out.setdefault(r, set()).add(e)
    return Acls({r: frozenset(es) for r, es in out.items()})


def test_acl_rules_as_kafkas_authorizer():
    t = ResourceType.TOPIC
    acls = _acls(
        (Resource(t, "orders"), Entry("User:alice", "*", Operation.READ, Permission.ALLOW)),
        (Resource(t, "logs-", PatternType.PREFIXED),
         Entry("User:*", "*", Operation.WRITE, Permission.ALLOW)),
        (Resource(t, "logs-secret"), Entry("User:bob", "*", Operation.ALL, Permission.DENY)),
        (Resource(t, "*"), Entry("User:carol", "10.0.0.1", Operation.ALL, Permission.ALLOW)),
    )  # fmt: skip

    def may(p, op, name, host="127.0.0.1", **kw):
        return authorize(acls, p, host, op, t, name, **kw)

    assert may("User:alice", Operation.READ, "orders")
    assert may("User:alice", Operation.DESCRIBE, "orders")  # READ implies DESCRIBE
    assert not may("User:alice", Operation.WRITE, "orders")
    assert may("User:bob", Operation.WRITE, "logs-app")  # prefixed, wildcard principal
    assert not may("User:bob", Operation.WRITE, "logs-secret")  # deny beats allow
    assert may("User:carol", Operation.DELETE, "anything", host="10.0.0.1")
    assert not may("User:carol", Operation.DELETE, "anything")  # another host
    assert may("User:root", Operation.DELETE, "orders", super_users=frozenset({"User:root"}))
    # the wildcard topic ACL (carol's) applies to every topic: none is without ACLs
    assert not may("User:x", Operation.READ, "other", allow_if_no_acls=True)
    g = ResourceType.GROUP
    assert not authorize(acls, "User:x", "h", Operation.READ, g, "grp")
    assert authorize(acls, "User:x", "h", Operation.READ, g, "grp", allow_if_no_acls=True)
    assert authorize_any(acls, "User:bob", "1.2.3.4", Operation.WRITE, t)
    denied_everywhere = _acls(
        (Resource(t, "a"), Entry("User:d", "*", Operation.WRITE, Permission.ALLOW)),
        (Resource(t, "*"), Entry("User:d", "*", Operation.WRITE, Permission.DENY)),
    )
    assert not authorize_any(denied_everywhere, "User:d", "h", Operation.WRITE, t)


def test_certificate_principals_and_mapping_rules():
    cert = {"subject": ((("countryName", "US"),), (("organizationName", "Acme, Inc"),),
                        (("commonName", "client1"),))}  # fmt: skip
    dn = distinguished_name(cert)
    assert dn == "CN=client1,O=Acme\\, Inc,C=US"
    rules = parse_mapping_rules("RULE:^CN=(.*?),O=(.*)$/$1/L, DEFAULT")
    assert map_principal("CN=Client1,O=x", rules) == "client1"
    assert map_principal("OU=z", rules) == "OU=z"
    assert map_principal(dn, parse_mapping_rules("DEFAULT")) == dn
    with pytest.raises(ValueError):
        parse_mapping_rules("RULE:broken")
