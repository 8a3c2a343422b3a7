"""The broker process's GC policy (pybroker/gc_policy.py): survivors of a slow full collection
are frozen, cyclic garbage among frozen objects is reclaimed after the unfreeze interval."""

from __future__ import annotations

import asyncio
import gc
import weakref

import pytest
from broker_fixture import free_port

from pybroker.broker import Broker
from pybroker.config import build_config
from pybroker.gc_policy import YOUNG_THRESHOLD, GcPolicy


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
