"""Cross-check our message declarations against Apache Kafka's JSON message specs.

kafka-python (a test-only dependency) ships Kafka's specs under
``kafka/protocol/schemas/resources/*.json``.  For every API registered in
``pybroker.wire.schema.SCHEMAS`` and for the request/response headers, and for every version in
the intersection of our declared range and the spec's ``validVersions``, the comparison walks
both trees and checks, struct by struct: the ordered list of fields present in that version,
their snake_case names, types (including struct type names), nullability, tag and
tagged-ness, default, and a field-level ``flexibleVersions`` override; plus the API key, the
message names and the message-level ``flexibleVersions``.

Versions we declare below the spec's ``validVersions`` (Kafka 4.0 removed some old versions
from its specs; older clients still send them) cannot be checked against the spec; those are
checked against kafka-python's legacy hand-written classes in ``kafka.protocol.old`` instead
(field order, names, nesting and wire types), and, like every other declared version Kafka 3.9
knows, field by field against Kafka 3.9.0's own specs, read from the kafka-clients jar that
scripts/fetch-java-deps caches (skipped without it).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest

import pybroker.wire.messages  # noqa: F401  (registers every declaration)
from pybroker.wire.schema import (
    REQUEST_HEADER,
    RESPONSE_HEADER,
    SCHEMAS,
    Field,
    Message,
    VersionRange,
    api,
)

# Located without importing kafka (its import emits DeprecationWarnings from importlib).
_KAFKA = importlib.util.find_spec("kafka")
assert _KAFKA is not None and _KAFKA.submodule_search_locations, "kafka-python is not installed"
SPEC_DIR = Path(_KAFKA.submodule_search_locations[0]) / "protocol" / "schemas" / "resources"
INT_TYPES = frozenset({"int8", "int16", "int32", "int64", "uint16"})


# --------------------------------------------------------------------------- spec loading


def strip_comments(text: str) -> str:
    """Drop ``//`` comments, leaving ``//`` inside JSON strings alone."""
    return re.sub(
        r'"(?:\\.|[^"\\])*"|//[^\n]*',
        lambda m: m.group(0) if m.group(0).startswith('"') else "",
        text,
    )


@cache
def load_spec(name: str) -> dict[str, Any]:
    return json.loads(strip_comments((SPEC_DIR / f"{name}.json").read_text()))


def snake(name: str) -> str:
    """Kafka's CamelCase field name -> our snake_case name."""
    s = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s).lower()


def spec_default(type_: str, value: Any) -> Any:
    """A spec ``default`` converted to the Python value our declarations use."""
    if not isinstance(value, str):
        return value  # a few specs write JSON numbers/booleans
    if type_ in INT_TYPES:
        return int(value, 0)  # "-1", "0x7fffffff"
    if type_ == "bool":
        return {"true": True, "false": False}[value]
    if type_ == "float64":
        return float(value)
    if value == "null":
        return None
    return value


def vr(spec: str | None) -> VersionRange:
    return VersionRange.parse(spec if spec is not None else "none")


def in_range(version: int, r: VersionRange | None) -> bool:
    return r is not None and version in r


# --------------------------------------------------------------------------- comparison


def compare_fields(
    ours: tuple[Field, ...],
    spec: list[dict[str, Any]],
    version: int,
    path: str,
    common: dict[str, list[dict[str, Any]]],
) -> list[str]:
    """Differences between our fields and the spec's fields of one struct, in one version."""
    errors: list[str] = []
    ours_v = [f for f in ours if version in f.versions]
    spec_v = [s for s in spec if version in vr(s["versions"])]
    ours_names = [f.name for f in ours_v]
    spec_names = [snake(s["name"]) for s in spec_v]
    if ours_names != spec_names:
        return [f"{path} v{version}: fields {ours_names} != spec {spec_names}"]
    for f, s in zip(ours_v, spec_v, strict=True):
        where = f"{path}.{f.name} v{version}"
        if f.type != s["type"]:
            errors.append(f"{where}: type {f.type!r} != spec {s['type']!r}")
        if (version in f.nullable) != in_range(version, vr(s.get("nullableVersions"))):
            errors.append(f"{where}: nullable {version in f.nullable} differs from spec")
        spec_tagged = "tag" in s and version in vr(s.get("taggedVersions"))
        ours_tagged = f.tag is not None and version in f.tagged
        if ours_tagged != spec_tagged:
            errors.append(f"{where}: tagged {ours_tagged} != spec {spec_tagged}")
        elif ours_tagged and f.tag != s["tag"]:
            errors.append(f"{where}: tag {f.tag} != spec {s['tag']}")
        want_default = spec_default(s["type"], s["default"]) if "default" in s else None
        if f.default != want_default or type(f.default) is not type(want_default):
            errors.append(f"{where}: default {f.default!r} != spec {want_default!r}")
        ours_flex = getattr(f, "flexible_versions", None)
        spec_flex = s.get("flexibleVersions")
        if spec_flex is not None or ours_flex is not None:
            if (
                ours_flex is None
                or spec_flex is None
                or (version in ours_flex) != (version in vr(spec_flex))
            ):
                errors.append(f"{where}: field flexibleVersions {ours_flex} != spec {spec_flex!r}")
        children = s.get("fields")
        if children is None and s["type"].removeprefix("[]") in common:
            children = common[s["type"].removeprefix("[]")]
        errors += compare_fields(f.fields, children or [], version, f"{path}.{f.name}", common)
    return errors


