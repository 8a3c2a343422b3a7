"""SCRAM credentials in the metadata store, where and as Kafka on ZooKeeper keeps them.

``/config/users/<sanitized user>`` holds ``{"version":1,"config":{"SCRAM-SHA-256":
"salt=...,stored_key=...,server_key=...,iterations=4096", ...}}`` (Kafka's
ScramCredentialUtils text per mechanism; other user configs, such as quotas, are kept as
they are).  User names are sanitized as Kafka's Sanitizer does (URL-encoded, ``*`` as
``%2A``, a space as ``%20``), so credentials added with Kafka's ``kafka-configs --zookeeper`` are found, and ours
are readable by Kafka's tools.  Every login reads the node (no cache): a credential change or
deletion takes effect at the next login on every broker.
"""

from __future__ import annotations

import json
import secrets

from pybroker.coord.metadata.store import (
    BadVersionError,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
)
from pybroker.quotas.entities import desanitize as quota_desanitize
from pybroker.quotas.entities import sanitize as quota_sanitize
from pybroker.security.scram import (
    MECHANISMS,
    ScramCredential,
    credential_from_string,
    credential_to_string,
)

USERS = "/config/users"
FAKE_SALT_KEY = "/pybroker/scram-unknown-user-salt-key"


def sanitize(name: str) -> str:
    """Kafka's Sanitizer, shared with client quotas (the same /config/users node)."""
    return quota_sanitize(name)


def desanitize(name: str) -> str:
    return quota_desanitize(name)


def user_path(user: str) -> str:
    return f"{USERS}/{sanitize(user)}"


class CredentialStore:
    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    async def _read(self, user: str) -> tuple[dict, int | None]:
        try:
            data, stat = await self.store.get(user_path(user))
        except NoNodeError:
            return {"version": 1, "config": {}}, None
        try:
            doc = json.loads(data) if data else {}
        except ValueError:
            doc = {}
        doc.setdefault("version", 1)
        doc.setdefault("config", {})
        return doc, stat.version

    async def get(self, user: str, mechanism: str) -> ScramCredential | None:
        doc, _ = await self._read(user)
        text = doc["config"].get(mechanism)
        if not isinstance(text, str):
            return None
        try:
            return credential_from_string(text)
        except (KeyError, ValueError):
            return None

    async def describe(self, user: str) -> list[tuple[str, int]]:
        """(mechanism, iterations) of each SCRAM credential the user has."""
        doc, _ = await self._read(user)
        out = []
        for mech in MECHANISMS:
            text = doc["config"].get(mech)
            if isinstance(text, str):
                try:
                    out.append((mech, credential_from_string(text).iterations))
                except (KeyError, ValueError):
                    continue
        return out

    async def users(self) -> list[str]:
        try:
            children = await self.store.get_children(USERS)
        except NoNodeError:
            return []
        return [desanitize(c) for c in children]

    async def alter(
        self, user: str, upserts: dict[str, ScramCredential], deletions: set[str]
    ) -> None:
        """Upsert and delete credentials of one user in one compare-and-set write."""
        for _ in range(10):
            doc, version = await self._read(user)
            config = doc["config"]
            for mech in deletions:
                config.pop(mech, None)
            for mech, cred in upserts.items():
                config[mech] = credential_to_string(cred)
            data = json.dumps(doc, separators=(",", ":")).encode()
            try:
                if version is None:
                    await self.store.ensure_path(USERS)
                    await self.store.create(user_path(user), data)
                else:
                    await self.store.set(user_path(user), data, version)
                return
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # written meanwhile: read again
        raise BadVersionError(f"credentials of {user!r} kept changing", user_path(user))


async def fake_salt_key(store: MetadataStore) -> bytes:
    """A secret shared by the cluster's brokers (created at first use): the key of the
    salts answered to SCRAM logins of unknown users (security/scram.py)."""
    try:
        data, _ = await store.get(FAKE_SALT_KEY)
        return data
    except NoNodeError:
        pass
    await store.ensure_path(FAKE_SALT_KEY.rsplit("/", 1)[0])
    try:
        await store.create(FAKE_SALT_KEY, secrets.token_bytes(32))
    except NodeExistsError:
        pass  # another broker made it first
    data, _ = await store.get(FAKE_SALT_KEY)
    return data
