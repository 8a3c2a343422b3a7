"""``/groups/<id>`` of a share group (KIP-932): state, epochs, members and their assignments,
and per share-partition the start offset, lag and record counts (pybroker/console/share.py)."""

from __future__ import annotations

from collections.abc import Mapping

from pybroker.console.html import assignment, dl, esc, link, num, table, url
from pybroker.console.listing import Column, arrange, filter_form, headers, order
from pybroker.console.share import ShareGroupDetail

DASH = "-"

COLUMNS = (
    Column("topic", "topic", lambda r: (r.topic, r.partition)),
    Column("partition", "partition", lambda r: (r.partition, r.topic)),
    Column("start", "start offset", lambda r: r.start_offset, True),
    Column("lag", "lag", lambda r: r.lag, True),
    Column("inflight", "in flight (acquired)", lambda r: r.in_flight, True),
    Column("available", "available", lambda r: r.available, True),
    Column("acknowledged", "acknowledged past the start", lambda r: r.acknowledged, True),
    Column("archived", "archived past the start", lambda r: r.archived, True),
)


def _n(x: int | None) -> str:
    return num(x) if x is not None else DASH


def render_share_group(g: ShareGroupDetail, params: Mapping[str, str] | None = None) -> str:
    params = params or {}
    facts = dl(
        [
            ("state", f'<span id="group-state">{esc(g.state)}</span>'),
            ("type", "share (KIP-932)"),
            ("group epoch / assignment epoch", f"{g.group_epoch} / {g.assignment_epoch}"),
            ("assignor", "simple"),
            ("members", num(len(g.members))),
            ("total lag", f'<span id="total-lag">{_n(g.lag)}</span>'),
            (
                "in flight",
                f'<span id="in-flight">'
                f"{_n(sum(p.in_flight for p in g.partitions if p.in_flight is not None))}"
                "</span>",
            ),
        ]
    )
    members = table(
        ["member id", "client id", "host", "member epoch", "assignment"],
        (
            [
                esc(m.member_id),
                esc(m.client_id),
                esc(m.host),
                num(m.epoch),
                assignment(m.assignment),
            ]
            for m in g.members
        ),
        tid="members",
    )
    o = order(params, COLUMNS, "topic")
    got = arrange(g.partitions, COLUMNS, o, lambda r: r.topic)
    rows = table(
        headers(COLUMNS, o, params),
        (
            [
                link(f"/topics/{url(r.topic)}", r.topic),
                str(r.partition),
                _n(r.start_offset),
                f'<span class="lag">{_n(r.lag)}</span>',
                _n(r.in_flight),
                _n(r.available),
                num(r.acknowledged),
                num(r.archived),
            ]
            for r in got
        ),
        tid="share-partitions",
        safe_headers=True,
    )
    note = (
        '<p class="note">Records in flight and available are known to the partition\'s leader '
        'only: "-" for partitions led by another broker (open its console). Acknowledged and '
        "archived count the records past the start offset (the start moves over them once "
        "everything before them is done).</p>"
    )
    return (
        f"{facts}<h2>Members</h2>{members}<h2>Share-partitions</h2>"
        + filter_form(params, o, "by topic", len(got), len(g.partitions), "share-partitions")
        + rows
        + note
    )
