"""Transactions under faults: a transactional producer and a read_committed watcher.

- ``TxnLoad``: a confluent-kafka transactional producer (one transactional.id) that writes
  transaction after transaction, RECORDS_PER_TXN records each, one per partition.  Every
  ABORT_EVERY-th transaction is aborted on purpose; the others are committed.  A payload names
  its transaction and the intent: ``<name>-<k:08d>-<C|A>-<i>``.  The outcome of transaction k
  is recorded: ``committed`` (commit_transaction returned), ``aborted`` (abort_transaction
  returned, or the transaction was never asked to commit and its producer was replaced: the
  new producer's InitProducerId aborts it), ``unknown`` (commit was asked for and the
  producer failed before it answered: either outcome is legal, but all or nothing).
- ``ReadCommittedWatcher``: a kafka-python consumer with isolation_level=read_committed
  reading every partition from the start for the whole run; it keeps every transactional
  payload it was shown.  An aborted transaction's record shown even once is a violation.

``check_transactions`` compares the outcomes with the watcher and with a final read_committed
read of the topic.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from pybroker.testing.cluster_loads import FAILOVER_CLIENT

RECORDS_PER_TXN = 3
ABORT_EVERY = 3
TXN_TIMEOUT_S = 30.0
PAYLOAD = re.compile(rb"^(?P<name>[a-z0-9]+)-(?P<k>\d{8})-(?P<intent>[CA])-(?P<i>\d+)$")


def txn_payload(name: str, k: int, intent: str, i: int) -> bytes:
    return f"{name}-{k:08d}-{intent}-{i}".encode()


@dataclass
class TxnStats:
    name: str
    outcomes: dict[int, str] = field(default_factory=dict)  # k -> committed/aborted/unknown
    errors: Counter = field(default_factory=Counter)
    producers: int = 0  # producer instances created (a fatal error replaces it)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def summary(self) -> str:
        c = Counter(self.outcomes.values())
        return (
            f"{self.name}: {len(self.outcomes)} transactions ({c['committed']} committed, "
            f"{c['aborted']} aborted, {c['unknown']} unknown outcome), "
            f"{self.producers} producer(s), errors {dict(self.errors)}"
        )


class TxnLoad(threading.Thread):
    def __init__(self, bootstrap: str, topic: str, partitions: int, name: str = "txn"):
        super().__init__(name=f"load-{name}", daemon=True)
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.stats = TxnStats(name)
        self._halt = threading.Event()
        self.error: BaseException | None = None
        self.pause = 0.05  # between transactions
        self.current: tuple[int, bool] | None = None  # (k, commit asked) of the open one
        self.unfinished: str | None = None  # set by stop() when the thread outlived it

    def stop(self, timeout: float = 120.0) -> TxnStats:
        """Halts the load: a commit or abort being retried is not retried again (its
        outcome: unknown, or aborted when no commit was asked), so the thread ends within one
        librdkafka call (TXN_TIMEOUT_S).  A thread still running after ``timeout`` is
        reported in ``unfinished`` (its open transaction counts as of unknown outcome), not
        raised: the transaction checks still run."""
        self._halt.set()
        self.join(timeout)
        if self.is_alive():
            with self.stats.lock:
                if self.current is not None:
                    self.stats.outcomes[self.current[0]] = "unknown"
            self.unfinished = (
                f"{self.name} still in a librdkafka call {timeout:.0f} s after stop "
                f"(transaction {self.current}); counted as of unknown outcome"
            )
        if self.error is not None:
            raise AssertionError(f"{self.name} crashed: {self.error!r}") from self.error
        return self.stats

    def _producer(self):
        from confluent_kafka import Producer

        p = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "client.id": self.stats.name,
                "transactional.id": f"{self.stats.name}-tid",
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "transaction.timeout.ms": 60000,
                "message.timeout.ms": 60000,
                "request.timeout.ms": 10000,
                "topic.metadata.refresh.interval.ms": 5000,
                "reconnect.backoff.max.ms": 1000,
                "log_level": 2,
            }
        )
        self.stats.producers += 1
        while not self._halt.is_set():
            try:
                p.init_transactions(TXN_TIMEOUT_S)
                return p
            except Exception as e:  # noqa: BLE001 - retriable while the cluster recovers
                self._count(e, "init")
                if _is_fatal(e):
                    p = self._replace(p)
                time.sleep(0.5)
        return None

    def _replace(self, p):
        try:
            p.flush(1)
        except Exception:  # noqa: BLE001
            pass
        return self._producer()

    def _count(self, e: BaseException, where: str) -> None:
        err = e.args[0] if e.args else None
        name = err.name() if hasattr(err, "name") else type(e).__name__
        with self.stats.lock:
            self.stats.errors[f"{where} {name}"] += 1

    def _set(self, k: int, outcome: str) -> None:
        with self.stats.lock:
            self.stats.outcomes[k] = outcome
            self.current = None

    def run(self) -> None:
        try:
            p = self._producer()
            k = 0
            while p is not None and not self._halt.is_set():
                intent = "A" if k % ABORT_EVERY == ABORT_EVERY - 1 else "C"
                p = self._one(p, k, intent)
                k += 1
                time.sleep(self.pause)
        except BaseException as e:  # noqa: BLE001
            self.error = e

    def _one(self, p, k: int, intent: str):
        """Transaction k; returns the producer to go on with (a new one after a fatal
        error)."""
        asked_commit = False
        self.current = (k, False)
        try:
            p.begin_transaction()
            for i in range(RECORDS_PER_TXN):
                p.produce(
                    self.topic,
                    value=txn_payload(self.stats.name, k, intent, i),
                    partition=i % self.partitions,
                )
            if intent == "C":
                asked_commit = True
                self.current = (k, True)
                self._retry(lambda: p.commit_transaction(TXN_TIMEOUT_S), "commit")
                self._set(k, "committed")
            else:
                self._retry(lambda: p.abort_transaction(TXN_TIMEOUT_S), "abort")
                self._set(k, "aborted")
            return p
        except _Halted:  # stop() while a commit or abort was retried
            self._set(k, "unknown" if asked_commit else "aborted")
            return None
        except Exception as e:  # noqa: BLE001
            self._count(e, "txn")
            if not _is_fatal(e) and _requires_abort(e):
                try:
                    self._retry(lambda: p.abort_transaction(TXN_TIMEOUT_S), "abort")
                    self._set(k, "aborted")
                    return p
                except Exception as e2:  # noqa: BLE001
                    self._count(e2, "abort")
            # replaced: the new producer's InitProducerId aborts what was never committed
            self._set(k, "unknown" if asked_commit else "aborted")
            return self._replace(p)

    def _retry(self, call, where: str) -> None:
        """commit/abort_transaction again while the error is retriable (the call is
        idempotent in librdkafka), at most 20 times."""
        for attempt in range(20):
            try:
                call()
                return
            except Exception as e:  # noqa: BLE001
                err = e.args[0] if e.args else None
                if attempt == 19 or not (hasattr(err, "retriable") and err.retriable()):
                    raise
                self._count(e, where)
                if self._halt.is_set():
                    raise _Halted() from e
                time.sleep(0.2)


class _Halted(Exception):
    """stop() was called while a commit or abort was being retried."""


def _is_fatal(e: BaseException) -> bool:
    err = e.args[0] if e.args else None
    return bool(hasattr(err, "fatal") and err.fatal())


def _requires_abort(e: BaseException) -> bool:
    err = e.args[0] if e.args else None
    return bool(hasattr(err, "txn_requires_abort") and err.txn_requires_abort())


class ReadCommittedWatcher(threading.Thread):
    """Reads every partition of the topic with isolation_level=read_committed from offset 0
    for the whole run; keeps every transactional payload it was shown (with its offset)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int):
        super().__init__(name="read-committed-watcher", daemon=True)
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.seen: dict[bytes, list[tuple[int, int]]] = {}
        self.records = 0
        self.errors: Counter = Counter()
        self._halt = threading.Event()
        self.error: BaseException | None = None

    def stop(self, timeout: float = 60.0) -> None:
        self._halt.set()
        self.join(timeout)

    def run(self) -> None:
        from kafka import KafkaConsumer, TopicPartition

        try:
            consumer = KafkaConsumer(
                bootstrap_servers=self.bootstrap,
                group_id=None,
                client_id="read-committed-watcher",
                enable_auto_commit=False,
                isolation_level="read_committed",
                auto_offset_reset="earliest",
                request_timeout_ms=15000,
                **FAILOVER_CLIENT,
            )
            consumer.assign([TopicPartition(self.topic, p) for p in range(self.partitions)])
            consumer.seek_to_beginning()
        except BaseException as e:  # noqa: BLE001
            self.error = e
            return
        try:
            while not self._halt.is_set():
                try:
                    batches = consumer.poll(timeout_ms=200)
                except Exception as e:  # noqa: BLE001 - leaders move under faults
                    self.errors[type(e).__name__] += 1
                    time.sleep(0.2)
                    continue
                for tp, recs in batches.items():
                    for r in recs:
                        self.records += 1
                        self.seen.setdefault(r.value, []).append((tp.partition, r.offset))
        except BaseException as e:  # noqa: BLE001
            self.error = e
        finally:
            try:
                consumer.close()
            except Exception:  # noqa: BLE001
                pass

    def summary(self) -> str:
        return (
            f"read_committed watcher: {self.records} records shown, "
            f"{len(self.seen)} distinct, errors {dict(self.errors)}"
        )


