"""ApiVersions (key 18), versions 0-4.

Answers the ranges registered in pybroker.registry, so only fully implemented APIs are
advertised.  The response header is v0 for every version (KIP-511); an unknown version gets
UNSUPPORTED_VERSION with key 18's range in a v0 body (pybroker.connection does that, since the
request cannot be decoded).  v3+: client software name and version are validated as Kafka
does (INVALID_REQUEST).  No supported or finalized features are announced.
"""

from __future__ import annotations

import re

from pybroker.errors import ErrorCode
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler, supported_versions

_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


@handler(18, 0, 4)
async def api_versions(ctx: RequestContext, req: dict) -> dict:
    error = ErrorCode.NONE
    if ctx.version >= 3:
        for s in (req["client_software_name"], req["client_software_version"]):
            if not _SOFTWARE.fullmatch(s):
                error = ErrorCode.INVALID_REQUEST
    return {"error_code": error, "api_keys": supported_versions(), "throttle_time_ms": 0}
