"""ACL authorization (authorizer.class.name = kafka.security.authorizer.AclAuthorizer) as a Kafka
user sees it: ACLs made with CreateAcls by an admin (super.users), stored at Kafka's ZooKeeper
paths in Kafka's JSON, and every API answering the *_AUTHORIZATION_FAILED codes Kafka answers.
Principals come from SASL/PLAIN logins (tests/test_sasl.py)."""

from __future__ import annotations

import json
import time
from itertools import islice

import pytest
from broker_fixture import Client, free_port, unique_topic
from test_sasl import PLAIN_JAAS, login, sasl_settings

from pybroker.wire.records import build_batch

PRODUCE, FETCH, METADATA, INIT_PRODUCER_ID, CREATE_TOPICS = 0, 1, 3, 22, 19
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS, FIND_COORDINATOR, OFFSET_COMMIT = 29, 30, 31, 10, 8
NONE, TOPIC_AUTH, GROUP_AUTH, CLUSTER_AUTH, TXN_AUTH = 0, 29, 30, 31, 53
UNKNOWN_TOPIC = 3
OFFSET_FETCH = 9
# ACL codes: resource TOPIC 2, GROUP 3, CLUSTER 4, TRANSACTIONAL_ID 5; pattern LITERAL 3,
# PREFIXED 4; operation ALL 2, READ 3, WRITE 4, CREATE 5, DESCRIBE 8, IDEMPOTENT_WRITE 12;
# permission DENY 2, ALLOW 3
TOPIC, GROUP, CLUSTER, TXN = 2, 3, 4, 5
LITERAL, PREFIXED = 3, 4
ALL, READ, WRITE, CREATE, DESCRIBE = 2, 3, 4, 5, 8
DENY, ALLOW = 2, 3

USERS_JAAS = PLAIN_JAAS.replace(";", ' user_bob="bob-secret";')


@pytest.fixture
def secured(start_broker):
    port = free_port()
    settings = sasl_settings(
        port,
        **{
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:admin",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": USERS_JAAS,
        },
    )
    b = start_broker(**settings)
    b.port = port
    return b


def as_user(b, user: str) -> Client:
    c = Client("127.0.0.1", b.port)
    assert login(c, "PLAIN", user, f"{user}-secret")["error_code"] == NONE
    return c


def acl(rtype, name, principal, op, perm=ALLOW, pattern=LITERAL, host="*") -> dict:
    return {
        "resource_type": rtype,
        "resource_name": name,
        "resource_pattern_type": pattern,
        "principal": principal,
        "host": host,
        "operation": op,
        "permission_type": perm,
    }


def create_acls(c: Client, *acls: dict) -> list[int]:
    r = c.request(CREATE_ACLS, 3, {"creations": list(acls)})
    return [x["error_code"] for x in r["results"]]


def create_topic(c: Client, name: str) -> int:
    r = c.request(
        CREATE_TOPICS,
        5,
        {
            "topics": [
                {"name": name, "num_partitions": 1, "replication_factor": 1,
                 "assignments": [], "configs": []}
            ],
            "timeout_ms": 10000,
            "validate_only": False,
        },
    )  # fmt: skip
    return r["topics"][0]["error_code"]


def produce(c: Client, topic: str, **extra) -> int:
    r = c.request(
        PRODUCE,
        8,
        {
            "transactional_id": None,
            "acks": -1,
            "timeout_ms": 10000,
            "topic_data": [
                {
                    "name": topic,
                    "partition_data": [
                        {"index": 0, "records": build_batch([(None, b"v", [])], **extra)}
                    ],
                }
            ],
        },
    )
    return r["responses"][0]["partition_responses"][0]["error_code"]


def metadata_topics(c: Client, topics=None) -> dict[str, int]:
    req = {"topics": None if topics is None else [{"name": t} for t in topics]}
    r = c.request(METADATA, 9, {**req, "allow_auto_topic_creation": False})
    return {t["name"]: t["error_code"] for t in r["topics"]}


def test_a_user_without_acls_sees_and_touches_nothing(secured):
    with as_user(secured, "admin") as admin:
        topic = unique_topic("acl")
        assert create_topic(admin, topic) == NONE
        assert produce(admin, topic) == NONE  # super user: no ACL needed
    with as_user(secured, "alice") as alice:
        assert topic not in metadata_topics(alice)
        assert metadata_topics(alice, [topic]) == {topic: TOPIC_AUTH}
        # a topic that does not exist answers the same: its existence is not revealed
        assert metadata_topics(alice, ["no-such-topic-acl"]) == {"no-such-topic-acl": TOPIC_AUTH}
        assert produce(alice, topic) == TOPIC_AUTH
        assert create_topic(alice, unique_topic("acl")) == TOPIC_AUTH
        assert create_acls(alice, acl(TOPIC, topic, "User:alice", READ)) == [CLUSTER_AUTH]
        r = alice.request(FIND_COORDINATOR, 3, {"key": "g", "key_type": 0})
        assert r["error_code"] == GROUP_AUTH
        r = alice.request(INIT_PRODUCER_ID, 4, {"transactional_id": None,
                                                "transaction_timeout_ms": 60000})  # fmt: skip
        assert r["error_code"] == CLUSTER_AUTH  # no IDEMPOTENT_WRITE, no WRITE anywhere
        r = alice.request(INIT_PRODUCER_ID, 4, {"transactional_id": "tx",
                                                "transaction_timeout_ms": 60000})  # fmt: skip
        assert r["error_code"] == TXN_AUTH


