"""pybroker's layouts of the APIs kafka-python ships no spec for, checked against Kafka's own
generated message classes: the KIP-848 ones against kafka-clients 3.9.0 (v0) and 4.1.1 (v1),
the share-group ones (KIP-932) against kafka-clients 4.4.0.

java/clients4/src/SchemaDump.java prints every SCHEMA_<n> field (path, wire type,
nullability); each version both declare must have the same fields in the same order with the
same wire types, and non-struct fields the same nullability (Kafka's struct types do not
report theirs).  tests/test_schema_crosscheck.py covers the other APIs from kafka-python's
copies of Kafka's JSON specs.
"""

from __future__ import annotations

import subprocess

import pytest

import pybroker.wire.messages  # noqa: F401
from pybroker.testing import java
from pybroker.wire.schema import SCHEMAS

pytestmark = pytest.mark.skipif(not java.java_available(), reason="java not found")

MESSAGES = {
    68: ("ConsumerGroupHeartbeatRequestData", "ConsumerGroupHeartbeatResponseData"),
    69: ("ConsumerGroupDescribeRequestData", "ConsumerGroupDescribeResponseData"),
    76: ("ShareGroupHeartbeatRequestData", "ShareGroupHeartbeatResponseData"),
    77: ("ShareGroupDescribeRequestData", "ShareGroupDescribeResponseData"),
    78: ("ShareFetchRequestData", "ShareFetchResponseData"),
    79: ("ShareAcknowledgeRequestData", "ShareAcknowledgeResponseData"),
    90: ("DescribeShareGroupOffsetsRequestData", "DescribeShareGroupOffsetsResponseData"),
    91: ("AlterShareGroupOffsetsRequestData", "AlterShareGroupOffsetsResponseData"),
    92: ("DeleteShareGroupOffsetsRequestData", "DeleteShareGroupOffsetsResponseData"),
}
LABELS = ("3.9", "4.1", "4.4")
# The share-group APIs are held to Kafka 4.4 only: kafka-clients 4.1 still declares ShareFetch
# v1's records nullable (4.4 does not); pybroker never sends null records, so both decode it.
SHARE_KEYS = frozenset({76, 77, 78, 79, 90, 91, 92})
SCALARS = {"int8": "INT8", "int16": "INT16", "int32": "INT32", "int64": "INT64",
           "bool": "BOOLEAN", "uuid": "UUID", "string": "COMPACT_STRING",
           "bytes": "COMPACT_BYTES", "records": "COMPACT_RECORDS"}  # fmt: skip


def _kind(f) -> str:
    if f.is_struct:
        return "[]struct" if f.is_array else "struct"
    if f.is_array:
        return "[]" + SCALARS[f.element_type]
    return SCALARS[f.type]


def ours(message, version: int, path: str = "") -> list[tuple[str, str, bool | None]]:
    out = []
    for f in message.fields if path == "" else message:
        if version not in f.versions or version in f.tagged:
            continue
        p = f"{path}.{f.name}" if path else f.name
        nullable = None if f.is_struct and not f.is_array else version in f.nullable
        out.append((p, _kind(f), nullable))
        if f.is_struct:
            out += ours(f.fields, version, p)
    return out


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> dict[str, dict[tuple[str, int], list]]:
    with java.deps_or_fail():
        cp4 = java.compile_app("SchemaDump.java", tmp_path_factory.mktemp("dump"), clients4=True)
        cp39 = cp4.split(":", 1)[0] + ":" + java.classpath()
        cp44 = cp4.split(":", 1)[0] + ":" + java.kafka4_classpath()
    names = [n for pair in MESSAGES.values() for n in pair]
    out = {}
    for label, cp in zip(LABELS, (cp39, cp4, cp44), strict=True):
        cmd = java.java_command("SchemaDump", names, cp=cp, log4j=None)
        text = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout
        got: dict[tuple[str, int], list] = {}
        for line in text.splitlines():
            msg, v, path, kind, nullable = line.split()
            kind = kind.replace("NULLABLE_", "")
            if kind.startswith("COMPACT_ARRAY("):
                kind = "[]" + kind[len("COMPACT_ARRAY(") : -1]
            is_struct = kind in ("struct", "[]struct")
            null = None if kind == "struct" else nullable == "true"
            got.setdefault((msg, int(v[1:])), []).append(
                (path, kind, null if not is_struct or kind == "[]struct" else None)
            )
        out[label] = got
    return out


@pytest.mark.parametrize("key", sorted(MESSAGES))
def test_layouts_match_kafkas_generated_classes(key, dumps):
    api = SCHEMAS.by_key[key]
    checked = 0
    for message, java_name in zip((api.request, api.response), MESSAGES[key], strict=True):
        for v in range(api.request.versions.lo, api.request.versions.hi + 1):
            for label in ("4.4",) if key in SHARE_KEYS else LABELS:
                theirs = dumps[label].get((java_name, v))
                if theirs is None:
                    continue  # this client version does not know v
                assert ours(message, v) == theirs, (java_name, v, label)
                checked += 1
    assert checked >= 2