def compare_message(msg: Message, spec: dict[str, Any]) -> list[str]:
    """Every difference between one declared message and its spec, over the shared versions."""
    errors: list[str] = []
    if msg.name != spec["name"]:
        errors.append(f"{msg.name}: name differs from spec {spec['name']!r}")
    valid = vr(spec["validVersions"])
    flex = vr(spec.get("flexibleVersions", "none"))
    for v in range(0, 200):
        if (v in msg.flexible) != (v in flex):
            errors.append(
                f"{msg.name}: flexible {msg.flexible} != spec {spec.get('flexibleVersions')!r}"
            )
            break
    shared = [v for v in range(msg.versions.lo, msg.versions.hi + 1) if v in valid]
    if not shared:
        errors.append(f"{msg.name}: no version shared with spec {spec['validVersions']!r}")
    common = {c["name"]: c["fields"] for c in spec.get("commonStructs", [])}
    for v in shared:
        errors += compare_fields(msg.fields, spec["fields"], v, msg.name, common)
    return list(dict.fromkeys(errors))  # a field differing in many versions: report once per text


def spec_name(msg: Message) -> str:
    return msg.name


# APIs whose specs kafka-python does not ship: checked against Kafka's generated message
# classes instead (compat_tests/test_java_schemas.py, kafka-clients 3.9.0, 4.1.1 and 4.4.0).
CHECKED_AGAINST_JAVA = {
    68: "ConsumerGroupHeartbeat", 69: "ConsumerGroupDescribe",
    76: "ShareGroupHeartbeat", 77: "ShareGroupDescribe", 78: "ShareFetch",
    79: "ShareAcknowledge", 90: "DescribeShareGroupOffsets", 91: "AlterShareGroupOffsets",
    92: "DeleteShareGroupOffsets",
}  # fmt: skip
APIS = sorted(
    (a for a in SCHEMAS.by_key.values() if a.key not in CHECKED_AGAINST_JAVA), key=lambda a: a.key
)


def test_all_expected_apis_declared() -> None:
    expected = {
        0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 8: "OffsetCommit",
        9: "OffsetFetch", 10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat",
        13: "LeaveGroup", 14: "SyncGroup", 15: "DescribeGroups", 16: "ListGroups",
        18: "ApiVersions", 19: "CreateTopics", 20: "DeleteTopics", 22: "InitProducerId",
        21: "DeleteRecords", 23: "OffsetForLeaderEpoch", 29: "DescribeAcls",
        30: "CreateAcls", 31: "DeleteAcls", 32: "DescribeConfigs", 33: "AlterConfigs",
        35: "DescribeLogDirs", 37: "CreatePartitions", 42: "DeleteGroups",
        43: "ElectLeaders", 44: "IncrementalAlterConfigs", 46: "ListPartitionReassignments",
        47: "OffsetDelete", 48: "DescribeClientQuotas", 49: "AlterClientQuotas",
        60: "DescribeCluster", 61: "DescribeProducers",
        66: "ListTransactions", 75: "DescribeTopicPartitions",
    }  # fmt: skip
    expected.update(CHECKED_AGAINST_JAVA)
    declared = {a.key: a.name for a in SCHEMAS.by_key.values()}
    for key in CHECKED_AGAINST_JAVA:  # still not in kafka-python? else move them back
        assert not (SPEC_DIR / f"{declared.get(key, '?')}Request.json").exists(), key
    missing = {k: n for k, n in expected.items() if declared.get(k) != n}
    assert not missing, f"not declared: {missing}"


