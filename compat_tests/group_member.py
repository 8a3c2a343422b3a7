"""A kafka-python consumer-group member, plus the test-side helpers that drive members.

Run as a separate process (the tests kill -9 it):

    python compat_tests/group_member.py --bootstrap 127.0.0.1:9092 --topic t --group g \
        --out member.jsonl [--session-timeout-ms 6000] [--heartbeat-interval-ms 500] \
        [--max-poll-records 10] [--delay-ms 100]

It subscribes, polls, and for every non-empty batch first writes the records it consumed,
then commits the batch's offsets synchronously, then writes what it committed. Every line of
--out is one JSON object ("t" is time.time() of the event):

    {"ev": "start", "pid": 123, "t": ...}
    {"ev": "assigned", "partitions": [0, 1], "generation": 3, "t": ...}   (each rebalance)
    {"ev": "revoked", "partitions": [0, 1], "t": ...}
    {"ev": "records", "records": [[partition, offset, "value"], ...], "t": ...}
    {"ev": "committed", "offsets": {"0": 17}, "t": ...}      (next offset to read)
    {"ev": "commit_failed", "offsets": {...}, "error": "...", "t": ...}
    {"ev": "closed", "t": ...}                              (after SIGTERM: close() = leave)

Each line is flushed before the next step, so a kill -9 loses nothing that was written.

Imported by the tests (compat_tests.group_member): MemberProcess (spawn/read/kill such a
process), ThreadMember (an in-process kafka-python member polling in its own thread),
wait_until, produce and a few checks shared by the test_groups_*.py files.

The test_groups_*.py tests also pass unchanged against Apache Kafka 3.9 (bench/
kafka_reference.py with the same overrides), which is how their expectations were checked.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.errors import CommitFailedError, KafkaError
from kafka.structs import OffsetAndMetadata

from pybroker.testing.cluster_harness import wait_until as harness_wait_until

SESSION_TIMEOUT_MS = 6000  # Kafka's default group.min.session.timeout.ms is 6000
HEARTBEAT_INTERVAL_MS = 500
# the broker settings every group test starts with
GROUP_BROKER_OVERRIDES = {
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,
}


# ------------------------------------------------------------------------------------------
# the member process
# ------------------------------------------------------------------------------------------
class _Writer:
    def __init__(self, path: str):
        self._f = open(path, "a", buffering=1)  # noqa: SIM115 - closed at exit
        self._lock = threading.Lock()

    def write(self, ev: str, **fields) -> None:
        fields = {"ev": ev, **fields, "t": time.time()}
        with self._lock:
            self._f.write(json.dumps(fields) + "\n")
            self._f.flush()

    def close(self) -> None:
        self._f.close()


def _await_topic_metadata(consumer: KafkaConsumer, topic: str, timeout: float = 30.0) -> None:
    """Work around a kafka-python 3.0.12 join hang: subscribe, then fetch the topic's
    metadata BEFORE the first poll.

    If the first JoinGroup completes before the consumer knows the topic's partitions, the
    leader assigns nothing, and the metadata arriving afterwards triggers a rejoin that is
    driven only by `_assignment_snapshot != _metadata_snapshot`. The leader's
    _perform_assignment for that rejoin makes the two snapshots equal again, so once
    poll(timeout_ms) gives up waiting for the in-flight JoinGroup/SyncGroup task,
    need_rejoin() is False on every later poll: the finished task is never consumed, the
    member stays REBALANCING with heartbeats disabled, and the broker expires it after
    the session timeout (client-side; seen with group.initial.rebalance.delay.ms=0, where
    JoinGroup answers faster than the first Metadata request).
    """
    deadline = time.monotonic() + timeout
    while not consumer.partitions_for_topic(topic):
        if time.monotonic() > deadline:
            raise AssertionError(f"no metadata for topic {topic} after {timeout}s")
        time.sleep(0.05)


def _member_main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--client-id", default="group-member")
    ap.add_argument("--session-timeout-ms", type=int, default=SESSION_TIMEOUT_MS)
    ap.add_argument("--heartbeat-interval-ms", type=int, default=HEARTBEAT_INTERVAL_MS)
    ap.add_argument("--max-poll-records", type=int, default=50)
    ap.add_argument("--delay-ms", type=int, default=0, help="processing time per batch")
    args = ap.parse_args(argv)

    level = os.environ.get("GROUP_MEMBER_LOG_LEVEL")  # e.g. DEBUG: kafka-python's log to stderr
    if level:
        import logging

        logging.basicConfig(
            level=level.upper(), format="%(asctime)s %(threadName)s %(name)s: %(message)s"
        )
    out = _Writer(args.out)
    out.write("start", pid=os.getpid())
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        client_id=args.client_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.heartbeat_interval_ms,
        max_poll_records=args.max_poll_records,
    )

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            out.write("revoked", partitions=sorted(tp.partition for tp in revoked))

        def on_partitions_assigned(self, assigned):
            out.write(
                "assigned",
                partitions=sorted(tp.partition for tp in consumer.assignment() or ()),
                generation=consumer.group_metadata().generation_id,
            )

    consumer.subscribe([args.topic], listener=Listener())
    _await_topic_metadata(consumer, args.topic)
    try:
        while not stop.is_set():
            batch = consumer.poll(timeout_ms=200)
            if not batch:
                continue
            records = [
                [r.partition, r.offset, r.value.decode() if r.value is not None else None]
                for recs in batch.values()
                for r in recs
            ]
            out.write("records", records=records)
            if args.delay_ms:
                time.sleep(args.delay_ms / 1000)
            offsets = {
                tp: OffsetAndMetadata(recs[-1].offset + 1, "", -1)
                for tp, recs in batch.items()
                if recs
            }
            shown = {str(tp.partition): om.offset for tp, om in offsets.items()}
            try:
                consumer.commit(offsets)
            except (CommitFailedError, KafkaError) as e:
                out.write("commit_failed", offsets=shown, error=repr(e))
            else:
                out.write("committed", offsets=shown)
    finally:
        consumer.close(autocommit=False)
        out.write("closed")
        out.close()
    return 0


# ------------------------------------------------------------------------------------------
# test-side helpers
# ------------------------------------------------------------------------------------------
def wait_until(cond, timeout: float, interval: float = 0.05, what: str = "condition"):
    """cluster_harness.wait_until, polling more often."""
    return harness_wait_until(cond, timeout, interval, what)


def produce(bootstrap: str, topic: str, partitions: int, n: int, tag: str) -> dict:
    """n records round-robin over the partitions; returns {(partition, offset): value}."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    try:
        futs = []
        for i in range(n):
            value = f"{tag}-{i}"
            futs.append(
                (value, producer.send(topic, value=value.encode(), partition=i % partitions))
            )
        producer.flush(timeout=30)
        sent = {}
        for value, fut in futs:
            md = fut.get(timeout=30)
            sent[(md.partition, md.offset)] = value
    finally:
        producer.close()
    assert len(sent) == n
    return sent


