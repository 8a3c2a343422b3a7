"""The read-only web console on the ``metrics.listener`` HTTP listener (docs/console.md).

``Console(broker, sample_interval_s)``: ``install(http)`` adds its routes to the broker's
HttpServer (``/``, ``/topics``, ``/topics/<name>``, ``/groups``, ``/groups/<id>``,
``/brokers/<id>``, ``/acls``, ``/static/console.css``), ``start()`` / ``stop()`` run the
consumer-lag sampler (console/lag.py).  Every page takes ``?refresh=N`` (seconds, at most
``REFRESH_MAX_S``; 0: off): a ``<meta http-equiv="refresh">`` reloads it.
Every page: the viewer is authenticated (console/auth.py: HTTP Basic against the broker's SASL
credentials when an authorizer is configured, 401 otherwise), its state is read on the event
loop (console/state.py, chunked), and the page is rendered (console/views/) in a worker
thread.  Topics and groups the viewer may not DESCRIBE are left out; asking for one answers
403 whether it exists or not (its existence is not revealed), as Kafka's Metadata does.
"""

from __future__ import annotations

import asyncio
import time
from functools import partial
from importlib import resources
from typing import TYPE_CHECKING
from urllib.parse import unquote

from pybroker.console import html, pages
from pybroker.console.auth import Unauthenticated, viewer_for
from pybroker.console.lag import LagHistory
from pybroker.http_server import HttpRequest, HttpResponse, HttpServer

if TYPE_CHECKING:
    from pybroker.services import BrokerServices

HTML = "text/html; charset=utf-8"
# no script at all; styles only from the console's own stylesheet
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def _css() -> bytes:
    return resources.files("pybroker.console").joinpath("static/console.css").read_bytes()


class Console:
    def __init__(self, broker: BrokerServices, sample_interval_s: float = 10.0) -> None:
        self.broker = broker
        self.lag = LagHistory(broker, sample_interval_s)
        self._css = _css()

    def install(self, http: HttpServer) -> None:
        http.route("/", self._serve)
        http.route("/topics", self._serve)
        http.route_prefix("/topics/", self._serve)
        http.route("/groups", self._serve)
        http.route_prefix("/groups/", self._serve)
        http.route_prefix("/brokers/", self._serve)
        http.route("/acls", self._serve)
        http.route("/static/console.css", self._static)

    def start(self) -> None:
        self.lag.start()

    async def stop(self) -> None:
        await self.lag.stop()

    async def _static(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse(
            200, self._css, "text/css; charset=utf-8", {"Cache-Control": "max-age=300"}
        )

    async def _serve(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        try:
            viewer = await viewer_for(self.broker, request.headers, request.peer)
        except Unauthenticated as e:
            return HttpResponse(
                401,
                f"{e}\n".encode(),
                headers={"WWW-Authenticate": 'Basic realm="pybroker console", charset="UTF-8"'},
            )
        q = {k: v[-1] for k, v in request.query.items()}
        path = request.path
        refresh = 0
        try:
            refresh = min(max(pages.int_param(q, "refresh", 0, "overview"), 0), html.REFRESH_MAX_S)
            if path == "/":
                result = await pages.overview(self.broker, viewer, q)
            elif path == "/topics":
                result = await pages.topic_list(self.broker, viewer, q)
            elif path.startswith("/topics/"):
                result = await pages.topic(self.broker, viewer, unquote(path[8:]), q, self.lag)
            elif path == "/groups":
                result = await pages.group_list(self.broker, viewer, q)
            elif path.startswith("/groups/"):
                result = await pages.group(self.broker, viewer, unquote(path[8:]), self.lag, q)
            elif path.startswith("/brokers/"):
                result = await pages.broker_configs(self.broker, viewer, unquote(path[9:]), q)
            else:
                result = await pages.acls(self.broker, viewer, q)
        except pages.PageError as e:
            message = f'<p class="bad" id="error">{html.esc(e.message)}</p>'
            result = pages.Result(e.status, e.title, e.section, partial(str, message))
        body = await asyncio.to_thread(result.render)
        ms = f"{(time.perf_counter() - started) * 1000:.0f}"
        cluster = self.broker.cluster
        doc = html.page(
            result.title,
            body,
            section=result.section,
            broker_id=self.broker.config.broker_id,
            cluster_id=cluster.cluster_id if cluster is not None else "",
            principal=viewer.principal,
            render_ms=ms,
            params=q,
            refresh=refresh,
        )
        return HttpResponse(result.status, doc.encode(), HTML, dict(SECURITY_HEADERS))
