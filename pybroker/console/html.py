"""HTML helpers for the console: every string that reaches a page goes through ``esc`` (text
and attribute values) or ``url`` (one path segment or query value), so topic names, group
ids, client ids, keys, values and headers can never become markup.  Pages are plain Python
f-strings built from these helpers; the page shell is a ``string.Template``.

Contract: ``esc(x)`` escapes ``& < > " '``; ``url(x)`` percent-encodes everything but
unreserved characters; ``page(title, body_html, ...)`` returns the whole document as bytes
(UTF-8).  ``body_html`` must already be safe markup (built with these helpers).
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from string import Template
from urllib.parse import quote, urlencode

SHELL = Template(
    """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>$title - pybroker</title>
<link rel="stylesheet" href="/static/console.css">
</head><body>
<header><span class="brand">pybroker</span>
<nav><a href="/"$on_overview>Overview</a> <a href="/topics"$on_topics>Topics</a> <a href="/groups"$on_groups>Consumer groups</a></nav>
<span class="who">broker $broker_id &middot; cluster $cluster_id$who</span></header>
<main>
<h1>$title</h1>
$body
</main>
<footer>read-only console &middot; rendered in $render_ms ms</footer>
</body></html>
"""
)


def esc(x: object) -> str:
    return html.escape(str(x), quote=True)


def url(x: object) -> str:
    return quote(str(x), safe="")


def query(**params: object) -> str:
    return "?" + urlencode({k: v for k, v in params.items() if v is not None})


def link(href: str, text: object, cls: str | None = None) -> str:
    c = f' class="{esc(cls)}"' if cls else ""
    return f'<a href="{esc(href)}"{c}>{esc(text)}</a>'


def table(
    headers: Sequence[str], rows: Iterable[Sequence[str]], cls: str = "grid", tid: str = ""
) -> str:
    """``rows`` hold cells that are already safe markup (use esc / link)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    ident = f' id="{esc(tid)}"' if tid else ""
    return f'<table class="{esc(cls)}"{ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def dl(items: Iterable[tuple[str, str]]) -> str:
    """A definition list of (label, safe markup)."""
    return (
        '<dl class="facts">' + "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in items) + "</dl>"
    )


def num(n: int | None) -> str:
    return "&ndash;" if n is None else f"{n:,}"


def size(n: int | None) -> str:
    if n is None:
        return "&ndash;"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:,} B" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def ids(xs: Iterable[int]) -> str:
    return esc(",".join(str(x) for x in xs))


def pager(base: str, page: int, pages: int, **params: object) -> str:
    """Links to the other pages of a paginated table (``page`` counts from 1)."""
    if pages <= 1:
        return ""
    parts = []
    for p in sorted({1, page - 1, page, page + 1, pages}):
        if 1 <= p <= pages:
            if p == page:
                parts.append(f'<span class="current">{p}</span>')
            else:
                parts.append(link(base + query(page=p, **params), p))
    return f'<nav class="pager">page {page} of {pages}: ' + " ".join(parts) + "</nav>"


def page(
    title: str,
    body: str,
    *,
    section: str,
    broker_id: int,
    cluster_id: str,
    principal: str | None,
    render_ms: str,
) -> str:
    on = ' class="on"'
    return SHELL.substitute(
        title=esc(title),
        body=body,
        on_overview=on if section == "overview" else "",
        on_topics=on if section == "topics" else "",
        on_groups=on if section == "groups" else "",
        broker_id=esc(broker_id),
        cluster_id=esc(cluster_id),
        who=f" &middot; {esc(principal)}" if principal else "",
        render_ms=render_ms,
    )
