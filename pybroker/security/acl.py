"""Kafka's ACL model (org.apache.kafka.common.acl / resource) and its decision rules
(kafka.security.authorizer.AclAuthorizer), sans-I/O.

Codes are the protocol's (CreateAcls / DescribeAcls / DeleteAcls); names are the ones Kafka
writes into ZooKeeper (``Topic``, ``Read``, ``Allow``...).  ``Acls`` is an immutable index of
every binding; ``authorize`` answers Kafka's way: super users may do anything; a matching DENY
wins; then a matching ALLOW (READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS
implies DESCRIBE_CONFIGS; ALL matches every operation); a resource with no ACL at all is
allowed only with allow.everyone.if.no.acl.found.  A binding matches a resource when it is
LITERAL with the same name or the wildcard ``*``, or PREFIXED with a prefix of the name; and
a request when its principal is the request's or ``User:*`` and its host the client's or ``*``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


RESOURCE_NAMES = {
    ResourceType.TOPIC: "Topic",
    ResourceType.GROUP: "Group",
    ResourceType.CLUSTER: "Cluster",
    ResourceType.TRANSACTIONAL_ID: "TransactionalId",
    ResourceType.DELEGATION_TOKEN: "DelegationToken",
    ResourceType.USER: "User",
}
OPERATION_NAMES = {
    Operation.ALL: "All",
    Operation.READ: "Read",
    Operation.WRITE: "Write",
    Operation.CREATE: "Create",
    Operation.DELETE: "Delete",
    Operation.ALTER: "Alter",
    Operation.DESCRIBE: "Describe",
    Operation.CLUSTER_ACTION: "ClusterAction",
    Operation.DESCRIBE_CONFIGS: "DescribeConfigs",
    Operation.ALTER_CONFIGS: "AlterConfigs",
    Operation.IDEMPOTENT_WRITE: "IdempotentWrite",
    Operation.CREATE_TOKENS: "CreateTokens",
    Operation.DESCRIBE_TOKENS: "DescribeTokens",
}
PERMISSION_NAMES = {Permission.ALLOW: "Allow", Permission.DENY: "Deny"}
CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"

#: Kafka's AclEntry.supportedOperations per resource type (CreateAcls refuses others)
SUPPORTED_OPERATIONS = {
    ResourceType.TOPIC: {
        Operation.READ,
        Operation.WRITE,
        Operation.CREATE,
        Operation.DESCRIBE,
        Operation.DELETE,
        Operation.ALTER,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
    },
    ResourceType.GROUP: {Operation.READ, Operation.DESCRIBE, Operation.DELETE},
    ResourceType.CLUSTER: {
        Operation.CREATE,
        Operation.CLUSTER_ACTION,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
        Operation.IDEMPOTENT_WRITE,
        Operation.ALTER,
        Operation.DESCRIBE,
    },
    ResourceType.TRANSACTIONAL_ID: {Operation.DESCRIBE, Operation.WRITE},
    ResourceType.DELEGATION_TOKEN: {Operation.DESCRIBE},
    ResourceType.USER: {Operation.CREATE_TOKENS, Operation.DESCRIBE_TOKENS},
}
_IMPLIED = {
    Operation.DESCRIBE: {Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE,
                         Operation.ALTER},
    Operation.DESCRIBE_CONFIGS: {Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS},
}  # fmt: skip


@dataclass(frozen=True)
class Resource:
    type: ResourceType
    name: str
    pattern: PatternType = PatternType.LITERAL


@dataclass(frozen=True)
class Entry:
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def to_json(self) -> dict[str, str]:
        return {
            "principal": self.principal,
            "permissionType": PERMISSION_NAMES[self.permission],
            "operation": OPERATION_NAMES[self.operation],
            "host": self.host,
        }

    @classmethod
    def from_json(cls, d: dict[str, str]) -> Entry:
        ops = {v: k for k, v in OPERATION_NAMES.items()}
        perms = {v: k for k, v in PERMISSION_NAMES.items()}
        return cls(d["principal"], d["host"], ops[d["operation"]], perms[d["permissionType"]])


Binding = tuple[Resource, Entry]


@dataclass(frozen=True)
class Filter:
    """DescribeAcls / DeleteAcls filter: None / ANY fields match everything."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def matches(self, r: Resource, e: Entry) -> bool:
        if self.resource_type not in (ResourceType.ANY, r.type):
            return False
        if self.pattern == PatternType.MATCH:
            if self.name is None:
                pass
            elif r.pattern == PatternType.LITERAL:
                if r.name not in (self.name, WILDCARD):
                    return False
            elif r.pattern == PatternType.PREFIXED:
                if not self.name.startswith(r.name):
                    return False
        else:
            if self.pattern not in (PatternType.ANY, r.pattern):
                return False
            if self.name is not None and self.name != r.name:
                return False
        if self.principal is not None and self.principal != e.principal:
            return False
        if self.host is not None and self.host != e.host:
            return False
        if self.operation not in (Operation.ANY, e.operation):
            return False
        return self.permission in (Permission.ANY, e.permission)


