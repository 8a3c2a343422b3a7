"""The request-path side of client quotas: who a request is charged to, and the
Produce/Fetch recordings as Kafka's KafkaApis makes them.

* ``produce_throttle(services, session, client_id, request_bytes)``: records the request's
  size (Kafka: request.sizeInBytes, the frame without its size prefix) against
  producer_byte_rate; answers the throttle time (acks=0 too: the mute still applies).
* ``fetch_bound(...)``: the most a consumer's fetch may carry (getMaxValueInQuotaWindow:
  bound * (quota.window.num - 1) * window seconds), None without a quota.
* ``fetch_throttle(...)``: records the fetched bytes against consumer_byte_rate; when the
  quota is violated the recording is taken back (unrecordQuotaSensor) and the caller
  answers an empty, throttled response instead, as Kafka's getThrottledResponse.

Followers' fetches are never charged (replication is not subject to client quotas).  The
user of a connection is its principal's name (``ANONYMOUS`` without authentication).
"""

from __future__ import annotations

from typing import Any

from pybroker.quotas.entities import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE


def user_of(session: Any) -> str:
    principal = getattr(session, "principal", None) or "User:ANONYMOUS"
    return principal.split(":", 1)[1] if ":" in principal else principal


def produce_throttle(services: Any, session: Any, client_id: str | None, size: int) -> int:
    q = getattr(services, "quotas", None)
    if q is None:
        return 0
    ms = q.record(PRODUCER_BYTE_RATE, user_of(session), client_id or "", size)
    if ms:
        q.throttled(PRODUCER_BYTE_RATE, ms)
    return ms


def fetch_bound(services: Any, session: Any, client_id: str | None) -> int | None:
    q = getattr(services, "quotas", None)
    if q is None:
        return None
    return q.max_value_in_window(CONSUMER_BYTE_RATE, user_of(session), client_id or "")


def fetch_throttle(services: Any, session: Any, client_id: str | None, size: int) -> int:
    q = getattr(services, "quotas", None)
    if q is None:
        return 0
    user, cid = user_of(session), client_id or ""
    ms = q.record(CONSUMER_BYTE_RATE, user, cid, size)
    if ms:
        q.unrecord(CONSUMER_BYTE_RATE, user, cid, size)
        q.throttled(CONSUMER_BYTE_RATE, ms)
    return ms
