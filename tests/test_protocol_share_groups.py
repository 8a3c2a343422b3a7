"""Share groups (KIP-932) at the wire level against an in-process broker: the checks and error
codes of ShareGroupHeartbeat/Describe, ShareFetch/Acknowledge and the share-group offsets APIs,
as Kafka 4.4 answers them; share.version in ApiVersions; group configs; the off switch."""

from __future__ import annotations

import uuid

import pytest
from broker_fixture import (
    API_VERSIONS,
    INVALID_CONFIG,
    INVALID_REQUEST,
    NONE,
    UNSUPPORTED_VERSION,
    BrokerFactory,
    batch,
    unique_topic,
    wait_until,
)

from pybroker.coord.metadata.paths import MAX_NAME_CHARS
from pybroker.errors import ErrorCode

HEARTBEAT, DESCRIBE, FETCH, ACK = 76, 77, 78, 79
DESCRIBE_OFFSETS, ALTER_OFFSETS, DELETE_OFFSETS = 90, 91, 92
INCREMENTAL_ALTER_CONFIGS, DESCRIBE_CONFIGS, LIST_GROUPS, DELETE_GROUPS = 44, 32, 16, 42
FIND_COORDINATOR, JOIN_GROUP, DESCRIBE_GROUPS, CONSUMER_GROUP_HEARTBEAT = 10, 11, 15, 68
INCONSISTENT_GROUP_PROTOCOL = 23
ACCEPT, RELEASE = 1, 2


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerFactory(tmp_path_factory.mktemp("share")) as factory:
        yield factory(**{"group.initial.rebalance.delay.ms": 0})


def member() -> str:
    return str(uuid.uuid4())


def heartbeat(c, group, mid, epoch, topics=None, **kw) -> dict:  # type: ignore[no-untyped-def]
    body = {"group_id": group, "member_id": mid, "member_epoch": epoch}
    body["subscribed_topic_names"] = topics
    body.update(kw)
    return c.request(HEARTBEAT, 1, body)


def set_config(c, group, name, value) -> dict:  # type: ignore[no-untyped-def]
    body = c.request(
        INCREMENTAL_ALTER_CONFIGS,
        1,
        {
            "resources": [
                {
                    "resource_type": 32,
                    "resource_name": group,
                    "configs": [{"name": name, "config_operation": 0, "value": value}],
                }
            ],
            "validate_only": False,
        },
    )
    return body["responses"][0]


def share_fetch(c, group, mid, epoch, tid, acks=None, max_records=100, version=2, **kw):  # type: ignore[no-untyped-def]
    part = {"partition_index": 0, "acknowledgement_batches": acks or []}
    body = {
        "group_id": group,
        "member_id": mid,
        "share_session_epoch": epoch,
        "max_wait_ms": kw.pop("max_wait_ms", 200),
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "max_records": max_records,
        "batch_size": max_records,
        "topics": [{"topic_id": tid, "partitions": [part]}],
        "forgotten_topics_data": [],
    }
    body.update(kw)
    return c.request(FETCH, version, body)


def partition_of(resp) -> dict:  # type: ignore[no-untyped-def]
    (t,) = resp["responses"]
    (p,) = t["partitions"]
    return p


@pytest.fixture
def setup(client):
    """A topic with 30 records in 3 batches, and an earliest share group joined by one
    member: (group, member id, topic id)."""
    topic = unique_topic("sq")
    client.create_topic(topic)
    for k in range(3):
        client.produce(topic, 0, batch([b"v%d" % (k * 10 + i) for i in range(10)]))
    group = f"sg-{uuid.uuid4().hex[:8]}"
    assert set_config(client, group, "share.auto.offset.reset", "earliest")["error_code"] == 0
    mid = member()
    r = heartbeat(client, group, mid, 0, [topic])
    assert r["error_code"] == NONE, r
    (tp,) = r["assignment"]["topic_partitions"]
    assert tp["partitions"] == [0]
    return group, mid, tp["topic_id"], topic


