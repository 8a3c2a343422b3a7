"""``/groups`` (the list) and ``/groups/<id>`` (members, offsets, lag, lag chart)."""

from __future__ import annotations

from pybroker.console.html import dl, esc, link, num, table, url
from pybroker.console.state import GroupDetail, GroupRow


def render_list(rows: list[GroupRow]) -> str:
    grid = table(
        ["group", "state", "protocol type", "members", "total lag"],
        (
            [
                link(f"/groups/{url(g.group_id)}", g.group_id),
                esc(g.state),
                esc(g.protocol_type or g.group_type),
                num(g.members),
                num(g.lag),
            ]
            for g in rows
        ),
        tid="groups",
    )
    return (
        f'<p><span id="groups-total">{num(len(rows))}</span> groups coordinated by this '
        "broker (each broker lists the groups it coordinates).</p>" + grid
    )


def render_group(g: GroupDetail, chart: str) -> str:
    facts = dl(
        [
            ("state", f'<span id="group-state">{esc(g.state)}</span>'),
            ("protocol type", esc(g.protocol_type or g.group_type)),
            ("protocol / assignor", esc(g.protocol) if g.protocol else "&ndash;"),
            ("members", num(len(g.members))),
            (
                "total lag",
                f'<span id="total-lag">{num(sum(r.lag for r in g.offsets if r.lag is not None))}</span>',
            ),
        ]
    )
    members = table(
        ["member id", "instance id", "client id", "host", "assignment"],
        (
            [
                esc(m.member_id),
                esc(m.instance_id) if m.instance_id else "&ndash;",
                esc(m.client_id),
                esc(m.host),
                esc("; ".join(f"{t}: {','.join(map(str, ps))}" for t, ps in m.assignment)),
            ]
            for m in g.members
        ),
        tid="members",
    )
    offsets = table(
        ["topic", "partition", "committed offset", "log end (high watermark)", "lag"],
        (
            [
                link(f"/topics/{url(r.topic)}", r.topic),
                str(r.partition),
                num(r.committed),
                num(r.log_end),
                f'<span class="lag">{num(r.lag)}</span>',
            ]
            for r in g.offsets
        ),
        tid="offsets",
    )
    hidden = (
        f'<p class="note">Offsets of {num(g.hidden_topics)} topic(s) you may not describe are not shown.</p>'
        if g.hidden_topics
        else ""
    )
    return (
        f"{facts}<h2>Lag over time</h2>{chart}<h2>Members</h2>{members}"
        f"<h2>Committed offsets and lag</h2>{offsets}{hidden}"
    )
