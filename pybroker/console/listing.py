"""Sorting and filtering the console's tables without a script: ``?sort=<column>&dir=asc|desc``
and ``?q=<text>`` (a GET form) are applied on the server to the page's rows (in the render
thread, before paging).  Column headers are links that sort by them, the other way round when
they already do; the filter keeps the sort, the sort keeps the filter.

Contract: ``order(params, columns, default)`` reads the request (an unknown column or
direction falls back to the default: a bad link never fails the page); ``arrange(rows,
columns, order, text)`` keeps the rows whose ``text(row)`` contains ``q`` (case-insensitive)
and sorts them by the column's ``value`` (rows whose value is None last, in both directions;
ties keep their order); ``headers`` and ``filter_form`` give the markup.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pybroker.console.html import esc, here, link

R = TypeVar("R")
KEEP = ("sort", "dir", "refresh")  # what the filter form carries over


@dataclass(frozen=True)
class Column:
    key: str  # the ?sort= value
    label: str  # the header text
    value: Callable[[Any], Any] | None = None  # a row's sort key; None: not sortable
    desc_first: bool = False  # the first click sorts the largest first (counts, lag, sizes)


@dataclass(frozen=True)
class Order:
    sort: str
    desc: bool
    q: str


def order(
    params: Mapping[str, str], columns: Sequence[Column], default: str, desc: bool = False
) -> Order:
    by = {c.key: c for c in columns if c.value is not None}
    key = params.get("sort", "")
    if key not in by:
        key = default
    d = params.get("dir", "")
    down = d == "desc" if d in ("asc", "desc") else (desc if key == default else by[key].desc_first)
    return Order(key, down, params.get("q", "").strip()[:200])


def arrange(
    rows: Iterable[R],
    columns: Sequence[Column],
    o: Order,
    text: Callable[[R], str] | None = None,
) -> list[R]:
    out = list(rows)
    if o.q and text is not None:
        needle = o.q.casefold()
        out = [r for r in out if needle in text(r).casefold()]
    col = next((c for c in columns if c.key == o.sort and c.value is not None), None)
    if col is None:
        return out
    key = col.value
    assert key is not None
    known = [r for r in out if key(r) is not None]
    unknown = [r for r in out if key(r) is None]
    known.sort(key=key, reverse=o.desc)
    return known + unknown


def headers(columns: Sequence[Column], o: Order, params: Mapping[str, str]) -> list[str]:
    """Header cells (safe markup): sortable columns are links; the sorted one carries the class
    ``sort asc`` or ``sort desc`` (the stylesheet draws the arrow, so the text stays the
    label)."""
    out = []
    for c in columns:
        if c.value is None:
            out.append(esc(c.label))
            continue
        if c.key == o.sort:
            cls, nxt = ("sort desc", "asc") if o.desc else ("sort asc", "desc")
        else:
            cls, nxt = "sort", "desc" if c.desc_first else "asc"
        out.append(link(here(params, sort=c.key, dir=nxt, page=None), c.label, cls))
    return out


def filter_form(
    params: Mapping[str, str], o: Order, what: str, shown: int, total: int, fid: str
) -> str:
    """A GET form for ``q`` that keeps the sort and refresh, and how many rows it left."""
    hidden = "".join(
        f'<input type="hidden" name="{k}" value="{esc(params[k])}">' for k in KEEP if params.get(k)
    )
    clear = " " + link(here(params, q=None, page=None), "clear") if o.q else ""
    count = (
        f'<span class="count" id="{esc(fid)}-count">{shown:,} of {total:,}</span>'
        if o.q
        else f'<span class="count" id="{esc(fid)}-count">{total:,}</span>'
    )
    return (
        f'<form method="get" class="filter" id="{esc(fid)}-filter">'
        f'<label>filter {esc(what)} <input name="q" size="24" value="{esc(o.q)}"></label>'
        f"{hidden} <button>Filter</button>{clear} {count}</form>"
    )
