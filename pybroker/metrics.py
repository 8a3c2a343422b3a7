"""The counters behind /metrics that the request paths move: ``BrokerMetrics`` (requests,
latency buckets, error codes, bytes in and out per topic) and ``IdleMeter``.

Costs: on the produce and fetch paths only plain Python counters move (dict look-ups and
integer additions, nothing of prometheus_client), and only when ``metrics.listener`` is set
(else ``Broker.metrics`` is None and the handlers skip it).  Everything else is read at scrape
time (pybroker/read_model.py's snapshot) and rendered off the loop (pybroker/exposition.py).
"""

from __future__ import annotations

import bisect
import math
import time
from collections import deque
from collections.abc import Iterable

from pybroker.errors import ErrorCode
from pybroker.wire import messages as _messages  # noqa: F401  (registers the declarations)
from pybroker.wire.schema import SCHEMAS

# request latency buckets, seconds (Prometheus' convention); Kafka's TotalTimeMs quantiles are
# estimated from them
LATENCY_BOUNDS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
QUANTILE_WINDOW_S = 300.0  # Kafka's reservoir favours the last 5 minutes
SNAPSHOT_EVERY_S = 15.0

_bucket = bisect.bisect_left
_API_NAMES: dict[int, str] = {k: api.name for k, api in SCHEMAS.by_key.items()}
_ERROR_NAMES: dict[int, str] = {int(e): e.name for e in ErrorCode}
FETCH, PRODUCE = 1, 0


def api_name(api_key: int) -> str:
    return _API_NAMES.get(api_key, f"Api{api_key}")


def error_name(code: int) -> str:
    return _ERROR_NAMES.get(code, f"UNKNOWN_{code}")


def _count_errors(obj: dict, counts: dict[int, int]) -> None:
    """Kafka's ``AbstractResponse.errorCounts``: every ``error_code`` of the answer, NONE too."""
    code = obj.get("error_code")
    if code is not None:
        counts[code] = counts.get(code, 0) + 1
    for v in obj.values():
        if type(v) is list:
            for x in v:
                if type(x) is dict:
                    _count_errors(x, counts)


