"""A LogManager's log dirs (log.dirs, JBOD): which are online, loading them at start, where a
new log goes and taking a failed one offline (Kafka's LogManager.loadLogs, nextLogDirs and
handleLogDirFailure).  A part of LogManager (manager.py: its logs at runtime), whose fields it
uses; docs/internals.md ("pybroker/log/manager.py", "Several log dirs").
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from pybroker.log.checkpoints import CLEAN_SHUTDOWN_FILE, fsync_dir, read_dir_checkpoints
from pybroker.log.partition_log import PartitionLog, parse_future_dir, parse_partition_dir

log = logging.getLogger("pybroker.log.manager")  # LogManager's

DELETE_DIR_SUFFIX = "-delete"


def _why_unusable(d: Path, e: OSError) -> str:
    """What keeps ``d`` from being a log dir, for the operator (the file in the way, if any)."""
    if e.errno in (errno.ENOTDIR, errno.EEXIST):
        for p in [d, *d.parents]:
            if p.exists() and not p.is_dir():
                return f"{p} is a file, not a directory"
    return e.strerror or str(e)


class DuplicateLogError(Exception):
    """A partition's log found in two log dirs at start (Kafka refuses to start too)."""


class LogDirNotFoundError(Exception):
    """A path that is not one of log.dirs (Kafka's LogDirNotFoundException)."""


class OfflineLogDirError(Exception):
    """The log dir is offline (Kafka's KafkaStorageException)."""


Key = tuple[str, int]
# fail_dir's listeners: (the dir, the partitions whose current log was in it)
DirFailureListener = Callable[[Path, list[Key]], None]


class LogTable(dict[Key, PartitionLog]):
    """A table of logs by partition that keeps how many it holds in each dir, so that placing
    a new log (next_log_dir) costs O(dirs), not O(logs): counting on every creation made
    creating n partitions cost O(n^2).  Only item assignment, ``del`` and ``pop`` change it;
    a log whose directory moves while in the table is assigned again (recounted)."""

    def __init__(self) -> None:
        super().__init__()
        self.counted: dict[Key, Path] = {}
        self.per_dir: dict[Path, int] = {}

    def _uncount(self, key: Key) -> None:
        d = self.counted.pop(key, None)
        if d is not None:
            self.per_dir[d] -= 1

    def __setitem__(self, key: Key, plog: PartitionLog) -> None:
        super().__setitem__(key, plog)
        self._uncount(key)
        d = plog.directory.parent
        self.counted[key] = d
        self.per_dir[d] = self.per_dir.get(d, 0) + 1

    def __delitem__(self, key: Key) -> None:
        super().__delitem__(key)
        self._uncount(key)

    _MISSING = object()

    def pop(self, key: Key, default: object = _MISSING) -> PartitionLog:  # type: ignore[override]
        if key in self:
            plog = super().pop(key)
            self._uncount(key)
            return plog
        if default is self._MISSING:
            raise KeyError(key)
        return default  # type: ignore[return-value]


