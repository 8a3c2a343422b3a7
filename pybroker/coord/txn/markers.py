"""The transaction coordinator's marker sender (Kafka's TransactionMarkerChannelManager).

``MarkerSender`` is the ``MarkerWriter`` of txn/coordinator.py: it writes one transaction's
COMMIT / ABORT marker to each of its partitions and answers an error code per partition.  A
data partition's marker goes to its leader; a marker for (__consumer_offsets, p) goes to the
coordinator of offsets partition p (metadata/placement.py), which commits or drops the
transaction's pending offsets of its groups (group/txn_offsets.py).  Partitions this broker
leads (or coordinates) are written directly (``write_local``: the broker passes
handlers/write_txn_markers.py's writer); the others go as one WriteTxnMarkers v1 request per
broker, over the inter-broker listener, all concurrently, through a :class:`BrokerChannel`
the broker's ``connect`` opens (replication/client.py's BrokerConnection).  A partition with
no leader, an unreachable broker or a lost connection answers a retriable error, and the
coordinator sends again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import NamedTuple, Protocol

from pybroker.coord.metadata.cluster import Cluster
from pybroker.coord.metadata.model import TopicPartition
from pybroker.coord.metadata.placement import OFFSETS_TOPIC, partition_coordinator
from pybroker.errors import ErrorCode

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS_KEY, WRITE_TXN_MARKERS_VERSION = 27, 1


class TxnMarker(NamedTuple):
    """One marker to write: the transaction of ``producer_id`` (at ``producer_epoch``) ends
    with COMMIT (``committed``) or ABORT in every one of ``partitions``."""

    producer_id: int
    producer_epoch: int
    committed: bool
    coordinator_epoch: int
    partitions: Sequence[TopicPartition]


class BrokerChannel(Protocol):
    """A connection to another broker: one request at a time (the sender serializes them);
    ``request`` raises ConnectionError when the broker cannot be reached or the connection
    is lost."""

    async def request(
        self, api_key: int, api_version: int, body: dict, *, timeout_s: float | None = None
    ) -> dict: ...

    def close(self) -> None: ...


#: the markers for partitions this broker leads or coordinates: an error code per partition,
#: per marker
LocalMarkerWriter = Callable[[Sequence[TxnMarker]], Awaitable[list[dict[TopicPartition, int]]]]
#: (host, port) of a broker's inter-broker listener -> a channel to it
Connect = Callable[[str, int], BrokerChannel]


class MarkerSender:
    def __init__(
        self,
        cluster: Cluster,
        broker_id: int,
        *,
        write_local: LocalMarkerWriter,
        connect: Connect,
        listener: Callable[[], str | None],
        request_timeout_s: float = 35.0,
        offsets_owner: Callable[[int], int] | None = None,
    ) -> None:
        """``listener``: the inter-broker listener's name (read at each send: the endpoint
        the markers go to).  ``offsets_owner``: the coordinator of an offsets partition (the
        group coordinator's placement; default: rendezvous hashing over the live brokers)."""
        self._offsets_owner = offsets_owner
        self.cluster = cluster
        self.broker_id = broker_id
        self._write_local = write_local
        self._connect = connect
        self._listener = listener
        self.request_timeout_s = request_timeout_s
        self._conns: dict[int, tuple[tuple[str, int], BrokerChannel, asyncio.Lock]] = {}

    def _destination(self, topic: str, partition: int) -> int | None:
        """The broker that takes this partition's marker; None: the topic is gone."""
        cluster = self.cluster
        if topic == OFFSETS_TOPIC:
            if self._offsets_owner is not None:
                return self._offsets_owner(partition)
            return partition_coordinator(partition, cluster.brokers)
        info = cluster.topics.get(topic)
        if info is None or partition not in info.partitions:
            return None
        return info.partitions[partition].leader

    async def __call__(
        self,
        producer_id: int,
        producer_epoch: int,
        committed: bool,
        coordinator_epoch: int,
        partitions: list[TopicPartition],
    ) -> dict[TopicPartition, int]:
        codes: dict[TopicPartition, int] = {}
        by_broker: dict[int, list[TopicPartition]] = {}
        for tp in partitions:
            dest = self._destination(*tp)
            if dest is None:
                codes[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif dest < 0:
                codes[tp] = ErrorCode.NOT_LEADER_OR_FOLLOWER
            else:
                by_broker.setdefault(dest, []).append(tp)

        async def send(broker: int, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
            marker = TxnMarker(producer_id, producer_epoch, committed, coordinator_epoch, tps)
            if broker == self.broker_id:
                return (await self._write_local([marker]))[0]
            return await self._remote(broker, marker)

        results = await asyncio.gather(*(send(b, tps) for b, tps in by_broker.items()))
        for r in results:
            codes.update(r)
        return codes

    async def _remote(self, broker: int, marker: TxnMarker) -> dict[TopicPartition, int]:
        info = self.cluster.brokers.get(broker)
        addr = None if info is None else info.endpoint(self._listener())
        if addr is None:
            return dict.fromkeys(marker.partitions, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        conn = self._connection(broker, addr)
        topics: dict[str, list[int]] = {}
        for t, p in marker.partitions:
            topics.setdefault(t, []).append(p)
        body = {
            "markers": [
                {
                    "producer_id": marker.producer_id,
                    "producer_epoch": marker.producer_epoch,
                    "transaction_result": marker.committed,
                    "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()],
                    "coordinator_epoch": marker.coordinator_epoch,
                }
            ]
        }
        _, c, lock = conn
        try:
            async with lock:  # one request in flight per connection
                resp = await c.request(
                    WRITE_TXN_MARKERS_KEY,
                    WRITE_TXN_MARKERS_VERSION,
                    body,
                    timeout_s=self.request_timeout_s,
                )
        except ConnectionError as e:
            log.info("markers to broker %d: %s", broker, e)
            return dict.fromkeys(marker.partitions, ErrorCode.NETWORK_EXCEPTION)
        codes: dict[TopicPartition, int] = dict.fromkeys(marker.partitions, ErrorCode.UNKNOWN)
        for m in resp["markers"]:
            for t in m["topics"]:
                for p in t["partitions"]:
                    if (t["name"], p["partition_index"]) in codes:
                        codes[(t["name"], p["partition_index"])] = p["error_code"]
        return codes

    def _connection(
        self, broker: int, addr: tuple[str, int]
    ) -> tuple[tuple[str, int], BrokerChannel, asyncio.Lock]:
        got = self._conns.get(broker)
        if got is None or got[0] != addr:
            if got is not None:
                got[1].close()
            got = (addr, self._connect(*addr), asyncio.Lock())
            self._conns[broker] = got
        return got

    def close(self) -> None:
        for _, conn, _ in self._conns.values():
            conn.close()
        self._conns.clear()
