"""W9: the log cleaner, on Apache Kafka and on pybroker alike (bench/run.py runs it).

One run, against a broker that is already up with a 1-partition probe topic:

1. ``fill``: a topic with cleanup.policy=delete (retention.ms=-1, so nothing leaves it) and
   64 MiB segments gets ``total_bytes`` of 1 KiB records (uncompressed, acks=1, through
   confluent-kafka) whose keys are drawn, with a fixed seed, from ``keys`` distinct keys:
   10% of the records are the latest value of their key.
2. ``LatencyProbe``: another producer writes 1 KiB records, acks=1, linger.ms=0, at a fixed
   rate to the probe topic and records every record's send -> acknowledgement time.
3. ``measure_clean``: the probe's p99 over an idle window; then the topic is switched to
   cleanup.policy=compact (AlterConfigs) and the clock runs until the broker's
   ``cleaner-offset-checkpoint`` (Kafka's file, in the log dir: both brokers write it when a
   clean completes) reaches the base offset of the active segment, that is, until every
   inactive segment is cleaned.  Figures: bytes of the inactive segments / wall time
   (cleaner MB/s), the broker's CPU seconds over that window per GiB cleaned, the probe's p99
   during the window and its ratio to the idle p99, and the share of the log left.
"""

from __future__ import annotations

import functools
import os
import random
import statistics
import threading
import time
from pathlib import Path

from bench.clients import create_topics, produce_retrying
from bench.targets import Target
from pybroker.log.checkpoints import read_checkpoint
from pybroker.log.cleaner import CLEANER_OFFSET_CHECKPOINT
from pybroker.testing.procstat import cpu_seconds

MIB = 1 << 20
GIB = 1 << 30
VALUE_SIZE = 1024
SEGMENT_BYTES = 64 * MIB
PROBE_RATE = 500  # records/s
IDLE_S = 10.0
CLEAN_TIMEOUT_S = 1800.0


class CompactionBenchError(RuntimeError):
    pass


def _producer(bootstrap: str, **conf: object):  # noqa: ANN202 - confluent_kafka.Producer
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, "enable.idempotence": False, **conf})


def fill(bootstrap: str, topic: str, total_bytes: int, keys: int, seed: int) -> int:
    """Writes total_bytes / 1 KiB keyed records; returns the count. Raises on any failure."""
    n = total_bytes // VALUE_SIZE
    failed: list[str] = []

    def done(err, _msg) -> None:  # noqa: ANN001
        if err is not None:
            failed.append(str(err))

    p = _producer(
        bootstrap,
        **{
            "acks": "1",
            "linger.ms": 10,
            "batch.size": MIB,
            "batch.num.messages": 100_000,
            "queue.buffering.max.kbytes": 256 * 1024,
            "compression.type": "none",
            "on_delivery": done,
        },
    )
    rng = random.Random(seed)
    value = os.urandom(VALUE_SIZE)
    for i in range(n):
        key = b"key-%07d" % rng.randrange(keys)
        produce_retrying(p, topic, value, key)
        if i % 2000 == 0:
            p.poll(0)
    left = p.flush(600)
    if left or failed:
        raise CompactionBenchError(f"fill: {left} undelivered, {len(failed)} failed {failed[:3]}")
    return n


class LatencyProbe:
    """A producer writing 1 KiB records at PROBE_RATE/s; keeps (send time, latency s)."""

    def __init__(self, bootstrap: str, topic: str, rate: int = PROBE_RATE) -> None:
        self.bootstrap, self.topic, self.rate = bootstrap, topic, rate
        self.samples: list[tuple[float, float]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="w9-probe", daemon=True)

    def _done(self, sent: float, err, _msg) -> None:  # noqa: ANN001
        if err is not None:
            self.errors.append(str(err))
        else:
            self.samples.append((sent, time.monotonic() - sent))

    def _run(self) -> None:
        p = _producer(self.bootstrap, **{"acks": "1", "linger.ms": 0})
        value = os.urandom(VALUE_SIZE)
        p.produce(self.topic, value)  # metadata and connection before the first sample
        p.flush(30)
        self._ready.set()
        interval = 1.0 / self.rate
        due = time.monotonic()
        while not self._stop.is_set():
            sent = time.monotonic()
            p.produce(self.topic, value, on_delivery=functools.partial(self._done, sent))
            due += interval
            while (wait := due - time.monotonic()) > 0:
                p.poll(wait)
            p.poll(0)
        p.flush(30)

    def __enter__(self) -> LatencyProbe:
        self._thread.start()
        if not self._ready.wait(60):
            raise CompactionBenchError("latency probe: no first acknowledgement in 60 s")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def p99_ms(self, t0: float, t1: float) -> tuple[float, int]:
        lat = sorted(v for t, v in list(self.samples) if t0 <= t < t1)
        if len(lat) < 100:
            raise CompactionBenchError(f"latency probe: only {len(lat)} samples in the window")
        return statistics.quantiles(lat, n=100)[98] * 1000, len(lat)


def segments(partition_dir: Path) -> list[tuple[int, int]]:
    """(base offset, bytes) of the partition's live segments (``<base>.log`` files)."""
    out = []
    for f in partition_dir.iterdir():
        if f.name.endswith(".log") and f.name[:-4].isdigit():
            out.append((int(f.name[:-4]), f.stat().st_size))
    return sorted(out)


