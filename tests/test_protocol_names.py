"""Client-supplied names that become metadata-store paths, at the wire: the fuzzer's
reproducer (DescribeUserScramCredentials naming "" and "ddhc.faad", which raised ValueError
from the store and closed the connection), users ".", ".." and "" in both SCRAM APIs, quota
entities, ACL resources, broker-config entity names, and groups named ".", ".." and "a/b",
which Kafka accepts and which must work.  Each answer carries Kafka's error code, the
connection stays open, and the broker logs no traceback."""

from __future__ import annotations

import hashlib

import pytest
from broker_fixture import NONE, unique_topic

METADATA, OFFSET_COMMIT, OFFSET_FETCH, LIST_GROUPS, DESCRIBE_GROUPS = 3, 8, 9, 16, 15
DELETE_GROUPS, CREATE_ACLS, DESCRIBE_CONFIGS, ALTER_CONFIGS = 42, 30, 32, 33
DESCRIBE_QUOTAS, ALTER_QUOTAS, DESCRIBE_SCRAM, ALTER_SCRAM = 48, 49, 50, 51
INVALID_REQUEST, RESOURCE_NOT_FOUND, UNACCEPTABLE_CREDENTIAL = 42, 91, 93

REPRODUCER = bytes.fromhex("0000001e0032000000001867000466757a7a00030a646468632e6661616400010000")


@pytest.fixture(scope="module")
def named(tmp_path_factory):
    from broker_fixture import BrokerFactory

    with BrokerFactory(tmp_path_factory.mktemp("names")) as factory:
        yield factory(
            **{
                "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                "super.users": "User:ANONYMOUS",
            }
        )


def _still_serving(c) -> None:
    assert c.request(METADATA, 9, {"topics": None})["brokers"]


def test_the_fuzzers_reproducer_gets_an_answer_per_user(named):
    from pybroker.wire import codec

    with named.client() as c:
        c.send_raw(REPRODUCER)
        corr, body = codec.decode_response(DESCRIBE_SCRAM, 0, c.recv_frame())
        assert corr == 0x1867 and body["error_code"] == NONE
        got = {r["user"]: (r["error_code"], r["error_message"]) for r in body["results"]}
        assert got == {
            "ddhc.faad": (RESOURCE_NOT_FOUND, got["ddhc.faad"][1]),
            "": (RESOURCE_NOT_FOUND, "Username must not be empty"),
        }
        _still_serving(c)


def test_scram_users_dot_and_dotdot_are_users_like_any_other(named):
    salted = hashlib.pbkdf2_hmac("sha256", b"pw", b"salt", 4096)
    with named.client() as c:
        d = c.request(DESCRIBE_SCRAM, 0, {"users": [{"name": n} for n in (".", "..", "", "a/b")]})
        assert [(r["user"], r["error_code"]) for r in d["results"]] == [
            (".", RESOURCE_NOT_FOUND),
            ("..", RESOURCE_NOT_FOUND),
            ("", RESOURCE_NOT_FOUND),
            ("a/b", RESOURCE_NOT_FOUND),
        ]
        upsert = [
            {"name": n, "mechanism": 1, "iterations": 4096, "salt": b"salt",
             "salted_password": salted}
            for n in (".", "..", "a/b", "")
        ]  # fmt: skip
        r = c.request(ALTER_SCRAM, 0, {"deletions": [], "upsertions": upsert})
        assert {x["user"]: x["error_code"] for x in r["results"]} == {
            ".": NONE,
            "..": NONE,
            "a/b": NONE,
            "": UNACCEPTABLE_CREDENTIAL,
        }
        d = c.request(DESCRIBE_SCRAM, 0, {"users": None})
        listed = {r["user"]: r["credential_infos"] for r in d["results"]}
        assert {".", "..", "a/b"} <= set(listed)
        assert listed["."] == [{"mechanism": 1, "iterations": 4096}]
        _still_serving(c)


def test_client_quota_entities_with_odd_names(named):
    with named.client() as c:
        entries = [
            {"entity": [{"entity_type": t, "entity_name": n}],
             "ops": [{"key": "producer_byte_rate", "value": 1024.0, "remove": False}]}
            for t in ("user", "client-id") for n in (".", "..", "a/b", "", "<default>")
        ]  # fmt: skip
        r = c.request(ALTER_QUOTAS, 1, {"entries": entries, "validate_only": False})
        codes = {(e["entity"][0]["entity_type"], e["entity"][0]["entity_name"]): e["error_code"]
                 for e in r["entries"]}  # fmt: skip
        assert codes == {
            (t, n): (INVALID_REQUEST if n == "" else NONE)
            for t in ("user", "client-id")
            for n in (".", "..", "a/b", "", "<default>")
        }
        d = c.request(
            DESCRIBE_QUOTAS,
            1,
            {"components": [{"entity_type": "user", "match_type": 0, "match": ".."}],
             "strict": False},
        )  # fmt: skip
        assert d["error_code"] == NONE
        assert [e["entity"] for e in d["entries"]] == [
            [{"entity_type": "user", "entity_name": ".."}]
        ]
        _still_serving(c)