@pytest.mark.parametrize("a", APIS, ids=lambda a: f"{a.key}-{a.name}")
def test_api_matches_spec(a) -> None:
    errors = []
    for msg in (a.request, a.response):
        path = SPEC_DIR / f"{msg.name}.json"
        assert path.exists(), f"kafka-python ships no spec {path.name}"
        spec = load_spec(msg.name)
        if spec["apiKey"] != a.key:
            errors.append(f"{msg.name}: api key {a.key} != spec {spec['apiKey']}")
        if spec["type"] != ("request" if msg is a.request else "response"):
            errors.append(f"{msg.name}: spec type is {spec['type']!r}")
        errors += compare_message(msg, spec)
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("msg", [REQUEST_HEADER, RESPONSE_HEADER], ids=spec_name)
def test_header_matches_spec(msg: Message) -> None:
    errors = compare_message(msg, load_spec(msg.name))
    assert not errors, "\n".join(errors)


# --------------------------------------------------------------------------- the checker checks


def test_snake_case_conversion() -> None:
    assert snake("ThrottleTimeMs") == "throttle_time_ms"
    assert snake("TopicID") == "topic_id"
    assert snake("TopicId") == "topic_id"
    assert snake("IsFutureKey") == "is_future_key"
    assert snake("Acks") == "acks"
    assert snake("ISRNodes") == "isr_nodes"


def test_spec_default_conversion() -> None:
    assert spec_default("int32", "-1") == -1
    assert spec_default("int32", "0x7fffffff") == 0x7FFFFFFF
    assert spec_default("int32", -2) == -2
    assert spec_default("bool", "true") is True
    assert spec_default("bool", False) is False
    assert spec_default("string", "null") is None
    assert spec_default("string", "") == ""


def test_strip_comments_keeps_slashes_in_strings() -> None:
    assert json.loads(strip_comments('{"a": "http://x" // c\n}')) == {"a": "http://x"}


def _perturb(fields: tuple[Field, ...], target: str, **changes: Any) -> tuple[Field, ...]:
    """A copy of ``fields`` with the (first, depth-first) field called ``target`` changed."""
    out = []
    done = False
    for f in fields:
        if not done and f.name == target:
            f = dataclasses.replace(f, **changes)
            done = True
        elif not done:
            new_children = _perturb(f.fields, target, **changes)
            if new_children != f.fields:
                f = dataclasses.replace(f, fields=new_children)
                done = True
        out.append(f)
    return tuple(out)


@pytest.mark.parametrize(
    ("field", "changes", "expect"),
    [
        ("throttle_time_ms", {"name": "throttle_ms"}, "fields ["),
        ("throttle_time_ms", {"versions": VersionRange.parse("5+")}, "fields ["),
        ("log_start_offset", {"versions": VersionRange.parse("0-10")}, "fields ["),
        ("log_append_time_ms", {"type": "int32"}, "type 'int32'"),
        ("log_append_time_ms", {"default": 0}, "default 0"),
        ("error_message", {"nullable": VersionRange.parse("none")}, "nullable False"),
        ("current_leader", {"tag": 1}, "tag 1"),
        ("current_leader", {"tag": None}, "tagged False"),
        ("node_endpoints", {"type": "[]Node"}, "type '[]Node'"),
    ],
)
def test_comparison_reports_perturbed_declaration(field, changes, expect) -> None:
    produce = SCHEMAS.by_key[0]
    spec = load_spec("ProduceResponse")
    assert compare_message(produce.response, spec) == []
    broken = dataclasses.replace(
        produce.response, fields=_perturb(produce.response.fields, field, **changes)
    )
    assert broken.fields != produce.response.fields
    errors = compare_message(broken, spec)
    assert any(expect in e for e in errors), errors


def test_comparison_reports_wrong_flexible_versions_and_key() -> None:
    ipi = SCHEMAS.by_key[22]  # InitProducerId, flexible "2+"
    wrong = api(
        23,
        "InitProducerId",
        versions="0-4",
        flexible="3+",
        request=list(ipi.request.fields),
        response=list(ipi.response.fields),
    )
    errors = compare_message(wrong.request, load_spec("InitProducerIdRequest"))
    assert any("flexible" in e for e in errors), errors
    with pytest.raises(AssertionError, match="api key 23"):
        test_api_matches_spec(wrong)


# --------------------------------------------------------------------------- below validVersions

_LEGACY_MODULES = ("produce", "admin", "offset_for_leader_epoch", "fetch", "list_offsets", "commit")