class BrokerMetrics:
    """The counters the request paths move; plain ints and dicts, owned by the event loop.

    ``request`` is called once per request by the connection; ``produced`` and ``consumed``
    by the Produce and Fetch handlers per partition appended / answered with records."""

    def __init__(self) -> None:
        # topic -> [bytes in, messages in, bytes out]; topics deleted are folded into _retired
        self.topics: dict[str, list[int]] = {}
        self._retired = [0, 0, 0]
        self.replication_bytes_out = 0  # (bytes in: ReplicaManager.replication_bytes_in)
        self.requests: dict[tuple[str, int], int] = {}  # (request name, version) -> count
        # request name -> [count per LATENCY_BOUNDS bucket + overflow bucket, sum seconds]
        self.latency: dict[str, list[float]] = {}
        self.errors: dict[tuple[str, int], int] = {}  # (request name, error code) -> count
        self.idle = IdleMeter()
        self._history: deque[tuple[float, dict[str, list[float]]]] = deque()
        self._errors_scratch: dict[int, int] = {}

    # -- the hot path ---------------------------------------------------------------------
    def produced(self, topic: str, nbytes: int, records: int) -> None:
        c = self.topics.get(topic)
        if c is None:
            c = self.topics[topic] = [0, 0, 0]
        c[0] += nbytes
        c[1] += records

    def consumed(self, topic: str, nbytes: int) -> None:
        c = self.topics.get(topic)
        if c is None:
            c = self.topics[topic] = [0, 0, 0]
        c[2] += nbytes

    def request(
        self, api_key: int, version: int, body: dict, response: dict | None, seconds: float
    ) -> None:
        name = _API_NAMES.get(api_key) or api_name(api_key)
        requests = self.requests
        key = (name, version)
        requests[key] = requests.get(key, 0) + 1
        h = self.latency.get(name)
        if h is None:
            h = self.latency[name] = [0] * (len(LATENCY_BOUNDS) + 2)
        h[_bucket(LATENCY_BOUNDS, seconds)] += 1
        h[-1] += seconds
        if api_key == FETCH:  # as Kafka: also under FetchConsumer / FetchFollower
            if version >= 15:
                replica = (body.get("replica_state") or {}).get("replica_id", -1)
            else:
                replica = body.get("replica_id", -1)
            self._request("FetchFollower" if replica >= 0 else "FetchConsumer", version, seconds)
        if response is None:
            return
        errors = self.errors
        if api_key == PRODUCE:  # the hot two, walked without the generic recursion
            for t in response["responses"]:
                for p in t["partition_responses"]:
                    key = (name, p["error_code"])
                    errors[key] = errors.get(key, 0) + 1
        elif api_key == FETCH:
            key = (name, response["error_code"])
            errors[key] = errors.get(key, 0) + 1
            for t in response["responses"]:
                for p in t["partitions"]:
                    key = (name, p["error_code"])
                    errors[key] = errors.get(key, 0) + 1
        else:
            counts = self._errors_scratch
            _count_errors(response, counts)
            for code, n in counts.items():
                key = (name, code)
                errors[key] = errors.get(key, 0) + n
            counts.clear()

    def _request(self, name: str, version: int, seconds: float) -> None:
        key = (name, version)
        requests = self.requests
        requests[key] = requests.get(key, 0) + 1
        h = self.latency.get(name)
        if h is None:
            h = self.latency[name] = [0] * (len(LATENCY_BOUNDS) + 2)
        h[_bucket(LATENCY_BOUNDS, seconds)] += 1
        h[-1] += seconds

    # -- scrape time ----------------------------------------------------------------------
    def retire_topics(self, live: Iterable[str]) -> None:
        """Drop the per-topic counters of deleted topics (Kafka removes their MBeans), keeping
        the all-topics totals monotonic."""
        live = set(live)
        for topic in [t for t in self.topics if t not in live]:
            c = self.topics.pop(topic)
            for i in range(3):
                self._retired[i] += c[i]

    def totals(self) -> list[int]:
        out = list(self._retired)
        for c in self.topics.values():
            for i in range(3):
                out[i] += c[i]
        return out

    def quantile_base(self, now: float) -> dict[str, list[float]]:
        """Bucket counts at the start of the quantile window (the oldest snapshot at most
        QUANTILE_WINDOW_S old); a snapshot of now is kept every SNAPSHOT_EVERY_S."""
        hist = self._history
        if not hist or now - hist[-1][0] >= SNAPSHOT_EVERY_S:
            hist.append((now, {k: list(v) for k, v in self.latency.items()}))
        while len(hist) > 1 and now - hist[0][0] > QUANTILE_WINDOW_S:
            hist.popleft()
        return hist[0][1] if len(hist) > 1 else {}


class IdleMeter:
    """How much of the time the event loop's thread is off the CPU (Kafka's network processor
    idle share), from that thread's CPU clock (``time.thread_time``) read at scrape time:
    nothing is measured per request or per loop iteration.  Time the loop spends blocked in
    a system call that does not use the CPU (a disk read waiting for the device) or waiting
    for the GIL counts as idle.  ``start`` and ``read`` must run on the loop's thread."""

    def __init__(self) -> None:
        self._start: tuple[float, float] | None = None  # (wall, thread CPU) at start
        self._last: tuple[float, float] | None = None  # at the previous read
        self.share: float = math.nan
        self.idle_s = 0.0  # wall seconds minus the loop thread's CPU seconds since start

    def start(self) -> None:
        self._start = self._last = (time.perf_counter(), time.thread_time())

    def read(self) -> float:
        """The idle share since the previous read (at least one second back; else the share
        the previous read gave)."""
        if self._start is None or self._last is None:
            return math.nan
        now, cpu = time.perf_counter(), time.thread_time()
        self.idle_s = max(0.0, (now - self._start[0]) - (cpu - self._start[1]))
        wall0, cpu0 = self._last
        if now - wall0 >= 1.0 or (math.isnan(self.share) and now > wall0):
            self.share = min(1.0, max(0.0, 1.0 - (cpu - cpu0) / (now - wall0)))
            if now - wall0 >= 1.0:
                self._last = (now, cpu)
        return self.share
