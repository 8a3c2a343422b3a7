"""KIP-848 at the wire: ConsumerGroupHeartbeat, ConsumerGroupDescribe, and the other group
APIs facing a consumer-protocol group (Kafka's answers as the spec)."""

from __future__ import annotations

import struct
import uuid

from broker_fixture import API_VERSIONS, NONE, unique_topic

HEARTBEAT, DESCRIBE = 68, 69
OFFSET_COMMIT, OFFSET_FETCH, JOIN_GROUP, DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS = (
    8,
    9,
    11,
    15,
    16,
    42,
)
INVALID_REQUEST, UNKNOWN_MEMBER_ID, GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP = 42, 25, 69, 68
FENCED_MEMBER_EPOCH, UNSUPPORTED_ASSIGNOR, STALE_MEMBER_EPOCH = 110, 112, 113
UNSUPPORTED_VERSION, INCONSISTENT_GROUP_PROTOCOL = 35, 23
MEMBER_ID_REQUIRED, REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION = 79, 27, 22
SYNC_GROUP, CLASSIC_HEARTBEAT, LEAVE_GROUP = 14, 12, 13


def heartbeat(client, group, member_id="", epoch=0, topics=None, version=0, **kw):
    body = {
        "group_id": group,
        "member_id": member_id,
        "member_epoch": epoch,
        "instance_id": None,
        "rack_id": None,
        "rebalance_timeout_ms": 60000 if epoch == 0 else -1,
        "subscribed_topic_names": topics if epoch == 0 else None,
        "subscribed_topic_regex": None,
        "server_assignor": None,
        "topic_partitions": [] if epoch == 0 else None,
    }
    body.update(kw)
    return client.request(HEARTBEAT, version, body)


def joined(client, topic, partitions=3):
    client.create_topic(topic, partitions=partitions)
    group = f"g-{uuid.uuid4().hex[:8]}"
    r = heartbeat(client, group, topics=[topic])
    assert r["error_code"] == NONE, r
    return group, r


def test_join_gets_a_member_id_epoch_one_and_every_partition_by_topic_id(client):
    topic = unique_topic()
    group, r = joined(client, topic)
    tid = client.metadata([topic], version=12)["topics"][0]["topic_id"]
    assert r["member_id"] and r["member_epoch"] == 1 and r["heartbeat_interval_ms"] > 0
    assert r["assignment"]["topic_partitions"] == [{"topic_id": tid, "partitions": [0, 1, 2]}]
    again = heartbeat(client, group, r["member_id"], 1)
    assert (again["error_code"], again["member_epoch"], again["assignment"]) == (NONE, 1, None)
    # v1: the client chooses its member id
    r1 = heartbeat(client, group, "my-own-id", 0, topics=[topic], version=1)
    assert r1["error_code"] == NONE and r1["member_id"] == "my-own-id"


def test_invalid_heartbeats_get_kafka_errors(client):
    topic = unique_topic()
    client.create_topic(topic)
    cases = [
        (dict(group_id=""), "GroupId can't be empty."),
        (dict(rebalance_timeout_ms=-1), "RebalanceTimeoutMs must be provided in first request."),
        (dict(topic_partitions=None), "TopicPartitions must be empty when (re-)joining."),
        (dict(subscribed_topic_names=None), None),
        (dict(member_epoch=7, member_id=""), "MemberId can't be empty."),
        (dict(member_epoch=-3, member_id="m"), "MemberEpoch is invalid."),
    ]
    for extra, message in cases:
        r = heartbeat(client, "g-invalid", topics=[topic], **extra)
        assert r["error_code"] == INVALID_REQUEST, (extra, r)
        if message:
            assert r["error_message"] == message
    r = heartbeat(client, "g-invalid", topics=[topic], server_assignor="sticky")
    assert r["error_code"] == UNSUPPORTED_ASSIGNOR
    group, r = joined(client, unique_topic())
    assert heartbeat(client, group, "stranger", 1)["error_code"] == UNKNOWN_MEMBER_ID
    assert heartbeat(client, group, r["member_id"], 9)["error_code"] == FENCED_MEMBER_EPOCH
    # a group this coordinator does not hold (it may have moved here): rejoin at epoch 0
    assert heartbeat(client, "no-such-group", "m", 1)["error_code"] == UNKNOWN_MEMBER_ID


