"""What a handler receives: the request's header facts and the broker's services
(``services``: the broker, seen through pybroker/services.py's ``BrokerServices``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from pybroker.security.sasl import Session
    from pybroker.services import BrokerServices


class RequestContext(NamedTuple):
    """Immutable, built once per request (a NamedTuple: a frozen dataclass's __init__ sets
    each field through object.__setattr__, 2-3% of the broker's CPU on W18's commit path)."""

    services: BrokerServices
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    peer: tuple | None = None  # the client's address (the transport's peername)
    listener: str | None = None  # the name of the listener the request came in on
    session: Session | None = None  # who the connection is

    @property
    def version(self) -> int:
        return self.api_version


class CloseConnection(Exception):
    """Raised by a handler when Kafka would answer by closing the connection (e.g. an error
    on an acks=0 produce, which has no response to carry it)."""
