"""The broker's side of a controlled shutdown (pybroker/replication/controlled_shutdown.py)
against a stand-in controller that moves leaderships at a given pace: a hand-over that keeps
progressing is waited for past the fixed bound (Kafka waits for its controller's answer, up to
its retries of request.timeout.ms each), one that stalls is given up at the bound."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from pybroker.coord.metadata.store import NoNodeError
from pybroker.replication.controlled_shutdown import controlled_shutdown


@dataclass
class _State:
    leader: int
    isr: list[int]
    replicas: list[int]


@dataclass
class _Topic:
    partitions: dict[int, _State]


class _Store:
    def __init__(self) -> None:
        self.created = asyncio.Event()

    async def delete(self, path: str) -> None:
        raise NoNodeError(path)

    async def create(self, path: str, data: bytes, **kw: object) -> None:
        self.created.set()


@dataclass
class _Cluster:
    broker_id: int = 1
    brokers: dict[int, object] = field(default_factory=lambda: {1: None, 2: None})
    session_ok: bool = True
    topics: dict[str, _Topic] = field(default_factory=dict)
    store: _Store = field(default_factory=_Store)


class _Replicas:
    async def stop_fetching(self) -> None:
        return None


async def _controller(cluster: _Cluster, per_step: int, step_s: float, steps: int | None) -> None:
    """Moves ``per_step`` of broker 1's leaderships to broker 2 every ``step_s`` once the
    shutdown was announced; after ``steps`` steps (None: never) it stops making progress."""
    await cluster.store.created.wait()
    done = 0
    while steps is None or done < steps:
        await asyncio.sleep(step_s)
        moved = 0
        for t in cluster.topics.values():
            for st in t.partitions.values():
                if st.leader == 1 and moved < per_step:
                    st.leader, st.isr = 2, [2]
                    moved += 1
        done += 1


def _cluster(partitions: int) -> _Cluster:
    c = _Cluster()
    c.topics["t"] = _Topic({p: _State(1, [1, 2], [1, 2]) for p in range(partitions)})
    return c


def _run(partitions: int, per_step: int, step_s: float, steps: int | None) -> tuple[bool, int]:
    async def main() -> tuple[bool, int]:
        c = _cluster(partitions)
        ctl = asyncio.create_task(_controller(c, per_step, step_s, steps))
        ok = await controlled_shutdown(
            c, _Replicas(), max_retries=3, retry_backoff_ms=50, attempt_s=0.3, max_s=0.6
        )
        ctl.cancel()
        left = sum(st.leader == 1 for st in c.topics["t"].partitions.values())
        return ok, left

    return asyncio.run(main())


def test_a_hand_over_that_keeps_progressing_is_waited_for_past_the_bound():
    # 40 partitions, 2 moved every 0.05 s: 1 s of work against a 0.6 s bound
    ok, left = _run(40, 2, 0.05, None)
    assert ok and left == 0


def test_a_hand_over_that_stops_progressing_is_given_up():
    ok, left = _run(40, 2, 0.05, 3)
    assert not ok and left == 34
