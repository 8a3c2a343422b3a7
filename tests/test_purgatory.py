"""The purgatory (pybroker/purgatory.py) against a model: a notify wakes exactly the waits
registered on its key, each wait leaves nothing registered once it ends (woken, timed out or
cancelled), and ``waiting()`` counts one per (key, wait).  A key's lone waiter is held without
a set of its own, a second one makes the set: both shapes, promotions and removals are
exercised by random interleavings."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from pybroker.purgatory import Purgatory

KEYS = st.lists(st.integers(0, 5), min_size=1, max_size=4)  # (repeats allowed)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("wait"), KEYS),
        st.tuples(st.just("notify"), st.integers(0, 6)),
        st.tuples(st.just("cancel"), st.integers(0, 30)),
    ),
    max_size=40,
)


async def _steps(n: int = 3) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_notify_wakes_exactly_the_waits_on_its_key(ops):
    async def run() -> None:
        pg = Purgatory()
        tasks: list[asyncio.Task] = []
        keys_of: list[set[int]] = []
        live: set[int] = set()  # the model's waits still parked
        woken: set[int] = set()
        for op, arg in ops:
            if op == "wait":
                tasks.append(asyncio.ensure_future(pg.wait_any(arg, 3600)))
                keys_of.append(set(arg))
                live.add(len(tasks) - 1)
            elif op == "notify":
                pg.notify(arg)
                hit = {i for i in live if arg in keys_of[i]}
                live -= hit
                woken |= hit
            elif tasks:
                i = arg % len(tasks)
                if i in live:
                    tasks[i].cancel()
                    live.discard(i)
            await _steps()
            for i, t in enumerate(tasks):
                assert t.done() == (i not in live)
                if i in woken:
                    assert t.result() is True
                elif t.done():
                    assert t.cancelled()
            assert pg.waiting() == sum(len(keys_of[i]) for i in live)
        for i in live:
            tasks[i].cancel()
        await _steps()
        assert pg.waiting() == 0

    asyncio.run(run())


def test_a_wait_that_times_out_leaves_nothing_and_a_later_notify_wakes_only_the_others():
    async def run() -> None:
        pg = Purgatory()
        short = asyncio.ensure_future(pg.wait_any([1, 2], 0.001))
        long = asyncio.ensure_future(pg.wait_any([2], 3600))
        assert await short is False
        assert pg.waiting() == 1  # only the long wait's key 2
        pg.notify(1)  # nobody waits on it now
        await _steps()
        assert not long.done()
        pg.notify(2)
        assert await long is True
        assert pg.waiting() == 0
        assert await pg.wait_any([3], 0) is False  # no wait at all: nothing registered
        assert pg.waiting() == 0

    asyncio.run(run())