def test_api_versions_announce_share_version(client):
    body = client.request(
        API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}
    )
    keys = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}
    # Kafka 4.4's ranges
    assert {k: keys[k] for k in (76, 77, 78, 79, 90, 91, 92)} == {
        76: (1, 1), 77: (1, 1), 78: (1, 2), 79: (1, 2), 90: (0, 1), 91: (0, 0), 92: (0, 0)
    }  # fmt: skip
    assert {"name": "share.version", "min_version": 0, "max_version": 1} in body[
        "supported_features"
    ]
    assert body["finalized_features"] == [
        {"name": "share.version", "max_version_level": 1, "min_version_level": 1}
    ]


@pytest.mark.parametrize(
    "mid, epoch, topics, kw, message",
    [
        ("", 0, ["t"], {}, "Invalid member id in the request."),
        ("x" * 37, 0, ["t"], {}, "Invalid member id in the request."),
        ("m", 0, None, {}, "SubscribedTopicNames must be set in first request."),
        ("m", 0, [], {}, "SubscribedTopicNames must be set in first request."),
        ("m", -2, None, {}, "MemberEpoch is invalid."),
        ("m", 0, ["t"], {"rack_id": ""}, "RackId can't be empty."),
    ],
)
def test_heartbeat_request_checks(client, mid, epoch, topics, kw, message):
    r = heartbeat(client, "g", mid, epoch, topics, **kw)
    assert (r["error_code"], r["error_message"]) == (INVALID_REQUEST, message)


