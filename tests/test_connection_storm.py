"""A connection storm (issue 27, W23: 1,000 connects a second to a broker holding 10,000):
the listener sets up at most ACCEPT_BATCH new connections per event-loop iteration (Kafka's
Processor.ConnectionQueueSize, 20), the rest waiting in the listen backlog, so the requests of
connections already open are served between batches; no connect is lost meanwhile."""

from __future__ import annotations

import asyncio
import gc
import itertools
import socket
import threading
import weakref

from broker_fixture import batch, unique_topic, wait_until

from pybroker.server import ACCEPT_BATCH, BACKLOG
from pybroker.testing.scale import Clients

NONE = 0


def test_the_loop_runs_between_accept_batches(start_broker):
    """Connections waiting in the listen backlog are accepted a batch per loop iteration: a
    callback that re-arms itself every iteration sees some of them set up and not the rest
    (all at once, before: asyncio-style batches of 128 took these 100 in one iteration)."""
    b = start_broker()
    server = b.broker.server
    n = 100
    assert n < BACKLOG  # all of them wait in the listen backlog

    async def storm() -> tuple[list[int], list[socket.socket]]:
        loop = asyncio.get_running_loop()
        base = len(server.connections)
        # connected by the kernel into the listen backlog; none accepted before we yield
        socks = [socket.create_connection((b.host, b.port), timeout=10) for _ in range(n)]
        seen: list[int] = []

        def probe() -> None:
            seen.append(len(server.connections) - base)
            if seen[-1] < n:
                loop.call_soon(probe)

        loop.call_soon(probe)
        while len(server.connections) - base < n:
            await asyncio.sleep(0.01)
        return seen, socks

    seen, socks = b.run(storm())
    try:
        assert seen[-1] == n
        assert [s for s in seen if 0 < s < n], seen  # the loop ran between batches
        assert all(y - x <= ACCEPT_BATCH for x, y in itertools.pairwise(seen)), seen
    finally:
        for s in socks:
            s.close()


def test_a_storm_of_connects_while_a_producer_produces(start_broker):
    """300 connects at once, each asking ApiVersions, while a producer on a connection of its
    own produces back to back (acks 1): every connect is answered, every produce
    acknowledged, at consecutive offsets."""
    b = start_broker(**{"max.connections.per.ip": 100_000})
    topic = unique_topic("storm")
    with b.client() as c:
        c.create_topic(topic, 1)
    stop = threading.Event()
    acks: list[dict] = []
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            with b.client() as p:
                while not stop.is_set():
                    acks.append(p.produce(topic, 0, batch([b"v"]), acks=1))
        except BaseException as e:  # reported below
            errors.append(e)

    producer = threading.Thread(target=produce)
    producer.start()
    storm = Clients((b.host, b.port))
    try:
        storm.open(300)
    finally:
        stop.set()
        producer.join(30)
        storm.close()
    assert not errors, errors
    assert storm.failed == 0
    assert storm.answered == 300
    assert acks and all(a["error_code"] == NONE for a in acks)
    assert [a["base_offset"] for a in acks] == list(range(len(acks)))


def test_a_closed_connection_is_freed_without_the_cyclic_collector(start_broker):
    """A storm's closed connections are freed by reference counting as they close, not left
    as cycles for the collector's next full walk (a storm's longest loop stalls were full
    collections of the connections a storm before it left: 35 objects each)."""
    b = start_broker()
    server = b.broker.server

    async def refs() -> list[weakref.ref]:
        return [weakref.ref(c) for c in server.connections]

    async def live() -> int:
        await asyncio.sleep(0.05)
        return len(server.connections)

    gc.disable()
    try:
        clients = Clients((b.host, b.port))
        clients.open(50)
        assert clients.answered == 50
        conns = b.run(refs())
        assert len(conns) == 50
        clients.close()
        wait_until(lambda: b.run(live()) == 0)
        wait_until(lambda: b.run(live()) == 0 and all(r() is None for r in conns))
    finally:
        gc.enable()