def test_read_on_a_topic_and_its_group_lets_a_user_consume_not_produce(secured):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    topic, group = unique_topic("acl"), unique_topic("grp")
    with as_user(secured, "admin") as admin:
        assert create_topic(admin, topic) == NONE
        assert create_topic(admin, unique_topic("hidden")) == NONE
        assert produce(admin, topic) == NONE
        assert create_acls(
            admin, acl(TOPIC, topic, "User:alice", READ), acl(GROUP, group, "User:alice", READ)
        ) == [NONE, NONE]
    auth = {
        "bootstrap_servers": f"127.0.0.1:{secured.port}",
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "alice",
        "sasl_plain_password": "alice-secret",
    }
    consumer = KafkaConsumer(
        topic, group_id=group, auto_offset_reset="earliest", consumer_timeout_ms=30000, **auth
    )
    try:
        assert [m.value for m in islice(consumer, 1)] == [b"v"]  # (islice: no idle wait after it)
        consumer.commit()
    finally:
        consumer.close()
    with as_user(secured, "alice") as alice:
        assert set(metadata_topics(alice)) == {topic}  # only what alice may describe
        assert produce(alice, topic) == TOPIC_AUTH
    producer = KafkaProducer(max_block_ms=10000, enable_idempotence=False, **auth)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send(topic, b"nope").get(timeout=20)
    finally:
        producer.close()


def test_prefixed_acls_deny_beats_allow_and_the_wildcard_principal(secured):
    with as_user(secured, "admin") as admin:
        for t in ("logs-a", "logs-b", "other-x"):
            create_topic(admin, t)
        assert create_acls(
            admin,
            acl(TOPIC, "logs-", "User:alice", WRITE, pattern=PREFIXED),
            acl(TOPIC, "logs-b", "User:*", WRITE),
            acl(TOPIC, "logs-b", "User:alice", WRITE, perm=DENY),
        ) == [NONE, NONE, NONE]
    with as_user(secured, "alice") as alice:
        assert produce(alice, "logs-a") == NONE
        assert produce(alice, "logs-b") == TOPIC_AUTH  # the DENY wins
        assert produce(alice, "other-x") == TOPIC_AUTH
        # WRITE implies DESCRIBE: alice sees the logs- topics
        assert set(metadata_topics(alice)) == {"logs-a", "logs-b"}
        # KIP-679: WRITE on a topic is enough for an idempotent producer id
        r = alice.request(INIT_PRODUCER_ID, 4, {"transactional_id": None,
                                                "transaction_timeout_ms": 60000})  # fmt: skip
        assert r["error_code"] == NONE
    with as_user(secured, "bob") as bob:
        assert produce(bob, "logs-b") == NONE  # User:* allows bob
        assert produce(bob, "logs-a") == TOPIC_AUTH


