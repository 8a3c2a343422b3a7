"""Controlled shutdown, the broker's side (Kafka's controlled.shutdown.enable, ZooKeeper mode):
before a broker of a cluster stops, it stops fetching, announces the shutdown with the
ephemeral ``/pybroker/controlled_shutdown/<id>`` (the controller then moves its leaderships and
removes it from every ISR) and waits until the metadata shows that done.  Attempts follow
Kafka's ``controlled.shutdown.max.retries`` and ``.retry.backoff.ms``; the whole hand-over is
bounded by :data:`MAX_S`, so SIGTERM always ends the process.  Steps: docs/internals.md
("pybroker/replication/controlled_shutdown.py").
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING, Any

from pybroker.coord.metadata import paths
from pybroker.coord.metadata.store import NodeExistsError, NoNodeError, StoreError

if TYPE_CHECKING:
    from pybroker.coord.metadata.cluster import Cluster
    from pybroker.replication.manager import ReplicaManager

log = logging.getLogger("pybroker.controlled_shutdown")

ATTEMPT_S = 3.0  # one attempt: how long the controller has to act (Kafka: a request timeout)
MAX_S = 10.0  # the whole controlled shutdown, backoffs included
POLL_S = 0.02


def pending_work(cluster: Cluster, broker_id: int) -> tuple[list[str], list[str]]:
    """What the controller still has to do for ``broker_id``, from the metadata cache:
    (partitions it leads that another live ISR member could lead, partitions led by another
    live broker whose ISR still names it), each as "topic-partition"."""
    live = set(cluster.brokers)
    leads, follows = [], []
    for name, info in cluster.topics.items():
        for p, st in info.partitions.items():
            if st.leader == broker_id:
                if any(r != broker_id and r in st.isr and r in live for r in st.replicas):
                    leads.append(f"{name}-{p}")
            elif broker_id in st.isr and st.leader in live:
                follows.append(f"{name}-{p}")
    return leads, follows


async def controlled_shutdown(
    cluster: Cluster,
    replicas: ReplicaManager,
    *,
    max_retries: int,
    retry_backoff_ms: int,
    attempt_s: float = ATTEMPT_S,
    max_s: float = MAX_S,
) -> bool:
    """Hand this broker's leaderships and ISR memberships over (module docstring).  Returns
    True when it succeeded (or there was nothing to hand over), False when the broker stops
    without it."""
    me = cluster.broker_id
    t0 = time.monotonic()
    deadline = t0 + max_s
    if not set(cluster.brokers) - {me}:
        log.info("controlled shutdown: no other live broker; stopping")
        return True
    if not cluster.session_ok:
        log.warning("controlled shutdown: the metadata store is not reachable; stopping")
        return False
    leads, follows = pending_work(cluster, me)
    log.info(
        "controlled shutdown: starting (broker %d leads %d partitions another replica can "
        "take over, and is in %d ISRs as a follower)",
        me,
        len(leads),
        len(follows),
    )
    try:
        await _within(replicas.stop_fetching(), min(deadline, t0 + attempt_s))
    except TimeoutError:
        log.warning("controlled shutdown: the fetchers did not stop within %.0f s", attempt_s)
    for attempt in range(1, max_retries + 1):
        if time.monotonic() >= deadline:
            break
        try:
            await _within(_announce(cluster, me), min(deadline, time.monotonic() + attempt_s))
        except (StoreError, TimeoutError) as e:
            log.warning("controlled shutdown: attempt %d could not reach the store: %s", attempt, e)
        else:
            if await _done_within(cluster, me, min(deadline, time.monotonic() + attempt_s), t0):
                return True
        leads, follows = pending_work(cluster, me)
        left = max_retries - attempt
        log.warning(
            "controlled shutdown attempt %d failed: still leading %s, in the ISR of %s "
            "(%d retries left)",
            attempt,
            leads[:10],
            follows[:10],
            left,
        )
        # the backoff; what the controller finishes meanwhile (or brokers leaving, so
        # that nobody is left to hand over to) ends the wait
        if left and await _done_within(
            cluster, me, min(deadline, time.monotonic() + retry_backoff_ms / 1000.0), t0
        ):
            return True
    log.warning(
        "controlled shutdown failed; proceeding to an unclean shutdown after %.0f ms",
        (time.monotonic() - t0) * 1000,
    )
    return False


async def _done_within(cluster: Cluster, me: int, end: float, t0: float) -> bool:
    """Poll the metadata cache until nothing is left to hand over (True) or ``end``."""
    while True:
        leads, follows = pending_work(cluster, me)
        if not leads and not follows:
            log.info(
                "controlled shutdown succeeded after %.0f ms: leading no partition another "
                "replica can lead, in no ISR",
                (time.monotonic() - t0) * 1000,
            )
            return True
        if time.monotonic() >= end:
            return False
        await asyncio.sleep(POLL_S)


async def _within(coro: Any, deadline: float) -> Any:
    async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
        return await coro


async def _announce(cluster: Cluster, broker_id: int) -> None:
    """(Re)create our ephemeral controlled-shutdown znode: a new child fires the controller's
    watch (a retry deletes and creates it again, to be seen by a controller elected since)."""
    store = cluster.store
    path = paths.controlled_shutdown(broker_id)
    data = json.dumps(
        {"version": 1, "broker": broker_id, "timestamp": str(int(time.time() * 1000))}
    ).encode()
    try:
        await store.delete(path)
    except NoNodeError:
        pass
    try:
        await store.create(path, data, ephemeral=True, makepath=True)
    except NodeExistsError:
        pass
