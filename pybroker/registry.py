"""One registry of API handlers: ``@handler(api_key, min_version, max_version)``.

ApiVersions answers from this registry, so a key is advertised exactly when a handler for it
is registered, with the range the handler declares it fully implements.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pybroker.wire import messages as _messages  # noqa: F401  (registers the declarations)
from pybroker.wire.schema import SCHEMAS

# A handler is ``async def``, or a plain function returning the response or an awaitable of it
# (answered without a coroutine when nothing waits: connection.py writes such an answer from
# the callback that read the request)
Handler = Callable[[Any, dict], Awaitable[dict | None] | dict | None]


@dataclass(frozen=True)
class Registration:
    api_key: int
    min_version: int
    max_version: int
    fn: Handler


HANDLERS: dict[int, Registration] = {}


def handler(api_key: int, min_version: int, max_version: int) -> Callable[[Handler], Handler]:
    """Register ``fn(ctx, request) -> response dict`` (None: no response, e.g. acks=0)."""

    def register(fn: Handler) -> Handler:
        schema = SCHEMAS.by_key.get(api_key)
        if schema is None:
            raise ValueError(f"no schema declared for api key {api_key}")
        if not (
            schema.request.versions.lo <= min_version <= max_version <= schema.request.versions.hi
        ):
            raise ValueError(f"api {api_key}: {min_version}-{max_version} outside the schema")
        if api_key in HANDLERS:
            raise ValueError(f"api key {api_key} registered twice")
        HANDLERS[api_key] = Registration(api_key, min_version, max_version, fn)
        return fn

    return register


def supported_versions() -> list[dict]:
    return [
        {"api_key": r.api_key, "min_version": r.min_version, "max_version": r.max_version}
        for r in sorted(HANDLERS.values(), key=lambda r: r.api_key)
    ]