def cleaner_checkpoint(log_dir: Path) -> dict[tuple[str, int], int]:
    """The log dir's cleaner-offset-checkpoint (Kafka's and pybroker's: the same format)."""
    return read_checkpoint(log_dir / CLEANER_OFFSET_CHECKPOINT)


def alter_topic(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    """IncrementalAlterConfigs SET of `configs` on the topic (kafka-python's admin client)."""
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=60_000)
    try:
        res = admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, configs)], incremental=True
        )
    finally:
        admin.close()
    outcome = [v for by_name in res.values() for v in by_name.values()]
    if not outcome or any(getattr(v, "errno", 0) for v in outcome):
        raise CompactionBenchError(f"IncrementalAlterConfigs {topic} {configs}: {res}")


def measure_clean(
    bootstrap: str,
    pids: list[int],
    log_dir: Path,
    topic: str,
    probe: LatencyProbe,
) -> dict[str, float]:
    pdir = log_dir / f"{topic}-0"
    segs = segments(pdir)
    if len(segs) < 2:
        raise CompactionBenchError(f"{pdir}: {len(segs)} segment(s), nothing to clean")
    active = segs[-1][0]
    dirty = sum(size for base, size in segs if base < active)
    total = sum(size for _, size in segs)

    t_idle = time.monotonic()
    time.sleep(IDLE_S)
    p99_idle, n_idle = probe.p99_ms(t_idle, time.monotonic())

    cpu0, t0 = cpu_seconds(pids), time.monotonic()
    alter_topic(bootstrap, topic, {"cleanup.policy": "compact"})
    while cleaner_checkpoint(log_dir).get((topic, 0), -1) < active:
        if time.monotonic() - t0 > CLEAN_TIMEOUT_S:
            raise CompactionBenchError(f"{topic}: not cleaned within {CLEAN_TIMEOUT_S:.0f} s")
        time.sleep(0.05)
    t1, cpu1 = time.monotonic(), cpu_seconds(pids)
    p99_clean, n_clean = probe.p99_ms(t0, t1)
    if probe.errors:
        raise CompactionBenchError(f"latency probe: {len(probe.errors)} errors {probe.errors[:3]}")
    left = sum(size for _, size in segments(pdir))
    return {
        "cleaner MB/s": dirty / MIB / (t1 - t0),
        "CPU s/GiB": (cpu1 - cpu0) / (dirty / GIB),
        "produce p99 ms idle": p99_idle,
        "produce p99 ms cleaning": p99_clean,
        "p99 cleaning / idle": p99_clean / p99_idle,
        "log left %": 100.0 * left / total,
        "clean s": t1 - t0,
        "GiB cleaned": dirty / GIB,
        "probe samples": float(n_idle + n_clean),
    }


# the workload W9 ----------------------------------------------------------------------
# W9 ---------------------------------------------------------------------------------------
# The cleaner's backoff is 15 s by default on both brokers: a clean would start up to 15 s
# after the topic turns compact. 500 ms on both keeps that wait out of the cleaner's MB/s.
W9_OVERRIDES: dict[str, object] = {"log.cleaner.backoff.ms": 500}
W9_TOPIC_CONFIGS = {
    "cleanup.policy": "delete",
    "retention.ms": "-1",
    "segment.bytes": str(SEGMENT_BYTES),
}


def w9_setup(target: Target, sizes: dict) -> dict:
    create_topics(target, ["w9-probe"], 1)
    return {"sizes": sizes}


def w9_run(target: Target, st: dict, i: int) -> dict[str, float]:
    topic = f"w9-{i}"
    create_topics(target, [topic], 1, configs=W9_TOPIC_CONFIGS)
    sizes = st["sizes"]
    fill(target.bootstrap, topic, sizes["w9_bytes"], sizes["w9_keys"], seed=9 + i)
    with LatencyProbe(target.bootstrap, "w9-probe") as probe:
        return measure_clean(target.bootstrap, target.pids, target.log_dirs[0], topic, probe)


def w9_cmds(sizes: dict) -> list[str]:
    n = sizes["w9_bytes"] // VALUE_SIZE
    return [
        "brokers: " + ", ".join(f"{k}={v}" for k, v in W9_OVERRIDES.items()),
        "topic w9-<run>: 1 partition, "
        + ", ".join(f"{k}={v}" for k, v in W9_TOPIC_CONFIGS.items()),
        f"fill (bench/py, confluent-kafka, acks=1, uncompressed): {n:,} records of "
        f"{VALUE_SIZE} B, keys drawn from {sizes['w9_keys']:,} (seeded), so 10% of "
        "the records are the latest of their key",
        f"probe: a confluent-kafka producer, acks=1, linger.ms=0, {PROBE_RATE} "
        f"records/s of 1 KiB to w9-probe; p99 over {IDLE_S:.0f} s idle, then over "
        "the clean",
        "clean: IncrementalAlterConfigs cleanup.policy=compact; timed until the broker's "
        "cleaner-offset-checkpoint reaches the active segment's base offset; MB/s and CPU "
        "s/GiB over the bytes of the inactive segments",
    ]