def test_heartbeat_errors_and_leave(client):
    topic = unique_topic("hb")
    client.create_topic(topic)
    group, mid = f"sg-{uuid.uuid4().hex[:8]}", member()
    r = heartbeat(client, group, mid, 3)
    assert r["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
    r = heartbeat(client, group, mid, 0, [topic])
    assert (r["error_code"], r["member_epoch"]) == (NONE, 1)
    r = heartbeat(client, group, member(), 4)
    assert r["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
    r = heartbeat(client, group, mid, 9)
    assert r["error_code"] == ErrorCode.FENCED_MEMBER_EPOCH
    r = heartbeat(client, group, mid, -1)
    assert (r["error_code"], r["member_epoch"]) == (NONE, -1)
    desc = client.request(DESCRIBE, 1, {"group_ids": [group, "nope"],
                                        "include_authorized_operations": False})  # fmt: skip
    g, missing = desc["groups"]
    assert (g["error_code"], g["group_state"], g["members"]) == (NONE, "Empty", [])
    assert missing["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND


def test_a_classic_group_id_is_not_a_share_group(client):
    topic = unique_topic("cl")
    client.create_topic(topic)
    group = f"cg-{uuid.uuid4().hex[:8]}"
    body = client.request(
        8,
        2,
        {
            "group_id": group,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "retention_time_ms": -1,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": 0, "committed_offset": 0, "committed_metadata": ""}]}],
        },
    )  # fmt: skip
    assert body["topics"][0]["partitions"][0]["error_code"] == NONE
    r = heartbeat(client, group, member(), 0, [topic])
    assert (r["error_code"], r["error_message"]) == (
        ErrorCode.GROUP_ID_NOT_FOUND,
        f"Group {group} is not a share group.",
    )


def test_a_share_group_id_is_not_a_classic_or_consumer_group(client):
    """Kafka's classicGroupJoin answers INCONSISTENT_GROUP_PROTOCOL for a share group's id,
    its consumerGroupHeartbeat GROUP_ID_NOT_FOUND; an empty share group still holds the id."""
    topic = unique_topic("sg")
    client.create_topic(topic)
    group = f"sg-{uuid.uuid4().hex[:8]}"
    mid = member()
    assert heartbeat(client, group, mid, 0, [topic])["error_code"] == NONE
    for leave in (False, True):
        if leave:
            assert heartbeat(client, group, mid, -1)["error_code"] == NONE
        body = client.request(
            JOIN_GROUP,
            5,
            {
                "group_id": group,
                "session_timeout_ms": 10000,
                "rebalance_timeout_ms": 10000,
                "member_id": "",
                "group_instance_id": None,
                "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b""}],
            },
        )
        assert (body["error_code"], body["member_id"]) == (INCONSISTENT_GROUP_PROTOCOL, "")
        body = client.request(
            CONSUMER_GROUP_HEARTBEAT,
            0,
            {
                "group_id": group,
                "member_id": member(),
                "member_epoch": 0,
                "instance_id": None,
                "rack_id": None,
                "rebalance_timeout_ms": 10000,
                "subscribed_topic_names": [topic],
                "server_assignor": None,
                "topic_partitions": [],
            },
        )
        assert (body["error_code"], body["error_message"]) == (
            ErrorCode.GROUP_ID_NOT_FOUND,
            f"Group {group} is not a consumer group.",
        )
        # DescribeGroups (up to v5, Kafka 3.9's): Kafka 4.4 describes a share group as it
        # describes an id no classic group holds: Dead, no error (v6 would add
        # GROUP_ID_NOT_FOUND)
        body = client.request(
            DESCRIBE_GROUPS, 5, {"groups": [group], "include_authorized_operations": False}
        )
        (g,) = body["groups"]
        assert (g["error_code"], g["group_state"], g["protocol_type"], g["members"]) == (
            NONE,
            "Dead",
            "",
            [],
        )


def test_fetch_acknowledge_and_describe(client, setup):
    group, mid, tid, topic = setup
    # acknowledgements are not allowed when the session opens
    r = share_fetch(client, group, mid, 0, tid, acks=[
        {"first_offset": 0, "last_offset": 0, "acknowledge_types": [1]}])  # fmt: skip
    assert r["error_code"] == INVALID_REQUEST
    r = share_fetch(client, group, mid, 0, tid, max_records=15)
    p = partition_of(r)
    assert r["acquisition_lock_timeout_ms"] == 30000
    # whole log batches: 15 asked, two batches of 10 given (one range: batch_size 15)
    assert [(a["first_offset"], a["last_offset"], a["delivery_count"])
            for a in p["acquired_records"]] == [(0, 19, 1)]  # fmt: skip
    assert len(p["records"]) > 0
    # another member cannot acknowledge them
    other = member()
    r = share_fetch(client, group, other, 0, tid, max_wait_ms=0)
    assert [(a["first_offset"], a["last_offset"]) for a in
            partition_of(r)["acquired_records"]] == [(20, 29)]  # fmt: skip
    r = client.request(ACK, 2, {
        "group_id": group, "member_id": other, "share_session_epoch": 1, "is_renew_ack": False,
        "topics": [{"topic_id": tid, "partitions": [{"partition_index": 0,
            "acknowledgement_batches": [
                {"first_offset": 0, "last_offset": 9, "acknowledge_types": [ACCEPT]}]}]}],
    })  # fmt: skip
    ap = partition_of(r)
    assert ap["error_code"] == ErrorCode.INVALID_RECORD_STATE
    assert r["acquisition_lock_timeout_ms"] == 30000
    # the owner: accept 0-9, release 10-19 (piggybacked on the next fetch: a subset of an
    # acquired range is fine)
    r = share_fetch(client, group, mid, 1, tid, acks=[
        {"first_offset": 0, "last_offset": 9, "acknowledge_types": [ACCEPT]},
        {"first_offset": 10, "last_offset": 19, "acknowledge_types": [RELEASE]},
    ], max_wait_ms=0)  # fmt: skip
    p = partition_of(r)
    assert p["acknowledge_error_code"] == NONE
    assert [(a["first_offset"], a["delivery_count"]) for a in p["acquired_records"]] == [(10, 2)]
    # the stored start offset moved past the accepted batch
    r = client.request(DESCRIBE_OFFSETS, 1, {"groups": [{"group_id": group, "topics": None}]})
    (g,) = r["groups"]
    (t,) = g["topics"]
    (po,) = t["partitions"]
    assert (t["topic_name"], po["start_offset"], po["error_code"]) == (topic, 10, NONE)
    assert po["lag"] == 20  # 30 records, 10 done
    # a wrong session epoch
    r = share_fetch(client, group, mid, 7, tid)
    assert r["error_code"] == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    # closing the session releases the member's records
    r = share_fetch(client, group, mid, -1, tid, max_wait_ms=0)
    assert r["error_code"] == NONE
    r = share_fetch(client, group, member(), 0, tid, max_wait_ms=0)
    assert [(a["first_offset"], a["delivery_count"])
            for a in partition_of(r)["acquired_records"]] == [(10, 3)]  # fmt: skip


def test_a_fetch_waiting_on_a_closed_connection_takes_no_records(broker, client, setup):
    """A share consumer killed (kill -9) while its next ShareFetch waits for records: the
    connection closes, the member's records are released, and that waiting fetch, whose
    answer can no longer be sent, must not acquire them again for the dead member.  (It did:
    the release woke it, it took them back, and they came to the next consumer only when
    that lock ran out, with one delivery more; compat_tests/test_share_groups_java.py's
    lost-consumer test under load.)"""
    group, mid, tid, _ = setup
    shares = broker.broker.shares
    with broker.client() as dying:
        p = partition_of(share_fetch(dying, group, mid, 0, tid))
        assert {(a["first_offset"], a["last_offset"], a["delivery_count"])
                for a in p["acquired_records"]} == {(0, 29, 1)}  # fmt: skip
        parked = broker.run(_parked(shares))
        dying.send(FETCH, 2, {
            "group_id": group, "member_id": mid, "share_session_epoch": 1, "max_wait_ms": 30000,
            "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 100, "batch_size": 100,
            "topics": [{"topic_id": tid, "partitions": [{"partition_index": 0,
                                                         "acknowledgement_batches": []}]}],
            "forgotten_topics_data": [],
        })  # fmt: skip
        wait_until(lambda: broker.run(_parked(shares)) > parked, 30)
    # the connection closed: another member gets the records at once, delivered once before
    r = share_fetch(client, group, member(), 0, tid, max_wait_ms=5000)
    assert [(a["first_offset"], a["last_offset"], a["delivery_count"])
            for a in partition_of(r)["acquired_records"]] == [(0, 29, 2)]  # fmt: skip


async def _parked(shares) -> int:  # type: ignore[no-untyped-def]
    return shares.purgatory.parked()


def test_acknowledgement_batches_are_validated(client, setup):
    group, mid, tid, _ = setup
    share_fetch(client, group, mid, 0, tid, max_records=10)
    for bad in (
        [{"first_offset": 5, "last_offset": 4, "acknowledge_types": [ACCEPT]}],
        [{"first_offset": 0, "last_offset": 9, "acknowledge_types": []}],
        [{"first_offset": 0, "last_offset": 9, "acknowledge_types": [1, 1]}],
        [{"first_offset": 0, "last_offset": 0, "acknowledge_types": [9]}],
        [{"first_offset": 0, "last_offset": 0, "acknowledge_types": [4]}],  # Renew, not renew ack
        [{"first_offset": 4, "last_offset": 5, "acknowledge_types": [1]},
         {"first_offset": 0, "last_offset": 1, "acknowledge_types": [1]}],
    ):  # fmt: skip
        r = client.request(ACK, 2, {
            "group_id": group, "member_id": mid, "share_session_epoch": 1, "is_renew_ack": False,
            "topics": [{"topic_id": tid, "partitions": [
                {"partition_index": 0, "acknowledgement_batches": bad}]}],
        })  # fmt: skip
        assert partition_of(r)["error_code"] == INVALID_REQUEST, bad
        # (the session epoch moved anyway: the request itself was fine)
        share_fetch(client, group, mid, 0, tid, max_wait_ms=0)


def test_renew_ack_request_must_not_fetch(client, setup):
    group, mid, tid, _ = setup
    share_fetch(client, group, mid, 0, tid, max_records=10)
    r = share_fetch(client, group, mid, 1, tid, is_renew_ack=True)
    assert r["error_code"] == INVALID_REQUEST
    assert r["error_message"].startswith("maxBytes must be set to 0, ")
    r = share_fetch(client, group, mid, 1, tid, acks=[
        {"first_offset": 0, "last_offset": 9, "acknowledge_types": [4]}],
        is_renew_ack=True, max_wait_ms=0, max_bytes=0, max_records=0, min_bytes=0,
    )  # fmt: skip
    p = partition_of(r)
    assert (p["acknowledge_error_code"], p["acquired_records"]) == (NONE, [])


def test_fetch_without_share_state_is_refused(client):
    topic = unique_topic("nostate")
    client.create_topic(topic)
    tid = client.metadata([topic], version=10)["topics"][0]["topic_id"]
    r = share_fetch(client, f"sg-{uuid.uuid4().hex[:8]}", member(), 0, tid, max_wait_ms=0)
    p = partition_of(r)
    assert p["error_code"] == ErrorCode.UNKNOWN
    assert "uninitialized share partition" in p["error_message"]
    r = share_fetch(client, "g", member(), 0, uuid.uuid4(), max_wait_ms=0)
    assert partition_of(r)["error_code"] == ErrorCode.UNKNOWN_TOPIC_ID


def test_offsets_apis_need_an_empty_group(client, setup):
    group, mid, tid, topic = setup
    r = client.request(
        ALTER_OFFSETS,
        0,
        {
            "group_id": group,
            "topics": [
                {"topic_name": topic, "partitions": [{"partition_index": 0, "start_offset": 5}]}
            ],
        },
    )
    assert r["error_code"] == ErrorCode.NON_EMPTY_GROUP
    r = client.request(DELETE_GROUPS, 2, {"groups_names": [group]})
    assert r["results"][0]["error_code"] == ErrorCode.NON_EMPTY_GROUP
    assert heartbeat(client, group, mid, -1)["error_code"] == NONE
    r = client.request(ALTER_OFFSETS, 0, {"group_id": group, "topics": [
        {"topic_name": topic, "partitions": [{"partition_index": 0, "start_offset": 25}]},
        {"topic_name": "no-such-topic", "partitions": [{"partition_index": 0,
                                                       "start_offset": 0}]}]})  # fmt: skip
    assert r["error_code"] == NONE
    codes = {t["topic_name"]: t["partitions"][0]["error_code"] for t in r["responses"]}
    assert codes == {topic: NONE, "no-such-topic": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    # a new member starts at 25
    mid2 = member()
    assert heartbeat(client, group, mid2, 0, [topic])["error_code"] == NONE
    r = share_fetch(client, group, mid2, 0, tid, max_wait_ms=0)
    assert partition_of(r)["acquired_records"][0]["first_offset"] == 25
    assert heartbeat(client, group, mid2, -1)["error_code"] == NONE
    r = client.request(DELETE_OFFSETS, 0, {"group_id": group, "topics": [{"topic_name": topic}]})
    assert (r["error_code"], r["responses"][0]["error_code"]) == (NONE, NONE)
    r = client.request(DESCRIBE_OFFSETS, 1, {"groups": [{"group_id": group, "topics": None}]})
    assert r["groups"][0]["topics"] == []
    groups = client.request(LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["share"]})
    mine = [g for g in groups["groups"] if g["group_id"] == group]
    assert mine == [{"group_id": group, "protocol_type": "share", "group_state": "Empty",
                     "group_type": "share"}]  # fmt: skip
    r = client.request(DELETE_GROUPS, 2, {"groups_names": [group]})
    assert r["results"][0]["error_code"] == NONE
    desc = client.request(DESCRIBE, 1, {"group_ids": [group],
                                        "include_authorized_operations": False})  # fmt: skip
    assert desc["groups"][0]["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND


def test_group_configs(client):
    group = f"sg-{uuid.uuid4().hex[:8]}"
    assert set_config(client, group, "share.record.lock.duration.ms", "20000")["error_code"] == 0
    for name, value in (
        ("share.record.lock.duration.ms", "999"),
        ("share.delivery.count.limit", "1"),
        ("share.auto.offset.reset", "first"),
        ("no.such.config", "1"),
    ):
        assert set_config(client, group, name, value)["error_code"] == INVALID_CONFIG, name
    r = client.request(DESCRIBE_CONFIGS, 4, {"resources": [{"resource_type": 32,
                       "resource_name": group, "configuration_keys": None}],
                       "include_synonyms": False, "include_documentation": False})  # fmt: skip
    configs = {c["name"]: (c["value"], c["config_source"]) for c in r["results"][0]["configs"]}
    assert configs["share.record.lock.duration.ms"] == ("20000", 8)  # GROUP_CONFIG
    assert configs["share.auto.offset.reset"] == ("latest", 5)  # DEFAULT_CONFIG


def test_find_coordinator_share_key_names_the_partition_leader(client, setup, broker):
    group, _, tid, _ = setup
    from pybroker.coord.metadata.paths import kafka_uuid_str

    r = client.request(FIND_COORDINATOR, 6, {"key_type": 2, "coordinator_keys": [
        f"{group}:{kafka_uuid_str(tid)}:0", "not-a-key"]})  # fmt: skip
    ok, bad = r["coordinators"]
    assert (ok["error_code"], ok["node_id"]) == (NONE, broker.broker_id)
    assert bad["error_code"] == INVALID_REQUEST


def test_share_groups_off(start_broker):
    b = start_broker(**{"group.share.enable": "false"})
    with b.client() as c:
        body = c.request(
            API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}
        )
        assert not {76, 77, 78, 79, 90, 91, 92} & {k["api_key"] for k in body["api_keys"]}
        assert body["finalized_features"] == []
        r = heartbeat(c, "g", member(), 0, ["t"])
        assert r["error_code"] == UNSUPPORTED_VERSION


def test_share_group_ids_any_name_and_the_length_bound(client):
    """Any group id Kafka accepts names a share group ('.', '..', 'a/b', '%2F', unicode: they
    become escaped store paths); one longer than pybroker's MAX_NAME_CHARS gets
    INVALID_GROUP_ID from every share-group API (INVALID_REQUEST from ShareFetch and
    ShareAcknowledge, whose only group-id error it is), never a retriable error."""
    topic = unique_topic("sg")
    client.create_topic(topic)
    for group in (".", "..", "a/b", "%2F", "grüße"):
        mid = member()
        assert heartbeat(client, group, mid, 0, [topic])["error_code"] == NONE, group
        d = client.request(
            DESCRIBE, 1, {"group_ids": [group], "include_authorized_operations": False}
        )
        assert (d["groups"][0]["error_code"], d["groups"][0]["group_state"]) == (NONE, "Stable")
        assert heartbeat(client, group, mid, -1)["error_code"] == NONE
        r = client.request(DELETE_GROUPS, 2, {"groups_names": [group]})
        assert r["results"][0]["error_code"] == NONE, group
    group = "x" * (MAX_NAME_CHARS + 1)
    r = heartbeat(client, group, member(), 0, [topic])
    assert r["error_code"] == ErrorCode.INVALID_GROUP_ID
    d = client.request(DESCRIBE, 1, {"group_ids": [group], "include_authorized_operations": False})
    assert d["groups"][0]["error_code"] == ErrorCode.INVALID_GROUP_ID
    o = client.request(DESCRIBE_OFFSETS, 0, {"groups": [{"group_id": group, "topics": None}]})
    assert o["groups"][0]["error_code"] == ErrorCode.INVALID_GROUP_ID
    f = share_fetch(client, group, member(), 0, uuid.uuid4())
    assert (f["error_code"], f["error_message"]) == (
        INVALID_REQUEST,
        "Invalid group id in the request.",
    )
    a = client.request(
        ACK, 1, {"group_id": group, "member_id": member(), "share_session_epoch": 1, "topics": []}
    )
    assert a["error_code"] == INVALID_REQUEST
