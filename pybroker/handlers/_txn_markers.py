"""The transaction coordinator's marker sender (Kafka's TransactionMarkerChannelManager).

``MarkerSender(services)`` is the ``MarkerWriter`` of coord/transactions.py: it writes one
transaction's COMMIT / ABORT marker to each of its partitions and answers an error code per
partition.  A data partition's marker goes to its leader; a marker for (__consumer_offsets, p)
goes to the coordinator of offsets partition p, which commits or drops the transaction's
pending offsets of its groups (coord/txn_offsets.py).  Partitions this broker leads (or
coordinates) are written directly (handlers/write_txn_markers.py); the others go as one
WriteTxnMarkers v1 request per broker, over the inter-broker listener, all concurrently.  A
partition with no leader, an unreachable broker or a lost connection answers a retriable
error, and the coordinator sends again.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from pybroker.coord.group_coordinator import OFFSETS_TOPIC, partition_coordinator
from pybroker.errors import ErrorCode
from pybroker.handlers.write_txn_markers import TxnMarker, write_txn_markers
from pybroker.replication.client import BrokerConnection
from pybroker.security import listeners as listener_security

log = logging.getLogger("pybroker.transactions.markers")

WRITE_TXN_MARKERS_KEY, WRITE_TXN_MARKERS_VERSION = 27, 1
TopicPartition = tuple[str, int]


class MarkerSender:
    def __init__(self, services: Any, *, request_timeout_s: float = 35.0) -> None:
        self.services = services
        self.request_timeout_s = request_timeout_s
        self._conns: dict[int, tuple[tuple[str, int], BrokerConnection, asyncio.Lock]] = {}

    def _destination(self, topic: str, partition: int) -> int | None:
        """The broker that takes this partition's marker; None: the topic is gone."""
        cluster = self.services.cluster
        if topic == OFFSETS_TOPIC:
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
        me = self.services.config.broker_id
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
            if broker == me:
                return (await write_txn_markers(self.services, [marker]))[0]
            return await self._remote(broker, marker)

        results = await asyncio.gather(*(send(b, tps) for b, tps in by_broker.items()))
        for r in results:
            codes.update(r)
        return codes

    async def _remote(self, broker: int, marker: TxnMarker) -> dict[TopicPartition, int]:
        info = self.services.cluster.brokers.get(broker)
        addr = None if info is None else info.endpoint(self.services.config.inter_broker_listener)
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
    ) -> tuple[tuple[str, int], BrokerConnection, asyncio.Lock]:
        got = self._conns.get(broker)
        if got is None or got[0] != addr:
            if got is not None:
                got[1].close()
            got = (
                addr,
                BrokerConnection(
                    addr[0],
                    addr[1],
                    f"txn-coordinator-{self.services.config.broker_id}",
                    ssl=listener_security.inter_broker_ssl_context(self.services.config),
                    sasl=listener_security.inter_broker_sasl(self.services.config),
                ),
                asyncio.Lock(),
            )
            self._conns[broker] = got
        return got

    def close(self) -> None:
        for _, conn, _ in self._conns.values():
            conn.close()
        self._conns.clear()
