"""The one place a log is flushed while the broker runs (Kafka's callers of UnifiedLog.flush):
the roll's flush (Kafka's ``flush-log`` task, which UnifiedLog.roll schedules: the rolled
segments and the roll's producer-state snapshot, then the recovery point moves to the new
active segment's base) and the flush policy's (``flush.messages`` / ``flush.ms``,
pybroker/flusher.py decides when: Kafka's append path and ``flushDirtyLogs``).  A clean
shutdown stops it, then each log's close flushes that log (LogManager.close); the periodic
checkpoint (``log.flush.offset.checkpoint.interval.ms``) only writes the recovery points
reached.  Every flush is ``PartitionLog.flush(upto)``, run on this flusher's threads, at most
one at a time per log (a request for a log being flushed waits and is merged: the larger
target, None being the log end); a failed flush is handed to ``on_io_error``
(LogManager.fail_dir, which queues itself to the owner thread).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pybroker.log.partition_log import PartitionLog

log = logging.getLogger(__name__)

# as asyncio.to_thread's default executor, where the policy's flushes ran until session 14
FLUSH_THREADS = min(32, (os.cpu_count() or 1) + 4)


def _merge(a: int | None, b: int | None) -> int | None:
    """Two flush targets as one (None: the log end seen when the flush runs)."""
    return None if a is None or b is None else max(a, b)


def _settle(futures: list[Future], point: int = 0, error: BaseException | None = None) -> None:
    for f in futures:
        try:
            if error is None:
                f.set_result(point)
            else:
                f.set_exception(error)
        except InvalidStateError:
            pass  # (its waiter cancelled it)


class LogFlusher:
    def __init__(
        self, on_io_error: Callable[[PartitionLog, OSError], None], threads: int = FLUSH_THREADS
    ) -> None:
        self.on_io_error = on_io_error
        self.threads = threads
        self._pool: ThreadPoolExecutor | None = None  # (started at the first flush)
        self._lock = threading.Lock()
        self._stopped = False
        # a log being flushed -> the next flush asked for it meanwhile (target, its futures)
        self._running: dict[PartitionLog, tuple[int | None, list[Future]] | None] = {}

    def flush(self, plog: PartitionLog, upto: int | None = None) -> Future:
        """Flush ``plog`` up to ``upto`` (None: its log end) on a flusher thread.  The future
        ends with the recovery point reached, or the flush's error (an OSError was handed to
        ``on_io_error`` too); cancelled if the log was closed or the flusher stopped first."""
        fut: Future = Future()
        with self._lock:
            if self._stopped:
                fut.cancel()  # (a clean shutdown's close flushes every log)
                return fut
            if plog in self._running:
                nxt = self._running[plog]
                if nxt is None:
                    self._running[plog] = (upto, [fut])
                else:
                    nxt[1].append(fut)
                    self._running[plog] = (_merge(nxt[0], upto), nxt[1])
                return fut
            self._running[plog] = None
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.threads, "log-flush")
            pool = self._pool
        pool.submit(self._run, plog, upto, [fut])
        return fut

    def rolled(self, plog: PartitionLog, base_offset: int) -> None:
        """``plog`` rolled a new active segment at ``base_offset`` (PartitionLog.on_roll):
        flush what is below it, in the background (Kafka's ``flush-log`` task)."""
        self.flush(plog, base_offset)

    def _run(self, plog: PartitionLog, upto: int | None, futures: list[Future]) -> None:
        while True:
            if plog.closed or self._stopped:
                for f in futures:
                    f.cancel()
            else:
                try:
                    point = plog.flush(upto)
                except OSError as e:
                    self.on_io_error(plog, e)
                    _settle(futures, error=e)
                except Exception as e:
                    log.exception("flush of %s up to %s failed", plog.directory.name, upto)
                    _settle(futures, error=e)
                else:
                    _settle(futures, point)
            with self._lock:
                nxt = self._running.pop(plog)
                if nxt is None:
                    return
                self._running[plog] = None
            upto, futures = nxt

    def stop(self) -> None:
        """Cancel what is asked and not started (the caller flushes every log itself) and
        wait for the flushes under way."""
        with self._lock:
            self._stopped = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