def test_describe_list_and_the_classic_apis_facing_a_consumer_group(client):
    topic = unique_topic()
    group, r = joined(client, topic)
    d = client.request(
        DESCRIBE, 1, {"group_ids": [group, "nope"], "include_authorized_operations": True}
    )
    g, missing = d["groups"]
    assert (g["error_code"], g["group_state"], g["group_epoch"], g["assignor_name"]) == (
        NONE,
        "Stable",
        1,
        "uniform",
    )
    (m,) = g["members"]
    assert m["member_id"] == r["member_id"] and m["member_epoch"] == 1 and m["member_type"] == 1
    assert m["subscribed_topic_names"] == [topic]
    assert m["assignment"]["topic_partitions"][0]["topic_name"] == topic
    assert m["target_assignment"] == m["assignment"]
    assert missing["error_code"] == GROUP_ID_NOT_FOUND
    listed = client.request(LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["consumer"]})
    assert {"group_id": group, "protocol_type": "consumer", "group_state": "Stable",
            "group_type": "consumer"} in listed["groups"]  # fmt: skip
    # DescribeGroups (classic) does not see it, as in Kafka 3.9
    dg = client.request(
        DESCRIBE_GROUPS, 5, {"groups": [group], "include_authorized_operations": False}
    )
    assert dg["groups"][0]["group_state"] == "Dead"
    # a classic member may join it (online migration: first MEMBER_ID_REQUIRED, as from a
    # classic group), but not with metadata that is not a consumer subscription; the group
    # cannot be deleted while it has members
    join_req = {
        "group_id": group,
        "session_timeout_ms": 10000,
        "rebalance_timeout_ms": 10000,
        "member_id": "",
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}],
    }
    join = client.request(JOIN_GROUP, 5, join_req)
    assert join["error_code"] == MEMBER_ID_REQUIRED and join["member_id"]
    join = client.request(JOIN_GROUP, 5, {**join_req, "member_id": join["member_id"]})
    assert join["error_code"] == INCONSISTENT_GROUP_PROTOCOL
    deleted = client.request(DELETE_GROUPS, 2, {"groups_names": [group]})
    assert deleted["results"][0]["error_code"] == NON_EMPTY_GROUP
    # after the member leaves, the group is empty and can be deleted
    left = heartbeat(client, group, r["member_id"], -1)
    assert (left["error_code"], left["member_epoch"]) == (NONE, -1)
    deleted = client.request(DELETE_GROUPS, 2, {"groups_names": [group]})
    assert deleted["results"][0]["error_code"] == NONE


def commit(client, group, member_id, epoch, topic, version=9):
    return client.request(
        OFFSET_COMMIT,
        version,
        {
            "group_id": group,
            "generation_id_or_member_epoch": epoch,
            "member_id": member_id,
            "group_instance_id": None,
            "retention_time_ms": -1,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1,
                         "committed_metadata": ""}
                    ],
                }
            ],
        },
    )["topics"][0]["partitions"][0]["error_code"]  # fmt: skip


def test_offsets_are_fenced_by_member_epochs(client):
    topic = unique_topic()
    group, r = joined(client, topic)
    mid = r["member_id"]
    assert commit(client, group, mid, 0, topic) == STALE_MEMBER_EPOCH
    assert commit(client, group, mid, 2, topic) == FENCED_MEMBER_EPOCH
    assert commit(client, group, "someone", 1, topic) == UNKNOWN_MEMBER_ID
    assert commit(client, group, mid, 1, topic, version=8) == UNSUPPORTED_VERSION
    assert commit(client, group, mid, 1, topic) == NONE

    def fetch(member_id, epoch):
        return client.request(
            OFFSET_FETCH,
            9,
            {
                "groups": [
                    {"group_id": group, "member_id": member_id, "member_epoch": epoch,
                     "topics": [{"name": topic, "partition_indexes": [0]}]}
                ],
                "require_stable": False,
            },
        )["groups"][0]  # fmt: skip

    assert fetch(mid, 0)["error_code"] == STALE_MEMBER_EPOCH
    got = fetch(mid, 1)
    assert got["error_code"] == NONE and got["topics"][0]["partitions"][0]["committed_offset"] == 5
    assert fetch(None, -1)["error_code"] == NONE  # an admin's fetch