def _legacy_class(name: str, version: int):
    for mod in _LEGACY_MODULES:
        m = importlib.import_module(f"kafka.protocol.old.{mod}")
        cls = getattr(m, f"{name}_v{version}", None)
        if cls is not None:
            return cls
    return None


def _legacy_type(t: Any) -> str:
    from kafka.protocol.old import types as lt

    scalars = {lt.Int8: "int8", lt.Int16: "int16", lt.Int32: "int32", lt.Int64: "int64"}
    scalars[lt.Boolean] = "bool"
    if t in scalars:
        return scalars[t]
    if isinstance(t, lt.String):
        return "string"
    if t is lt.Bytes or isinstance(t, lt.Bytes):
        return "bytes"
    if isinstance(t, lt.Array):
        inner = t.array_of
        return "[]struct" if isinstance(inner, lt.Schema) else "[]" + _legacy_type(inner)
    raise AssertionError(f"unexpected legacy type {t!r}")


def _our_wire_type(f: Field) -> str:
    if f.is_array and f.is_struct:
        return "[]struct"
    return {"records": "bytes"}.get(f.type, f.type)


# kafka-python's legacy DescribeLogDirsRequest_v0 declares Partitions as a single int32; in
# Kafka (and in the 4.x spec's field versions, which we follow) it is an array of int32.
_LEGACY_BUGS = {("DescribeLogDirsRequest", 0, "topics.partitions")}


def compare_legacy(fields: tuple[Field, ...], schema, version: int, msg: str, path="") -> list:
    errors = []
    ours = [f for f in fields if version in f.versions]
    if [f.name for f in ours] != list(schema.names):
        return [
            f"{msg} v{version} {path or '<top>'}: {[f.name for f in ours]} != legacy {list(schema.names)}"
        ]
    for f, t in zip(ours, schema.fields, strict=True):
        p = f"{path}.{f.name}" if path else f.name
        if (msg, version, p) in _LEGACY_BUGS:
            continue
        if _our_wire_type(f) != _legacy_type(t):
            errors.append(f"{msg} v{version} {p}: {f.type} != legacy {_legacy_type(t)}")
        elif f.is_struct:
            errors += compare_legacy(f.fields, t.array_of, version, msg, p)
    return errors


# Kafka 3.x's specs say "Version 1 is the same as version 0" and kafka-python has no legacy
# class: v0 must be laid out exactly as v1 (which the spec checks above cover).
_SAME_AS_NEXT_VERSION = {
    "AlterReplicaLogDirsRequest",
    "AlterReplicaLogDirsResponse",
    "WriteTxnMarkersRequest",  # Kafka 3.9: "Version 1 enables flexible versions."
    "WriteTxnMarkersResponse",
}


def _layout(fields: tuple[Field, ...], version: int) -> list:
    return [
        (f.name, f.type, _layout(f.fields, version) if f.is_struct else None)
        for f in fields
        if version in f.versions
    ]


_BELOW_SPEC = [
    (a, msg, v)
    for a in APIS
    for msg in (a.request, a.response)
    for v in range(msg.versions.lo, msg.versions.hi + 1)
    if v < vr(load_spec(msg.name)["validVersions"]).lo
]


def test_below_spec_versions_exist() -> None:
    # The APIs whose old versions Kafka 4.0 dropped from the specs but we still declare.
    got = sorted({(a.name, v) for a, _, v in _BELOW_SPEC})
    assert got == [
        ("AlterReplicaLogDirs", 0),
        ("CreateAcls", 0),
        ("CreateTopics", 0),
        ("CreateTopics", 1),
        ("DeleteAcls", 0),
        ("DeleteTopics", 0),
        ("DescribeAcls", 0),
        ("DescribeConfigs", 0),
        ("DescribeLogDirs", 0),
        ("Fetch", 0),
        ("Fetch", 1),
        ("Fetch", 2),
        ("Fetch", 3),
        ("ListOffsets", 0),
        ("OffsetCommit", 0),
        ("OffsetCommit", 1),
        ("OffsetFetch", 0),
        ("OffsetForLeaderEpoch", 0),
        ("OffsetForLeaderEpoch", 1),
        ("Produce", 0),
        ("Produce", 1),
        ("Produce", 2),
        ("WriteTxnMarkers", 0),
    ]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # importing kafka-python
