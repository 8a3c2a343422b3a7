"""What each console path shows: gathers the rows (console/state.py, on the event loop) and
returns a ``Result`` whose ``render()`` (a console/views/ function over those rows only) may
run in a worker thread.  ``PageError`` carries a 4xx answer (403 for a topic or group the
viewer may not describe, 404 for one that does not exist, 400 for a bad parameter)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from pybroker.console import state
from pybroker.console.auth import Viewer
from pybroker.console.lag import LagHistory, chart
from pybroker.console.records import DEFAULT_LIMIT, FORMATS, browse, parse_timestamp
from pybroker.console.views import groups as group_views
from pybroker.console.views import overview as overview_view
from pybroker.console.views import topics as topic_views
from pybroker.handlers.describe_configs import describe_configs
from pybroker.security.acl import Operation


@dataclass
class Result:
    status: int
    title: str
    section: str
    render: Callable[[], str]


class PageError(Exception):
    def __init__(self, status: int, title: str, section: str, message: str) -> None:
        super().__init__(message)
        self.status, self.title, self.section, self.message = status, title, section, message


def _int(q: dict[str, str], key: str, default: int, section: str) -> int:
    raw = q.get(key, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise PageError(400, "Bad request", section, f"{key} must be an integer: {raw!r}") from None


async def overview(broker: Any, viewer: Viewer) -> Result:
    o = await state.overview(broker, viewer)
    return Result(200, "Cluster overview", "overview", partial(overview_view.render, o))


async def topic_list(broker: Any, viewer: Viewer, q: dict[str, str]) -> Result:
    rows = await state.topic_rows(broker, viewer)
    page = _int(q, "page", 1, "topics")
    return Result(200, "Topics", "topics", partial(topic_views.render_list, rows, page))


async def _configs(broker: Any, viewer: Viewer, name: str) -> list[dict] | None:
    ctx = viewer.context(broker, 32, 4)
    resp = await describe_configs(
        ctx,
        {
            "resources": [{"resource_type": 2, "resource_name": name, "configuration_keys": None}],
            "include_synonyms": False,
            "include_documentation": False,
        },
    )
    (r,) = resp["results"]
    return r["configs"] if r["error_code"] == 0 else None


async def topic(
    broker: Any, viewer: Viewer, name: str, q: dict[str, str], lag: LagHistory
) -> Result:
    title = f"Topic {name}"
    if not viewer.topic(name):
        raise PageError(403, title, "topics", "Topic authorization failed.")
    info = broker.cluster.topics.get(name)
    if info is None:
        raise PageError(404, title, "topics", f"No topic named {name!r}.")
    n = len(info.partitions)
    pages = max(1, -(-n // topic_views.PAGE_ROWS))
    page = min(max(_int(q, "page", 1, "topics"), 1), pages)
    rows = await state.partition_rows(
        broker, name, (page - 1) * topic_views.PAGE_ROWS, topic_views.PAGE_ROWS
    )
    live = broker.cluster.brokers
    states = list(info.partitions.values())
    t = topic_views.TopicPage(
        name=name,
        topic_id=str(info.topic_id),
        partitions=n,
        replication_factor=max((len(s.replicas) for s in states), default=0),
        under_replicated=sum(1 for s in states if len(s.isr) < len(s.replicas)),
        offline=sum(1 for s in states if s.leader < 0 or s.leader not in live),
        rows=rows,
        page=page,
        pages=pages,
        configs=await _configs(broker, viewer, name),
        browse_allowed=viewer.topic(name, Operation.READ),
    )
    if t.browse_allowed and q.get("browse"):
        t.form = {k: q.get(k, "") for k in ("partition", "offset", "ts", "limit", "format")}
        fmt = q.get("format") or "text"
        if fmt not in FORMATS:
            fmt = "text"
        t.form["format"] = fmt
        t.form["limit"] = t.form["limit"] or str(DEFAULT_LIMIT)
        partition = _int(q, "partition", 0, "topics")
        limit = _int(q, "limit", DEFAULT_LIMIT, "topics")
        offset = _int(q, "offset", -1, "topics")
        ts = None
        if q.get("ts", "").strip():
            try:
                ts = parse_timestamp(q["ts"])
            except ValueError:
                t.error = f"not a time: {q['ts']!r} (ISO 8601 or milliseconds)"
        if partition not in info.partitions:
            t.error = f"no partition {partition}"
        if not t.error:
            t.browse = await browse(
                broker,
                viewer,
                name,
                partition,
                start=offset if offset >= 0 else None,
                timestamp=ts,
                limit=limit,
            )
    return Result(200, title, "topics", partial(topic_views.render_topic, t))


async def group_list(broker: Any, viewer: Viewer) -> Result:
    rows = await state.group_rows(broker, viewer)
    return Result(200, "Consumer groups", "groups", partial(group_views.render_list, rows))


async def group(broker: Any, viewer: Viewer, group_id: str, lag: LagHistory) -> Result:
    title = f"Group {group_id}"
    if not viewer.group(group_id):
        raise PageError(403, title, "groups", "Group authorization failed.")
    detail = await state.group_detail(broker, group_id, viewer)
    if detail is None:
        coordinator = state.coordinator(broker, group_id)
        where = (
            f" It is coordinated by broker {coordinator}: open that broker's console."
            if coordinator != broker.config.broker_id
            else ""
        )
        raise PageError(404, title, "groups", f"This broker knows no group {group_id!r}.{where}")
    svg = chart(lag.series(group_id), lag.interval_s)
    return Result(200, title, "groups", partial(group_views.render_group, detail, svg))
