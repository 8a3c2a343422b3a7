"""In-process CPU of a KIP-848 join wave's target computations (issue 27, W24): ``n`` members
join a consumer group one by one (a heartbeat at epoch 0 each), all subscribed to one topic of
``2n`` partitions as W24's members are; each join bumps the group epoch and computes the
target.  Prints the wave's CPU and the part spent in ``ConsumerGroup._compute_target``.

    PYTHONPATH=$PWD python -m bench.consumer_target_cost 1000 [partitions]

Compare trees by their PYTHONPATH, alternately (docs/scale.md, "the per-epoch target
computation made cheaper")."""

from __future__ import annotations

import sys
import time
import uuid

from pybroker.coord.group.consumer import ConsumerGroup
from pybroker.coord.group.consumer_member import ConsumerGroupConfig, HeartbeatRequest


def main() -> None:
    n = int(sys.argv[1])
    partitions = int(sys.argv[2]) if len(sys.argv) > 2 else 2 * n
    topics = {"t": (uuid.UUID(int=1), partitions)}
    group = ConsumerGroup("g", ConsumerGroupConfig(session_timeout_ms=10**9, max_size=10**6))
    spent = [0.0]
    compute = ConsumerGroup._compute_target

    def timed(self: ConsumerGroup, topics: dict) -> None:
        t = time.process_time()
        compute(self, topics)
        spent[0] += time.process_time() - t

    ConsumerGroup._compute_target = timed  # type: ignore[method-assign]
    start = time.process_time()
    for k in range(n):
        req = HeartbeatRequest(
            f"m{k:05d}-{uuid.UUID(int=k)}", 0, None, None, 60000, ["t"], None, None, {}
        )
        group.heartbeat(k, req, topics)
        group.take_target_changed()
    total = time.process_time() - start
    print(f"n={n} partitions={partitions} joins cpu={total:.3f}s compute_target={spent[0]:.3f}s")


if __name__ == "__main__":
    main()