@pytest.mark.parametrize(
    ("msg", "version"),
    [(msg, v) for _, msg, v in _BELOW_SPEC],
    ids=[f"{m.name}-v{v}" for _, m, v in _BELOW_SPEC],
)
def test_below_spec_versions_match_legacy_classes(msg: Message, version: int) -> None:
    assert version not in msg.flexible  # all of them predate flexible versions
    cls = _legacy_class(msg.name, version)
    if cls is None and msg.name in _SAME_AS_NEXT_VERSION:
        assert _layout(msg.fields, version) == _layout(msg.fields, version + 1)
        return
    assert cls is not None, f"no kafka.protocol.old class for {msg.name} v{version}"
    assert cls.API_VERSION == version
    errors = compare_legacy(msg.fields, cls.SCHEMA, version, msg.name)
    assert not errors, "\n".join(errors)


# --------------------------------------------------------------------------- Kafka 3.9's own specs

# Kafka 3.9 still serves the versions 4.0 removed (KIP-896), and its kafka-clients jar ships its
# message specs: every declared version Kafka 3.9 knows is checked against them, the old ones
# field by field like the rest (scripts/fetch-java-deps puts the jar under .cache/java/).
_ROOT = Path(__file__).resolve().parent.parent
_KAFKA_39_JARS = sorted(_ROOT.glob(".cache/java/kafka-3.9*/lib/kafka-clients-3.9*.jar"))


# Share groups (KIP-932) went GA in Kafka 4.2 at versions 3.9's early-access specs never had
# (3.9's v0 was removed): they are checked against kafka-clients 4.4.0's own specs instead.
_KAFKA_44_JARS = sorted(_ROOT.glob(".cache/java/kafka4-4.4.0/lib/kafka-clients-4.4.0.jar"))
KAFKA_4_APIS = {76, 77, 78, 79, 90, 91, 92}


def _jar_spec(jar_path: Path, name: str) -> dict[str, Any] | None:
    import zipfile

    with zipfile.ZipFile(jar_path) as jar:
        try:
            text = jar.read(f"common/message/{name}.json").decode()
        except KeyError:
            return None
    return json.loads(strip_comments(text))


@cache
def _kafka_39_spec(name: str) -> dict[str, Any] | None:
    return _jar_spec(_KAFKA_39_JARS[0], name)


@pytest.mark.skipif(
    not _KAFKA_39_JARS, reason="no kafka-clients 3.9 jar: run scripts/fetch-java-deps"
)
@pytest.mark.parametrize("a", sorted(SCHEMAS.by_key.values(), key=lambda a: a.key),
                         ids=lambda a: f"{a.key}-{a.name}")  # fmt: skip
def test_api_matches_kafka_39_spec(a) -> None:
    if a.key in KAFKA_4_APIS:
        pytest.skip("a Kafka 4.2+ API: test_api_matches_kafka_44_spec")
    errors = []
    for msg in (a.request, a.response):
        spec = _kafka_39_spec(msg.name)
        assert spec is not None, f"Kafka 3.9 has no spec {msg.name}"
        errors += compare_message(msg, spec)
    assert not errors, "\n".join(errors)


@pytest.mark.skipif(
    not _KAFKA_39_JARS, reason="no kafka-clients 3.9 jar: run scripts/fetch-java-deps"
)
def test_every_version_kafka_39_defines_below_ours_is_declared() -> None:
    # what Kafka 3.9 serves (tests/test_kafka39_versions.py) must be declared here first
    for a in SCHEMAS.by_key.values():
        if a.key in KAFKA_4_APIS:
            continue  # Kafka 4.x removed 3.9's early-access v0
        for msg in (a.request, a.response):
            spec = _kafka_39_spec(msg.name)
            assert spec is not None
            assert msg.versions.lo <= vr(spec["validVersions"]).lo, (msg.name, msg.versions)


@pytest.mark.skipif(
    not _KAFKA_44_JARS, reason="no kafka-clients 4.4.0 jar: run scripts/fetch-java-deps"
)
@pytest.mark.parametrize("key", sorted(KAFKA_4_APIS))
def test_api_matches_kafka_44_spec(key: int) -> None:
    a = SCHEMAS.by_key[key]
    errors = []
    for msg in (a.request, a.response):
        spec = _jar_spec(_KAFKA_44_JARS[0], msg.name)
        assert spec is not None, f"Kafka 4.4 has no spec {msg.name}"
        assert vr(spec["validVersions"]).hi == msg.versions.hi, (msg.name, msg.versions)
        errors += compare_message(msg, spec)
    assert not errors, "\n".join(errors)
