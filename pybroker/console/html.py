"""HTML helpers for the console: every string that reaches a page goes through ``esc`` (text
and attribute values) or ``url`` (one path segment or query value), so topic names, group
ids, client ids, keys, values and headers can never become markup.  Pages are plain Python
f-strings built from these helpers; the page shell is a ``string.Template``.

Contract: ``esc(x)`` escapes ``& < > " '``; ``url(x)`` percent-encodes everything but
unreserved characters; ``here(params, **changes)`` is a link to the same page with other query
parameters (a query-only reference: the path stays the browser's); ``page(title, body_html,
...)`` returns the whole document.  ``body_html`` must already be safe markup (built with
these helpers).  ``?refresh=N`` adds a ``<meta http-equiv="refresh">``: the browser reloads
the same URL every N seconds, no script.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from string import Template
from urllib.parse import quote, urlencode

SHELL = Template(
    """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>$title - pybroker</title>
<link rel="stylesheet" href="/static/console.css">$refresh_meta
</head><body>
<header><span class="brand">pybroker</span>
<nav><a href="/"$on_overview>Overview</a> <a href="/topics"$on_topics>Topics</a> <a href="/groups"$on_groups>Consumer groups</a> <a href="/brokers/$broker_id"$on_brokers>Broker configs</a> <a href="/acls"$on_acls>ACLs</a></nav>
<span class="who">broker $broker_id &middot; cluster $cluster_id$who</span></header>
<main>
<h1>$title</h1>
$refresh_control
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


def here(params: Mapping[str, str], **changes: object) -> str:
    """``?<params with changes>`` (a change to None drops the key): the same page with other
    query parameters.  Empty values are left out."""
    merged = dict(params)
    for k, v in changes.items():
        if v is None:
            merged.pop(k, None)
        else:
            merged[k] = str(v)
    return "?" + urlencode({k: v for k, v in merged.items() if v != ""})


def link(href: str, text: object, cls: str | None = None) -> str:
    c = f' class="{esc(cls)}"' if cls else ""
    return f'<a href="{esc(href)}"{c}>{esc(text)}</a>'


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[str]],
    cls: str = "grid",
    tid: str = "",
    *,
    safe_headers: bool = False,
) -> str:
    """``rows`` hold cells that are already safe markup (use esc / link); so do ``headers``
    with ``safe_headers`` (sort links), else they are text."""
    head = "".join(f"<th>{h if safe_headers else esc(h)}</th>" for h in headers)
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


def assignment(parts: Iterable[tuple[str, Iterable[int]]]) -> str:
    """A member's assignment: ``topic: p,p; topic: p``, escaped."""
    return esc("; ".join(f"{t}: {','.join(map(str, ps))}" for t, ps in parts))


def pager(params: Mapping[str, str], page: int, pages: int) -> str:
    """Links to the other pages of a paginated table (``page`` counts from 1), keeping the
    page's other query parameters."""
    if pages <= 1:
        return ""
    parts = []
    for p in sorted({1, page - 1, page, page + 1, pages}):
        if 1 <= p <= pages:
            if p == page:
                parts.append(f'<span class="current">{p}</span>')
            else:
                parts.append(link(here(params, page=p), p))
    return f'<nav class="pager">page {page} of {pages}: ' + " ".join(parts) + "</nav>"


REFRESH_CHOICES = (5, 10, 30, 60)
REFRESH_MAX_S = 3600


def refresh_control(params: Mapping[str, str], refresh: int) -> str:
    """Links that set ``?refresh=`` (off, or one of REFRESH_CHOICES seconds) on this page."""
    parts = []
    for s in (0, *REFRESH_CHOICES):
        label = "off" if s == 0 else f"{s} s"
        if s == refresh:
            parts.append(f'<b class="current">{label}</b>')
        else:
            parts.append(link(here(params, refresh=s or None), label))
    now = f"every {refresh} s" if refresh else "off"
    return (
        f'<nav class="refresh" id="refresh">auto-refresh ({now}): '
        + " &middot; ".join(parts)
        + "</nav>"
    )


def page(
    title: str,
    body: str,
    *,
    section: str,
    broker_id: int,
    cluster_id: str,
    principal: str | None,
    render_ms: str,
    params: Mapping[str, str] | None = None,
    refresh: int = 0,
) -> str:
    """The whole document; ``params`` (the request's query) and ``refresh`` (seconds, 0: off)
    give the auto-refresh control and tag."""
    on = ' class="on"'
    meta = f'\n<meta http-equiv="refresh" content="{int(refresh)}">' if refresh > 0 else ""
    return SHELL.substitute(
        title=esc(title),
        body=body,
        refresh_meta=meta,
        refresh_control=refresh_control(params, refresh) if params is not None else "",
        on_overview=on if section == "overview" else "",
        on_topics=on if section == "topics" else "",
        on_groups=on if section == "groups" else "",
        on_brokers=on if section == "brokers" else "",
        on_acls=on if section == "acls" else "",
        broker_id=esc(broker_id),
        cluster_id=esc(cluster_id),
        who=f" &middot; {esc(principal)}" if principal else "",
        render_ms=render_ms,
    )
