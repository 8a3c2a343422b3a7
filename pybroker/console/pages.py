"""What each console path shows: gathers the rows (console/state.py and console/configs.py, on
the event loop) and returns a ``Result`` whose ``render()`` (a console/views/ function over
those rows and the request's query parameters only) may run in a worker thread.
``PageError`` carries a 4xx answer (403 for a topic or group the viewer may not describe, 404
for one that does not exist, 400 for a bad parameter)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from pybroker.console import configs, state
from pybroker.console import share as share_state
from pybroker.console.auth import Viewer
from pybroker.console.lag import LagHistory, chart
from pybroker.console.records import (
    DEFAULT_LIMIT,
    FORMATS,
    browse,
    parse_cursor,
    parse_timestamp,
)
from pybroker.console.views import acls as acl_views
from pybroker.console.views import brokers as broker_views
from pybroker.console.views import groups as group_views
from pybroker.console.views import overview as overview_view
from pybroker.console.views import share_groups as share_views
from pybroker.console.views import topics as topic_views
from pybroker.console.views.records import BrowseForm
from pybroker.errors import ErrorCode
from pybroker.security.acl import Operation

if TYPE_CHECKING:
    from pybroker.services import BrokerServices

FILTER_MAX = 1024  # characters of a key / value filter


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


def int_param(q: dict[str, str], key: str, default: int, section: str) -> int:
    raw = q.get(key, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise PageError(400, "Bad request", section, f"{key} must be an integer: {raw!r}") from None


async def overview(broker: BrokerServices, viewer: Viewer, q: dict[str, str]) -> Result:
    o = await state.overview(broker, viewer)
    return Result(200, "Cluster overview", "overview", partial(overview_view.render, o))


async def topic_list(broker: BrokerServices, viewer: Viewer, q: dict[str, str]) -> Result:
    rows = await state.topic_rows(broker, viewer)
    int_param(q, "page", 1, "topics")
    return Result(200, "Topics", "topics", partial(topic_views.render_list, rows, q))


def _cursor(q: dict[str, str], key: str) -> dict[int, int] | None:
    raw = q.get(key, "").strip()
    if not raw:
        return None
    try:
        return parse_cursor(raw)
    except ValueError as e:
        raise PageError(400, "Bad request", "topics", f"{key}: {e}") from None


async def _browse(
    broker: BrokerServices, viewer: Viewer, name: str, info: Any, q: dict[str, str]
) -> BrowseForm:
    """The message browser's form as submitted, and the page of records it asks for."""
    f = BrowseForm({k: q.get(k, "") for k in BrowseForm.FIELDS})
    fmt = q.get("format") or "text"
    f.fields["format"] = fmt if fmt in FORMATS else "text"
    f.fields["limit"] = f.fields["limit"] or str(DEFAULT_LIMIT)
    f.fields["start"] = "latest" if q.get("start") == "latest" else "earliest"
    for k in ("key", "value"):
        f.fields[k] = f.fields[k][:FILTER_MAX]
    raw = q.get("partition", "").strip().lower()
    if raw in ("", "all"):
        partitions = sorted(info.partitions)
        f.fields["partition"] = "all"
    else:
        p = int_param(q, "partition", 0, "topics")
        if p not in info.partitions:
            f.error = f"no partition {p}"
            return f
        partitions = [p]
    limit = int_param(q, "limit", DEFAULT_LIMIT, "topics")
    offset = int_param(q, "offset", -1, "topics")
    after, before = _cursor(q, "after"), _cursor(q, "before")
    ts = None
    if before is None and after is None and q.get("ts", "").strip():
        try:
            ts = parse_timestamp(q["ts"])
        except ValueError:
            f.error = f"not a time: {q['ts']!r} (ISO 8601 or milliseconds)"
            return f
    if before is None and after is None and ts is None and offset < 0:
        if f.fields["start"] == "latest":
            before = {}
    f.browse = await browse(
        broker,
        viewer,
        name,
        partitions,
        after=after,
        before=before,
        start=offset if offset >= 0 else None,
        timestamp=ts,
        limit=limit,
        key=f.fields["key"].encode() or None,
        value=f.fields["value"].encode() or None,
    )
    return f


