"""``/topics`` (the list) and ``/topics/<name>`` (record count, consuming groups, the message
browser, partitions, configs)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pybroker.console.configs import ConfigRow
from pybroker.console.html import dl, esc, ids, link, num, pager, size, table, url
from pybroker.console.listing import Column, arrange, filter_form, headers, order
from pybroker.console.state import ConsumerRow, PartitionRow, RecordCount, TopicRow
from pybroker.console.views import records as record_views

PAGE_ROWS = 1000  # partitions (or topics) per page


def _page(params: Mapping[str, str], n: int) -> tuple[int, int]:
    pages = max(1, -(-n // PAGE_ROWS))
    try:
        page = int(params.get("page") or 1)
    except ValueError:
        page = 1
    return min(max(page, 1), pages), pages


def _count(c: RecordCount) -> str:
    """A record count as Kafka UIs show it: marked approximate for compacted topics and
    topics with transactions (markers take offsets)."""
    if c.records is None:
        return "&ndash;"
    return ("&asymp; " if c.approximate else "") + num(c.records)


LIST_COLUMNS = (
    Column("topic", "topic", lambda r: r.name),
    Column("partitions", "partitions", lambda r: r.partitions, True),
    Column("rf", "replication factor", lambda r: r.replication_factor, True),
    Column("records", "records (local replicas)", lambda r: r.count.records, True),
    Column("size", "size (local replicas)", lambda r: r.size, True),
    Column("urp", "under-replicated", lambda r: r.under_replicated, True),
)


def render_list(rows: list[TopicRow], params: Mapping[str, str]) -> str:
    o = order(params, LIST_COLUMNS, "topic")
    got = arrange(rows, LIST_COLUMNS, o, lambda r: r.name)
    page, pages = _page(params, len(got))
    shown = got[(page - 1) * PAGE_ROWS : page * PAGE_ROWS]
    grid = table(
        headers(LIST_COLUMNS, o, params),
        (
            [
                link(f"/topics/{url(r.name)}", r.name),
                num(r.partitions),
                num(r.replication_factor),
                _count(r.count),
                size(r.size),
                f'<span class="bad">{num(r.under_replicated)}</span>'
                if r.under_replicated
                else "0",
            ]
            for r in shown
        ),
        tid="topics",
        safe_headers=True,
    )
    return (
        f'<p><span id="topics-total">{num(len(rows))}</span> topics.</p>'
        + filter_form(params, o, "topics by name", len(got), len(rows), "topics")
        + pager(params, page, pages)
        + grid
        + pager(params, page, pages)
        + '<p class="note">Records: high watermark minus log start offset, summed over the '
        "partitions this broker holds a replica of; &asymp; marks compacted topics and topics "
        "with transactions, where it is at most that.</p>"
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
    configs: list[ConfigRow] | None  # None: not allowed (DESCRIBE_CONFIGS)
    consumers: list[ConsumerRow]
    brokers: int
    browse_allowed: bool
    params: Mapping[str, str]
    browser: record_views.BrowseForm | None = None


PARTITION_COLUMNS = (
    Column("partition", "partition", lambda r: r.partition),
    Column("leader", "leader", lambda r: r.leader),
    Column("replicas", "replicas"),
    Column("isr", "ISR", lambda r: len(r.isr)),
    Column("start", "log start", lambda r: r.log_start, True),
    Column("end", "log end", lambda r: r.log_end, True),
    Column("hw", "high watermark", lambda r: r.high_watermark, True),
    Column("records", "records", lambda r: r.records, True),
    Column("size", "size", lambda r: r.size, True),
)


def _partitions(t: TopicPage) -> str:
    o = order(t.params, PARTITION_COLUMNS, "partition")
    got = arrange(t.rows, PARTITION_COLUMNS, o)
    page, pages = _page(t.params, len(got))
    grid = table(
        headers(PARTITION_COLUMNS, o, t.params),
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
                num(r.records),
                size(r.size),
            ]
            for r in got[(page - 1) * PAGE_ROWS : page * PAGE_ROWS]
        ),
        cls="grid compact",
        tid="partitions",
        safe_headers=True,
    )
    return pager(t.params, page, pages) + grid + pager(t.params, page, pages)


def _configs(configs: list[ConfigRow] | None) -> str:
    if configs is None:
        return '<p class="note">You may not describe this topic\'s configs.</p>'
    rows = []
    for c in configs:
        name = esc(c.name)
        rows.append(
            [
                name if c.is_default else f'<b class="set">{name}</b>',
                esc(c.value) if c.value is not None else "&ndash;",
                esc(c.source),
            ]
        )
    return table(["config", "value", "source"], rows, cls="grid compact", tid="configs")


def _record_count(t: TopicPage) -> str:
    c = RecordCount()
    for r in t.rows:
        c.add(r)
    if c.records is None:
        return (
            '<span id="record-count">&ndash;</span> <small>(this broker holds no replica)</small>'
        )
    why = []
    if c.compacted:
        why.append("compacted: removed records still count")
    if c.transactional:
        why.append("transactions: their markers take offsets")
    label = f"approximate ({'; '.join(why)})" if why else "exact"
    local = f"{num(c.local)} of {num(t.partitions)}" if c.local < t.partitions else "all"
    return (
        f'<span id="record-count">{num(c.records)}</span> '
        f'<small id="record-count-note">{label}: high watermark minus log start offset over '
        f"{local} partitions (those this broker holds)</small>"
    )


def _consumers(t: TopicPage) -> str:
    scope = (
        "Groups coordinated by this broker"
        if t.brokers > 1
        else "Groups (this broker coordinates every group)"
    )
    note = (
        f'<p class="note" id="consumers-scope">{scope} that committed offsets of this topic or '
        "have its partitions assigned"
        + (
            "; groups coordinated by another broker are listed on that broker's console."
            if t.brokers > 1
            else "."
        )
        + "</p>"
    )
    if not t.consumers:
        return note + '<p id="consumers-none">No consumer group.</p>'
    grid = table(
        ["group", "state", "members", "assigned", "committed", "lag", "without a commit"],
        (
            [
                link(f"/groups/{url(c.group_id)}", c.group_id),
                esc(c.state),
                num(c.members),
                num(c.assigned),
                num(c.committed),
                num(c.lag),
                num(c.uncommitted),
            ]
            for c in t.consumers
        ),
        tid="consumers",
    )
    return note + grid


def render_topic(t: TopicPage) -> str:
    facts = dl(
        [
            ("topic id", esc(t.topic_id)),
            ("partitions", f'<span id="partition-count">{num(t.partitions)}</span>'),
            ("replication factor", num(t.replication_factor)),
            ("under-replicated", num(t.under_replicated)),
            ("offline", num(t.offline)),
            ("records", _record_count(t)),
        ]
    )
    parts = [facts, '<h2 id="browser">Messages</h2>']
    if not t.browse_allowed:
        parts.append('<p class="note">You may not read this topic.</p>')
    else:
        f = t.browser.fields if t.browser is not None else {}
        parts.append(record_views.form(f"/topics/{url(t.name)}", t.partitions, f))
        if t.browser is not None:
            parts.append(record_views.render(t.browser, t.params))
    parts += [
        "<h2>Consumer groups</h2>",
        _consumers(t),
        "<h2>Partitions</h2>",
        _partitions(t),
        "<h2>Configs</h2>",
        _configs(t.configs),
    ]
    return "".join(parts)
