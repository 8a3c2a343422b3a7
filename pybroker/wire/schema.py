"""Kafka message schemas as data: our own declarations of the request and response layouts, in
the shape of Apache Kafka's message specs (common/message/*.json) but written as Python data
with snake_case names.  One generic codec (``pybroker.wire.codec``) serves every API and
version from them; nothing else in pybroker knows byte layouts of messages, and
``tests/test_schema_crosscheck.py`` compares every declaration with Kafka's specs.  A
declaration is a tree of :class:`Field` with Kafka's type spellings and version ranges;
decoded messages are plain dicts.  Types, flexible versions and defaults: docs/internals.md
("pybroker/wire/schema.py").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SCALARS = frozenset({"int8", "int16", "int32", "int64", "uint16", "float64", "bool", "uuid"})
BLOBS = frozenset({"string", "bytes", "records"})


@dataclass(frozen=True)
class VersionRange:
    lo: int
    hi: int  # inclusive; a large number for "N+"

    @staticmethod
    def parse(spec: str) -> VersionRange:
        spec = spec.strip()
        if spec == "none":
            return VersionRange(1, 0)  # empty
        if spec.endswith("+"):
            return VersionRange(int(spec[:-1]), 0x7FFF)
        if "-" in spec:
            lo, hi = spec.split("-")
            return VersionRange(int(lo), int(hi))
        v = int(spec)
        return VersionRange(v, v)

    def __contains__(self, version: int) -> bool:
        return self.lo <= version <= self.hi

    def empty(self) -> bool:
        return self.lo > self.hi


@dataclass(frozen=True)
class Field:
    name: str
    type: str
    versions: VersionRange
    nullable: VersionRange
    tag: int | None
    tagged: VersionRange
    default: Any
    fields: tuple[Field, ...]
    # A field-level "flexibleVersions" override (RequestHeader's ClientId: "none").
    flexible_versions: VersionRange | None = None

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        return bool(self.fields)


def F(
    name: str,
    type: str,
    versions: str = "0+",
    *fields: Field,
    nullable: str = "none",
    tag: int | None = None,
    tagged: str | None = None,
    default: Any = None,
    flexible: str | None = None,
) -> Field:
    """Declare one field.  Nested fields (for struct and struct-array types) follow positionally."""
    if tag is not None and tagged is None:
        tagged = versions
    return Field(
        name=name,
        type=type,
        versions=VersionRange.parse(versions),
        nullable=VersionRange.parse(nullable),
        tag=tag,
        tagged=VersionRange.parse(tagged or "none"),
        default=default,
        fields=tuple(fields),
        flexible_versions=VersionRange.parse(flexible) if flexible is not None else None,
    )


@dataclass(frozen=True)
class Message:
    """One request or response layout of an API across the versions we declare."""

    name: str  # Kafka's name, e.g. "ProduceRequest"
    versions: VersionRange  # the versions declared here (may differ from Kafka's validVersions)
    flexible: VersionRange  # Kafka's flexibleVersions
    fields: tuple[Field, ...]


@dataclass(frozen=True)
class Api:
    key: int
    name: str  # e.g. "Produce"
    request: Message
    response: Message


def api(
    key: int,
    name: str,
    *,
    versions: str,
    flexible: str,
    request: list[Field],
    response: list[Field],
) -> Api:
    vr = VersionRange.parse(versions)
    fx = VersionRange.parse(flexible)
    return Api(
        key=key,
        name=name,
        request=Message(name + "Request", vr, fx, tuple(request)),
        response=Message(name + "Response", vr, fx, tuple(response)),
    )


@dataclass
class _Registry:
    by_key: dict[int, Api] = field(default_factory=dict)

    def add(self, a: Api) -> Api:
        if a.key in self.by_key:
            raise ValueError(f"api key {a.key} declared twice")
        self.by_key[a.key] = a
        return a


SCHEMAS = _Registry()


def declare(a: Api) -> Api:
    """Register a declared API; each module in pybroker.wire.messages calls this once."""
    return SCHEMAS.add(a)


# Header layouts (RequestHeader.json / ResponseHeader.json).  Request header v0 has no client
# id, v1 adds it, v2 adds tagged fields; ClientId stays a classic int16-length nullable string
# even in v2.  Response header v0 is the correlation id; v1 adds tagged fields.
REQUEST_HEADER = Message(
    "RequestHeader",
    VersionRange(0, 2),
    VersionRange(2, 0x7FFF),
    (
        F("request_api_key", "int16"),
        F("request_api_version", "int16"),
        F("correlation_id", "int32"),
        F("client_id", "string", "1+", nullable="1+", flexible="none"),
    ),
)
RESPONSE_HEADER = Message(
    "ResponseHeader",
    VersionRange(0, 1),
    VersionRange(1, 0x7FFF),
    (F("correlation_id", "int32"),),
)