def test_acl_resource_names_kafka_refuses_get_invalid_request(named):
    with named.client() as c:
        creations = [
            {"resource_type": 3, "resource_name": n, "resource_pattern_type": 3,
             "principal": "User:alice", "host": "*", "operation": 3, "permission_type": 3}
            for n in ("a/b", ".", "..", "a\x00b", "", "fine.group")
        ]  # fmt: skip
        r = c.request(CREATE_ACLS, 3, {"creations": creations})
        assert [x["error_code"] for x in r["results"]] == [INVALID_REQUEST] * 5 + [NONE]
        assert "invalid resource name" in r["results"][0]["error_message"]
        _still_serving(c)


def test_broker_config_entity_names_are_broker_ids(named):
    """Kafka parses the name with Integer.parseInt and writes /config/brokers/<id>: "+0" and
    "00" are broker 0; " 0", "0_0" (Python's int() takes them), "." and "a/b" are not ids."""

    def alter(c, name: str, value: str) -> int:
        r = c.request(
            ALTER_CONFIGS,
            2,
            {"resources": [{"resource_type": 4, "resource_name": name,
                            "configs": [{"name": "log.cleaner.threads", "value": value}]}],
             "validate_only": False},
        )  # fmt: skip
        return r["responses"][0]["error_code"]

    def described(c) -> tuple[str, int]:
        d = c.request(
            DESCRIBE_CONFIGS,
            4,
            {"resources": [{"resource_type": 4, "resource_name": "0",
                            "configuration_keys": ["log.cleaner.threads"]}],
             "include_synonyms": False, "include_documentation": False},
        )  # fmt: skip
        cfg = d["results"][0]["configs"][0]
        return cfg["value"], cfg["config_source"]

    with named.client() as c:
        for name in (" 0", "0_0", ".", "..", "a/b", ""):
            assert alter(c, name, "3") == INVALID_REQUEST or name == "", name
        for name, value in (("+0", "2"), ("00", "1")):
            assert alter(c, name, value) == NONE, name
            assert described(c) == (value, 2)  # DYNAMIC_BROKER_CONFIG of broker 0
        _still_serving(c)


def test_groups_named_dot_dotdot_and_a_slash_b_work(named):
    """Kafka keeps group offsets in __consumer_offsets: any group id is legal, and "" too for
    OffsetCommit, OffsetFetch, DescribeGroups and DeleteGroups (Kafka's isValidGroupId)."""
    topic = unique_topic("names")
    groups = [".", "..", "a/b", "%2F", "grüße", ""]
    with named.client() as c:
        c.create_topic(topic, 1)
        for g in groups:
            r = c.request(
                OFFSET_COMMIT,
                8,
                {"group_id": g, "generation_id_or_member_epoch": -1, "member_id": "",
                 "group_instance_id": None,
                 "topics": [{"name": topic, "partitions": [
                     {"partition_index": 0, "committed_offset": 7, "committed_leader_epoch": -1,
                      "committed_metadata": g}]}]},
            )  # fmt: skip
            assert r["topics"][0]["partitions"][0]["error_code"] == NONE, (g, r)
        for g in groups:
            f = c.request(
                OFFSET_FETCH,
                7,
                {"group_id": g, "topics": [{"name": topic, "partition_indexes": [0]}],
                 "require_stable": False},
            )  # fmt: skip
            p = f["topics"][0]["partitions"][0]
            assert (f["error_code"], p["committed_offset"], p["metadata"]) == (NONE, 7, g), g
        listed = {g["group_id"] for g in c.request(LIST_GROUPS, 4, {"states_filter": []})["groups"]}
        assert set(groups) <= listed
        d = c.request(
            DESCRIBE_GROUPS, 5, {"groups": groups, "include_authorized_operations": False}
        )
        assert [(x["group_id"], x["error_code"], x["group_state"]) for x in d["groups"]] == [
            (g, NONE, "Empty") for g in groups
        ]
        r = c.request(DELETE_GROUPS, 2, {"groups_names": groups})
        assert [(x["group_id"], x["error_code"]) for x in r["results"]] == [
            (g, NONE) for g in groups
        ]
        _still_serving(c)