def test_without_the_consumer_protocol_the_apis_are_not_offered(start_broker):
    broker = start_broker(**{"group.coordinator.rebalance.protocols": "classic"})
    with broker.client() as c:
        body = c.request(
            API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}
        )
        keys = {k["api_key"] for k in body["api_keys"]}
        assert HEARTBEAT not in keys and DESCRIBE not in keys


# -- online migration (Kafka 4.0): classic and consumer members in one group ------------------


def subscription(topics: list[str], owned: dict[str, list[int]] | None = None) -> bytes:
    """ConsumerProtocolSubscription v1: topics, null user data, owned partitions."""
    out = struct.pack(">hi", 1, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    out += struct.pack(">i", -1)
    owned = owned or {}
    out += struct.pack(">i", len(owned))
    for t, ps in owned.items():
        out += struct.pack(">h", len(t)) + t.encode() + struct.pack(">i", len(ps))
        out += b"".join(struct.pack(">i", p) for p in ps)
    return out


def assignment_of(data: bytes) -> dict[str, list[int]]:
    data = bytes(data)
    (_version, n), pos = struct.unpack_from(">hi", data), 6
    out: dict[str, list[int]] = {}
    for _ in range(n):
        (ln,) = struct.unpack_from(">h", data, pos)
        topic = data[pos + 2 : pos + 2 + ln].decode()
        pos += 2 + ln
        (count,) = struct.unpack_from(">i", data, pos)
        out[topic] = list(struct.unpack_from(f">{count}i", data, pos + 4))
        pos += 4 + 4 * count
    return out


class Classic:
    """One classic member speaking JoinGroup v5 / SyncGroup v3 / Heartbeat v3 on its own
    connection."""

    def __init__(self, broker, group: str, topic: str) -> None:
        self.c, self.group, self.topic = broker.client(), group, topic
        self.member_id, self.generation, self.owned = "", -1, {}

    def join(self, *, leader_assigns: bool = True) -> dict:
        body = {
            "group_id": self.group,
            "session_timeout_ms": 30000,
            "rebalance_timeout_ms": 30000,
            "member_id": self.member_id,
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": subscription([self.topic], self.owned)}],
        }
        r = self.c.request(JOIN_GROUP, 5, body)
        if r["error_code"] == MEMBER_ID_REQUIRED:
            self.member_id = r["member_id"]
            r = self.c.request(JOIN_GROUP, 5, {**body, "member_id": self.member_id})
        assert r["error_code"] == NONE, r
        self.member_id, self.generation = r["member_id"], r["generation_id"]
        assignments = []
        if r["leader"] == self.member_id and leader_assigns:  # the classic leader assigns all
            parts = list(range(4))
            assignments = [
                {"member_id": m["member_id"], "assignment": _assignment({self.topic: parts})}
                for m in r["members"]
            ]
        s = self.c.request(
            SYNC_GROUP,
            3,
            {
                "group_id": self.group,
                "generation_id": self.generation,
                "member_id": self.member_id,
                "group_instance_id": None,
                "assignments": assignments,
            },
        )
        assert s["error_code"] == NONE, s
        self.owned = assignment_of(s["assignment"])
        return r

    def heartbeat(self) -> int:
        return self.c.request(
            CLASSIC_HEARTBEAT,
            3,
            {
                "group_id": self.group,
                "generation_id": self.generation,
                "member_id": self.member_id,
                "group_instance_id": None,
            },
        )["error_code"]


def _assignment(parts: dict[str, list[int]]) -> bytes:
    out = struct.pack(">hi", 0, len(parts))
    for t, ps in parts.items():
        out += struct.pack(">h", len(t)) + t.encode() + struct.pack(">i", len(ps))
        out += b"".join(struct.pack(">i", p) for p in ps)
    return out + struct.pack(">i", -1)


def group_type(client, group: str) -> tuple[str, str]:
    listed = client.request(LIST_GROUPS, 5, {"states_filter": [], "types_filter": []})
    (g,) = [g for g in listed["groups"] if g["group_id"] == group]
    return g["group_type"], g["group_state"]


def test_a_classic_group_upgrades_when_a_consumer_member_joins_and_downgrades_when_it_leaves(
    start_broker,
):
    broker = start_broker(**{"group.initial.rebalance.delay.ms": 0})
    client = broker.client()
    topic = unique_topic()
    client.create_topic(topic, partitions=4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    classic = Classic(broker, group, topic)
    classic.join()
    assert classic.owned == {topic: [0, 1, 2, 3]} and group_type(client, group) == (
        "classic",
        "Stable",
    )
    generation = classic.generation

    # upgrade: a consumer-protocol member joins the non-empty classic group
    r = heartbeat(client, group, topics=[topic])
    assert r["error_code"] == NONE, r
    member, epoch = r["member_id"], r["member_epoch"]
    assert epoch == generation + 1 and r["assignment"]["topic_partitions"] == []
    assert group_type(client, group)[0] == "consumer"
    d = client.request(DESCRIBE, 1, {"group_ids": [group], "include_authorized_operations": False})
    types = {m["member_id"]: m["member_type"] for m in d["groups"][0]["members"]}
    assert types == {classic.member_id: 0, member: 1}

    # the classic member is asked to rejoin; an eager consumer rejoins owning nothing and
    # gets its half at the new epoch; the consumer member then gets the other half
    assert classic.heartbeat() == REBALANCE_IN_PROGRESS
    classic.owned = {}
    joined_again = classic.join()
    assert joined_again["generation_id"] == epoch and joined_again["members"] == []
    assert len(classic.owned[topic]) == 2
    assert classic.heartbeat() == NONE
    r = heartbeat(client, group, member, epoch)
    (tp,) = r["assignment"]["topic_partitions"]
    assert sorted(tp["partitions"] + classic.owned[topic]) == [0, 1, 2, 3]
    # the classic member commits with its generation id (= its member epoch)
    assert commit(client, group, classic.member_id, classic.generation, topic, version=7) == NONE
    stale = commit(client, group, classic.member_id, classic.generation - 1, topic, version=7)
    assert stale == ILLEGAL_GENERATION

    # downgrade: the last consumer-protocol member leaves; the classic member rebalances alone
    left = heartbeat(client, group, member, -1)
    assert left["error_code"] == NONE
    assert group_type(client, group) == ("classic", "PreparingRebalance")
    assert classic.heartbeat() == REBALANCE_IN_PROGRESS
    classic.join()
    assert classic.owned == {topic: [0, 1, 2, 3]}
    assert group_type(client, group) == ("classic", "Stable")


def test_migration_policy_disabled_keeps_the_protocols_apart(start_broker):
    broker = start_broker(
        **{"group.initial.rebalance.delay.ms": 0, "group.consumer.migration.policy": "disabled"}
    )
    client = broker.client()
    topic = unique_topic()
    client.create_topic(topic, partitions=4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    Classic(broker, group, topic).join()
    r = heartbeat(client, group, topics=[topic])
    assert r["error_code"] == GROUP_ID_NOT_FOUND
    assert group_type(client, group) == ("classic", "Stable")


def test_a_group_with_only_committed_offsets_becomes_a_consumer_group(start_broker):
    """Kafka's offline migration: an empty classic group (a simple consumer's commits, or the
    group a broker adopts at start from its offsets) is converted when the first
    consumer-protocol member joins; the member gets every partition and the offsets stay."""
    broker = start_broker(**{"group.initial.rebalance.delay.ms": 0})
    client = broker.client()
    topic = unique_topic()
    client.create_topic(topic, partitions=2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    assert commit(client, group, "", -1, topic, version=7) == NONE  # a simple consumer's commit
    classic = Classic(broker, group, topic)  # and a classic member that joins and leaves
    classic.join()
    left = classic.c.request(
        LEAVE_GROUP, 3, {"group_id": group, "members": [{"member_id": classic.member_id,
                                                         "group_instance_id": None}]}
    )  # fmt: skip
    assert left["error_code"] == NONE
    assert group_type(client, group) == ("classic", "Empty")
    r = heartbeat(client, group, topics=[topic])
    assert r["error_code"] == NONE, r
    (tp,) = r["assignment"]["topic_partitions"]
    assert tp["partitions"] == [0, 1]
    assert group_type(client, group)[0] == "consumer"
    assert commit(client, group, r["member_id"], r["member_epoch"], topic) == NONE
