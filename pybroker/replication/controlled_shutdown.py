"""Controlled shutdown, the broker's side (Kafka's controlled.shutdown.enable, ZooKeeper mode):
before a broker of a cluster stops, it stops fetching, announces the shutdown with the
ephemeral ``/pybroker/controlled_shutdown/<id>`` (the controller then moves its leaderships and
removes it from every ISR) and waits until the metadata shows that done.  Attempts follow
Kafka's ``controlled.shutdown.max.retries`` and ``.retry.backoff.ms``.  A hand-over that stops
progressing is given up after :data:`MAX_S`; one that keeps progressing (the controller moving
thousands of leaderships) is waited for, as Kafka waits for its controller's answer, up to
Kafka's own worst case (each retry a request timeout, :data:`REQUEST_TIMEOUT_S`, plus its
backoff), so SIGTERM always ends the process.  Steps: docs/internals.md
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
REQUEST_TIMEOUT_S = 30.0  # Kafka's request.timeout.ms for its ControlledShutdown request
# the whole controlled shutdown, backoffs included, while nothing progresses: Kafka's first
# attempt alone waits a request timeout for its controller (10 s before: at 100,000 replicas
# the controller was still moving 16,689 leaderships and 16,611 ISR memberships at 11.4 s)
MAX_S = REQUEST_TIMEOUT_S
POLL_S = 0.02


class _Progress:
    """The hand-over's deadline: ``MAX_S`` from the start, pushed ``attempt_s`` past each
    moment the pending work shrank, never past ``cap``."""

    __slots__ = ("best", "cap", "deadline", "extend_s")

    def __init__(self, deadline: float, cap: float, extend_s: float) -> None:
        self.best: int | None = None
        self.deadline, self.cap, self.extend_s = deadline, cap, extend_s

    def saw(self, pending: int, now: float) -> bool:
        """Record ``pending`` seen at ``now``; True (the deadline pushed) when it shrank."""
        if self.best is not None and pending >= self.best:
            return False
        first, self.best = self.best is None, pending
        if not first:
            self.deadline = max(self.deadline, min(self.cap, now + self.extend_s))
        return not first


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
    cap = t0 + max(max_s, max_retries * (REQUEST_TIMEOUT_S + retry_backoff_ms / 1000.0))
    progress = _Progress(t0 + max_s, cap, attempt_s)
    if not set(cluster.brokers) - {me}:
        log.info("controlled shutdown: no other live broker; stopping")
        return True
    if not cluster.session_ok:
        log.warning("controlled shutdown: the metadata store is not reachable; stopping")
        return False
    leads, follows = pending_work(cluster, me)
    progress.saw(len(leads) + len(follows), t0)
    log.info(
        "controlled shutdown: starting (broker %d leads %d partitions another replica can "
        "take over, and is in %d ISRs as a follower)",
        me,
        len(leads),
        len(follows),
    )
    try:
        await _within(replicas.stop_fetching(), min(progress.deadline, t0 + attempt_s))
    except TimeoutError:
        log.warning("controlled shutdown: the fetchers did not stop within %.0f s", attempt_s)
    for attempt in range(1, max_retries + 1):
        if time.monotonic() >= progress.deadline:
            break
        try:
            await _within(
                _announce(cluster, me), min(progress.deadline, time.monotonic() + attempt_s)
            )
        except (StoreError, TimeoutError) as e:
            log.warning("controlled shutdown: attempt %d could not reach the store: %s", attempt, e)
        else:
            end = min(progress.deadline, time.monotonic() + attempt_s)
            if await _done_within(cluster, me, end, t0, progress):
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
            cluster,
            me,
            min(progress.deadline, time.monotonic() + retry_backoff_ms / 1000.0),
            t0,
            progress,
        ):
            return True
    log.warning(
        "controlled shutdown failed; proceeding to an unclean shutdown after %.0f ms",
        (time.monotonic() - t0) * 1000,
    )
    return False


async def _done_within(
    cluster: Cluster, me: int, end: float, t0: float, progress: _Progress
) -> bool:
    """Poll the metadata cache until nothing is left to hand over (True) or ``end``, which
    moves with the deadline while the pending work shrinks.  A poll scans every partition:
    polls are spaced at least four scans apart, so they take at most a fifth of the loop."""
    while True:
        started = time.monotonic()
        leads, follows = pending_work(cluster, me)
        now = time.monotonic()
        if not leads and not follows:
            log.info(
                "controlled shutdown succeeded after %.0f ms: leading no partition another "
                "replica can lead, in no ISR",
                (time.monotonic() - t0) * 1000,
            )
            return True
        if progress.saw(len(leads) + len(follows), now):  # the attempt lasts while it moves
            end = max(end, min(progress.deadline, now + progress.extend_s))
        if now >= end:
            return False
        await asyncio.sleep(max(POLL_S, 4 * (now - started)))


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
