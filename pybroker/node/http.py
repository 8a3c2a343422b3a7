"""The node's metrics.listener: one HTTP listener for all the broker processes of a node.

Each broker process serves its own metrics and console on a private loopback port
(node/plan.py); the supervisor serves the node's ``metrics.listener`` with:

* ``/metrics``: every process's exposition merged into one, each sample labelled with its
  ``broker`` id (so ``sum without (broker)`` is the node's figure), each family's HELP and
  TYPE once; plus the node's own families (``pybroker_node_*``: processes wanted and serving,
  restarts, and each process's CPU seconds and resident memory read from /proc);
* ``/node``: the node's processes as a table (broker id, pid, port, state, restarts, CPU
  seconds, RSS);
* every other path (the web console): answered by one process, chosen by the path:
  ``/brokers/<id>`` by that broker; ``/groups/<id>`` by the one that coordinates the group
  (each is asked in turn until one does not answer 404); anything else by the first process
  serving.  Request headers that matter (Authorization, Accept, Cookie) are passed on, the
  answer comes back as it is.
"""

from __future__ import annotations

import asyncio
import html
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlencode

from pybroker.http_server import HttpRequest, HttpResponse

log = logging.getLogger("pybroker.node")

FETCH_TIMEOUT_S = 10.0
PASSED_HEADERS = ("authorization", "accept", "cookie", "if-none-match")
TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"


@dataclass
class ProcessView:
    """What the supervisor tells the listener about one broker process."""

    broker_id: int
    pid: int | None
    port: int  # its first Kafka listener port
    state: str  # starting | serving | restarting | stopped
    restarts: int
    cpu_s: float
    rss_mib: float
    metrics_port: int | None


