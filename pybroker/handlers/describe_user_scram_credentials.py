"""DescribeUserScramCredentials (key 50), version 0.

The SCRAM mechanisms and iteration counts each user has (never salts or keys), read from the
metadata store (security/credentials.py).  A null list describes every user with a
credential (an empty list too, as in Kafka); a named user without one (or named "") gets RESOURCE_NOT_FOUND, a name given twice
DUPLICATE_RESOURCE, as Kafka answers.
"""

from __future__ import annotations

from pybroker.coord.metadata.store import InvalidPathError, StoreError
from pybroker.errors import ErrorCode
from pybroker.handlers._authz import on_cluster
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation
from pybroker.security.scram import MECHANISM_IDS


def _not_found(name: str, message: str) -> dict:
    return {
        "user": name,
        "error_code": ErrorCode.RESOURCE_NOT_FOUND,
        "error_message": message,
        "credential_infos": [],
    }


@handler(50, 0, 0)
async def describe_user_scram_credentials(ctx: RequestContext, req: dict) -> dict:
    creds = ctx.services.credentials
    if not on_cluster(ctx, Operation.DESCRIBE):
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            "error_message": None,
            "results": [],
        }
    try:
        describe_all = not req["users"]  # null or empty: every user (Kafka's describingAllUsers)
        names = await creds.users() if describe_all else [u["name"] for u in req["users"]]
        results = []
        seen: dict[str, int] = {}
        for n in names:
            seen[n] = seen.get(n, 0) + 1
        for name in dict.fromkeys(names):
            if not name and not describe_all:  # before the duplicate check, as Kafka
                results.append(_not_found(name, "Username must not be empty"))
                continue
            if seen[name] > 1:
                results.append(
                    {
                        "user": name,
                        "error_code": ErrorCode.DUPLICATE_RESOURCE,
                        "error_message": f"Cannot describe SCRAM credentials for the same user "
                        f"twice in a single request: {name}",
                        "credential_infos": [],
                    }
                )
                continue
            try:
                infos = await creds.describe(name)
            except InvalidPathError:  # a name no store path can hold has no credential
                infos = []
            if not infos:
                if describe_all:
                    continue
                results.append(
                    _not_found(
                        name, f"Attempt to describe a user credential that does not exist: {name}"
                    )  # fmt: skip
                )
                continue
            results.append(
                {
                    "user": name,
                    "error_code": ErrorCode.NONE,
                    "error_message": None,
                    "credential_infos": [
                        {"mechanism": MECHANISM_IDS[m], "iterations": i} for m, i in infos
                    ],
                }
            )
    except StoreError as e:
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.UNKNOWN,
            "error_message": f"metadata store: {e}",
            "results": [],
        }
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "results": results,
    }