async def topic(
    broker: BrokerServices, viewer: Viewer, name: str, q: dict[str, str], lag: LagHistory
) -> Result:
    title = f"Topic {name}"
    if not viewer.topic(name):
        raise PageError(403, title, "topics", "Topic authorization failed.")
    info = broker.cluster.topics.get(name)
    if info is None:
        raise PageError(404, title, "topics", f"No topic named {name!r}.")
    int_param(q, "page", 1, "topics")
    rows = await state.partition_rows(broker, name)
    live = broker.cluster.brokers
    states = list(info.partitions.values())
    described = await configs.describe_configs(broker, viewer, configs.TOPIC, name)
    t = topic_views.TopicPage(
        name=name,
        topic_id=str(info.topic_id),
        partitions=len(info.partitions),
        replication_factor=max((len(s.replicas) for s in states), default=0),
        under_replicated=sum(1 for s in states if len(s.isr) < len(s.replicas)),
        offline=sum(1 for s in states if s.leader < 0 or s.leader not in live),
        rows=rows,
        configs=None if described.error else described.rows,
        consumers=await state.topic_consumers(broker, viewer, name),
        brokers=len(live),
        browse_allowed=viewer.topic(name, Operation.READ),
        params=q,
    )
    if t.browse_allowed and q.get("browse"):
        t.browser = await _browse(broker, viewer, name, info, q)
    return Result(200, title, "topics", partial(topic_views.render_topic, t))


async def group_list(broker: BrokerServices, viewer: Viewer, q: dict[str, str]) -> Result:
    rows = await state.group_rows(broker, viewer)
    for g in share_state.share_groups(broker):  # share groups (KIP-932): type "share"
        if viewer.cluster() or viewer.group(g.group_id):
            parts = await share_state.partitions(broker, g.group_id, viewer)
            lags = [p.lag for p in parts if p.lag is not None]
            rows.append(
                state.GroupRow(
                    g.group_id, g.state.value, "share", "share", len(g.members),
                    sum(lags) if lags else None,
                )
            )  # fmt: skip
    return Result(
        200,
        "Consumer groups",
        "groups",
        partial(group_views.render_list, rows, q, len(broker.cluster.brokers)),
    )


async def group(
    broker: BrokerServices, viewer: Viewer, group_id: str, lag: LagHistory, q: dict[str, str]
) -> Result:
    title = f"Group {group_id}"
    if not viewer.group(group_id):
        raise PageError(403, title, "groups", "Group authorization failed.")
    share = await share_state.detail(broker, group_id, viewer)
    if share is not None:
        return Result(200, title, "groups", partial(share_views.render_share_group, share, q))
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
    return Result(200, title, "groups", partial(group_views.render_group, detail, svg, q))


async def broker_configs(
    broker: BrokerServices, viewer: Viewer, which: str, q: dict[str, str]
) -> Result:
    """``/brokers/<id>``: this broker's configs and the cluster-wide dynamic defaults, as
    DescribeConfigs answers (each broker describes only itself, as Kafka's does)."""
    me = broker.config.broker_id
    title = f"Broker {which} configs"
    if which != str(me):
        raise PageError(
            404,
            title,
            "brokers",
            f"This is broker {me}: each broker's console shows that broker's configs.",
        )
    own = await configs.describe_configs(broker, viewer, configs.BROKER, str(me))
    if own.error == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
        raise PageError(403, title, "brokers", "Cluster authorization failed (DESCRIBE_CONFIGS).")
    if own.error:
        raise PageError(400, title, "brokers", own.message)
    defaults = await configs.describe_configs(broker, viewer, configs.BROKER, "")
    return Result(
        200,
        title,
        "brokers",
        partial(broker_views.render_configs, me, own.rows, defaults.rows, q),
    )


async def acls(broker: BrokerServices, viewer: Viewer, q: dict[str, str]) -> Result:
    got = await configs.acls(broker, viewer)
    if got.error == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
        raise PageError(403, "ACLs", "acls", "Cluster authorization failed (DESCRIBE).")
    return Result(200, "ACLs", "acls", partial(acl_views.render, got, q))