@dataclass
class TxnCheck:
    transactions: int
    records_read: int
    problems: list[str]


def check_transactions(
    stats: TxnStats,
    final: dict[int, list[tuple[int, bytes]]],
    watcher: ReadCommittedWatcher | None,
    max_examples: int = 5,
) -> TxnCheck:
    """``final``: a read_committed read of the whole topic after the load stopped.  Committed
    transactions: every record exactly once; aborted ones: no record, in the final read or
    shown to the watcher at any time; unknown outcome: all records or none; a record of an
    abort-intended transaction is never visible; the watcher was shown nothing the final read
    does not hold at the same offset."""
    problems: list[str] = []
    where: dict[bytes, list[tuple[int, int]]] = {}
    total = 0
    for p, recs in final.items():
        for o, v in recs:
            where.setdefault(v, []).append((p, o))
            total += 1
    dups = [v for v, locs in where.items() if len(locs) > 1]
    if dups:
        problems.append(f"{len(dups)} transactional records appear twice, e.g. {dups[:5]}")
    per_txn: Counter = Counter()
    for v in where:
        m = PAYLOAD.match(v)
        if m is None or m["name"].decode() != stats.name:
            problems.append(f"unexpected record {v!r} in the transactional topic")
            continue
        per_txn[int(m["k"])] += 1
        if m["intent"] == b"A":
            problems.append(f"record of an aborted transaction visible to read_committed: {v!r}")
    shown_aborted = []
    shown_elsewhere = []
    if watcher is not None:
        for v, locs in watcher.seen.items():
            m = PAYLOAD.match(v)
            if m is None:
                continue
            k = int(m["k"])
            if m["intent"] == b"A" or stats.outcomes.get(k) == "aborted":
                shown_aborted.append((v, locs))
            elif any(loc not in where.get(v, []) for loc in locs):
                shown_elsewhere.append((v, locs, where.get(v)))
    if shown_aborted:
        problems.append(
            f"read_committed consumer was shown {len(shown_aborted)} records of aborted "
            f"transactions, e.g. {shown_aborted[:max_examples]}"
        )
    if shown_elsewhere:
        problems.append(
            f"read_committed consumer was shown {len(shown_elsewhere)} records not in the final "
            f"log at that offset, e.g. {shown_elsewhere[:max_examples]}"
        )
    missing, leaked, partial = [], [], []
    for k, outcome in sorted(stats.outcomes.items()):
        n = per_txn.get(k, 0)
        if outcome == "committed" and n != RECORDS_PER_TXN:
            missing.append((k, n))
        elif outcome == "aborted" and n:
            leaked.append((k, n))
        elif outcome == "unknown" and n not in (0, RECORDS_PER_TXN):
            partial.append((k, n))
    if missing:
        problems.append(
            f"{len(missing)} committed transactions not wholly visible (k, records), "
            f"e.g. {missing[:max_examples]}"
        )
    if leaked:
        problems.append(f"{len(leaked)} aborted transactions visible, e.g. {leaked[:max_examples]}")
    if partial:
        problems.append(
            f"{len(partial)} transactions of unknown outcome partly visible, "
            f"e.g. {partial[:max_examples]}"
        )
    return TxnCheck(len(stats.outcomes), total, problems)
