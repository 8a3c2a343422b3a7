"""Configs and ACLs as the console shows them, read through the Kafka API handlers in process
(DescribeConfigs, DescribeAcls) as the viewer, so their rules apply: DESCRIBE_CONFIGS on the
topic or the cluster, DESCRIBE on the cluster for ACLs (Kafka's DescribeAcls rule), sensitive
values masked (the console never shows a value DescribeConfigs marks sensitive, whatever the
handler put in it).  ``describe_configs`` is the console's only dependency on the config
model: its answer is the DescribeConfigs response's entries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pybroker.console.auth import Viewer
from pybroker.errors import ErrorCode
from pybroker.handlers.describe_acls import describe_acls
from pybroker.handlers.describe_configs import describe_configs as describe_configs_handler
from pybroker.security.acl import Operation, PatternType, Permission, ResourceType
from pybroker.wire.messages.describe_configs import config_source_name

if TYPE_CHECKING:
    from pybroker.services import BrokerServices

TOPIC, BROKER = 2, 4  # DescribeConfigs resource types


@dataclass(slots=True)
class ConfigRow:
    name: str
    value: str | None  # None: null, or hidden because sensitive
    source: str
    is_default: bool
    sensitive: bool
    read_only: bool


@dataclass
class Configs:
    rows: list[ConfigRow]
    error: int = 0  # a Kafka error code: 0, or why nothing is shown
    message: str = ""


async def describe_configs(
    broker: BrokerServices, viewer: Viewer, resource_type: int, name: str
) -> Configs:
    """Every config of one resource, as DescribeConfigs (v4, no synonyms) answers the viewer."""
    ctx = viewer.context(broker, 32, 4)
    resp = await describe_configs_handler(
        ctx,
        {
            "resources": [
                {"resource_type": resource_type, "resource_name": name, "configuration_keys": None}
            ],
            "include_synonyms": False,
            "include_documentation": False,
        },
    )
    (r,) = resp["results"]
    if r["error_code"] != ErrorCode.NONE:
        return Configs([], r["error_code"], r["error_message"] or ErrorCode(r["error_code"]).name)
    rows = [
        ConfigRow(
            c["name"],
            None if c["is_sensitive"] else c["value"],
            config_source_name(c["config_source"]),
            c["is_default"],
            c["is_sensitive"],
            c["read_only"],
        )
        for c in r["configs"]
    ]
    return Configs(sorted(rows, key=lambda c: c.name))


@dataclass(slots=True)
class AclRow:
    resource_type: str
    resource_name: str
    pattern_type: str
    principal: str
    host: str
    operation: str
    permission: str


@dataclass
class Acls:
    rows: list[AclRow]
    error: int = 0
    message: str = ""


def _name(enum: Any, value: int) -> str:
    try:
        return enum(value).name
    except ValueError:
        return str(value)


async def acls(broker: BrokerServices, viewer: Viewer) -> Acls:
    """Every ACL binding, as DescribeAcls (v3, a filter matching any) answers the viewer."""
    ctx = viewer.context(broker, 29, 3)
    resp = await describe_acls(
        ctx,
        {
            "resource_type_filter": int(ResourceType.ANY),
            "resource_name_filter": None,
            "pattern_type_filter": int(PatternType.ANY),
            "principal_filter": None,
            "host_filter": None,
            "operation": int(Operation.ANY),
            "permission_type": int(Permission.ANY),
        },
    )
    if resp["error_code"] != ErrorCode.NONE:
        return Acls([], resp["error_code"], resp["error_message"] or "")
    rows = [
        AclRow(
            _name(ResourceType, r["resource_type"]),
            r["resource_name"],
            _name(PatternType, r["pattern_type"]),
            a["principal"],
            a["host"],
            _name(Operation, a["operation"]),
            _name(Permission, a["permission_type"]),
        )
        for r in resp["resources"]
        for a in r["acls"]
    ]
    return Acls(rows)
