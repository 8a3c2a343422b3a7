"""The message browser on a topic's page: its form, the records, what was scanned, and the
links to the previous / next page (offset cursors) and to the oldest / newest records."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import ClassVar

from pybroker.console.html import esc, here, link, num, table
from pybroker.console.records import FORMATS, MERGE_MAX, Browse, Span, format_cursor, render_bytes

# what a link to another page of records drops (its own position replaces them)
POSITION = {"offset": None, "ts": None, "start": None, "after": None, "before": None}


@dataclass
class BrowseForm:
    FIELDS: ClassVar[tuple[str, ...]] = (
        "partition",
        "offset",
        "ts",
        "start",
        "limit",
        "format",
        "key",
        "value",
    )
    fields: dict[str, str]
    browse: Browse | None = None
    error: str = ""


def _ts(ms: int) -> str:
    if ms < 0:
        return "&ndash;"
    return esc(datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds"))


def form(topic_url: str, partitions: int, f: Mapping[str, str]) -> str:
    fmts = "".join(
        f'<option value="{x}"{" selected" if x == f.get("format", "text") else ""}>{x}</option>'
        for x in FORMATS
    )
    starts = "".join(
        f'<option value="{x}"{" selected" if x == f.get("start", "earliest") else ""}>{x}</option>'
        for x in ("earliest", "latest")
    )
    default = "all" if partitions > 1 else "0"
    return (
        f'<form method="get" action="{esc(topic_url)}" class="browser" id="browse-form">'
        '<input type="hidden" name="browse" value="1">'
        f'<label>partition <input name="partition" size="5" placeholder="all or a number" '
        f'value="{esc(f.get("partition") or default)}"></label> '
        f'<label>from offset <input name="offset" size="10" value="{esc(f.get("offset", ""))}"></label> '
        f'<label>or time <input name="ts" size="24" placeholder="2026-11-25T12:00:00Z or ms" '
        f'value="{esc(f.get("ts", ""))}"></label> '
        f'<label>or the <select name="start">{starts}</select></label> '
        f'<label>records <input name="limit" size="4" value="{esc(f.get("limit", "20"))}"></label> '
        f'<label>decode as <select name="format">{fmts}</select></label><br>'
        f'<label>key contains <input name="key" size="20" value="{esc(f.get("key", ""))}"></label> '
        f'<label>value contains <input name="value" size="30" value="{esc(f.get("value", ""))}"></label> '
        "<small>(bytes of the UTF-8 text, case-sensitive)</small> "
        "<button>Show</button></form>"
    )


def _range(s: Span) -> str:
    if s.end <= s.start:
        return f"nothing to scan at offset {num(s.start)}"
    if s.end - 1 == s.start:
        return f"offset {num(s.start)}"
    return f"offsets {num(s.start)} to {num(s.end - 1)}"


def _records_word(n: int) -> str:
    return f"{num(n)} record" + ("" if n == 1 else "s")


def _scan_report(b: Browse, filtered: bool) -> str:
    matched = f"; {num(b.matched)} matched the filter" if filtered else ""
    if len(b.spans) == 1:
        (s,) = b.spans
        text = (
            f"Scanned {_records_word(s.scanned)} from partition {s.partition}, {_range(s)} "
            f"(log start {num(s.log_start)}, high watermark {num(s.high_watermark)}){matched}."
        )
        return f'<p class="note" id="browse-scan">{text}</p>'
    text = (
        f"Scanned {_records_word(b.scanned)} in {num(len(b.spans))} partitions, merged by "
        f"timestamp{matched}."
    )
    rows = [
        [
            str(s.partition),
            _range(s),
            num(s.scanned),
            num(len(s.matches)),
            num(s.shown),
            num(s.log_start),
            num(s.high_watermark),
        ]
        for s in b.spans
    ]
    spans = table(
        ["partition", "scanned", "records", "matched", "shown", "log start", "high watermark"],
        rows,
        cls="grid compact",
        tid="browse-spans",
    )
    return (
        f'<p class="note" id="browse-scan">{text}</p>'
        f"<details><summary>per partition</summary>{spans}</details>"
    )


def _nav(b: Browse, params: Mapping[str, str]) -> str:
    """Links to the pages before and after this one and to both ends."""
    parts = [link(here(params, **{**POSITION, "start": "earliest"}), "oldest")]
    if not b.at_start:
        prev = here(params, **{**POSITION, "before": format_cursor(b.before)})
        parts.append(f'<a href="{esc(prev)}" id="browse-prev" rel="prev">&larr; previous</a>')
    nxt = here(params, **{**POSITION, "after": format_cursor(b.after)})
    label = "next &rarr;" if not b.at_end else "next &rarr; (at the high watermark now)"
    parts.append(f'<a href="{esc(nxt)}" id="browse-next" rel="next">{label}</a>')
    parts.append(link(here(params, **{**POSITION, "start": "latest"}), "newest"))
    return '<nav class="pager" id="browse-nav">' + " &middot; ".join(parts) + "</nav>"


def _records(b: Browse, fmt: str) -> str:
    rows = []
    for r in b.records:
        key, knote = render_bytes(r.key, fmt)
        value, vnote = render_bytes(r.value, fmt)
        headers = "".join(
            f"<div>{esc(k)}: {esc(render_bytes(v, 'text')[0])}</div>" for k, v in r.headers
        )
        rows.append(
            [
                str(r.partition),
                str(r.offset),
                _ts(r.timestamp),
                f'<pre class="key">{esc(key)}</pre>'
                + (f"<small>{esc(knote)}</small>" if knote else ""),
                f'<pre class="value">{esc(value)}</pre>'
                + (f"<small>{esc(vnote)}</small>" if vnote else ""),
                headers,
            ]
        )
    return table(
        ["partition", "offset", "timestamp", "key", "value", "headers"],
        rows,
        cls="grid records",
        tid="records",
    )


def render(f: BrowseForm, params: Mapping[str, str]) -> str:
    out = []
    if f.error:
        out.append(f'<p class="bad" id="browse-error">{esc(f.error)}</p>')
    b = f.browse
    if b is None:
        return "".join(out)
    if b.note:
        out.append(f'<p class="note" id="browse-note">{esc(b.note)}</p>')
    if b.no_replica and len(b.spans):
        out.append(
            f'<p class="note" id="browse-no-replica">Partitions this broker holds no replica of are not shown: '
            f"{esc(', '.join(map(str, b.no_replica[:20])))}"
            f"{' ...' if len(b.no_replica) > 20 else ''}.</p>"
        )
    if b.not_merged:
        out.append(
            f'<p class="note" id="browse-not-merged">At most {MERGE_MAX} partitions are merged: '
            f"{num(b.not_merged)} more are not shown; pick a partition to see them.</p>"
        )
    if not b.spans:
        return "".join(out)
    filtered = bool(f.fields.get("key") or f.fields.get("value"))
    out.append(_scan_report(b, filtered))
    out.append(_nav(b, params))
    if b.records:
        out.append(_records(b, f.fields.get("format", "text")))
    else:
        out.append('<p id="no-records">No records.</p>')
    return "".join(out)
