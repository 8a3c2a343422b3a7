"""Offset-commit throughput of pybroker.coord.group.offsets.OffsetStore on both metadata stores.

    python bench/offset_commits.py [--commits N] [--backends local,zookeeper]

Starts a throwaway ZooKeeper (pybroker/testing/zookeeper.py: Debian's zookeeper package, default
forceSync=yes, data dir under /tmp) and an embedded LocalStore (default fsync policy: journal
os.write per commit, fsync at most every 1000 ms), then for 1 and 10 partitions per commit and
1 and 8 concurrent groups (each a consumer committing after every poll: one commit awaited
before the next) commits N times per group with a new offset each time, so every commit is a
store write; then one group of 8 members, each committing its own partition at the same time
(commits queued behind an in-flight multi are merged into one: group commit).  Prints commits/s, partitions/s and commit latency p50/p99.  Last, the
"idle consumer" rows: the same offsets again (skipped within timestamp_refresh_ms: no store
write) and OffsetFetch (load) from the cache.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from pybroker.clock import SYSTEM_CLOCK
from pybroker.coord.group.offsets import CommittedOffset, OffsetStore, encode_offset
from pybroker.coord.metadata.local import LocalStore
from pybroker.coord.metadata.store import MetadataStore, SetData
from pybroker.coord.metadata.zk import ZooKeeperStore
from pybroker.testing.zookeeper import ZooKeeperServer, zookeeper_available


def offsets_for(
    n: int, partitions: int, ts: int, first: int = 0
) -> dict[tuple[str, int], CommittedOffset]:
    return {
        ("bench-topic", p): CommittedOffset(n, 0, "", ts) for p in range(first, first + partitions)
    }


async def run_case(
    store: MetadataStore, groups: int, partitions: int, commits: int, members: int = 1
) -> tuple[float, list[float]]:
    """``groups`` groups of ``members`` consumers each; a member commits its own partitions."""
    offsets = OffsetStore(store, SYSTEM_CLOCK)
    names = [f"bench-{uuid.uuid4().hex[:8]}-{i}" for i in range(groups)]
    for g in names:  # create the znodes first: the loop measures steady-state commits
        await offsets.commit(g, offsets_for(0, partitions * members, SYSTEM_CLOCK.time_ms()))
    latencies: list[float] = []

    async def consumer(group: str, member: int) -> None:
        first = member * partitions
        for n in range(1, commits + 1):
            t = time.perf_counter()
            ts = SYSTEM_CLOCK.time_ms()
            await offsets.commit(group, offsets_for(n, partitions, ts, first))
            latencies.append(time.perf_counter() - t)

    start = time.perf_counter()
    await asyncio.gather(*(consumer(g, m) for g in names for m in range(members)))
    elapsed = time.perf_counter() - start
    for g in names:
        got = await OffsetStore(store, SYSTEM_CLOCK).load(g)
        assert all(co.offset == commits for co in got.values()), "commits lost"
    return elapsed, latencies


async def run_raw(store: MetadataStore, partitions: int, commits: int) -> float:
    """Baseline without OffsetStore: the same znode writes as one bare multi per commit."""
    base = f"/bench-raw-{uuid.uuid4().hex[:8]}"
    for p in range(partitions):
        await store.create(f"{base}/{p}", b"0", makepath=True)
    start = time.perf_counter()
    for n in range(1, commits + 1):
        data = encode_offset(CommittedOffset(n, 0, "", SYSTEM_CLOCK.time_ms()))
        await store.multi([SetData(f"{base}/{p}", data) for p in range(partitions)])
    return commits / (time.perf_counter() - start)


async def run_idle(store: MetadataStore, commits: int) -> tuple[float, float]:
    offsets = OffsetStore(store, SYSTEM_CLOCK)
    same = offsets_for(7, 10, SYSTEM_CLOCK.time_ms())
    await offsets.commit("bench-idle", same)
    start = time.perf_counter()
    for _ in range(commits):
        await offsets.commit("bench-idle", same)
    skipped = commits / (time.perf_counter() - start)
    start = time.perf_counter()
    for _ in range(commits):
        await offsets.load("bench-idle")
    fetches = commits / (time.perf_counter() - start)
    return skipped, fetches


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] * 1000 if len(values) > 1 else 0.0


async def bench_backend(name: str, open_store, commits: int) -> None:
    print(f"\n{name}")
    print(
        f"  {'partitions':>10} {'groups':>6} {'members':>7} {'commits':>8} {'commits/s':>10} "
        f"{'partitions/s':>13} {'p50 ms':>7} {'p99 ms':>7}"
    )
    cases = [(p, g, 1) for p in (1, 10) for g in (1, 8)] + [(1, 1, 8)]
    for partitions, groups, members in cases:
        store = await open_store()
        try:
            elapsed, lat = await run_case(store, groups, partitions, commits, members)
        finally:
            await store.close()
        total = groups * members * commits
        print(
            f"  {partitions:>10} {groups:>6} {members:>7} {total:>8} {total / elapsed:>10.0f} "
            f"{total * partitions / elapsed:>13.0f} {pct(lat, 50):>7.2f} {pct(lat, 99):>7.2f}"
        )
    for partitions in (1, 10):
        store = await open_store()
        try:
            raw = await run_raw(store, partitions, commits)
        finally:
            await store.close()
        print(
            f"  baseline, bare store.multi of {partitions:>2} SetData, 1 writer:      {raw:,.0f}/s"
        )
    store = await open_store()
    try:
        skipped, fetches = await run_idle(store, commits)
    finally:
        await store.close()
    print(f"  unchanged 10-partition commits (skipped, no store write): {skipped:,.0f}/s")
    print(f"  OffsetFetch from the cache (load, 10 partitions):        {fetches:,.0f}/s")


async def main_async(args: argparse.Namespace) -> None:
    backends = args.backends.split(",")
    if "local" in backends:
        with tempfile.TemporaryDirectory(prefix="pybroker-bench-") as tmp:
            counter = iter(range(1_000_000))

            async def open_local() -> MetadataStore:
                store = LocalStore(Path(tmp) / f"meta-{next(counter)}")
                await store.start()
                return store

            await bench_backend("embedded LocalStore", open_local, args.commits)
    if "zookeeper" in backends:
        if not zookeeper_available():
            print("\nzookeeper: skipped (zkServer.sh or java not installed)")
            return
        with ZooKeeperServer() as server:

            async def open_zk() -> MetadataStore:
                store = ZooKeeperStore(f"{server.connect}/bench-{uuid.uuid4().hex[:8]}")
                await store.start()
                return store

            await bench_backend(f"ZooKeeper ({server.connect}, one server)", open_zk, args.commits)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=2000, help="commits per group (2000)")
    parser.add_argument("--backends", default="local,zookeeper")
    args = parser.parse_args()
    print(
        f"OffsetStore commit throughput, {args.commits} commits per group, Python {sys.version.split()[0]}"
    )
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