def test_acls_are_stored_as_kafka_stores_them_and_can_be_described_and_deleted(secured):
    with as_user(secured, "admin") as admin:
        assert create_acls(
            admin,
            acl(TOPIC, "orders", "User:alice", READ),
            acl(TOPIC, "orders-", "User:bob", WRITE, pattern=PREFIXED),
            acl(CLUSTER, "kafka-cluster", "User:bob", CREATE),
        ) == [NONE, NONE, NONE]
        # invalid ones get INVALID_REQUEST (42)
        assert create_acls(
            admin, acl(CLUSTER, "not-the-cluster", "User:bob", CREATE),
            acl(GROUP, "g", "User:bob", WRITE), acl(TOPIC, "t", "alice", READ),
        ) == [42, 42, 42]  # fmt: skip

        async def node(path):
            data, _ = await secured.broker.store.get(path)
            return json.loads(data)

        literal = secured.run(node("/kafka-acl/Topic/orders"))
        assert literal == {
            "version": 1,
            "acls": [{"principal": "User:alice", "permissionType": "Allow",
                      "operation": "Read", "host": "*"}],
        }  # fmt: skip
        prefixed = secured.run(node("/kafka-acl-extended/prefixed/Topic/orders-"))
        assert prefixed["acls"][0]["operation"] == "Write"
        assert secured.run(secured.broker.store.get_children("/kafka-acl-changes"))

        everything = {
            "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
            "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1,
        }  # fmt: skip
        r = admin.request(DESCRIBE_ACLS, 3, everything)
        got = {(x["resource_type"], x["resource_name"], x["pattern_type"]) for x in r["resources"]}
        assert got == {(TOPIC, "orders", LITERAL), (TOPIC, "orders-", PREFIXED),
                       (CLUSTER, "kafka-cluster", LITERAL)}  # fmt: skip
        # MATCH: what applies to topic orders-eu
        match = dict(everything, resource_type_filter=TOPIC, resource_name_filter="orders-eu",
                     pattern_type_filter=2)  # fmt: skip
        r = admin.request(DESCRIBE_ACLS, 3, match)
        assert [x["resource_name"] for x in r["resources"]] == ["orders-"]
        r = admin.request(
            DELETE_ACLS, 3, {"filters": [dict(everything, principal_filter="User:bob")]}
        )
        deleted = r["filter_results"][0]["matching_acls"]
        assert sorted(x["resource_name"] for x in deleted) == ["kafka-cluster", "orders-"]
        r = admin.request(DESCRIBE_ACLS, 3, everything)
        assert [x["resource_name"] for x in r["resources"]] == ["orders"]
    with as_user(secured, "bob") as bob:
        assert create_topic(bob, "orders-new") == TOPIC_AUTH  # the CREATE ACL is gone


def test_allow_everyone_if_no_acl_found(start_broker):
    port = free_port()
    b = start_broker(
        **sasl_settings(
            port,
            **{
                "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                "allow.everyone.if.no.acl.found": "true",
                "super.users": "User:admin",
            },
        )
    )
    b.port = port
    with as_user(b, "admin") as admin:
        assert create_topic(admin, "open-topic") == NONE
        assert create_topic(admin, "closed-topic") == NONE
        assert create_acls(admin, acl(TOPIC, "closed-topic", "User:admin", ALL)) == [NONE]
    with as_user(b, "alice") as alice:
        assert produce(alice, "open-topic") == NONE  # no ACL at all on it
        assert produce(alice, "closed-topic") == TOPIC_AUTH  # ACLs exist: none for alice


def test_mutual_tls_principal_and_kafka_python_over_sasl_ssl(start_broker, tmp_path):
    """A client certificate's DN, mapped by ssl.principal.mapping.rules, is the principal
    ACLs name (SSL listener, ssl.client.auth=required); kafka-python logs in with
    SCRAM-SHA-512 over SASL_SSL on the same broker."""
    from kafka import KafkaConsumer, KafkaProducer

    from pybroker.testing.tls_certs import make_certs

    certs = make_certs(tmp_path / "certs")
    plain, tls_port, sasl_port = free_port(), free_port(), free_port()
    b = start_broker(
        **{
            "listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls_port},"
            f"SASL_SSL://127.0.0.1:{sasl_port}",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(certs.server),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(certs.ca),
            "listener.name.ssl.ssl.client.auth": "required",
            "ssl.principal.mapping.rules": "RULE:^CN=(.*)$/$1/U,DEFAULT",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:ANONYMOUS",  # the PLAINTEXT listener: set-up
        }
    )
    from pybroker.security.scram import make_credential

    b.run(b.broker.credentials.alter("carol", {"SCRAM-SHA-512": make_credential(
        "SCRAM-SHA-512", "carol-secret")}, set()))  # fmt: skip
    topic = unique_topic("mtls")
    with Client("127.0.0.1", plain) as admin:
        assert create_topic(admin, topic) == NONE
        assert create_acls(
            admin,
            acl(TOPIC, topic, "User:CLIENT-1", ALL),  # the mapped certificate principal
            acl(TOPIC, topic, "User:carol", ALL),
        ) == [NONE, NONE]
    mtls = {
        "bootstrap_servers": f"localhost:{tls_port}",
        "security_protocol": "SSL",
        "ssl_cafile": str(certs.ca),
        "ssl_certfile": str(certs.client_cert),
        "ssl_keyfile": str(certs.client_key),
    }
    p = KafkaProducer(max_block_ms=20000, **mtls)
    try:
        p.send(topic, b"from-mtls").get(timeout=30)
    finally:
        p.close()
    scram_ssl = {
        "bootstrap_servers": f"localhost:{sasl_port}",
        "security_protocol": "SASL_SSL",
        "ssl_cafile": str(certs.ca),
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "carol",
        "sasl_plain_password": "carol-secret",
    }
    c = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=30000, **scram_ssl)
    try:
        assert [m.value for m in islice(c, 1)] == [b"from-mtls"]
    finally:
        c.close()
    with Client("127.0.0.1", plain) as admin:  # without the mapping rule's ACL: refused
        r = admin.request(DELETE_ACLS, 3, {"filters": [{
            "resource_type_filter": TOPIC, "resource_name_filter": topic, "pattern_type_filter": 3,
            "principal_filter": "User:CLIENT-1", "host_filter": None, "operation": 1,
            "permission_type": 1}]})  # fmt: skip
        assert len(r["filter_results"][0]["matching_acls"]) == 1
    from kafka.errors import TopicAuthorizationFailedError

    p = KafkaProducer(max_block_ms=10000, **mtls)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            p.send(topic, b"refused").get(timeout=20)
    finally:
        p.close()


