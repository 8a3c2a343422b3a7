"""The log cleaner's worker process: one per cleaner thread, doing a clean's work on files
(pybroker/log/cleaner_job.py) on a core of its own, so that none of it holds the event
loop's GIL.

The one interface between the broker and the process (docs/internals.md, "log/cleaner.py"):

* Started with ``python -m pybroker.log.cleaner_process FD PARENT_PID`` (a fresh
  interpreter: nothing of the broker's threads, loop or modules is copied, as a fork would;
  the multiprocessing 'spawn' start would import the broker's ``__main__`` again and start a
  resource tracker), given one end of a socket pair.  It ignores SIGINT (a terminal's
  Ctrl-C is the broker's to handle) and dies with the thread that started it (Linux
  PR_SET_PDEATHSIG): an orphan must not write into a log dir that a restarted broker owns.
* Messages are pickled (multiprocessing.connection framing): the thread sends a
  :class:`~pybroker.log.cleaner_job.CleanJob` (paths, sizes, offsets, configs, aborted
  transactions, producers' last batches: plain values) and gets ``("ok", JobResult)``,
  ``("aborted", why)`` (a segment went away: try later) or ``("error", traceback)``; ``None``
  asks it to exit.  The process reads the segments and writes and fsyncs the ``.cleaned``
  files itself; it never renames a file of the log nor touches a PartitionLog.
* The thread (:meth:`CleanerProcess.run`) waits on the socket, checking every 0.1 s that the
  cleaner is not stopping (then it kills the process) and that the process lives.  A process
  that died (kill -9, SIGBUS from a segment truncated under its map, out of memory) is
  CleanAborted: the manager deletes the ``.cleaned`` files it left and the clean is tried
  again after the backoff, in a new process.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection

from pybroker.log.cleaner_job import CleanAborted, CleanJob, JobResult, OffsetMap, run_clean_job

PROCESS_NAME = b"pybroker-cleaner"  # its name in ps/top (Linux: at most 15 bytes shown)
_PR_SET_NAME = 15
_PR_SET_PDEATHSIG = 1


def _prctl(option: int, arg: object) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def serve(conn: Connection) -> None:
    """Run the jobs received on ``conn``, one at a time, with one offset map."""
    offset_map: OffsetMap | None = None
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        try:
            if offset_map is None or offset_map.capacity != job.map_capacity:
                offset_map = OffsetMap(job.map_capacity)
            result = run_clean_job(job, offset_map)
            offset_map.clear()
            conn.send(("ok", result))
        except CleanAborted as e:
            conn.send(("aborted", str(e)))
        except Exception as e:  # noqa: BLE001 - handed to the manager, which logs it
            conn.send(("error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


def main(argv: list[str]) -> None:
    fd, parent_pid = int(argv[1]), int(argv[2])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the broker died before the prctl
        os._exit(1)
    _prctl(_PR_SET_NAME, PROCESS_NAME)
    serve(Connection(fd))


class CleanerProcess:
    """One cleaner thread's worker process, started once the broker has a compacted log (or
    at the first :meth:`run`) and kept for the next cleans."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._proc: subprocess.Popen | None = None
        self._conn: Connection | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def started(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        """Start the process now (else at the first :meth:`run`)."""
        self._ensure()

    def _ensure(self) -> Connection:
        if self._proc is None or self._proc.poll() is not None:
            self.close(kill=True)
            ours, theirs = socket.socketpair()
            with ours, theirs:
                fd = theirs.fileno()
                self._proc = subprocess.Popen(
                    [sys.executable, "-m", __name__, str(fd), str(os.getpid())],
                    pass_fds=(fd,),
                    stdin=subprocess.DEVNULL,
                )
                self._conn = Connection(ours.detach())
        assert self._conn is not None
        return self._conn

    def run(self, job: CleanJob, stopping: Callable[[], bool]) -> JobResult:
        """Hand ``job`` to the process and wait for its result (CleanAborted when the
        cleaner stops meanwhile or the process dies; RuntimeError for a failure in it)."""
        conn = self._ensure()
        try:
            conn.send(job)
            while not conn.poll(0.1):
                if stopping():
                    self.close(kill=True)
                    raise CleanAborted("the cleaner is stopping")
                if self._proc is not None and self._proc.poll() is not None:
                    break
            kind, value = conn.recv()
        except (EOFError, OSError) as e:
            code = self._exit_code()
            self.close(kill=True)
            raise CleanAborted(f"cleaner process {self.name} lost (exit code {code})") from e
        if kind == "ok":
            return value
        if kind == "aborted":
            raise CleanAborted(value)
        raise RuntimeError(f"in the cleaner process: {value}")

    def _exit_code(self) -> int | None:
        try:
            return None if self._proc is None else self._proc.wait(1)
        except subprocess.TimeoutExpired:
            return None

    def close(self, kill: bool = False) -> None:
        """Let the process end (``kill``: SIGKILL it) and wait for it."""
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if conn is not None:
            if not kill:
                try:
                    conn.send(None)
                except OSError:
                    pass
            conn.close()
        if proc is not None:
            if kill:
                proc.kill()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


if __name__ == "__main__":
    main(sys.argv)
