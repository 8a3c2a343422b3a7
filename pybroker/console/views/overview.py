"""``/``: the cluster overview."""

from __future__ import annotations

from pybroker.console.html import dl, esc, ids, link, num, table, url
from pybroker.console.state import Overview, PartitionRow

LIST_MAX = 1000  # rows shown of the under-replicated and offline lists


def _problems(rows: list[tuple[str, PartitionRow]], tid: str, what: str) -> str:
    if not rows:
        return f'<p class="ok" id="{tid}-none">No {esc(what)} partitions.</p>'
    more = (
        f'<p class="note">{num(len(rows) - LIST_MAX)} more not listed.</p>'
        if len(rows) > LIST_MAX
        else ""
    )
    return (
        table(
            ["topic", "partition", "leader", "replicas", "ISR"],
            (
                [
                    link(f"/topics/{url(t)}", t),
                    str(r.partition),
                    esc(r.leader),
                    ids(r.replicas),
                    ids(r.isr),
                ]
                for t, r in rows[:LIST_MAX]
            ),
            tid=tid,
        )
        + more
    )


def render(o: Overview) -> str:
    brokers = table(
        ["id", "host:port", "rack", "role"],
        (
            [
                esc(b),
                esc(f"{host}:{port}"),
                esc(rack) if rack else "&ndash;",
                "controller" if b == o.controller else "",
            ]
            for b, host, port, rack in o.brokers
        ),
        tid="brokers",
    )
    facts = dl(
        [
            ("cluster id", esc(o.cluster_id)),
            ("controller", f'<span id="controller">{esc(o.controller)}</span>'),
            ("brokers", f'<span id="broker-count">{num(len(o.brokers))}</span>'),
            ("topics", f'<span id="topic-count">{num(o.topics)}</span>'),
            ("partitions", f'<span id="partition-count">{num(o.partitions)}</span>'),
            ("under-replicated", f'<span id="urp-count">{num(len(o.under_replicated))}</span>'),
            ("offline", f'<span id="offline-count">{num(len(o.offline))}</span>'),
        ]
    )
    scope = (
        ""
        if o.cluster_described
        else '<p class="note">Counts cover only the topics you may describe.</p>'
    )
    return (
        f"{facts}{scope}<h2>Brokers</h2>{brokers}"
        f"<h2>Under-replicated partitions</h2>{_problems(o.under_replicated, 'urp', 'under-replicated')}"
        f"<h2>Offline partitions</h2>{_problems(o.offline, 'offline', 'offline')}"
    )
