"""AlterUserScramCredentials (key 51), version 0.

Upserts and deletes SCRAM credentials (kafka-configs --alter --add-config
'SCRAM-SHA-256=[iterations=8192,password=...]' --entity-type users).  The client sends the
salt and the salted password; the broker keeps Kafka's stored and server keys
(security/credentials.py), one compare-and-set write per user.  Checks and errors as Kafka's:
UNACCEPTABLE_CREDENTIAL (empty name, iterations outside 4096-16384, empty salt or salted
password), UNSUPPORTED_SASL_MECHANISM, DUPLICATE_RESOURCE (a user/mechanism twice in the
request), RESOURCE_NOT_FOUND (deleting a credential that does not exist).  The whole of a
user's changes is refused if one of them is.
"""

from __future__ import annotations

from pybroker.coord.metadata.store import InvalidPathError, StoreError
from pybroker.errors import ErrorCode
from pybroker.handlers._authz import on_cluster
from pybroker.handlers.context import RequestContext
from pybroker.registry import handler
from pybroker.security.acl import Operation
from pybroker.security.scram import (
    MAX_ITERATIONS,
    MECHANISM_IDS,
    MIN_ITERATIONS,
    credential_from_salted,
)

_BY_ID = {v: k for k, v in MECHANISM_IDS.items()}


@handler(51, 0, 0)
async def alter_user_scram_credentials(ctx: RequestContext, req: dict) -> dict:
    creds = ctx.services.credentials
    if not on_cluster(ctx, Operation.ALTER):
        users = dict.fromkeys(i["name"] for i in req["deletions"] + req["upsertions"])
        return {
            "throttle_time_ms": 0,
            "results": [
                {
                    "user": u,
                    "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                    "error_message": None,
                }
                for u in users
            ],
        }
    errors: dict[str, tuple[int, str]] = {}
    order: list[str] = []
    changes: dict[str, tuple[dict, set]] = {}
    seen: set[tuple[str, int]] = set()

    def fail(user: str, code: int, message: str) -> None:
        errors.setdefault(user, (code, message))

    for kind, items in (("deletion", req["deletions"]), ("upsertion", req["upsertions"])):
        for it in items:
            user, mech_id = it["name"], it["mechanism"]
            if user not in order:
                order.append(user)
            if not user:
                fail(user, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
                continue
            mech = _BY_ID.get(mech_id)
            if mech is None:
                fail(user, ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
                continue
            if (user, mech_id) in seen:
                fail(
                    user,
                    ErrorCode.DUPLICATE_RESOURCE,
                    "A user credential cannot be altered twice in the same request",
                )
                continue
            seen.add((user, mech_id))
            upserts, deletions = changes.setdefault(user, ({}, set()))
            if kind == "deletion":
                deletions.add(mech)
                continue
            if not MIN_ITERATIONS <= it["iterations"] <= MAX_ITERATIONS:
                fail(
                    user,
                    ErrorCode.UNACCEPTABLE_CREDENTIAL,
                    f"Iterations {it['iterations']} must be between {MIN_ITERATIONS} and "
                    f"{MAX_ITERATIONS}",
                )
                continue
            salt, salted = bytes(it["salt"]), bytes(it["salted_password"])
            if not salt or not salted:
                fail(user, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and password must be given")
                continue
            upserts[mech] = credential_from_salted(mech, salted, salt, it["iterations"])
    results = []
    for user in order:
        if user not in errors:
            upserts, deletions = changes.get(user, ({}, set()))
            try:
                have = {m for m, _ in await creds.describe(user)}
                missing = deletions - have
                if missing:
                    fail(
                        user,
                        ErrorCode.RESOURCE_NOT_FOUND,
                        "Attempt to delete a user credential that does not exist",
                    )
                else:
                    await creds.alter(user, upserts, deletions)
            except InvalidPathError as e:  # a name longer than the store's paths hold
                fail(user, ErrorCode.UNACCEPTABLE_CREDENTIAL, f"Username cannot be stored: {e}")
            except StoreError as e:
                fail(user, ErrorCode.UNKNOWN, f"metadata store: {e}")
        code, message = errors.get(user, (ErrorCode.NONE, None))
        results.append({"user": user, "error_code": code, "error_message": message})
    return {"throttle_time_ms": 0, "results": results}
