"""W10: transactions of 100 records of 1 KiB, 6 partitions, read back read_committed."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from bench.clients import create_topics, produce_retrying, show_cmd
from bench.targets import Target
from bench.workloads.consume import consumer_perf, consumer_perf_args
from pybroker.testing import java

# W10: transactions -----------------------------------------------------------------------------
W10_PER_TXN, W10_SIZE = 100, 1024


def _txn_produce(bootstrap: str, topic: str, transactions: int) -> tuple[float, int]:
    """confluent-kafka's transactional producer: ``transactions`` of W10_PER_TXN records of
    W10_SIZE bytes over the topic's 6 partitions, each committed; (seconds, records)."""
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"w10-{uuid.uuid4().hex[:8]}",
            "linger.ms": 5,
        }
    )
    p.init_transactions(60)
    payload = b"x" * W10_SIZE
    start = time.perf_counter()
    for t in range(transactions):
        p.begin_transaction()
        for i in range(W10_PER_TXN):
            produce_retrying(p, topic, payload, partition=(t + i) % 6, backoff_s=0.01)
        p.commit_transaction(60)
    elapsed = time.perf_counter() - start
    return elapsed, transactions * W10_PER_TXN


def w10_run(target: Target, st: dict, i: int) -> dict[str, float]:
    topic = f"w10-{i}-{uuid.uuid4().hex[:6]}"
    create_topics(target, [topic], 6)
    seconds, n = _txn_produce(target.bootstrap, topic, st["sizes"]["w10_transactions"])
    config = Path(target.log_dirs[0]).parent / f"consumer-rc-{i}.properties"
    config.write_text("isolation.level=read_committed\n")
    args = consumer_perf_args(target.bootstrap, topic, n, f"w10-{i}-{uuid.uuid4().hex[:6]}")
    row = consumer_perf([*args, "--consumer.config", str(config)], n)
    return {
        "transactions/s": st["sizes"]["w10_transactions"] / seconds,
        "records/s": n / seconds,
        "read_committed MB/s": float(row["MB.sec"]),
        "_bytes": 2 * n * W10_SIZE,
    }


def w10_cmds(sizes: dict) -> list[str]:
    t = sizes["w10_transactions"]
    return [
        "topic: 6 partitions, RF 1 (fresh per run)",
        f"confluent-kafka transactional producer (linger.ms=5): {t} transactions of "
        f"{W10_PER_TXN} records of {W10_SIZE} B, each begin / 100 produce / commit "
        "(init_transactions once); timed from the first begin to the last commit",
        show_cmd(
            java.CONSUMER_PERFORMANCE,
            [
                *consumer_perf_args("<bootstrap>", "w10-<run>", t * W10_PER_TXN, "w10-<run>"),
                "--consumer.config",
                "<isolation.level=read_committed>",
            ],
        ),  # fmt: skip
        "CPU s/GiB over the produce and the consume (bytes counted twice)",
    ]