def test_a_read_revoked_on_an_idle_session_partition_is_answered_at_the_next_fetch(secured):
    """Kafka authorizes every partition of an incremental fetch session on each request: a
    consumer whose READ is deleted gets TOPIC_AUTHORIZATION_FAILED for its idle partition at
    once, though nothing changed in the partition (a round picked from the change feed would
    skip it)."""
    topic = unique_topic("acl")
    with as_user(secured, "admin") as admin:
        assert create_topic(admin, topic) == NONE
        assert produce(admin, topic) == NONE
        assert create_acls(admin, acl(TOPIC, topic, "User:alice", READ)) == [NONE]

    def fetch(c: Client, session_id: int, epoch: int) -> dict:
        parts = [{"partition": 0, "current_leader_epoch": -1, "fetch_offset": 1,
                  "log_start_offset": -1, "partition_max_bytes": 1 << 20}]  # fmt: skip
        r = c.request(
            FETCH,
            12,
            {
                "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                "isolation_level": 0, "session_id": session_id, "session_epoch": epoch,
                "topics": [{"topic": topic, "partitions": parts}] if epoch == 0 else [],
                "forgotten_topics_data": [], "rack_id": "",
            },
        )  # fmt: skip
        assert r["error_code"] == NONE
        return r

    with as_user(secured, "alice") as alice:
        r = fetch(alice, 0, 0)
        sid = r["session_id"]
        assert sid != 0 and r["responses"][0]["partitions"][0]["error_code"] == NONE
        for epoch in (1, 2, 3):
            assert fetch(alice, sid, epoch)["responses"] == []  # idle
        with as_user(secured, "admin") as admin:
            everything = {
                "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                "principal_filter": "User:alice", "host_filter": None, "operation": 1,
                "permission_type": 1,
            }  # fmt: skip
            r = admin.request(DELETE_ACLS, 3, {"filters": [everything]})
            assert len(r["filter_results"][0]["matching_acls"]) == 1
        epoch = 4
        while True:  # (the ACL cache follows the store: a few rounds at most)
            got = fetch(alice, sid, epoch)["responses"]
            epoch += 1
            if got or epoch > 200:
                break
            time.sleep(0.05)
        assert [p["error_code"] for t in got for p in t["partitions"]] == [TOPIC_AUTH]


def test_an_offset_commit_of_a_topic_without_read_fails_for_that_topic_alone(secured):
    """OffsetCommit: READ on the group and on each topic (Kafka's handleOffsetCommitRequest):
    a topic the principal may not read is TOPIC_AUTHORIZATION_FAILED in the answer, the
    others of the same request are committed."""
    readable, hidden, group = unique_topic("acl"), unique_topic("hidden"), unique_topic("grp")
    with as_user(secured, "admin") as admin:
        assert create_topic(admin, readable) == NONE
        assert create_topic(admin, hidden) == NONE
        assert create_acls(
            admin, acl(TOPIC, readable, "User:alice", READ), acl(GROUP, group, "User:alice", READ)
        ) == [NONE, NONE]
    body = {
        "group_id": group,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "group_instance_id": None,
        "topics": [
            {
                "name": t,
                "partitions": [
                    {
                        "partition_index": 0,
                        "committed_offset": 7,
                        "committed_leader_epoch": -1,
                        "committed_metadata": "",
                    }
                ],
            }
            for t in (hidden, readable)
        ],
    }
    with as_user(secured, "alice") as alice:
        deadline = time.monotonic() + 30
        while True:
            r = alice.request(OFFSET_COMMIT, 8, body)
            codes = {t["name"]: t["partitions"][0]["error_code"] for t in r["topics"]}
            if codes[readable] not in (14, 15) or time.monotonic() > deadline:
                break  # (COORDINATOR_LOAD_IN_PROGRESS / NOT_AVAILABLE while it starts)
            time.sleep(0.2)
        assert codes == {hidden: TOPIC_AUTH, readable: NONE}
        fetched = alice.request(
            OFFSET_FETCH,
            7,
            {
                "group_id": group,
                "topics": [{"name": readable, "partition_indexes": [0]}],
                "require_stable": False,
            },
        )
        (t,) = fetched["topics"]
        assert t["partitions"][0]["committed_offset"] == 7
