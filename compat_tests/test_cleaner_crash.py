"""The log cleaner's worker process under kill -9 (issue 24): a clean's work on files runs in
a process of its own (pybroker/log/cleaner_process.py).  Killed mid-clean, the process
leaves the log as it was (the broker notices, logs it, deletes the ``.cleaned`` files and
cleans again later in a new process); the broker killed mid-clean takes its process along
and recovers at restart by Kafka's ``.cleaned``/``.swap`` rules.  Either way the log opens
and reads the same records: every record read is one that was written, at its offset, and
each key's latest value is there at its offset."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType

from pybroker.log.checkpoints import read_checkpoint
from pybroker.log.cleaner import CLEANER_OFFSET_CHECKPOINT
from pybroker.testing.client_helpers import create_topic, unique_topic

KEYS = 500
VALUE = b"v" * 1000
SEGMENT_BYTES = 256 * 1024
WORKER_NAME = "pybroker-cleane"  # /proc/<pid>/comm keeps 15 bytes of "pybroker-cleaner"

Record = tuple[int, bytes, bytes]  # offset, key, value


def fill(bootstrap: str, topic: str, count: int, round_: int) -> dict[int, tuple[bytes, bytes]]:
    """``count`` keyed records (every value distinct); offset -> (key, value) as acknowledged."""
    written: dict[int, tuple[bytes, bytes]] = {}
    errors: list[str] = []

    def done(err, msg) -> None:  # noqa: ANN001
        if err is not None:
            errors.append(str(err))
        else:
            written[msg.offset()] = (msg.key(), msg.value())

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 256 * 1024})
    for i in range(count):
        value = b"%d-%d-" % (round_, i) + VALUE
        while True:
            try:
                p.produce(topic, value, b"k%04d" % (i * 7919 % KEYS), 0, on_delivery=done)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0 and not errors, errors[:3]
    return written


def read_all(bootstrap: str, topic: str, last_offset: int) -> list[Record]:
    """Every record from the log start up to ``last_offset`` (always kept: the latest of its
    key), with librdkafka."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "cleaner-crash-unused",
            "enable.auto.commit": False,
        }
    )
    got: list[Record] = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 60
        while not got or got[-1][0] < last_offset:
            assert time.monotonic() < deadline, f"read up to {got[-1][0] if got else None}"
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            got.append((msg.offset(), msg.key(), msg.value()))
    finally:
        c.close()
    return got


def assert_same_records(got: list[Record], written: dict[int, tuple[bytes, bytes]]) -> None:
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(set(offsets))  # offset order, nothing twice
    assert all(written[o] == (k, v) for o, k, v in got)  # each one as written, at its offset
    latest: dict[bytes, tuple[int, bytes]] = {}
    for o, (k, v) in sorted(written.items()):
        latest[k] = (o, v)
    seen = {k: (o, v) for o, k, v in got}
    assert seen == latest  # every key's latest value, at its offset


def alter(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="compat-admin")
    try:
        admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, configs)], incremental=True
        )
    finally:
        admin.close()


def create(bootstrap: str, topic: str) -> None:
    configs = {
        "cleanup.policy": "delete",
        "retention.ms": "-1",
        "segment.bytes": str(SEGMENT_BYTES),
    }
    create_topic(bootstrap, topic, configs=configs)