async def http_get(
    port: int, target: str, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """One GET to 127.0.0.1:port (HTTP/1.1, Connection: close): (status, headers, body)."""
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection("127.0.0.1", port), FETCH_TIMEOUT_S
    )
    try:
        lines = [f"GET {target} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Connection: close"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        raw = await asyncio.wait_for(reader.read(), FETCH_TIMEOUT_S)
    finally:
        writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    status = int(status_line.split()[1])
    out: dict[str, str] = {}
    for line in header_lines:
        k, _, v = line.partition(":")
        out[k.strip().lower()] = v.strip()
    return status, out, body


# --------------------------------------------------------------------------- /metrics

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?(\s.*)$")


def merge_expositions(parts: list[tuple[int, str]]) -> str:
    """Prometheus text expositions of several brokers -> one, each sample labelled
    ``broker="<id>"``, families in first-seen order, HELP/TYPE once each."""
    families: dict[str, list[str]] = {}  # family -> [HELP, TYPE] lines
    samples: dict[str, list[str]] = {}
    for broker_id, text in parts:
        family = ""
        for line in text.splitlines():
            if not line.strip():
                continue
            if line.startswith("# HELP ") or line.startswith("# TYPE "):
                family = line.split()[2]
                meta = families.setdefault(family, [])
                if not any(m.startswith(line[:7]) for m in meta):
                    meta.append(line)
                samples.setdefault(family, [])
                continue
            if line.startswith("#"):
                continue
            m = _SAMPLE.match(line)
            if m is None:
                continue
            name, labels, rest = m.groups()
            inner = labels[1:-1] if labels else ""
            labelled = f'broker="{broker_id}"' + (f",{inner}" if inner else "")
            samples.setdefault(family or name, []).append(f"{name}{{{labelled}}}{rest}")
    out: list[str] = []
    for family, lines in samples.items():
        out += families.get(family, [])
        out += lines
    return "\n".join(out) + "\n"


def node_families(views: list[ProcessView], wanted: int) -> str:
    serving = sum(1 for v in views if v.state == "serving")
    lines = [
        "# HELP pybroker_node_processes broker processes this node runs (node.cores)",
        "# TYPE pybroker_node_processes gauge",
        f"pybroker_node_processes {wanted}",
        "# HELP pybroker_node_processes_serving broker processes serving now",
        "# TYPE pybroker_node_processes_serving gauge",
        f"pybroker_node_processes_serving {serving}",
        "# HELP pybroker_node_restarts_total times a broker process was started again after it"
        " ended by itself",
        "# TYPE pybroker_node_restarts_total counter",
    ]
    lines += [f'pybroker_node_restarts_total{{broker="{v.broker_id}"}} {v.restarts}' for v in views]
    lines += [
        "# HELP pybroker_node_cpu_seconds_total CPU seconds (user + system) of a broker process",
        "# TYPE pybroker_node_cpu_seconds_total counter",
    ]
    lines += [f'pybroker_node_cpu_seconds_total{{broker="{v.broker_id}"}} {v.cpu_s}' for v in views]
    lines += [
        "# HELP pybroker_node_resident_memory_bytes resident memory of a broker process",
        "# TYPE pybroker_node_resident_memory_bytes gauge",
    ]
    lines += [
        f'pybroker_node_resident_memory_bytes{{broker="{v.broker_id}"}} {int(v.rss_mib * 1048576)}'
        for v in views
    ]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- the listener


class NodeHttp:
    """Routes for the node's HttpServer; ``views()`` is the supervisor's current picture."""

    def __init__(self, views: Callable[[], list[ProcessView]], wanted: int) -> None:
        self.views = views
        self.wanted = wanted

    def install(self, server: Any) -> None:
        server.route("/metrics", self.metrics)
        server.route("/node", self.node_page)
        server.route_prefix("/", self.proxy)

    async def metrics(self, request: HttpRequest) -> HttpResponse:
        views = self.views()
        serving = [v for v in views if v.state == "serving" and v.metrics_port]
        results = await asyncio.gather(
            *(http_get(v.metrics_port, "/metrics") for v in serving), return_exceptions=True
        )
        parts = []
        for v, r in zip(serving, results, strict=True):
            if isinstance(r, BaseException) or r[0] != 200:
                log.warning("metrics of broker %d not read: %r", v.broker_id, r)
                continue
            parts.append((v.broker_id, r[2].decode("utf-8", "replace")))
        body = merge_expositions(parts) + node_families(views, self.wanted)
        return HttpResponse(200, body.encode(), TEXT_FORMAT)

    async def node_page(self, request: HttpRequest) -> HttpResponse:
        rows = "".join(
            "<tr>"
            + "".join(
                f"<td>{html.escape(str(x))}</td>"
                for x in (
                    v.broker_id,
                    v.pid or "-",
                    v.port,
                    v.state,
                    v.restarts,
                    f"{v.cpu_s:.1f}",
                    f"{v.rss_mib:.0f}",
                )
            )
            + "</tr>"
            for v in self.views()
        )
        page = (
            "<!doctype html><html><head><meta charset='utf-8'><title>node</title>"
            "<link rel='stylesheet' href='/static/console.css'></head><body>"
            f"<h1>This node: {self.wanted} broker processes</h1>"
            "<p><a href='/'>cluster overview</a></p>"
            "<table><thead><tr><th>broker</th><th>pid</th><th>port</th><th>state</th>"
            "<th>restarts</th><th>CPU s</th><th>RSS MiB</th></tr></thead>"
            f"<tbody>{rows}</tbody></table></body></html>"
        )
        return HttpResponse(200, page.encode(), "text/html; charset=utf-8")

    def _candidates(self, path: str) -> list[ProcessView]:
        serving = [v for v in self.views() if v.state == "serving" and v.metrics_port]
        parts = path.split("/")
        if len(parts) >= 3 and parts[1] == "brokers":
            wanted = unquote(parts[2])
            return [v for v in serving if str(v.broker_id) == wanted] or serving[:1]
        if len(parts) >= 3 and parts[1] == "groups" and parts[2]:
            return serving  # the coordinator answers; the others 404
        return serving[:1]

    async def proxy(self, request: HttpRequest) -> HttpResponse:
        target = request.path + (
            "?" + urlencode(request.query, doseq=True) if request.query else ""
        )
        headers = {k: v for k, v in request.headers.items() if k in PASSED_HEADERS}
        answer: tuple[int, dict[str, str], bytes] | None = None
        for v in self._candidates(request.path):
            try:
                answer = await http_get(v.metrics_port, target, headers)
            except (OSError, TimeoutError, ValueError, IndexError) as e:
                log.warning("console request to broker %d failed: %r", v.broker_id, e)
                continue
            if answer[0] != 404:
                break
        if answer is None:
            return HttpResponse(503, b"no broker process of this node is serving\n")
        status, headers_in, body = answer
        passed = {
            k: v
            for k, v in headers_in.items()
            if k not in ("content-length", "content-type", "connection", "keep-alive", "date")
        }
        return HttpResponse(
            status, body, headers_in.get("content-type", "text/plain"), headers=passed
        )
