"""ZooKeeper alone: how many set-data operations per second one kazoo session gets through,
written as multis of ``--batch`` operations with ``--in-flight`` multis outstanding, the shape
of pybroker's group commit (coord/metadata/batching.py) under W18.  No broker runs: this is the
ceiling the ``zookeeper`` offsets storage can reach on this machine.

    python -m bench.zk_multi_ceiling --nodes 1 --batch 1,16,64,256 --in-flight 1,2,8 --seconds 5
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

from pybroker.testing.zookeeper import ZooKeeperEnsemble

ZNODES = 256


def measure(connect: str, batch: int, in_flight: int, seconds: float) -> tuple[float, float]:
    """(operations/s, multis/s) over ``seconds``."""
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=connect, timeout=30)
    zk.start(timeout=60)
    try:
        zk.ensure_path("/ceiling")
        for i in range(ZNODES):
            if zk.exists(f"/ceiling/n{i}") is None:
                zk.create(f"/ceiling/n{i}", b"0")
        slots = threading.Semaphore(in_flight)
        done = [0]
        errors: list[BaseException] = []
        value = b'{"version":1,"offset":123456,"leader_epoch":0,"metadata":"","commit_timestamp":1}'

        def finished(result) -> None:  # noqa: ANN001 (kazoo's IAsyncResult)
            try:
                result.get()
                done[0] += 1
            except BaseException as e:  # noqa: BLE001
                errors.append(e)
            slots.release()

        end = time.monotonic() + seconds
        sent = 0
        t0 = time.perf_counter()
        k = 0
        while time.monotonic() < end and not errors:
            slots.acquire()
            tx = zk.transaction()
            for _ in range(batch):
                tx.set_data(f"/ceiling/n{k % ZNODES}", value)
                k += 1
            tx.commit_async().rawlink(finished)
            sent += 1
        for _ in range(in_flight):
            slots.acquire()
        elapsed = time.perf_counter() - t0
        if errors:
            raise RuntimeError(f"multi failed: {errors[0]!r}")
        return done[0] * batch / elapsed, done[0] / elapsed
    finally:
        zk.stop()
        zk.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--batch", default="1,16,64,256")
    p.add_argument("--in-flight", default="1,2,8")
    p.add_argument("--seconds", type=float, default=5.0)
    args = p.parse_args(argv)
    ens = ZooKeeperEnsemble(args.nodes)
    ens.start()
    try:
        print(f"ZooKeeper {args.nodes} node(s), load {os.getloadavg()[0]:.2f}")
        for b in (int(x) for x in args.batch.split(",")):
            for w in (int(x) for x in args.in_flight.split(",")):
                ops, multis = measure(ens.connect, b, w, args.seconds)
                print(
                    f"batch {b:>4} in-flight {w:>2}: {ops:>9,.0f} ops/s {multis:>8,.0f} multis/s"
                    f"  load {os.getloadavg()[0]:.2f}",
                    flush=True,
                )
    finally:
        ens.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
