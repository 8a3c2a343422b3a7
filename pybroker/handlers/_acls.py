"""What CreateAcls, DescribeAcls and DeleteAcls share: Kafka's validation of bindings and
filters (AclApis / AclControlManager) and the wire form of a binding."""

from __future__ import annotations

from pybroker.coord.metadata.store import InvalidPathError, validate_path
from pybroker.security.acl import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    Binding,
    Entry,
    Filter,
    Operation,
    PatternType,
    Permission,
    Resource,
    ResourceType,
)
from pybroker.security.authorizer import resource_path


class InvalidAcl(ValueError):
    pass


def _enum(cls, value: int, what: str):
    try:
        return cls(value)
    except ValueError:
        raise InvalidAcl(f"Unknown {what} {value}") from None


def binding_from(c: dict, pattern_key: str = "resource_pattern_type") -> Binding:
    rtype = _enum(ResourceType, c["resource_type"], "resource type")
    pattern = _enum(PatternType, c.get(pattern_key, PatternType.LITERAL), "pattern type")
    op = _enum(Operation, c["operation"], "operation")
    perm = _enum(Permission, c["permission_type"], "permission type")
    name, principal, host = c["resource_name"], c["principal"], c["host"]
    if rtype in (ResourceType.ANY, ResourceType.UNKNOWN):
        raise InvalidAcl(f"Invalid resource type {rtype.name}")
    if pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidAcl(f"Invalid pattern type {pattern.name}")
    if op in (Operation.ANY, Operation.UNKNOWN) or perm in (Permission.ANY, Permission.UNKNOWN):
        raise InvalidAcl("Invalid operation or permission type")
    if not name:
        raise InvalidAcl("Resource name must not be empty")
    if rtype == ResourceType.CLUSTER and name != CLUSTER_NAME:
        raise InvalidAcl("The only valid name for the CLUSTER resource is kafka-cluster")
    resource = Resource(rtype, name, pattern)
    if "/" in name:  # AclAuthorizer.validateAclBinding: its ZooKeeper node would be nested
        raise InvalidAcl(f"ACL binding contains invalid resource name: {name:.200}")
    try:  # ".", "..", characters ZooKeeper refuses, too long: Kafka's ZooKeeper store fails
        validate_path(resource_path(resource))
    except InvalidPathError as e:
        raise InvalidAcl(f"ACL binding contains invalid resource name: {e}") from None
    if not principal or ":" not in principal or principal.startswith(":"):
        raise InvalidAcl(f"Invalid principal {principal!r}: expected PrincipalType:name")
    if op != Operation.ALL and op not in SUPPORTED_OPERATIONS.get(rtype, ()):
        raise InvalidAcl(f"Operation {op.name} is not supported for resource type {rtype.name}")
    if not host:
        raise InvalidAcl("Host must not be empty")
    return resource, Entry(principal, host, op, perm)


def filter_from(f: dict) -> Filter:
    rtype = _enum(ResourceType, f["resource_type_filter"], "resource type")
    pattern = _enum(PatternType, f.get("pattern_type_filter", PatternType.LITERAL), "pattern type")
    op = _enum(Operation, f["operation"], "operation")
    perm = _enum(Permission, f["permission_type"], "permission type")
    if ResourceType.UNKNOWN in (rtype,) or pattern == PatternType.UNKNOWN:
        raise InvalidAcl("Filter contains UNKNOWN elements")
    if op == Operation.UNKNOWN or perm == Permission.UNKNOWN:
        raise InvalidAcl("Filter contains UNKNOWN elements")
    return Filter(
        rtype,
        f["resource_name_filter"],
        pattern,
        f["principal_filter"],
        f["host_filter"],
        op,
        perm,
    )


def wire(r: Resource, e: Entry) -> dict:
    return {
        "resource_type": int(r.type),
        "resource_name": r.name,
        "pattern_type": int(r.pattern),
        "principal": e.principal,
        "host": e.host,
        "operation": int(e.operation),
        "permission_type": int(e.permission),
    }
