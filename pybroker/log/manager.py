"""All partition logs of one log dir, in Kafka's layout::

    <log.dir>/
        <topic>-<partition>/                     one PartitionLog each
        recovery-point-offset-checkpoint         text, see below
        log-start-offset-checkpoint              text, same format: each log's start offset
        .kafka_cleanshutdown                     present only after a clean shutdown
        <topic>-<partition>.<hex>-delete/        deleted partitions awaiting removal

Checkpoint file format (Kafka's OffsetCheckpointFile), UTF-8 text::

    0                       version
    <n>                     number of entries
    <topic> <partition> <offset>    n lines

Checkpoints are written atomically: temporary file, fsync, rename, fsync of the directory.
The log start offset checkpoint keeps a start moved by DeleteRecords (inside a segment) across
restarts; on open a log starts at max(its first segment's base offset, the checkpointed value).
At start the clean-shutdown marker decides whether logs are scanned at all; it is removed
once the logs are loaded (so a crash afterwards means an unclean start) and written again by
:meth:`LogManager.close` after every log was flushed and the checkpoint written.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

from pybroker.clock import SYSTEM_CLOCK, Clock
from pybroker.log import partition_metadata
from pybroker.log.partition_log import LogConfig, PartitionLog, parse_partition_dir

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
# The high watermarks (Kafka's replication-offset-checkpoint), so that a restarted replica does
# not expose records the ISR may not hold: it starts from the last checkpointed value and the
# leader (or, for a follower, the leader's fetch answers) moves it on.
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
DELETE_DIR_SUFFIX = "-delete"


def write_checkpoint(path: Path, entries: Iterable[tuple[str, int, int]]) -> None:
    lines = [f"{t} {p} {o}" for t, p, o in entries]
    data = "\n".join(["0", str(len(lines)), *lines]) + "\n"
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def read_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """Parse a checkpoint file; a missing or malformed file reads as empty (full recovery)."""
    try:
        lines = path.read_text().splitlines()
    except (FileNotFoundError, UnicodeDecodeError):
        return {}
    try:
        if lines[0].strip() != "0":
            return {}
        n = int(lines[1])
        out = {}
        for line in lines[2 : 2 + n]:
            topic, part, off = line.split()
            out[(topic, int(part))] = int(off)
        if len(out) != n:
            return {}
        return out
    except (IndexError, ValueError):
        return {}


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class LogManager:
    def __init__(
        self, log_dir: Path, default_config: LogConfig, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self.log_dir = Path(log_dir)
        self.default_config = default_config
        self.clock = clock
        self.logs: dict[tuple[str, int], PartitionLog] = {}
        self._pending_dir_deletes: list[tuple[int, Path, PartitionLog]] = []
        self.had_clean_shutdown = False

    def load_all(self) -> None:
        """Open and recover every ``<topic>-<partition>`` directory; ignore anything else."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        marker = self.log_dir / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        self.had_clean_shutdown = clean
        points = read_checkpoint(self.log_dir / RECOVERY_POINT_CHECKPOINT)
        starts = read_checkpoint(self.log_dir / LOG_START_OFFSET_CHECKPOINT)
        hws = read_checkpoint(self.log_dir / REPLICATION_OFFSET_CHECKPOINT)
        for entry in sorted(os.listdir(self.log_dir)):
            path = self.log_dir / entry
            if not path.is_dir():
                continue
            if entry.endswith(DELETE_DIR_SUFFIX):
                shutil.rmtree(path, ignore_errors=True)
                continue
            parsed = parse_partition_dir(entry)
            if parsed is None or parsed in self.logs:
                continue
            self.logs[parsed] = PartitionLog.open(
                path,
                self.default_config,
                self.clock,
                recovery_point=points.get(parsed, 0),
                clean_shutdown=clean,
                log_start_offset=starts.get(parsed, 0),
            )
            log = self.logs[parsed]
            log.high_watermark = max(
                min(hws.get(parsed, 0), log.log_end_offset), log.log_start_offset
            )
        marker.unlink(missing_ok=True)
        _fsync_dir(self.log_dir)
        self.checkpoint()

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self.logs.get((topic, partition))

    def get_or_create(
        self,
        topic: str,
        partition: int,
        config: LogConfig | None = None,
        topic_id: uuid.UUID | None = None,
    ) -> PartitionLog:
        """The partition's log, created if needed.  With ``topic_id`` (the topic's current
        incarnation), a log that holds another incarnation (partition.metadata) is deleted and
        an empty one created in its place; a log without an id adopts this one."""
        log = self.logs.get((topic, partition))
        if topic_id == partition_metadata.ZERO:
            topic_id = None
        if log is not None and partition_metadata.other_incarnation(log.topic_id, topic_id):
            self.delete(topic, partition)
            log = None
        if log is None:
            log = PartitionLog.open(
                self.log_dir / f"{topic}-{partition}", config or self.default_config, self.clock
            )
            self.logs[(topic, partition)] = log
        elif config is not None:
            log.config = config
        if topic_id is not None and log.topic_id is None:
            partition_metadata.write(log.directory, topic_id)
            log.topic_id = topic_id
        return log

    def delete(self, topic: str, partition: int) -> None:
        """Forget the partition and rename its directory to ``<name>.<hex>-delete``; the files
        go in :meth:`delete_pending_files` after file.delete.delay.ms (in-flight reads)."""
        log = self.logs.pop((topic, partition), None)
        if log is None:
            return
        target = self.log_dir / f"{log.directory.name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
        os.rename(log.directory, target)
        log.moved_to(target)
        for seg in log.segments:  # as Kafka closes a deleted log's handles at once
            seg.release()
        due = self.clock.time_ms() + log.config.file_delete_delay_ms
        self._pending_dir_deletes.append((due, target, log))

    def partitions(self) -> Iterator[tuple[str, int, PartitionLog]]:
        for (topic, partition), log in list(self.logs.items()):
            yield topic, partition, log

    def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """DeleteRecords on one partition (PartitionLog.delete_records_before), then write the
        log start offset checkpoint so the new start survives a crash.  Returns the new log
        start offset; KeyError if the partition has no log here."""
        log = self.logs[(topic, partition)]
        before = log.log_start_offset
        start = log.delete_records_before(offset)
        if start != before:
            self.checkpoint()
        return start

    def run_retention(self) -> int:
        """Apply retention to every log (cheap: renames only).  Returns segments removed."""
        return sum(log.delete_old_segments() for log in list(self.logs.values()))

    def delete_pending_files(self, *, force: bool = False) -> None:
        """Unlink files of deleted segments and partitions once due.  Worker-thread safe."""
        for log in list(self.logs.values()):
            log.delete_pending_files(force=force)
        now = self.clock.time_ms()
        keep = []
        for due, path, log in self._pending_dir_deletes:
            if force or due <= now:
                log.delete()
                shutil.rmtree(path, ignore_errors=True)
            else:
                keep.append((due, path, log))
        self._pending_dir_deletes = keep

    def flush_all(self) -> None:
        """fsync every log and checkpoint the recovery points (may run in a worker thread)."""
        for log in list(self.logs.values()):
            log.flush()
        self.checkpoint()

    def checkpoint(self) -> None:
        items = sorted(self.logs.items())
        write_checkpoint(
            self.log_dir / RECOVERY_POINT_CHECKPOINT,
            [(t, p, log.recovery_point) for (t, p), log in items],
        )
        write_checkpoint(
            self.log_dir / LOG_START_OFFSET_CHECKPOINT,
            [(t, p, log.log_start_offset) for (t, p), log in items],
        )
        write_checkpoint(
            self.log_dir / REPLICATION_OFFSET_CHECKPOINT,
            [(t, p, log.high_watermark) for (t, p), log in items],
        )

    def close(self) -> None:
        """Clean shutdown: close (flush + producer snapshot) every log, checkpoint, marker."""
        for log in list(self.logs.values()):
            log.close()
        self.delete_pending_files(force=True)
        self.checkpoint()
        marker = self.log_dir / CLEAN_SHUTDOWN_FILE
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        _fsync_dir(self.log_dir)
