"""Per (user, client-id) quota sensors and throttle times, as Kafka's ClientQuotaManager.

``QuotaManager(quotas_of, now_ms, samples, window_ms)`` where ``quotas_of()`` returns the
current entity -> quotas map (QuotaStore.quotas: read at use time, so a change applies to
the next request).  For quota type ``key`` (producer_byte_rate, consumer_byte_rate,
request_percentage):

* ``record(key, user, client_id, value) -> throttle_ms``: the quota bound and the sensor
  come from the eight-level precedence (entities.resolve); without a quota nothing is
  recorded and 0 is answered.  The value is recorded, then the rate measured; above the
  bound the throttle time is QuotaUtils.throttleTime (for request_percentage capped at one
  window, ClientRequestQuotaManager's maxThrottleTimeMs).
* ``unrecord(...)``: records -value without a check (Kafka's unrecordQuotaSensor).
* ``max_value_in_window(key, user, client_id)``: bound * (samples - 1) * window seconds,
  Kafka's getMaxValueInQuotaWindow (a consumer's fetch is bounded by it), None unlimited.
* ``record_connection(ip) -> throttle_ms``: connection_creation_rate per IP (ConnectionQuotas).
* ``throttled(key, ms)``: adds to the throttle-time totals per quota type (``throttle_ms``),
  the total that Kafka's throttle-time sensors count.
"""

from __future__ import annotations

from collections.abc import Callable

from pybroker.quotas.entities import CONNECTION_CREATION_RATE, IP, REQUEST_PERCENTAGE, resolve
from pybroker.quotas.rate import WindowedRate, throttle_time_ms
from pybroker.quotas.store import Quotas

# a user with no sensor activity for this long loses its sensors (Kafka: one hour)
INACTIVE_SENSOR_MS = 3_600_000


class QuotaManager:
    def __init__(
        self,
        quotas_of: Callable[[], Quotas],
        now_ms: Callable[[], int],
        samples: int = 11,
        window_ms: int = 1000,
    ) -> None:
        self._quotas_of = quotas_of
        self._now_ms = now_ms
        self.samples = samples
        self.window_ms = window_ms
        self._sensors: dict[tuple[str, str, str], tuple[WindowedRate, list[int]]] = {}
        self.throttle_ms: dict[str, int] = {}
        self._last_expiry = 0
        self._enabled_for: Quotas | None = None
        self._enabled: set[str] = set()

    def _sensor(self, key: str, tags: tuple[str, str], now: int) -> WindowedRate:
        k = (key, *tags)
        entry = self._sensors.get(k)
        if entry is None:
            entry = (WindowedRate(self.samples, self.window_ms), [now])
            self._sensors[k] = entry
        entry[1][0] = now
        if now - self._last_expiry > INACTIVE_SENSOR_MS:
            self._last_expiry = now
            for old in [
                s for s, (_, t) in self._sensors.items() if now - t[0] > INACTIVE_SENSOR_MS
            ]:
                del self._sensors[old]
        return entry[0]

    def enabled(self, key: str) -> bool:
        """Whether any entity has a ``key`` quota (cached per quotas map: the store replaces
        the map on every change)."""
        quotas = self._quotas_of()
        if quotas is not self._enabled_for:
            self._enabled_for = quotas
            self._enabled = {k for cfg in quotas.values() for k in cfg}
        return key in self._enabled

    def record(self, key: str, user: str, client_id: str, value: float) -> int:
        if not self.enabled(key):  # the common case: no quota of this type anywhere
            return 0
        found = resolve(self._quotas_of(), key, user, client_id)
        if found is None:
            return 0
        bound, tags = found
        now = self._now_ms()
        rate = self._sensor(key, tags, now)
        rate.record(value, now)
        if bound <= 0:
            # a zero quota: Kafka's arithmetic divides by zero; hold the client a full window
            return self.window_ms if key == REQUEST_PERCENTAGE else self.window_ms * self.samples
        t = throttle_time_ms(rate, bound, now)
        if key == REQUEST_PERCENTAGE:
            t = min(t, self.window_ms)
        return t

    def unrecord(self, key: str, user: str, client_id: str, value: float) -> None:
        if not self.enabled(key):
            return
        found = resolve(self._quotas_of(), key, user, client_id)
        if found is not None:
            now = self._now_ms()
            self._sensor(key, found[1], now).record(-value, now)

    def max_value_in_window(self, key: str, user: str, client_id: str) -> int | None:
        if not self.enabled(key):
            return None
        found = resolve(self._quotas_of(), key, user, client_id)
        if found is None:
            return None
        return int(found[0] * (self.samples - 1) * self.window_ms / 1000)

    def record_connection(self, ip: str) -> int:
        """ConnectionQuotas' per-IP connection_creation_rate (/config/ips/<ip>, else
        /config/ips/<default>): a new connection from ``ip`` is recorded; above the quota it
        is taken back and the throttle time (at most one window) answered: the caller closes
        the connection after that time without serving it."""
        if not self.enabled(CONNECTION_CREATION_RATE):
            return 0
        quotas = self._quotas_of()
        bound = None
        for name in (ip, None):
            cfg = quotas.get(((IP, name),))
            if cfg is not None and CONNECTION_CREATION_RATE in cfg:
                bound = cfg[CONNECTION_CREATION_RATE]
                break
        if bound is None:
            return 0
        now = self._now_ms()
        rate = self._sensor(CONNECTION_CREATION_RATE, (ip, ""), now)
        rate.record(1.0, now)
        t = min(throttle_time_ms(rate, bound, now), self.window_ms) if bound > 0 else self.window_ms
        if t:
            rate.record(-1.0, now)
            self.throttled(CONNECTION_CREATION_RATE, t)
        return t

    def throttled(self, key: str, ms: int) -> None:
        self.throttle_ms[key] = self.throttle_ms.get(key, 0) + ms
