"""Loads for cluster tests and the fault campaign: acks=all idempotent producers
(kafka-python and confluent-kafka) that record every acknowledgement, a reader that consumes a
whole topic with assign/seek, and ``check_records``, which verifies exactly-once and
per-producer order of acknowledged records.  pybroker.testing.cluster_harness names them too.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field

# kafka-python settings of the loads' clients: a failover's new leader found within a second
FAILOVER_CLIENT = {
    "retry_backoff_ms": 100,
    "reconnect_backoff_max_ms": 1000,
    "metadata_max_age_ms": 5000,
}
# ------------------------------------------------------------------------------------------
# producer loads: unique payloads, every acknowledgement recorded
# ------------------------------------------------------------------------------------------


@dataclass
class Ack:
    partition: int
    offset: int
    seq: int
    t: float  # time.monotonic() of the callback


@dataclass
class LoadStats:
    name: str
    sent: int = 0
    acked: list[Ack] = field(default_factory=list)
    failed: Counter = field(default_factory=Counter)  # error name -> count
    send_errors: Counter = field(default_factory=Counter)  # errors raised by send() itself
    lock: threading.Lock = field(default_factory=threading.Lock)

    def payload(self, seq: int) -> bytes:
        return f"{self.name}-{seq:08d}".encode()

    def first_ack_after(self, t: float, partition: int | None = None) -> float | None:
        """time.monotonic() of the first acknowledgement after t (of that partition)."""
        with self.lock:
            times = [a.t for a in self.acked if a.t > t and partition in (None, a.partition)]
        return min(times) if times else None

    def summary(self) -> str:
        return (
            f"{self.name}: sent {self.sent}, acknowledged {len(self.acked)}, "
            f"failed {sum(self.failed.values())} {dict(self.failed)}"
            + (f", send() errors {dict(self.send_errors)}" if self.send_errors else "")
        )


class Load(threading.Thread):
    """Sends unique payloads round-robin over `partitions` until stop() (paced by `interval`
    seconds between sends)."""

    def __init__(self, name: str, bootstrap: str, topic: str, partitions: int, interval: float):
        super().__init__(name=f"load-{name}", daemon=True)
        self.stats = LoadStats(name)
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.interval = interval
        self.flush_timeout = 150.0  # at stop(); what is still unacknowledged then counts as failed
        self._halt = threading.Event()
        self.error: BaseException | None = None

    def stop(self, timeout: float = 120.0) -> LoadStats:
        self._halt.set()
        self.join(timeout)
        assert not self.is_alive(), f"{self.name} did not finish within {timeout}s"
        if self.error is not None:
            raise AssertionError(f"{self.name} crashed: {self.error!r}") from self.error
        return self.stats

    def _ack(self, seq: int, partition: int, offset: int) -> None:
        with self.stats.lock:
            self.stats.acked.append(Ack(partition, offset, seq, time.monotonic()))

    def _fail(self, error: object) -> None:
        with self.stats.lock:
            self.stats.failed[type(error).__name__ if not isinstance(error, str) else error] += 1


class KafkaPythonLoad(Load):
    """kafka-python KafkaProducer(enable_idempotence=True, acks='all', retries huge)."""

    def run(self) -> None:
        from kafka import KafkaProducer
        from kafka.errors import KafkaTimeoutError

        try:
            producer = KafkaProducer(
                bootstrap_servers=self.bootstrap,
                client_id=self.stats.name,
                enable_idempotence=True,
                acks="all",
                retries=2**31 - 1,
                linger_ms=5,
                request_timeout_ms=10000,
                delivery_timeout_ms=120000,
                max_block_ms=5000,
                **FAILOVER_CLIENT,
            )
        except BaseException as e:  # noqa: BLE001
            self.error = e
            return
        try:
            seq = 0
            while not self._halt.is_set():
                p = seq % self.partitions
                try:
                    fut = producer.send(self.topic, value=self.stats.payload(seq), partition=p)
                except Exception as e:  # noqa: BLE001 - buffer full / metadata during outages
                    self.stats.send_errors[type(e).__name__] += 1
                    time.sleep(0.1)
                    continue
                fut.add_callback(lambda md, s=seq: self._ack(s, md.partition, md.offset))
                fut.add_errback(self._fail)
                self.stats.sent += 1
                seq += 1
                if self.interval:
                    time.sleep(self.interval)
            try:
                producer.flush(timeout=self.flush_timeout)
            except KafkaTimeoutError:
                self.stats.failed[f"unacknowledged after {self.flush_timeout:.0f} s flush"] += 1
        except BaseException as e:  # noqa: BLE001
            self.error = e
        finally:
            try:
                producer.close(timeout=5)
            except KafkaTimeoutError:
                pass


class ConfluentLoad(Load):
    """confluent-kafka Producer(enable.idempotence=True) (acks=all implied)."""

    def run(self) -> None:
        from confluent_kafka import KafkaException, Producer

        try:
            producer = Producer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "client.id": self.stats.name,
                    "enable.idempotence": True,
                    "acks": "all",
                    "linger.ms": 5,
                    "message.timeout.ms": 120000,
                    "request.timeout.ms": 10000,
                    "topic.metadata.refresh.interval.ms": 5000,
                    "reconnect.backoff.max.ms": 1000,
                    "log_level": 2,  # no connection-refused noise
                }
            )
        except BaseException as e:  # noqa: BLE001
            self.error = e
            return

        def delivered(err, msg, seq):
            if err is not None:
                self._fail(err.name() if hasattr(err, "name") else str(err))
            else:
                self._ack(seq, msg.partition(), msg.offset())

        try:
            seq = 0
            while not self._halt.is_set():
                p = seq % self.partitions
                try:
                    producer.produce(
                        self.topic,
                        value=self.stats.payload(seq),
                        partition=p,
                        on_delivery=lambda err, msg, s=seq: delivered(err, msg, s),
                    )
                except (BufferError, KafkaException) as e:
                    self.stats.send_errors[type(e).__name__] += 1
                    producer.poll(0.1)
                    continue
                self.stats.sent += 1
                seq += 1
                producer.poll(0)
                if self.interval:
                    time.sleep(self.interval)
            remaining = producer.flush(self.flush_timeout)
            if remaining:
                self.stats.failed[f"unacknowledged after {self.flush_timeout:.0f} s flush"] += (
                    remaining
                )
        except BaseException as e:  # noqa: BLE001
            self.error = e


# ------------------------------------------------------------------------------------------
# reading back and checking
# ------------------------------------------------------------------------------------------


def read_topic(
    bootstrap: str,
    topic: str,
    partitions: int,
    timeout: float = 90.0,
    isolation_level: str = "read_uncommitted",
) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of the topic, {partition: [(offset, value)] in log order}, read with
    kafka-python (assign + seek_to_beginning) up to the end offsets seen at the start
    (read_committed: the last stable offsets, aborted transactions left out).  Fails when
    no position moved for ``timeout`` seconds (a long campaign's topic takes minutes)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        client_id="cluster-reader",
        max_partition_fetch_bytes=4 * 1024 * 1024,
        isolation_level=isolation_level,
    )
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning()
        end = consumer.end_offsets(tps)
        out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + timeout
        while any(consumer.position(tp) < end[tp] for tp in tps):
            if time.monotonic() > deadline:
                short = {tp.partition: (consumer.position(tp), end[tp]) for tp in tps}
                raise AssertionError(
                    f"read_topic {topic}: no progress for {timeout:.0f} s: (position, end) {short}"
                )
            for tp, records in consumer.poll(timeout_ms=500, max_records=5000).items():
                if records:
                    deadline = time.monotonic() + timeout
                out[tp.partition].extend((r.offset, r.value) for r in records)
        return out
    finally:
        consumer.close()


@dataclass
class CheckResult:
    records_read: int
    acked_checked: int
    problems: list[str]

    def summary(self) -> str:
        return (
            f"records read {self.records_read}, acknowledged records checked {self.acked_checked}"
        )


def check_records(
    read: dict[int, list[tuple[int, bytes]]], loads: list[LoadStats], max_problems: int = 20
) -> CheckResult:
    """Every acknowledged record present exactly once, at the offset its ack reported; for
    each producer and partition, its records (acknowledged or not) appear in send order;
    no payload appears twice; no offset was acknowledged twice (to two records: two brokers
    accepting acks=all writes for one partition at once, a split brain)."""
    problems: list[str] = []
    acked_at: dict[tuple[int, int], list[str]] = defaultdict(list)
    for st in loads:
        for a in st.acked:
            acked_at[(a.partition, a.offset)].append(f"{st.name}-{a.seq}")
    twice = {k: v for k, v in acked_at.items() if len(v) > 1}
    if twice:
        problems.append(
            f"{len(twice)} offsets acknowledged to more than one record (split brain), e.g. "
            + ", ".join(f"p{p}@{o}: {names}" for (p, o), names in list(twice.items())[:5])
        )
    where: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    total = 0
    for p, recs in read.items():
        offsets = [o for o, _ in recs]
        if offsets != sorted(set(offsets)):
            problems.append(f"partition {p}: offsets not strictly increasing")
        for o, v in recs:
            where[v].append((p, o))
            total += 1
    dups = {v: locs for v, locs in where.items() if len(locs) > 1}
    if dups:
        problems.append(
            f"{len(dups)} payloads appear more than once, e.g. "
            + ", ".join(f"{v.decode()}@{locs}" for v, locs in list(dups.items())[:5])
        )
    checked = 0
    for st in loads:
        missing, misplaced = [], []
        for a in st.acked:
            locs = where.get(st.payload(a.seq), [])
            checked += 1
            if not locs:
                missing.append(a)
            elif (a.partition, a.offset) not in locs:
                misplaced.append((a, locs))
        if missing:
            problems.append(
                f"{st.name}: {len(missing)} acknowledged records missing, e.g. "
                + ", ".join(f"seq {a.seq} (acked p{a.partition}@{a.offset})" for a in missing[:5])
            )
        if misplaced:
            problems.append(
                f"{st.name}: {len(misplaced)} acknowledged records at another offset than "
                "acknowledged, e.g. "
                + ", ".join(
                    f"seq {a.seq} acked p{a.partition}@{a.offset}, found {locs}"
                    for a, locs in misplaced[:5]
                )
            )
        # order: per partition, this producer's sequence numbers increase with the offset
        prefix = f"{st.name}-".encode()
        for p, recs in read.items():
            seqs = [int(v[len(prefix) :]) for _, v in recs if v.startswith(prefix)]
            bad = [(a, b) for a, b in zip(seqs, seqs[1:], strict=False) if b <= a]
            if bad:
                problems.append(
                    f"{st.name}: partition {p}: {len(bad)} order inversions, e.g. {bad[:5]}"
                )
        # ack order = offset order per partition
        by_p: dict[int, list[Ack]] = defaultdict(list)
        for a in st.acked:
            by_p[a.partition].append(a)
        for p, acks in by_p.items():
            acks_by_seq = sorted(acks, key=lambda a: a.seq)
            offs = [a.offset for a in acks_by_seq]
            if offs != sorted(offs):
                problems.append(f"{st.name}: partition {p}: acked offsets not in send order")
    return CheckResult(total, checked, problems[:max_problems])
