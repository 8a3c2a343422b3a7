"""``/groups`` (the list) and ``/groups/<id>`` (members, every assigned or committed partition
with its lag, the lag chart)."""

from __future__ import annotations

from collections.abc import Mapping

from pybroker.console.html import assignment, dl, esc, link, num, table, url
from pybroker.console.listing import Column, arrange, filter_form, headers, order
from pybroker.console.state import GroupDetail, GroupRow, OffsetRow

DASH = "-"  # kafka-consumer-groups prints "-" for what a partition does not have

LIST_COLUMNS = (
    Column("group", "group", lambda g: g.group_id),
    Column("state", "state", lambda g: g.state),
    Column("type", "protocol type", lambda g: g.protocol_type or g.group_type),
    Column("members", "members", lambda g: g.members, True),
    Column("lag", "total lag", lambda g: g.lag, True),
    Column("uncommitted", "assigned without a commit", lambda g: g.uncommitted, True),
)


def render_list(rows: list[GroupRow], params: Mapping[str, str], brokers: int = 1) -> str:
    o = order(params, LIST_COLUMNS, "group")
    got = arrange(rows, LIST_COLUMNS, o, lambda g: f"{g.group_id} {g.state}")
    grid = table(
        headers(LIST_COLUMNS, o, params),
        (
            [
                link(f"/groups/{url(g.group_id)}", g.group_id),
                esc(g.state),
                esc(g.protocol_type or g.group_type),
                num(g.members),
                num(g.lag),
                f'<span class="bad">{num(g.uncommitted)}</span>' if g.uncommitted else "0",
            ]
            for g in got
        ),
        tid="groups",
        safe_headers=True,
    )
    scope = (
        "groups coordinated by this broker (each broker lists the groups it coordinates)"
        if brokers > 1
        else "groups (this broker coordinates every group)"
    )
    return (
        f'<p><span id="groups-total">{num(len(rows))}</span> {scope}. Total lag counts the '
        "partitions with a committed offset; assigned partitions without one are counted "
        "apart.</p>"
        + filter_form(params, o, "groups by id or state", len(got), len(rows), "groups")
        + grid
    )


def _member(r: OffsetRow) -> tuple[str, str, str]:
    m = r.member
    if m is None:
        return DASH, DASH, DASH
    return esc(m.member_id), esc(m.host), esc(m.client_id)


OFFSET_COLUMNS = (
    Column("topic", "topic", lambda r: (r.topic, r.partition)),
    Column("partition", "partition", lambda r: (r.partition, r.topic)),
    Column("committed", "committed offset", lambda r: r.committed, True),
    Column("end", "log end (high watermark)", lambda r: r.log_end, True),
    Column("lag", "lag", lambda r: r.lag, True),
    Column("consumer", "consumer id", lambda r: r.member.member_id if r.member else None),
    Column("host", "host", lambda r: r.member.host if r.member else None),
    Column("client", "client id", lambda r: r.member.client_id if r.member else None),
)


def _text(r: OffsetRow) -> str:
    m = r.member
    return f"{r.topic} {m.member_id} {m.client_id} {m.host}" if m else r.topic


def render_group(g: GroupDetail, chart: str, params: Mapping[str, str] | None = None) -> str:
    params = params or {}
    known = [r.lag for r in g.offsets if r.lag is not None]
    uncommitted = g.uncommitted
    facts = dl(
        [
            ("state", f'<span id="group-state">{esc(g.state)}</span>'),
            ("protocol type", esc(g.protocol_type or g.group_type)),
            ("protocol / assignor", esc(g.protocol) if g.protocol else "&ndash;"),
            ("members", num(len(g.members))),
            ("total lag", f'<span id="total-lag">{num(sum(known))}</span>'),
            (
                "assigned without a commit",
                f'<span id="uncommitted" class="{"bad" if uncommitted else ""}">'
                f"{num(uncommitted)}</span>",
            ),
        ]
    )
    lag_note = (
        f'<p class="note" id="uncommitted-note">{num(uncommitted)} assigned partition(s) have '
        'no committed offset ("-"): their lag is unknown and not in the total lag.</p>'
        if uncommitted
        else ""
    )
    members = table(
        ["member id", "instance id", "client id", "host", "assignment"],
        (
            [
                esc(m.member_id),
                esc(m.instance_id) if m.instance_id else "&ndash;",
                esc(m.client_id),
                esc(m.host),
                assignment(m.assignment),
            ]
            for m in g.members
        ),
        tid="members",
    )
    o = order(params, OFFSET_COLUMNS, "topic")
    got = arrange(g.offsets, OFFSET_COLUMNS, o, _text)
    rows = []
    for r in got:
        consumer, host, client = _member(r)
        rows.append(
            [
                link(f"/topics/{url(r.topic)}", r.topic),
                str(r.partition),
                num(r.committed) if r.committed is not None else DASH,
                num(r.log_end),
                f'<span class="lag">{num(r.lag) if r.committed is not None else DASH}</span>',
                consumer,
                host,
                client,
            ]
        )
    offsets = table(headers(OFFSET_COLUMNS, o, params), rows, tid="offsets", safe_headers=True)
    hidden = (
        f'<p class="note">Offsets of {num(g.hidden_topics)} topic(s) you may not describe are not shown.</p>'
        if g.hidden_topics
        else ""
    )
    return (
        f"{facts}{lag_note}<h2>Lag over time</h2>{chart}<h2>Members</h2>{members}"
        "<h2>Partitions: committed offsets, assignment and lag</h2>"
        + filter_form(
            params, o, "by topic, consumer, client or host", len(got), len(g.offsets), "offsets"
        )
        + offsets
        + hidden
    )
