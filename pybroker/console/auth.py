"""Who is looking: HTTP Basic authentication against the broker's own SASL credentials, and
the ACL checks of what that principal may see.

Without an authorizer (``authorizer.class.name`` unset) the console is open, read-only, and
every check passes, as Kafka allows everything then.  With one, every request must carry
``Authorization: Basic`` credentials, checked with the broker's own SASL code:

* PLAIN: the ``user_<name>="<password>"`` users of the JAAS entry of every SASL listener that
  enables PLAIN (security/plain.py ``PlainServer``);
* SCRAM-SHA-256/512: the credentials in the metadata store (security/credentials.py) of the
  mechanisms some SASL listener enables (both mechanisms when no listener is a SASL one), by
  running a full exchange between ``ScramClient`` and ``ScramServer`` in a worker thread (the
  PBKDF2 work never runs on the event loop).

The principal is ``User:<name>``; the ACL host is the HTTP client's address.  Missing or bad
credentials: ``Unauthenticated`` (the console answers 401 with a Basic challenge).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pybroker.handlers.context import RequestContext
from pybroker.security import listeners as listener_security
from pybroker.security.acl import CLUSTER_NAME, Operation, ResourceType
from pybroker.security.plain import PlainServer
from pybroker.security.sasl import Session
from pybroker.security.scram import MECHANISMS as SCRAM_MECHANISMS
from pybroker.security.scram import AuthenticationFailed, ScramClient, ScramServer

if TYPE_CHECKING:
    from pybroker.config import Config
    from pybroker.security.authorizer import Authorizer
    from pybroker.security.scram import ScramCredential
    from pybroker.services import BrokerServices


class Unauthenticated(Exception):
    """No credentials, or credentials the broker does not accept."""


@dataclass
class Viewer:
    """The principal a page is rendered for (``principal`` None: no authorizer, all allowed)."""

    principal: str | None
    host: str
    authorizer: Authorizer | None = None

    def can(self, op: Operation, rtype: ResourceType, name: str) -> bool:
        if self.authorizer is None:
            return True
        return self.authorizer.authorize(self.principal, self.host, op, rtype, name)

    def topic(self, name: str, op: Operation = Operation.DESCRIBE) -> bool:
        return self.can(op, ResourceType.TOPIC, name)

    def group(self, name: str, op: Operation = Operation.DESCRIBE) -> bool:
        return self.can(op, ResourceType.GROUP, name)

    def cluster(self, op: Operation = Operation.DESCRIBE) -> bool:
        return self.can(op, ResourceType.CLUSTER, CLUSTER_NAME)

    def context(self, broker: BrokerServices, api_key: int, version: int) -> RequestContext:
        """A request context for calling a Kafka API handler in process as this principal,
        so the handler's own authorization rules apply."""
        session = Session(principal=self.principal) if self.principal else None
        return RequestContext(
            services=broker,
            api_key=api_key,
            api_version=version,
            correlation_id=0,
            client_id="pybroker-console",
            peer=(self.host, 0),
            session=session,
        )


def basic_credentials(header: str | None) -> tuple[str, str]:
    """(user, password) of an ``Authorization: Basic`` header; Unauthenticated otherwise."""
    if not header:
        raise Unauthenticated("credentials required")
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic":
        raise Unauthenticated("Basic authentication required")
    try:
        text = base64.b64decode(token.strip(), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        raise Unauthenticated("malformed Basic credentials") from None
    user, sep, password = text.partition(":")
    if not sep or not user:
        raise Unauthenticated("malformed Basic credentials")
    return user, password


def _plain_users(config: Config) -> dict[str, str]:
    users: dict[str, str] = {}
    for name in config.sasl_listeners:
        sasl = listener_security.listener_sasl(config, name)
        if "PLAIN" in sasl.mechanisms:
            users.update(sasl.plain_users)
    return users


def _scram_mechanisms(config: Config) -> list[str]:
    listeners = config.sasl_listeners
    if not listeners:
        return list(SCRAM_MECHANISMS)
    out: list[str] = []
    for name in listeners:
        for m in listener_security.listener_sasl(config, name).mechanisms:
            if m in SCRAM_MECHANISMS and m not in out:
                out.append(m)
    return out


def _plain_ok(users: dict[str, str], user: str, password: str) -> bool:
    try:
        PlainServer(users).step(b"\0" + user.encode() + b"\0" + password.encode())
    except AuthenticationFailed:
        return False
    return True


def _scram_ok(
    mechanism: str, cred: ScramCredential | None, user: str, password: str, key: bytes
) -> bool:
    """One whole SCRAM exchange, client and server side (CPU: the client's PBKDF2)."""
    server = ScramServer(mechanism, lambda _u: cred, key)
    client = ScramClient(mechanism, user, password)
    try:
        client.check(server.step(client.final(server.step(client.first()))))
    except (AuthenticationFailed, KeyError, ValueError):
        return False
    return server.complete and server.principal == user


async def authenticate(broker: BrokerServices, header: str | None) -> str:
    """The principal (``User:<name>``) of the request's Basic credentials."""
    user, password = basic_credentials(header)
    config = broker.config
    users = _plain_users(config)
    if user in users and _plain_ok(users, user, password):
        return f"User:{user}"
    credentials = broker.credentials
    if credentials is not None and password:
        key = await broker.scram_fake_salt_key()
        for mechanism in _scram_mechanisms(config):
            cred = await credentials.get(user, mechanism)
            if cred is None:
                continue
            if await asyncio.to_thread(_scram_ok, mechanism, cred, user, password, key):
                return f"User:{user}"
    raise Unauthenticated("invalid username or password")


async def viewer_for(broker: BrokerServices, headers: dict[str, str], peer: tuple | None) -> Viewer:
    host = str(peer[0]) if peer else "*"
    authorizer = broker.authorizer
    if authorizer is None:
        return Viewer(None, host)
    principal = await authenticate(broker, headers.get("authorization"))
    return Viewer(principal, host, authorizer)