class LogDirs:
    """LogManager's dirs (module docstring)."""

    # -- dirs -------------------------------------------------------------------------------
    @property
    def online_dirs(self) -> list[Path]:
        return [d for d in self.log_dirs if d not in self.offline_dirs]

    def resolve_dir(self, path: str | Path) -> Path:
        """The log dir ``path`` names (compared as absolute paths, as Kafka does);
        LogDirNotFoundError if it is none of them, OfflineLogDirError if it is offline."""
        p = Path(os.path.abspath(path))
        if p not in self.log_dirs:
            raise LogDirNotFoundError(f"Failed to find the log directory {path}")
        if p in self.offline_dirs:
            raise OfflineLogDirError(f"Log directory {p} is offline")
        return p

    @staticmethod
    def dir_of(plog: PartitionLog) -> Path:
        return plog.directory.parent

    def logs_in(self, directory: Path) -> list[tuple[Key, PartitionLog, bool]]:
        """(key, log, is_future) of every log in ``directory``; worker-thread safe."""
        current, future = list(self.logs.items()), list(self.future_logs.items())
        out = [(k, lg, False) for k, lg in current if self.dir_of(lg) == directory]
        out += [(k, lg, True) for k, lg in future if self.dir_of(lg) == directory]
        return sorted(out, key=lambda e: (e[0], e[2]))

    def next_log_dir(self, key: Key, exclude: Iterable[Path] = ()) -> Path:
        """Where a new log goes: the dir named for it by AlterReplicaLogDirs if online, else
        the online dir holding the fewest logs, current and future (Kafka's nextLogDirs; ties
        in log.dirs order)."""
        skip = set(exclude)
        online = [d for d in self.online_dirs if d not in skip]
        if not online:
            raise OfflineLogDirError("every log dir is offline")
        preferred = self.preferred_dirs.get(key)
        if preferred in online:
            return preferred
        if len(online) == 1:
            return online[0]
        current, future = self.logs, self.future_logs
        assert isinstance(current, LogTable) and isinstance(future, LogTable)
        return min(online, key=lambda d: current.per_dir.get(d, 0) + future.per_dir.get(d, 0))

    def fail_dir(self, directory: Path, error: BaseException | None = None) -> None:
        """Kafka's handleLogDirFailure: ``directory`` (a log dir, or a path inside one) is
        offline from now on.  Its logs are dropped (their descriptors closed, nothing else
        touched on that disk), a future copy whose source or target was there is abandoned,
        and every listener is told (dir, partitions whose current log was there).  Idempotent.
        Called in another thread than ``owner_thread``, it is handed to the owner."""
        if (
            self.owner_thread is not None
            and self.call_on_owner is not None
            and threading.get_ident() != self.owner_thread
        ):
            self.call_on_owner(self.fail_dir, directory, error)
            return
        d = self._owning_dir(directory)
        if d is None or d in self.offline_dirs:
            return
        self.offline_dirs.add(d)
        log.error(
            "log dir %s is offline (%s); %d log dir(s) left online",
            d,
            error or "I/O error",
            len(self.online_dirs),
        )
        lost = [k for k, lg in self.logs.items() if self.dir_of(lg) == d]
        self.offline_partitions.update(lost)
        for k in lost:
            self._drop(self.logs.pop(k))
            fut = self.future_logs.pop(k, None)
            if fut is not None:
                self._drop(fut)
        for k, fut in list(self.future_logs.items()):
            if self.dir_of(fut) == d:
                del self.future_logs[k]
                src = self.logs.get(k)
                if src is not None:
                    src.future_copy = None
                self._drop(fut)
        for listener in list(self.dir_failure_listeners):
            listener(d, lost)

    def _owning_dir(self, path: Path) -> Path | None:
        p = Path(os.path.abspath(path))
        for d in self.log_dirs:
            if p == d or d in p.parents:
                return d
        return None

    @staticmethod
    def _drop(plog: PartitionLog) -> None:
        plog.future_copy = None
        plog.closed = True
        for seg in plog.segments:
            try:
                seg.release()
            except OSError:
                pass

    # -- start ------------------------------------------------------------------------------
    def load_all(self) -> None:
        """Open and recover every ``<topic>-<partition>`` directory of every log dir (and the
        ``-future`` copies); ignore anything else.  A dir that cannot be read or written is
        offline (OfflineLogDirError if all are); a partition in two dirs: DuplicateLogError."""
        cleans = []
        for d in self.log_dirs:
            try:
                cleans.append(self._load_dir(d))
            except DuplicateLogError:
                raise
            except OSError as e:
                self.offline_dirs.add(d)
                self.start_errors[d] = _why_unusable(d, e)
                log.error("log dir %s (log.dirs) is offline at start: %s", d, e)
        self.had_clean_shutdown = all(cleans)
        if self.online_dirs:
            self.checkpoint()  # (a dir whose write fails goes offline here)
        if not self.online_dirs:  # Kafka: "none of the specified log dirs ... can be created"
            raise OfflineLogDirError(
                "log.dirs: no log dir can be created and written: "
                + "; ".join(
                    f"{d}: {self.start_errors.get(d, 'a write failed')}" for d in self.log_dirs
                )
            )

    def _load_dir(self, d: Path) -> bool:
        d.mkdir(parents=True, exist_ok=True)
        if not os.access(d, os.R_OK | os.W_OK | os.X_OK):  # (root too: a read-only mount)
            raise PermissionError(errno.EACCES, "not readable and writable by this user", str(d))
        marker = d / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        points, starts, hws = read_dir_checkpoints(d)
        for entry in sorted(os.listdir(d)):
            path = d / entry
            if not path.is_dir():
                continue
            if entry.endswith(DELETE_DIR_SUFFIX):
                shutil.rmtree(path, ignore_errors=True)
                continue
            future = parse_future_dir(entry)
            parsed = future or parse_partition_dir(entry)
            if parsed is None:
                continue
            table = self.future_logs if future else self.logs
            if parsed in table:
                other = table[parsed].directory
                if future:
                    raise DuplicateLogError(f"Duplicate log directories found: {path}, {other}")
                raise DuplicateLogError(
                    f"Duplicate log directories for {parsed[0]}-{parsed[1]} are found in both"
                    f" {path} and {other}. It is likely because log directory failure happened"
                    " while broker was replacing current replica with future replica. Recover"
                    " broker from this failure by manually deleting one of the two directories"
                    " for this partition. It is recommended to delete the partition in the log"
                    " directory that is known to have failed recently."
                )
            plog = PartitionLog.open(
                path,
                self.default_config,
                self.clock,
                recovery_point=points.get(parsed, 0),
                clean_shutdown=clean,
                log_start_offset=starts.get(parsed, 0),
                descriptors=self.descriptors,
            )
            plog.high_watermark = max(
                min(hws.get(parsed, 0), plog.log_end_offset), plog.log_start_offset
            )
            self._attach(plog)
            table[parsed] = plog
        for key, fut in self.future_logs.items():
            src = self.logs.get(key)
            if src is not None:
                src.future_copy = fut
        marker.unlink(missing_ok=True)
        fsync_dir(d)
        return clean

    def place(self, keys: Iterable[Key]) -> dict[Key, Path]:
        """Where each of these new logs goes (:meth:`next_log_dir`, counting the earlier keys
        as placed).  On the owner, before :meth:`open_new` runs elsewhere."""
        placed: dict[Key, Path] = {}
        extra: dict[Path, int] = {}
        current, future = self.logs, self.future_logs
        assert isinstance(current, LogTable) and isinstance(future, LogTable)
        online = self.online_dirs
        if not online:
            raise OfflineLogDirError("every log dir is offline")
        for key in keys:
            preferred = self.preferred_dirs.get(key)
            if preferred in online:
                d = preferred
            else:
                d = min(
                    online,
                    key=lambda d: (
                        current.per_dir.get(d, 0) + future.per_dir.get(d, 0) + extra.get(d, 0)
                    ),
                )
            extra[d] = extra.get(d, 0) + 1
            placed[key] = d
        return placed
