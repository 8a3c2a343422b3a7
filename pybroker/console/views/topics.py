"""``/topics`` (the list) and ``/topics/<name>`` (partitions, configs, message browser)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from pybroker.console.html import dl, esc, ids, link, num, pager, query, size, table, url
from pybroker.console.records import FORMATS, Browse, render_bytes
from pybroker.console.state import PartitionRow, TopicRow

PAGE_ROWS = 1000  # partitions (or topics) per page


def render_list(rows: list[TopicRow], page: int) -> str:
    pages = max(1, -(-len(rows) // PAGE_ROWS))
    page = min(max(page, 1), pages)
    shown = rows[(page - 1) * PAGE_ROWS : page * PAGE_ROWS]
    grid = table(
        ["topic", "partitions", "replication factor", "size (local replicas)", "under-replicated"],
        (
            [
                link(f"/topics/{url(r.name)}", r.name),
                num(r.partitions),
                num(r.replication_factor),
                size(r.size),
                f'<span class="bad">{num(r.under_replicated)}</span>'
                if r.under_replicated
                else "0",
            ]
            for r in shown
        ),
        tid="topics",
    )
    return (
        f'<p><span id="topics-total">{num(len(rows))}</span> topics.</p>'
        + pager("/topics", page, pages)
        + grid
        + pager("/topics", page, pages)
    )


@dataclass
class TopicPage:
    name: str
    topic_id: str
    partitions: int
    replication_factor: int
    under_replicated: int
    offline: int
    rows: list[PartitionRow]
    page: int
    pages: int
    configs: list[dict] | None  # None: not allowed (DESCRIBE_CONFIGS)
    browse_allowed: bool
    form: dict[str, str] = field(default_factory=dict)
    browse: Browse | None = None
    error: str = ""


def _partitions(t: TopicPage) -> str:
    grid = table(
        [
            "partition",
            "leader",
            "replicas",
            "ISR",
            "log start",
            "log end",
            "high watermark",
            "size",
        ],
        (
            [
                str(r.partition),
                '<span class="bad">none</span>' if r.offline else esc(r.leader),
                ids(r.replicas),
                ids(r.isr)
                if len(r.isr) >= len(r.replicas)
                else f'<span class="bad">{ids(r.isr)}</span>',
                num(r.log_start),
                num(r.log_end),
                num(r.high_watermark),
                size(r.size),
            ]
            for r in t.rows
        ),
        cls="grid compact",
        tid="partitions",
    )
    base = f"/topics/{url(t.name)}"
    return pager(base, t.page, t.pages) + grid + pager(base, t.page, t.pages)


def _configs(configs: list[dict] | None) -> str:
    if configs is None:
        return '<p class="note">You may not describe this topic\'s configs.</p>'
    rows = []
    for c in sorted(configs, key=lambda c: c["name"]):
        marked = not c["is_default"]
        name = esc(c["name"])
        rows.append(
            [
                f'<b class="set">{name}</b>' if marked else name,
                esc(c["value"]) if c["value"] is not None else "&ndash;",
                "set" if marked else "default",
            ]
        )
    return table(["config", "value", "source"], rows, cls="grid compact", tid="configs")


def _ts(ms: int) -> str:
    if ms < 0:
        return "&ndash;"
    return esc(datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds"))


def _form(t: TopicPage) -> str:
    f = t.form
    fmts = "".join(
        f'<option value="{x}"{" selected" if x == f.get("format", "text") else ""}>{x}</option>'
        for x in FORMATS
    )
    return (
        f'<form method="get" action="/topics/{url(t.name)}" class="browser" id="browse-form">'
        '<input type="hidden" name="browse" value="1">'
        f'<label>partition <input type="number" name="partition" min="0" max="{t.partitions - 1}" '
        f'value="{esc(f.get("partition", "0"))}"></label> '
        f'<label>from offset <input name="offset" size="10" value="{esc(f.get("offset", ""))}"></label> '
        f'<label>or time <input name="ts" size="24" placeholder="2026-11-25T12:00:00Z or ms" '
        f'value="{esc(f.get("ts", ""))}"></label> '
        f'<label>records <input name="limit" size="4" value="{esc(f.get("limit", "20"))}"></label> '
        f'<label>decode as <select name="format">{fmts}</select></label> '
        "<button>Show</button></form>"
    )


def _records(b: Browse, fmt: str) -> str:
    head = (
        f'<p class="note" id="browse-range">log start {num(b.log_start)}, high watermark '
        f"{num(b.high_watermark)}"
        + (f", from offset {num(b.start)}" if b.start is not None else "")
        + "</p>"
    )
    if b.note:
        head += f'<p class="note" id="browse-note">{esc(b.note)}</p>'
    if not b.records:
        return head + '<p id="no-records">No records.</p>'
    rows = []
    for r in b.records:
        key, knote = render_bytes(r.key, fmt)
        value, vnote = render_bytes(r.value, fmt)
        headers = "".join(
            f"<div>{esc(k)}: {esc(render_bytes(v, 'text')[0])}</div>" for k, v in r.headers
        )
        rows.append(
            [
                str(r.offset),
                _ts(r.timestamp),
                f'<pre class="key">{esc(key)}</pre>'
                + (f"<small>{esc(knote)}</small>" if knote else ""),
                f'<pre class="value">{esc(value)}</pre>'
                + (f"<small>{esc(vnote)}</small>" if vnote else ""),
                headers,
            ]
        )
    return head + table(["offset", "timestamp", "key", "value", "headers"], rows, tid="records")


def render_topic(t: TopicPage) -> str:
    facts = dl(
        [
            ("topic id", esc(t.topic_id)),
            ("partitions", f'<span id="partition-count">{num(t.partitions)}</span>'),
            ("replication factor", num(t.replication_factor)),
            ("under-replicated", num(t.under_replicated)),
            ("offline", num(t.offline)),
        ]
    )
    parts = [facts, '<h2 id="browser">Messages</h2>']
    if not t.browse_allowed:
        parts.append('<p class="note">You may not read this topic.</p>')
    else:
        parts.append(_form(t))
        if t.error:
            parts.append(f'<p class="bad" id="browse-error">{esc(t.error)}</p>')
        if t.browse is not None:
            parts.append(_records(t.browse, t.form.get("format", "text")))
    parts += ["<h2>Partitions</h2>", _partitions(t), "<h2>Configs</h2>", _configs(t.configs)]
    return "".join(parts)


def browse_link(topic: str, partition: int, offset: int) -> str:
    return f"/topics/{url(topic)}" + query(browse=1, partition=partition, offset=offset)
