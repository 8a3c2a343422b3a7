"""ApiVersions (key 18), versions 0-4.

Answers the ranges registered in pybroker.registry, so only fully implemented APIs are
advertised.  The response header is v0 for every version (KIP-511); an unknown version gets
UNSUPPORTED_VERSION with key 18's range in a v0 body (pybroker.connection does that, since the
request cannot be decoded).  v3+: client software name and version are validated as Kafka
does (INVALID_REQUEST).  The KIP-848 APIs are left out when
group.coordinator.rebalance.protocols does not name "consumer".  Share groups (KIP-932): with
group.share.enable (on by default, as in Kafka 4.2+), v3+ announces Kafka's feature
share.version (supported 0-1, finalized at 1, Kafka 4.2's level) and the share APIs are listed;
without it neither is.
"""

from __future__ import annotations

import re

from pybroker.errors import ErrorCode
from pybroker.handlers._share import SHARE_APIS, SHARE_VERSION, share_enabled
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler, supported_versions

# ConsumerGroupHeartbeat, ConsumerGroupDescribe: advertised only with
# group.coordinator.rebalance.protocols naming "consumer", as Kafka does
KIP_848_APIS = (68, 69)
_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


@handler(18, 0, 4)
def api_versions(ctx: RequestContext, req: dict) -> dict:
    # a plain function: answered in the callback that read it (connection.py, issue 28)
    error = ErrorCode.NONE
    if ctx.version >= 3:
        for s in (req["client_software_name"], req["client_software_version"]):
            if not _SOFTWARE.fullmatch(s):
                error = ErrorCode.INVALID_REQUEST
    keys = supported_versions()
    if "consumer" not in ctx.services.config.group_coordinator_rebalance_protocols:
        keys = [k for k in keys if k["api_key"] not in KIP_848_APIS]
    resp = {"error_code": error, "api_keys": keys, "throttle_time_ms": 0}
    if share_enabled(ctx):
        if ctx.version >= 3:
            resp["supported_features"] = [
                {"name": "share.version", "min_version": 0, "max_version": SHARE_VERSION}
            ]
            resp["finalized_features_epoch"] = 1
            resp["finalized_features"] = [
                {
                    "name": "share.version",
                    "max_version_level": SHARE_VERSION,
                    "min_version_level": SHARE_VERSION,
                }
            ]
    else:
        resp["api_keys"] = [k for k in keys if k["api_key"] not in SHARE_APIS]
    return resp