class Acls:
    """Every binding, indexed by resource (literal by (type, name), prefixed by type)."""

    def __init__(self, bindings: dict[Resource, frozenset[Entry]] | None = None) -> None:
        self.by_resource: dict[Resource, frozenset[Entry]] = {
            r: es for r, es in (bindings or {}).items() if es
        }
        self._prefixed: dict[ResourceType, list[tuple[str, frozenset[Entry]]]] = {}
        for r, es in self.by_resource.items():
            if r.pattern == PatternType.PREFIXED:
                self._prefixed.setdefault(r.type, []).append((r.name, es))

    def bindings(self) -> Iterable[Binding]:
        for r, es in self.by_resource.items():
            for e in es:
                yield r, e

    def matching(self, rtype: ResourceType, name: str) -> list[Entry]:
        out: list[Entry] = []
        for n in (name, WILDCARD):
            out += self.by_resource.get(Resource(rtype, n, PatternType.LITERAL), ())
        for prefix, es in self._prefixed.get(rtype, ()):
            if name.startswith(prefix):
                out += es
        return out


def authorize_any(
    acls: Acls,
    principal: str,
    host: str,
    operation: Operation,
    rtype: ResourceType,
    *,
    super_users: frozenset[str] = frozenset(),
) -> bool:
    """Kafka's authorizeByResourceType: may the principal ``operation`` some resource of the
    type (an ALLOW binding that no DENY of a wider pattern, the wildcard or a prefix of its
    name, cancels)?  Used for idempotent producers' WRITE on any topic (KIP-679)."""
    if principal in super_users:
        return True

    def applies(e: Entry) -> bool:
        return (
            e.principal in (principal, WILDCARD_PRINCIPAL)
            and e.host in (host, WILDCARD)
            and e.operation in (Operation.ALL, operation)
        )

    denies = [
        r for r, e in acls.bindings() if r.type == rtype and e.permission == Permission.DENY
        and applies(e)
    ]  # fmt: skip
    for r, e in acls.bindings():
        if r.type != rtype or e.permission != Permission.ALLOW or not applies(e):
            continue
        cancelled = any(
            (d.pattern == PatternType.LITERAL and d.name in (WILDCARD, r.name))
            or (d.pattern == PatternType.PREFIXED and r.name.startswith(d.name))
            for d in denies
        )
        if not cancelled:
            return True
    return False


def authorize(
    acls: Acls,
    principal: str,
    host: str,
    operation: Operation,
    rtype: ResourceType,
    name: str,
    *,
    super_users: frozenset[str] = frozenset(),
    allow_if_no_acls: bool = False,
) -> bool:
    if principal in super_users:
        return True
    entries = acls.matching(rtype, name)
    if not entries:
        return allow_if_no_acls

    def applies(e: Entry) -> bool:
        return e.principal in (principal, WILDCARD_PRINCIPAL) and e.host in (host, WILDCARD)

    for e in entries:
        if e.permission == Permission.DENY and applies(e):
            if e.operation in (Operation.ALL, operation):
                return False
    allowed_ops = _IMPLIED.get(operation, {operation})
    for e in entries:
        if e.permission == Permission.ALLOW and applies(e):
            if e.operation == Operation.ALL or e.operation in allowed_ops:
                return True
    return False
