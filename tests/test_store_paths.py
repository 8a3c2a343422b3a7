"""Every builder of a metadata-store path from a client-supplied name accepts every name Kafka
accepts for that resource and gives a path both backends hold (store.validate_path), and
where the name is read back from the path (listing groups, users, quota entities), the same
name comes back.  The names are the protocol fuzzer's hostile ones (tests/fuzz/frames.py:
"", ".", "..", "/", "a/b", NUL, unicode, very long...), which it sends in every request
field that names a resource.

Names Kafka refuses are refused before any path is built: topics by Topic.validate, ACL
resource names with "/" (AclAuthorizer) or that its ZooKeeper store cannot hold, empty user
names and client ids.  A name whose store path would pass ``store.MAX_PATH_BYTES`` (only
names of thousands of characters) raises InvalidPathError, a StoreError the APIs answer with
their store error; that is checked too."""

from __future__ import annotations

import random
import re
import uuid

import pytest

from pybroker.coord.group import classic_store as classic_group_store
from pybroker.coord.group import consumer_store as consumer_group_store
from pybroker.coord.group import share_store
from pybroker.coord.metadata import paths
from pybroker.coord.metadata import paths as offsets
from pybroker.coord.metadata.store import (
    MAX_PATH_BYTES,
    InvalidPathError,
    StoreError,
    validate_path,
)
from pybroker.coord.metadata.topic_rules import validate_topic_name
from pybroker.coord.txn import store as txn_store
from pybroker.errors import KafkaError
from pybroker.handlers._acls import InvalidAcl, binding_from
from pybroker.quotas import entities
from pybroker.security import credentials
from tests.fuzz.frames import HOSTILE_NAMES

NAMES = sorted(
    set(HOSTILE_NAMES)
    | {"orders", "a.b", "-", "_", "x" * 249, "x" * 250, "\u0301", "😀", "a b", "a+b", "%41"}
    | {"\x01", "\x1f", "\x9f", "\ud7ff", "\uf900", "\ufff0", "\U0010ffff", "<default>"}
)


def _short(name: str) -> str:
    return repr(name if len(name) < 30 else name[:10] + f"...({len(name)})")


def _fits(path_of_name) -> list[str]:
    """The names whose path is not valid (raising anything but InvalidPathError for a long
    name fails the test at once)."""
    bad = []
    for name in NAMES:
        try:
            validate_path(path_of_name(name))
        except InvalidPathError:
            if len(name) < 4096:
                bad.append(_short(name))
    return bad


def test_group_and_transactional_id_paths_hold_every_name():
    """Kafka accepts any string as a group id or transactional.id (they live in record keys
    of __consumer_offsets / __transaction_state, not in paths): every one is escaped."""
    builders = {
        "offsets": lambda g: paths.consumer_offset(
            offsets.name_to_component(g), offsets.name_to_component("t"), 0
        ),
        "KIP-848 group": consumer_group_store.group_path,
        "KIP-848 member": lambda m: (
            consumer_group_store.group_path("g") + "/" + offsets.name_to_component(m)
        ),
        "classic group": classic_group_store.group_path,
        "share group": share_store.group_path,
        "share-partition state": lambda g: share_store.state_path(g, uuid.UUID(int=1), 0),
        "transactional.id": txn_store.txn_path,
    }
    for what, build in builders.items():
        assert _fits(build) == [], what
    for name in NAMES:
        assert offsets.component_to_name(offsets.name_to_component(name)) == name, _short(name)


