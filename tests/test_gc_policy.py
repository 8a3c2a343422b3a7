"""The broker process's GC policy (pybroker/gc_policy.py): survivors of a slow full collection
are frozen, cyclic garbage among frozen objects is reclaimed after the unfreeze interval."""

from __future__ import annotations

import asyncio
import gc
import weakref

import pytest
from broker_fixture import free_port

from pybroker import gc_policy
from pybroker.broker import Broker
from pybroker.config import build_config
from pybroker.gc_policy import CONNECTIONS_PER_FREEZE, YOUNG_THRESHOLD, GcPolicy


class _Cyclic:
    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def clean_gc():
    yield
    gc.unfreeze()  # give this process's objects back to the collector
    gc.collect()


async def _full_collection_then_loop_step() -> None:
    gc.collect()
    await asyncio.sleep(0)  # the freeze is queued on the loop
    await asyncio.sleep(0)


def test_a_slow_full_collection_freezes_its_survivors(clean_gc):
    async def main() -> tuple[int, int]:
        policy = GcPolicy(asyncio.get_running_loop(), freeze_after_ms=0.0)
        policy.install()
        try:
            gc.unfreeze()
            assert gc.get_freeze_count() == 0
            await _full_collection_then_loop_step()
            return gc.get_freeze_count(), policy.stats.freezes
        finally:
            policy.uninstall()

    frozen, freezes = asyncio.run(main())
    assert frozen > 0 and freezes == 1


def test_a_fast_full_collection_freezes_nothing(clean_gc):
    async def main() -> int:
        policy = GcPolicy(asyncio.get_running_loop(), freeze_after_ms=1e9)
        policy.install()
        try:
            gc.unfreeze()
            await _full_collection_then_loop_step()
            assert policy.stats.full_collections >= 1
            return gc.get_freeze_count()
        finally:
            policy.uninstall()

    assert asyncio.run(main()) == 0


def test_cyclic_garbage_among_frozen_objects_is_reclaimed_after_the_unfreeze(clean_gc):
    """Memory stays bounded: a cycle alive at a freeze and dropped later is freed once the
    unfreeze interval has passed and a full collection ran."""

    async def main() -> tuple[bool, bool]:
        policy = GcPolicy(asyncio.get_running_loop(), freeze_after_ms=1e9, unfreeze_interval_s=0.05)
        policy.install()
        try:
            obj = _Cyclic()
            ref = weakref.ref(obj)
            policy.freeze_now()
            del obj
            gc.collect()
            kept_while_frozen = ref() is not None
            await asyncio.sleep(0.2)  # the unfreeze timer
            gc.collect()
            return kept_while_frozen, ref() is None
        finally:
            policy.uninstall()

    kept_while_frozen, reclaimed = asyncio.run(main())
    assert kept_while_frozen  # frozen: no collection walks it
    assert reclaimed and gc.get_freeze_count() == 0


def test_uninstall_removes_the_callback_and_the_timer(clean_gc):
    async def main() -> None:
        policy = GcPolicy(asyncio.get_running_loop())
        policy.install()
        assert policy._on_gc in gc.callbacks
        policy.uninstall()
        assert policy._on_gc not in gc.callbacks
        policy.uninstall()  # twice: harmless

    asyncio.run(main())


def test_bench_gc_pauses_runs_both_modes():
    """bench/gc_pauses.py, small: both modes report their full collections."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "bench.gc_pauses", "--objects", "200000"],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert [line.split()[0] for line in out.splitlines()] == ["defaults", "policy"]


def test_install_raises_the_young_threshold_and_uninstall_restores_it(clean_gc):
    before = gc.get_threshold()

    async def main() -> None:
        policy = GcPolicy(asyncio.get_running_loop())
        policy.install()
        assert gc.get_threshold() == (YOUNG_THRESHOLD, *before[1:])
        garbage = weakref.ref(_Cyclic())
        gc.collect(0)  # an explicit young collection still reclaims cycles
        assert garbage() is None
        policy.uninstall()
        assert gc.get_threshold() == before

    asyncio.run(main())


def _policy_installed() -> bool:
    return any(isinstance(getattr(cb, "__self__", None), GcPolicy) for cb in gc.callbacks)


def test_a_serving_broker_runs_under_the_policy_and_removes_it_on_stop(tmp_path, clean_gc):
    """Broker.serving (``pybroker serve`` and a node's worker): the policy is installed for
    the serving broker's life, the start's survivors frozen, and gone once it stopped."""
    settings = {
        "broker.id": "0",
        "listeners": f"PLAINTEXT://127.0.0.1:{free_port()}",
        "log.dirs": str(tmp_path),
    }

    async def main() -> tuple[bool, int, bool]:
        gc.unfreeze()
        async with Broker(build_config(settings)).serving():
            installed, frozen = _policy_installed(), gc.get_freeze_count()
        return installed, frozen, _policy_installed()

    installed, frozen, after = asyncio.run(main())
    assert installed and frozen > 0 and not after


def test_a_thousand_more_open_connections_freeze_once_and_churn_does_not(clean_gc, monkeypatch):
    """Connections opened by the thousand are frozen (W23: an idle connection's ~30 tracked
    objects are not walked by a later full collection); connections that close and reopen
    below the mark freeze nothing more, and after the unfreeze only more connections do."""
    monkeypatch.setattr(gc_policy, "CONNECTIONS_FREEZE_DELAY_S", 0.0)

    async def settle() -> None:
        for _ in range(3):
            await asyncio.sleep(0)

    async def main() -> list[int]:
        policy = GcPolicy(asyncio.get_running_loop(), freeze_after_ms=1e9)
        policy.install()
        seen = []
        try:
            gc.unfreeze()
            for n in range(1, CONNECTIONS_PER_FREEZE):
                policy.connections_open(n)
            await settle()
            seen.append(gc.get_freeze_count())  # below the step: nothing frozen
            policy.connections_open(CONNECTIONS_PER_FREEZE)
            await settle()
            seen.append(policy.stats.connection_freezes)
            seen.append(gc.get_freeze_count())
            for _ in range(3):  # churn: all closed (the count falls), as many open again
                for n in range(1, CONNECTIONS_PER_FREEZE + 1):
                    policy.connections_open(n)
                await settle()
            seen.append(policy.stats.connection_freezes)
            policy._unfreeze()
            policy.connections_open(CONNECTIONS_PER_FREEZE + 1)  # the same connections
            await settle()
            seen.append(policy.stats.connection_freezes)
            policy.connections_open(2 * CONNECTIONS_PER_FREEZE)  # a thousand more
            await settle()
            seen.append(policy.stats.connection_freezes)
            return seen
        finally:
            policy.uninstall()

    before, freezes, frozen, after_churn, after_unfreeze, after_more = asyncio.run(main())
    assert before == 0
    assert freezes == 1 and frozen > 0
    assert after_churn == 1
    assert after_unfreeze == 1
    assert after_more == 2


def test_a_serving_broker_tells_the_policy_of_its_connections(tmp_path, clean_gc):
    settings = {
        "broker.id": "0",
        "listeners": f"PLAINTEXT://127.0.0.1:{free_port()}",
        "log.dirs": str(tmp_path),
    }

    async def main() -> bool:
        broker = Broker(build_config(settings))
        async with broker.serving():
            hook = broker.server.on_open
        return isinstance(getattr(hook, "__self__", None), GcPolicy)

    assert asyncio.run(main())
