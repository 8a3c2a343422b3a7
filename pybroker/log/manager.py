"""All partition logs of the broker's log dirs (log.dirs, JBOD), each dir in Kafka's layout::

    <log.dir>/
        <topic>-<partition>/                     one PartitionLog each
        <topic>-<partition>.<hex>-future/        a replica being moved here (AlterReplicaLogDirs)
        recovery-point-offset-checkpoint         text (pybroker/log/checkpoints.py)
        log-start-offset-checkpoint              text, same format: each log's start offset
        replication-offset-checkpoint            text, same format: each log's high watermark
        .kafka_cleanshutdown                     present only after a clean shutdown
        <topic>-<partition>.<hex>-delete/        deleted partitions awaiting removal

A partition is in one dir; a dir whose I/O fails is offline from then on.  Placement, start
and the clean-shutdown marker: docs/internals.md ("pybroker/log/manager.py").
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pybroker.clock import SYSTEM_CLOCK, Clock
from pybroker.log import partition_metadata
from pybroker.log.checkpoints import (
    write_clean_shutdown_marker,
    write_dir_checkpoints,
)
from pybroker.log.descriptors import DescriptorCache
from pybroker.log.leader_epoch import EpochCheckpointWriter, LeaderEpochCache
from pybroker.log.log_dirs import (
    DELETE_DIR_SUFFIX,
    DirFailureListener,
    DuplicateLogError,
    Key,
    LogDirNotFoundError,
    LogDirs,
    LogTable,
    OfflineLogDirError,
)
from pybroker.log.log_flusher import LogFlusher
from pybroker.log.partition_log import (
    FUTURE_DIR_SUFFIX,
    LogConfig,
    PartitionLog,
)

log = logging.getLogger(__name__)


class LogManager(LogDirs):
    def __init__(
        self,
        log_dirs: Path | Sequence[Path],
        default_config: LogConfig,
        clock: Clock = SYSTEM_CLOCK,
        descriptors: DescriptorCache | None = None,
    ) -> None:
        """``descriptors``: the LRU bounding the segments' open descriptors, shared by every
        log here (the broker's, sized from its open files limit; None: one of its own)."""
        dirs = [log_dirs] if isinstance(log_dirs, (str, Path)) else list(log_dirs)
        self.log_dirs: list[Path] = []
        for d in dirs:
            p = Path(os.path.abspath(d))
            if p not in self.log_dirs:
                self.log_dirs.append(p)
        if not self.log_dirs:
            raise ValueError("no log dir")
        # leader-epoch checkpoints that only grew are written by its thread (leader_epoch.py)
        self.epoch_writer = EpochCheckpointWriter()
        # every flush of a log while the broker runs: a roll's, the flush policy's
        self.log_flusher = LogFlusher(lambda lg, e: self.fail_dir(self.dir_of(lg), e))
        self.log_dir = self.log_dirs[0]  # the first: the cleaner's checkpoint lives there
        self.default_config = default_config
        self.clock = clock
        self.descriptors = (
            descriptors if descriptors is not None else DescriptorCache.for_open_files_limit()
        )
        self.logs: dict[Key, PartitionLog] = LogTable()
        self.future_logs: dict[Key, PartitionLog] = LogTable()
        # AlterReplicaLogDirs for a replica not created yet: where it is to be created
        self.preferred_dirs: dict[Key, Path] = {}
        self.offline_dirs: set[Path] = set()
        # partitions whose log was in a dir that failed: offline here until the next start
        # (Kafka's HostedPartition.Offline), never created again in another dir meanwhile
        self.offline_partitions: set[Key] = set()
        self.dir_failure_listeners: list[DirFailureListener] = []
        # called (topic, partition) on the loop when a log's start moved without an append
        # (DeleteRecords, retention, a moved log): the leader's followers' sessions look again
        self.log_start_listeners: list[Callable[[str, int], object]] = []
        # the owner of the logs (the event loop's thread) and how to run a call there: a worker
        # thread's failure is handled by the owner (None: any thread; tests, start-up).
        self.owner_thread: int | None = None
        self.call_on_owner: Callable[..., object] | None = None
        self._pending_dir_deletes: list[tuple[int, Path, PartitionLog]] = []
        self.had_clean_shutdown = False
        # Checkpoints are written from the loop (a move, DeleteRecords) and the periodic
        # worker thread: one writer at a time (as Kafka's), or two share a .tmp file.
        self._checkpoint_lock = threading.Lock()
        self.start_errors: dict[Path, str] = {}  # why a dir went offline in load_all

    # -- logs -------------------------------------------------------------------------------
    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self.logs.get((topic, partition))

    def get_future(self, topic: str, partition: int) -> PartitionLog | None:
        return self.future_logs.get((topic, partition))

    def get_or_create(
        self,
        topic: str,
        partition: int,
        config: LogConfig | None = None,
        topic_id: uuid.UUID | None = None,
    ) -> PartitionLog:
        """The partition's log, created if needed (in :meth:`next_log_dir`).  With
        ``topic_id`` (the topic's current incarnation), a log that holds another incarnation
        (partition.metadata) is deleted and an empty one created in its place; a log without
        an id adopts this one.  A dir that fails to create it goes offline and the next is tried;
        OfflineLogDirError when none is left."""
        key = (topic, partition)
        plog = self.logs.get(key)
        if topic_id == partition_metadata.ZERO:
            topic_id = None
        if plog is not None and partition_metadata.other_incarnation(plog.topic_id, topic_id):
            self.delete(topic, partition)
            plog = None
        if plog is None:
            if key in self.offline_partitions:
                raise OfflineLogDirError(f"{topic}-{partition} is offline (its log dir failed)")
            tried: list[Path] = []
            while plog is None:  # a dir that fails here goes offline; the next one is tried
                d = self.next_log_dir(key, tried)
                try:
                    plog = PartitionLog.open(
                        d / f"{topic}-{partition}",
                        config or self.default_config,
                        self.clock,
                        descriptors=self.descriptors,
                    )
                except OSError as e:
                    tried.append(d)
                    self.fail_dir(d, e)
            self.preferred_dirs.pop(key, None)
            self._attach(plog)
            self.logs[key] = plog
        elif config is not None:
            plog.config = config
        if topic_id is not None and plog.topic_id is None:
            partition_metadata.write(plog.directory, topic_id)
            plog.topic_id = topic_id
        return plog

    # -- creating many logs off the owner's thread ---------------------------------------------
    def open_new(
        self,
        directory: Path,
        key: Key,
        config: LogConfig,
        topic_id: uuid.UUID | None,
        leader_epoch: int | None = None,
    ) -> PartitionLog:
        """Open (create) one partition's log in ``directory`` without touching the tables
        (safe in a worker thread; :meth:`adopt` on the owner makes it the partition's log),
        with its partition.metadata and, for a leader, its first leader epoch entry."""
        plog = PartitionLog.open(
            directory / f"{key[0]}-{key[1]}", config, self.clock, descriptors=self.descriptors
        )
        if topic_id is not None and topic_id != partition_metadata.ZERO and plog.topic_id is None:
            partition_metadata.write(plog.directory, topic_id)
            plog.topic_id = topic_id
        if leader_epoch is not None and leader_epoch >= 0:
            plog.leader_epochs.assign(leader_epoch, plog.log_end_offset)
        self._attach(plog)  # (after the creation's own epoch write)
        return plog

    def _attach(self, plog: PartitionLog) -> None:
        plog.leader_epochs.writer = self.epoch_writer
        plog.on_roll = self.log_flusher.rolled

    def adopt(self, key: Key, plog: PartitionLog) -> bool:
        """Make a log made by :meth:`open_new` the partition's (on the owner).  False (and the
        log is deleted) if the partition has a log already or is offline here."""
        if (
            key in self.logs
            or key in self.offline_partitions
            or self.dir_of(plog) in self.offline_dirs
        ):
            self.discard(plog)
            return False
        self.preferred_dirs.pop(key, None)
        self.logs[key] = plog
        return True

    def discard(self, plog: PartitionLog) -> None:
        """Delete a log :meth:`open_new` made that no table holds (renamed ``-delete``, its
        files removed later, as :meth:`delete`)."""
        try:
            self._retire(plog)
        except OSError as e:
            self.fail_dir(self.dir_of(plog), e)

    def create_future(self, topic: str, partition: int, directory: Path) -> PartitionLog:
        """An empty copy of the partition's current log in ``directory``, named
        ``<topic>-<partition>.<uuid hex>-future`` (Kafka's), starting at the current log's
        start offset, with its topic id and config; log/mover.py fills it."""
        key = (topic, partition)
        src = self.logs[key]
        if key in self.future_logs:
            raise ValueError(f"{topic}-{partition} already has a future log")
        path = directory / f"{topic}-{partition}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}"
        try:
            fut = PartitionLog.open(path, src.config, self.clock, descriptors=self.descriptors)
            fut.on_roll = self.log_flusher.rolled
            if src.log_start_offset > 0:
                fut.truncate_fully_and_start_at(src.log_start_offset)
            if src.topic_id is not None:
                partition_metadata.write(fut.directory, src.topic_id)
                fut.topic_id = src.topic_id
        except OSError as e:
            self.fail_dir(directory, e)
            raise OfflineLogDirError(f"Log directory {directory} is offline") from e
        self.future_logs[key] = fut
        src.future_copy = fut
        return fut

    def remove_future(self, topic: str, partition: int) -> None:
        """Abandon a move: the future log is renamed ``-delete`` and removed later."""
        fut = self.future_logs.pop((topic, partition), None)
        if fut is None:
            return
        src = self.logs.get((topic, partition))
        if src is not None and src.future_copy is fut:
            src.future_copy = None
        try:
            self._retire(fut)
        except OSError as e:
            self.fail_dir(self.dir_of(fut), e)

    def replace_current_with_future(self, topic: str, partition: int) -> None:
        """The swap at the end of a move (Kafka's replaceCurrentWithFutureLog), when the
        future log holds exactly the current one's offsets (same log end).  Caller: the owner
        (event loop), with no await since it last compared them.  On disk: the future dir is
        renamed to ``<topic>-<partition>``, then the old dir to ``<name>.<hex>-delete``
        (a crash between leaves the partition in two dirs: the next start refuses, naming
        both, as Kafka's).  The log object everyone holds takes the future's state
        (PartitionLog.exchange_state); the old state is deleted after file.delete.delay.ms."""
        key = (topic, partition)
        src = self.logs[key]
        fut = self.future_logs[key]
        if fut.log_end_offset != src.log_end_offset:
            raise ValueError(
                f"{topic}-{partition}: future log end {fut.log_end_offset} != {src.log_end_offset}"
            )
        del self.future_logs[key]
        src.future_copy = None
        fut.high_watermark = fut.log_end_offset  # (so that its start may move up to there)
        if src.log_start_offset > fut.log_start_offset:
            fut.delete_records_before(src.log_start_offset)
        fut.high_watermark = src.high_watermark
        epochs = LeaderEpochCache(fut.leader_epochs.path, src.leader_epochs.entries())
        epochs.flush()
        epochs.sync()
        fut.leader_epochs = epochs
        target = fut.directory.parent / f"{topic}-{partition}"
        try:
            os.rename(fut.directory, target)
        except OSError as e:
            self.future_logs[key] = fut
            src.future_copy = fut
            self.fail_dir(fut.directory, e)
            raise
        fut.moved_to(target)
        src.exchange_state(fut)  # src: the moved log now; fut: the old one
        self.logs[key] = src  # (counted in its new dir)
        self._log_start_moved(key)
        try:
            self._retire(fut)
        except OSError as e:  # the old dir failed: the partition lives on in the new one
            self.fail_dir(fut.directory, e)
        self.checkpoint()

    def _retire(self, plog: PartitionLog) -> None:
        target = (
            plog.directory.parent / f"{plog.directory.name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
        )
        os.rename(plog.directory, target)
        plog.moved_to(target)
        plog.closed = True  # (a deleted log: no flush or clean starts on it)
        for seg in plog.segments:  # as Kafka closes a deleted log's handles at once
            seg.release()
        due = self.clock.time_ms() + plog.config.file_delete_delay_ms
        self._pending_dir_deletes.append((due, target, plog))

    def delete(self, topic: str, partition: int) -> None:
        """Forget the partition and rename its directory to ``<name>.<hex>-delete`` (a move
        under way is abandoned too); the files go in :meth:`delete_pending_files` after
        file.delete.delay.ms (in-flight reads)."""
        self.remove_future(topic, partition)
        plog = self.logs.pop((topic, partition), None)
        if plog is None:
            return
        try:
            self._retire(plog)
        except OSError as e:  # (its dir failed: the partition goes with it)
            self.logs[(topic, partition)] = plog
            self.fail_dir(self.dir_of(plog), e)

    def partitions(self) -> Iterator[tuple[str, int, PartitionLog]]:
        # dict.copy, not list(items()): the cleaner's thread calls this while the loop adds
        # logs, and a copy is one step under the GIL (list() of a view can see the dict grow:
        # "dictionary changed size during iteration", seen creating 100,000 replicas)
        for (topic, partition), plog in self.logs.copy().items():
            yield topic, partition, plog

    def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """DeleteRecords on one partition (PartitionLog.delete_records_before), then write the
        log start offset checkpoint so the new start survives a crash.  Returns the new log
        start offset; KeyError if the partition has no log here."""
        plog = self.logs[(topic, partition)]
        before = plog.log_start_offset
        start = plog.delete_records_before(offset)
        if start != before:
            self._log_start_moved((topic, partition))
            self.checkpoint()
        return start

    def _log_start_moved(self, key: Key) -> None:
        for cb in self.log_start_listeners:
            cb(*key)

    def run_retention(self) -> int:
        """Apply retention to every log (cheap: renames only).  Returns segments removed."""
        removed = 0
        for key, plog in list(self.logs.items()):
            try:
                n = plog.delete_old_segments()
            except OSError as e:
                self.fail_dir(self.dir_of(plog), e)
                continue
            if n:
                removed += n
                self._log_start_moved(key)
        return removed

    def delete_pending_files(self, *, force: bool = False) -> None:
        """Unlink files of deleted segments and partitions once due.  Worker-thread safe."""
        for plog in [*self.logs.values(), *self.future_logs.values()]:
            try:
                plog.delete_pending_files(force=force)
            except OSError:
                pass  # (its dir failed: the next write there reports it)
        now = self.clock.time_ms()
        keep = []
        for due, path, plog in self._pending_dir_deletes:
            if force or due <= now:
                try:
                    plog.delete()
                except OSError:
                    pass
                shutil.rmtree(path, ignore_errors=True)
            else:
                keep.append((due, path, plog))
        self._pending_dir_deletes = keep

    def checkpoint(self) -> None:
        """Each online dir's three checkpoint files (its current and future logs); a dir
        whose write fails goes offline.  Safe from any thread (one writer at a time)."""
        with self._checkpoint_lock:
            self._checkpoint()

    def _checkpoint(self) -> None:
        for d in self.online_dirs:
            entries = [
                (k, lg.recovery_point, lg.log_start_offset, lg.high_watermark)
                for k, lg, _ in self.logs_in(d)
            ]
            try:
                write_dir_checkpoints(d, entries)
            except OSError as e:
                self.fail_dir(d, e)

    def close(self, threads_per_dir: int = 1) -> None:
        """Clean shutdown, as Kafka's LogManager.shutdown: close (flush + producer snapshot)
        every log, each dir's on ``threads_per_dir`` threads, the dirs at once; checkpoint; the
        markers after every log closed (another error than an I/O error leaves none)."""
        self.log_flusher.stop()  # (each log's close flushes it)
        by_dir: dict[Path, list[PartitionLog]] = {}
        for plog in [*self.logs.values(), *self.future_logs.values()]:
            by_dir.setdefault(self.dir_of(plog), []).append(plog)
        pools = [
            (d, ThreadPoolExecutor(min(threads_per_dir, len(plogs)), f"log-close-{i}"), plogs)
            for i, (d, plogs) in enumerate(by_dir.items())
        ]
        jobs = [(d, pool.submit(plog.close)) for d, pool, plogs in pools for plog in plogs]
        unexpected: BaseException | None = None
        failed: set[Path] = set()  # (fail_dir may only be queued to the owner thread)
        try:
            for d, job in jobs:
                try:
                    job.result()
                except OSError as e:
                    failed.add(d)
                    self.fail_dir(d, e)
                except BaseException as e:  # noqa: BLE001 - re-raised once every job ended
                    unexpected = unexpected or e
        finally:
            for _, pool, _ in pools:
                pool.shutdown(wait=True)
        if unexpected is not None:
            raise unexpected
        self.epoch_writer.stop()  # (what an empty log's close left to it)
        self.delete_pending_files(force=True)
        self.checkpoint()
        for d in self.online_dirs:
            if d in failed:
                continue
            try:
                write_clean_shutdown_marker(d)
            except OSError as e:
                log.error("log dir %s: clean shutdown marker not written: %s", d, e)


__all__ = [
    "DuplicateLogError",
    "Key",
    "LogDirNotFoundError",
    "LogManager",
    "OfflineLogDirError",
]