def duplicates(keys) -> dict:
    """{key: count} for keys seen more than once."""
    return {k: c for k, c in Counter(keys).items() if c > 1}


class MemberProcess:
    """One `group_member.py` process; its events are read back from its JSON-lines file."""

    SCRIPT = Path(__file__).resolve()

    def __init__(self, workdir: Path, name: str, bootstrap: str, topic: str, group: str, **opts):
        self.name = name
        self.out = Path(workdir) / f"{name}.jsonl"
        self.stderr_path = Path(workdir) / f"{name}.stderr"
        cmd = [
            sys.executable,
            str(self.SCRIPT),
            "--bootstrap",
            bootstrap,
            "--topic",
            topic,
            "--group",
            group,
            "--out",
            str(self.out),
            "--client-id",
            name,
        ]
        for k, v in opts.items():
            cmd += [f"--{k.replace('_', '-')}", str(v)]
        with open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen(
                cmd,
                stdout=err,
                stderr=err,
                stdin=subprocess.DEVNULL,
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
                start_new_session=True,
            )

    # -- reading ----------------------------------------------------------------------------
    def events(self, kind: str | None = None) -> list[dict]:
        try:
            text = self.out.read_text()
        except FileNotFoundError:
            return []
        evs = []
        for line in text.splitlines():
            try:
                evs.append(json.loads(line))
            except ValueError:  # a torn last line (being written, or cut by kill -9)
                continue
        return [e for e in evs if kind is None or e["ev"] == kind]

    def consumed(self) -> list[tuple[int, int, str]]:
        return [tuple(r) for e in self.events("records") for r in e["records"]]

    def assignment(self) -> tuple[int, set[int]] | None:
        """(generation, partitions) of the latest assignment, None before the first."""
        assigned = self.events("assigned")
        if not assigned:
            return None
        return assigned[-1]["generation"], set(assigned[-1]["partitions"])

    def committed(self) -> dict[int, int]:
        """Latest committed next-offset per partition (successful commits only)."""
        result: dict[int, int] = {}
        for e in self.events("committed"):
            for p, off in e["offsets"].items():
                result[int(p)] = max(result.get(int(p), 0), off)
        return result

    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    # -- lifecycle --------------------------------------------------------------------------
    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill9(self) -> None:
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def terminate(self, timeout: float = 30) -> int:
        """SIGTERM: the member closes its consumer (LeaveGroup) and exits 0."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
            raise AssertionError(f"{self.name} did not exit within {timeout}s of SIGTERM") from None

    def cleanup(self) -> None:
        try:
            if self.alive():
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass


class ThreadMember:
    """An in-process kafka-python group member polling in its own thread.

    After every poll it publishes a snapshot (state, generation, assignment); records are
    collected as (partition, offset, value). With commit=True (default) each non-empty batch
    is committed synchronously after it was recorded. close() makes the thread call
    consumer.close() (a clean LeaveGroup) and waits for it.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        group: str,
        name: str,
        *,
        commit: bool = True,
        **config,
    ):
        self.name = name
        self.topic = topic
        self.commit = commit
        self._lock = threading.Lock()
        self._records: list[tuple[int, int, str]] = []
        self._snapshot: tuple[str, int, frozenset[int]] = ("", -1, frozenset())
        self.assign_events: list[tuple[float, frozenset[int]]] = []  # (monotonic, partitions)
        self.commit_failures: list[str] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self.closed_at: tuple[float, float] | None = None  # monotonic (close start, close end)
        conf = dict(
            bootstrap_servers=bootstrap,
            group_id=group,
            client_id=name,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
        )
        conf.update(config)
        self._conf = conf
        self.consumer: KafkaConsumer | None = None  # for debugging; owned by the thread
        self._thread = threading.Thread(target=self._run, name=f"member-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        member = self
        consumer = None
        try:
            consumer = self.consumer = KafkaConsumer(**self._conf)

            class Listener(ConsumerRebalanceListener):
                def on_partitions_revoked(self, revoked):
                    pass

                def on_partitions_assigned(self, assigned):
                    parts = frozenset(tp.partition for tp in consumer.assignment() or ())
                    with member._lock:
                        member.assign_events.append((time.monotonic(), parts))

            consumer.subscribe([self.topic], listener=Listener())
            _await_topic_metadata(consumer, self.topic)
            while not self._stop.is_set():
                batch = consumer.poll(timeout_ms=100)
                got = [
                    (r.partition, r.offset, r.value.decode() if r.value is not None else None)
                    for recs in batch.values()
                    for r in recs
                ]
                md = consumer.group_metadata()
                parts = frozenset(tp.partition for tp in consumer.assignment() or ())
                with self._lock:
                    self._records.extend(got)
                    self._snapshot = (md.state, md.generation_id, parts)
                if got and self.commit:
                    offsets = {
                        tp: OffsetAndMetadata(recs[-1].offset + 1, "", -1)
                        for tp, recs in batch.items()
                        if recs
                    }
                    try:
                        consumer.commit(offsets)
                    except (CommitFailedError, KafkaError) as e:
                        with self._lock:
                            self.commit_failures.append(repr(e))
        except BaseException as e:  # noqa: BLE001 - reported by check()
            self.error = e
        finally:
            if consumer is not None:
                start = time.monotonic()
                try:
                    consumer.close(autocommit=False)
                except BaseException as e:  # noqa: BLE001
                    self.error = self.error or e
                self.closed_at = (start, time.monotonic())

    # -- views ------------------------------------------------------------------------------
    def records(self) -> list[tuple[int, int, str]]:
        with self._lock:
            return list(self._records)

    def snapshot(self) -> tuple[str, int, frozenset[int]]:
        """(member state, generation id, assigned partitions) after the latest poll."""
        with self._lock:
            return self._snapshot

    def partitions(self) -> frozenset[int]:
        return self.snapshot()[2]

    def check(self) -> None:
        if self.error is not None:
            raise AssertionError(f"member {self.name} failed: {self.error!r}") from self.error

    # -- lifecycle --------------------------------------------------------------------------
    def close(self, timeout: float = 40) -> None:
        self._stop.set()
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"member {self.name} did not close within {timeout}s"


STABLE = "<stable>"  # kafka.structs.MemberState.STABLE


def stable_assignment(members: list[ThreadMember], partitions: int):
    """The members' partition sets if all are stable in one generation and the sets are
    disjoint and cover every partition; else None."""
    for m in members:
        m.check()
    snaps = [m.snapshot() for m in members]
    if any(state != STABLE for state, _, _ in snaps):
        return None
    if len({gen for _, gen, _ in snaps}) != 1:
        return None
    sets = [parts for _, _, parts in snaps]
    if sum(len(s) for s in sets) != partitions or set().union(*sets) != set(range(partitions)):
        return None
    return sets


def _diagnose(m: ThreadMember) -> str:
    c = m.consumer
    if c is None:
        return f"{m.name}: no consumer"
    try:
        co = c._coordinator  # private, for the failure message only
        return (
            f"{m.name}: snapshot={m.snapshot()} metadata_snapshot={co._metadata_snapshot} "
            f"assignment_snapshot={co._assignment_snapshot} leader={co._is_leader} "
            f"cluster_partitions={c._cluster.partitions_for_topic(m.topic)} "
            f"rejoin_needed={co.rejoin_needed} coordinator={co.coordinator_id}"
        )
    except Exception as e:  # noqa: BLE001
        return f"{m.name}: snapshot={m.snapshot()} ({e!r})"


def wait_stable(members: list[ThreadMember], partitions: int, timeout: float):
    """wait_until(stable_assignment(...)), with each member's view in the failure message."""
    try:
        return wait_until(
            lambda: stable_assignment(members, partitions),
            timeout,
            what=f"{len(members)} members stable on {partitions} partitions",
        )
    except AssertionError as e:
        raise AssertionError(f"{e}\n" + "\n".join(_diagnose(m) for m in members)) from None


def close_all(members) -> None:
    """Teardown: close every member, ignoring errors (cleanup must not mask a failure)."""
    for m in members:
        try:
            if isinstance(m, MemberProcess):
                m.cleanup()
            else:
                m.close()
        except Exception:  # noqa: BLE001
            pass


__all__ = [
    "GROUP_BROKER_OVERRIDES",
    "HEARTBEAT_INTERVAL_MS",
    "MemberProcess",
    "SESSION_TIMEOUT_MS",
    "ThreadMember",
    "TopicPartition",
    "close_all",
    "duplicates",
    "produce",
    "stable_assignment",
    "wait_stable",
    "wait_until",
]


if __name__ == "__main__":
    sys.exit(_member_main())