def test_escaping_is_the_documented_mapping():
    """name_to_component's fast table gives the documented regex's escapes (stored names
    written by earlier versions are found again)."""
    rng = random.Random(7)
    pool = [chr(c) for c in (0, 0x1F, 0x20, 0x25, 0x2F, 0x7F, 0x9F, 0xA0, 0xD800, 0xF8FF)]
    pool += [chr(c) for c in (0xF900, 0xFFEF, 0xFFF0, 0xFFFF, 0x10000, 0x41, 0x2E, 0x4E2D)]

    def reference(name: str) -> str:
        if name == "":
            return "%"
        if name in (".", ".."):
            return "%2E" * len(name)
        return offsets._UNSAFE.sub(
            lambda m: "".join(f"%{b:02X}" for b in m.group().encode("utf-8", "surrogatepass")),
            name,
        )

    for _ in range(3000):
        name = "".join(rng.choice(pool) for _ in range(rng.randrange(0, 8)))
        assert offsets.name_to_component(name) == reference(name), _short(name)


def test_topic_paths_hold_every_topic_name_kafka_accepts():
    legal = []
    for name in NAMES:
        try:
            validate_topic_name(name)
        except KafkaError:
            continue
        legal.append(name)
    assert {"orders", "a.b", "-", "x" * 249, "__consumer_offsets"} <= set(legal)
    assert not {"", ".", "..", "a/b", "x" * 250} & set(legal)
    for name in legal:
        for build in (
            paths.topic,
            paths.partitions,
            lambda n: paths.partition(n, 0),
            lambda n: paths.partition_state(n, 0),
            paths.topic_config,
            paths.delete_topic,
        ):
            validate_path(build(name))


def test_user_and_client_id_paths_hold_every_nonempty_name():
    """SCRAM users and quota entities: Kafka's Sanitizer (URL-encoding), with "." and ".."
    as %2E (Kafka's own ZooKeeper path would be invalid; its desanitize reads them back)."""
    names = [n for n in NAMES if n]  # Kafka refuses empty user names and client ids
    assert _fits(credentials.user_path) == [_short("")]  # refused by the APIs first
    for name in names:
        path = credentials.user_path(name)
        if len(name) < 4096:
            validate_path(path)
        assert credentials.desanitize(path.rsplit("/", 1)[1]) == name, _short(name)
        for e in (
            entities.entity(user=name),
            entities.entity(client_id=name),
            entities.entity(user=name, client_id=name),
            entities.entity(user=None, client_id=name),
        ):
            qpath = entities.path_of(e)
            try:
                validate_path(qpath)
            except InvalidPathError:
                assert len(name) >= 4096, _short(name)
                continue
            assert entities.entity_of_path(qpath) == e, _short(name)
    assert credentials.user_path(".") == "/config/users/%2E"
    assert credentials.user_path("..") == "/config/users/%2E%2E"


def test_acl_resource_names_are_refused_or_stored():
    """CreateAcls: Kafka's AclAuthorizer refuses a name with "/" (its ZooKeeper node would be
    nested) and fails on names ZooKeeper refuses; pybroker refuses both with INVALID_REQUEST,
    and every name it accepts has a valid path."""
    from pybroker.security.authorizer import resource_path

    accepted = []
    for name in NAMES:
        for rtype in (2, 3, 5, 7):  # topic, group, transactional id, user
            creation = {
                "resource_type": rtype,
                "resource_name": name,
                "resource_pattern_type": 3,
                "principal": "User:alice",
                "host": "*",
                "operation": 2,  # ALL
                "permission_type": 3,
            }
            try:
                resource, _ = binding_from(creation)
            except InvalidAcl as e:
                assert name == "" or re.search("invalid resource name|must not be empty", str(e))
                continue
            validate_path(resource_path(resource))
            accepted.append(name)
    assert {"orders", "a.b", "grüße", "*", "<default>"} <= set(accepted)
    assert not {"a/b", ".", "..", "a\x00b", ""} & set(accepted)


def test_an_invalid_path_is_a_store_error():
    """So a builder that lets a name through is answered with the API's store error, never
    a traceback."""
    for path in ("/config/users/.", "/a/", "/a/\x00", "/x/" + "y" * MAX_PATH_BYTES, "/a//b"):
        with pytest.raises(StoreError):
            validate_path(path)
        with pytest.raises(ValueError):
            validate_path(path)