def worker_pids(broker_pid: int) -> list[int]:
    """The broker's cleaner processes (its children named pybroker-cleaner)."""
    out = []
    try:
        tasks = os.listdir(f"/proc/{broker_pid}/task")
    except FileNotFoundError:
        return out
    for task in tasks:
        try:
            children = Path(f"/proc/{broker_pid}/task/{task}/children").read_text().split()
        except OSError:
            continue
        for child in map(int, children):
            try:
                if Path(f"/proc/{child}/comm").read_text().strip() == WORKER_NAME:
                    out.append(child)
            except OSError:
                pass
    return out


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (an orphan's exit may wait to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def active_base(partition_dir: Path) -> int:
    return max(int(p.name[:-4]) for p in partition_dir.glob("*.log"))


def cleaned_through(log_dir: Path, topic: str) -> int:
    return read_checkpoint(log_dir / CLEANER_OFFSET_CHECKPOINT).get((topic, 0), -1)


def wait_cleaned(log_dir: Path, topic: str, partition_dir: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while cleaned_through(log_dir, topic) < active_base(partition_dir):
        assert time.monotonic() < deadline, "the log was not cleaned"
        time.sleep(0.05)


def compact_and_catch_the_worker(broker, count: int):  # noqa: ANN001, ANN201
    """Fill a fresh topic, turn it to compact, and return (topic, its records, its directory,
    the worker's pid) at the moment the worker has ``.cleaned`` files written (the clean's
    second pass), with the worker stopped (SIGSTOP) there; None if the clean ended before
    it was seen (the caller tries with more data)."""
    topic = unique_topic("crash")
    create(broker.bootstrap, topic)
    written = fill(broker.bootstrap, topic, count, 0)
    pdir = broker.log_dir / f"{topic}-0"
    active = active_base(pdir)
    assert active > 0
    alter(broker.bootstrap, topic, {"cleanup.policy": "compact"})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if any(name.endswith(".cleaned") for name in os.listdir(pdir)):
            pids = worker_pids(broker.pid)
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
            if pids and cleaned_through(broker.log_dir, topic) < active:
                return topic, written, pdir, pids[0]
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        if cleaned_through(broker.log_dir, topic) >= active:
            return None
        time.sleep(0.001)
    raise AssertionError("no clean started")


def caught(broker):  # noqa: ANN001, ANN201
    for count in (20_000, 60_000, 180_000):
        found = compact_and_catch_the_worker(broker, count)
        if found is not None:
            return found
    pytest.fail("every clean ended before its .cleaned files were seen")


@pytest.mark.broker_overrides({"log.cleaner.backoff.ms": 100})
def test_kill9_of_the_cleaner_process_mid_clean(broker):
    """The broker notices, logs, deletes what the process left, and cleans again later in a
    new process; the log reads the same records before and after a restart."""
    topic, written, pdir, pid = caught(broker)
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while f"clean of {topic}-0 abandoned" not in broker.output(max_lines=10_000):
        assert time.monotonic() < deadline, "the broker did not notice its cleaner process died"
        time.sleep(0.05)
    assert "exit code -9" in broker.output(max_lines=10_000)
    wait_cleaned(broker.log_dir, topic, pdir)  # the clean tried again, in a new process
    assert worker_pids(broker.pid) and pid not in worker_pids(broker.pid)
    last = max(written)
    got = read_all(broker.bootstrap, topic, last)
    assert_same_records(got, written)
    assert len(got) < len(written) / 5  # compacted
    assert not [p for p in os.listdir(pdir) if p.endswith((".cleaned", ".swap"))]
    broker.stop()
    broker.restart()
    assert read_all(broker.bootstrap, topic, last) == got


@pytest.mark.broker_overrides({"log.cleaner.backoff.ms": 100})
def test_kill9_of_the_broker_mid_clean(broker):
    """The cleaner process dies with the broker (an orphan would write into the log dir of
    the restarted broker); the restarted broker recovers the log by the .cleaned/.swap rules,
    reads the same records, and cleans it."""
    topic, written, pdir, pid = caught(broker)
    broker.kill9()
    try:
        # still stopped: only a SIGKILL ends it (the death signal the broker left it)
        deadline = time.monotonic() + 30
        while alive(pid):
            assert time.monotonic() < deadline, "the cleaner process outlived its broker"
            time.sleep(0.05)
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    broker.restart()
    last = max(written)
    assert_same_records(read_all(broker.bootstrap, topic, last), written)
    wait_cleaned(broker.log_dir, topic, pdir)
    got = read_all(broker.bootstrap, topic, last)
    assert_same_records(got, written)
    assert len(got) < len(written) / 5
    assert not [p for p in os.listdir(pdir) if p.endswith((".cleaned", ".swap"))]
