"""What a handler receives: the request's header facts and the broker's services.

``services`` is the composed broker (pybroker.broker.Broker); handlers use only these of its
attributes: ``config`` (pybroker.config.Config), ``cluster``
(pybroker.coord.metadata.cluster.Cluster), ``logs`` (pybroker.log.manager.LogManager), ``purgatory`` (pybroker.purgatory.Purgatory),
``clock`` (pybroker.clock.Clock), ``fetch_sessions`` (pybroker.fetch_session.FetchSessionCache),
``groups`` (pybroker.coord.group.coordinator.GroupCoordinator), ``dynamic``
(pybroker.dynamic_config.DynamicBrokerConfig: the dynamic broker configs applied to ``config``),
``reload_tls()`` (new TLS contexts for the SSL listeners, files read again).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RequestContext:
    services: Any
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    peer: Any = None
    listener: str | None = None  # the name of the listener the request came in on
    session: Any = None  # pybroker.security.sasl.Session: who the connection is

    @property
    def version(self) -> int:
        return self.api_version


class CloseConnection(Exception):
    """Raised by a handler when Kafka would answer by closing the connection (e.g. an error
    on an acks=0 produce, which has no response to carry it)."""
