"""Moving a replica between log dirs on a live broker (AlterReplicaLogDirs; Kafka's
ReplicaAlterLogDirsThread).  A ``-future`` log in the target dir is filled with the current
log's batches, unchanged, paced to ``replica.alter.log.dirs.io.max.bytes.per.second``, while the
current log keeps serving; the future is always a copy of a prefix of the current log, and the
swap happens in the loop step whose copy reaches the current log's end, with no await in
between.  After a crash :meth:`LogDirMover.resume` goes on; an OSError takes that dir offline.
Steps: docs/internals.md ("pybroker/log/mover.py").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from pybroker.clock import SYSTEM_CLOCK, Clock
from pybroker.log.manager import Key, LogManager
from pybroker.wire.records import parse_batches

log = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 20  # Kafka: replica.fetch.max.bytes's default
FLUSH_BYTES = 64 << 20  # the future log is fsynced (worker thread) after this many bytes
UNLIMITED = (1 << 63) - 1


class LogDirMover:
    def __init__(
        self,
        logs: LogManager,
        *,
        rate: Callable[[], int] = lambda: UNLIMITED,
        clock: Clock = SYSTEM_CLOCK,
        chunk_bytes: int = CHUNK_BYTES,
    ) -> None:
        self.logs = logs
        self.rate = rate  # bytes per second, read before every chunk
        self.clock = clock
        self.chunk_bytes = chunk_bytes
        self.tasks: dict[Key, asyncio.Task] = {}
        self.completed = 0  # moves finished (swapped)
        self.bytes_copied = 0

    def start_move(self, topic: str, partition: int, directory: Path) -> bool:
        """Kafka's maybeCreateFutureReplica + the fetcher: start moving the partition's
        current log to ``directory`` (an online log dir).  False when there is nothing to do
        (already there, or already moving there); a move to another dir under way is
        abandoned first (Kafka's futureReplicaDirChanged).  KeyError without a current log."""
        key = (topic, partition)
        src = self.logs.logs[key]
        fut = self.logs.future_logs.get(key)
        if fut is not None and self.logs.dir_of(fut) != directory:
            self.cancel(topic, partition)
            fut = None
        if self.logs.dir_of(src) == directory:
            return False
        if fut is None:
            self.logs.create_future(topic, partition, directory)
        elif key in self.tasks:
            return False
        self._spawn(key)
        return True

    def cancel(self, topic: str, partition: int) -> None:
        task = self.tasks.pop((topic, partition), None)
        if task is not None:
            task.cancel()
        self.logs.remove_future(topic, partition)

    def resume(self) -> None:
        """At start: go on with every future log found on disk."""
        for key in list(self.logs.future_logs):
            if key not in self.logs.logs:
                log.info("%s-%d: future log without a current one, removed", *key)
                self.logs.remove_future(*key)
            elif key not in self.tasks:
                self._spawn(key)

    async def stop(self) -> None:
        tasks = list(self.tasks.values())
        self.tasks.clear()
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=2.0)

    def _spawn(self, key: Key) -> None:
        task = asyncio.get_running_loop().create_task(self._run(key), name=f"alter-log-dir-{key}")
        self.tasks[key] = task

        def done(t: asyncio.Task) -> None:
            if self.tasks.get(key) is t:
                del self.tasks[key]
            if not t.cancelled() and t.exception() is not None:
                log.error("%s-%d: log dir move failed", *key, exc_info=t.exception())

        task.add_done_callback(done)

    async def _run(self, key: Key) -> None:
        logs = self.logs
        fut = logs.future_logs[key]
        log.info("%s-%d: moving to %s", key[0], key[1], logs.dir_of(fut))
        unflushed = 0
        while True:
            src = logs.logs.get(key)
            if logs.future_logs.get(key) is not fut or src is None or src.future_copy is not fut:
                return  # abandoned (cancelled, deleted, a dir failed)
            copied = 0
            if fut.log_end_offset != src.log_end_offset:
                copied = self._copy_chunk(src, fut)
                if copied < 0:
                    return
            if fut.log_end_offset == src.log_end_offset:
                # in the same loop step as the comparison (and the copy that caught up): no
                # append can come between (a wait here would let a busy partition run away)
                logs.replace_current_with_future(*key)
                self.completed += 1
                log.info("%s-%d: moved to %s", key[0], key[1], logs.dir_of(src))
                return
            unflushed += copied
            if unflushed >= FLUSH_BYTES:  # bounds what a crash leaves to recover
                unflushed = 0
                try:
                    await asyncio.to_thread(fut.flush)
                except OSError as e:
                    logs.fail_dir(logs.dir_of(fut), e)
                    return
            elif copied == 0:  # nothing readable at the future's end yet
                await asyncio.sleep(0.05)
            else:
                await self._pace(copied)

    def _copy_chunk(self, src, fut) -> int:  # noqa: ANN001
        """Copy the next batches (at most one chunk, at least one batch); -1 if a dir failed."""
        logs = self.logs
        if fut.log_end_offset < src.log_start_offset:
            fut.truncate_fully_and_start_at(src.log_start_offset)
        limit = max(1, min(self.chunk_bytes, self.rate()))
        try:
            got = src.read(fut.log_end_offset, limit)
            if got is None:
                return 0
            got.file.seek(got.position)
            buf = bytearray(got.file.read(got.size))
        except OSError as e:
            logs.fail_dir(logs.dir_of(src), e)
            return -1
        batches = parse_batches(buf, verify_crc=False, allow_control=True)
        try:
            fut.append_as_follower(buf, batches)
        except OSError as e:
            logs.fail_dir(logs.dir_of(fut), e)
            return -1
        self.bytes_copied += len(buf)
        return len(buf)

    async def _pace(self, copied: int) -> None:
        rate = self.rate()
        if rate >= UNLIMITED or copied <= 0:
            await asyncio.sleep(0)  # other work between two chunks
            return
        await asyncio.sleep(copied / max(rate, 1))
