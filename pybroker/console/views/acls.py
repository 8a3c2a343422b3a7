"""``/acls``: every ACL binding, as DescribeAcls answers the viewer (which needs DESCRIBE on
the cluster, as Kafka's does)."""

from __future__ import annotations

from collections.abc import Mapping

from pybroker.console.configs import AclRow, Acls
from pybroker.console.html import esc, table
from pybroker.console.listing import Column, arrange, filter_form, headers, order
from pybroker.errors import ErrorCode


def _key(*names: str):  # noqa: ANN202
    return lambda a: tuple(getattr(a, n) for n in names)


COLUMNS = (
    Column("type", "resource type", _key("resource_type", "resource_name")),
    Column("name", "resource name", _key("resource_name", "resource_type")),
    Column("pattern", "pattern type", _key("pattern_type", "resource_name")),
    Column("principal", "principal", _key("principal", "resource_name")),
    Column("host", "host", _key("host", "principal")),
    Column("operation", "operation", _key("operation", "resource_name")),
    Column("permission", "permission", _key("permission", "resource_name")),
)


def _text(a: AclRow) -> str:
    return " ".join(
        (a.resource_type, a.resource_name, a.pattern_type, a.principal, a.host, a.operation,
         a.permission)
    )  # fmt: skip


def render(got: Acls, params: Mapping[str, str]) -> str:
    if got.error == ErrorCode.SECURITY_DISABLED:
        return (
            '<p class="note" id="acls-disabled">No authorizer is configured on the broker '
            "(authorizer.class.name is unset): there are no ACLs, and every principal may do "
            "everything.</p>"
        )
    if got.error:
        return f'<p class="bad" id="acls-error">{esc(got.message)}</p>'
    o = order(params, COLUMNS, "type")
    rows = arrange(got.rows, COLUMNS, o, _text)
    grid = table(
        headers(COLUMNS, o, params),
        (
            [
                esc(a.resource_type),
                esc(a.resource_name),
                esc(a.pattern_type),
                esc(a.principal),
                esc(a.host),
                esc(a.operation),
                f'<span class="{"bad" if a.permission == "DENY" else "ok"}">{esc(a.permission)}</span>',
            ]
            for a in rows
        ),
        tid="acls",
        safe_headers=True,
    )
    return (
        '<p class="note">Every ACL binding, as kafka-acls --list shows them (super.users need '
        "none).</p>"
        + filter_form(params, o, "by any field", len(rows), len(got.rows), "acls")
        + grid
    )
