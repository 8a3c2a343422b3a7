"""The flush of a rolled segment (Kafka's ``flush-log`` task, which UnifiedLog.roll schedules
on the log manager's scheduler): when a log rolls, the segments below the new active
segment's base offset are fsynced in the background and the log's recovery point moves to
that base (``PartitionLog.flush(upto=...)``).  With Kafka's default flush configs this, a
``flush.messages`` / ``flush.ms`` policy (pybroker/flusher.py) and a clean shutdown are the
only things that move a recovery point; the periodic checkpoint
(``log.flush.offset.checkpoint.interval.ms``) only writes the recovery points reached.

One daemon thread, started at the first roll; a failed flush is handed to ``on_io_error``
(LogManager.fail_dir, which queues itself to the owner thread).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pybroker.log.partition_log import PartitionLog

log = logging.getLogger(__name__)


class RolledSegmentFlusher:
    def __init__(self, on_io_error: Callable[[PartitionLog, OSError], None]) -> None:
        self.on_io_error = on_io_error
        self._queue: queue.SimpleQueue[tuple[PartitionLog, int] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stopped = False

    def rolled(self, plog: PartitionLog, base_offset: int) -> None:
        """``plog`` rolled a new active segment at ``base_offset``: flush what is below it."""
        with self._lock:
            if self._stopped:
                return  # (a clean shutdown's close flushes every log)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="log-roll-flush", daemon=True
                )
                self._thread.start()
        self._queue.put((plog, base_offset))

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            plog, offset = job
            if plog.closed or self._stopped:
                continue
            try:
                plog.flush(upto=offset)
            except OSError as e:
                self.on_io_error(plog, e)
            except Exception:
                log.exception("flush of %s below %d failed", plog.directory.name, offset)

    def stop(self) -> None:
        """Drop what is queued (the caller flushes every log itself), end the thread once the
        flush under way is done."""
        with self._lock:
            self._stopped = True
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            thread.join()
