"""Small process/port helpers shared by the ZooKeeper and broker fixtures (the compat tests
and the pytest plugin, pybroker.testing.pytest_plugin)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess

_HANDED_OUT: set[int] = set()
PORT_BLOCK = 64  # ports are shared out among pytest-xdist workers in blocks of this many


def _worker_slot() -> tuple[int, int]:
    """(index, count) of this pytest-xdist worker ("gw1" of 2 -> (1, 2)); (0, 1) outside xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if not worker.startswith("gw") or count <= 1:
        return 0, 1
    return int(worker[2:]) % count, count


def _ours(port: int) -> bool:
    """Whether ``port`` is in this xdist worker's share: under ``pytest -n N`` worker i hands
    out only ports whose block (port // PORT_BLOCK) is i modulo N, so two workers never hand
    out the same port (a port taken but not yet bound, or a stopped broker's kept for its
    restart, is not free to the other worker either)."""
    index, count = _worker_slot()
    return (port // PORT_BLOCK) % count == index


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on loopback that nothing listens on right now and that this process has not
    handed out before: the kernel may give the same free port to two calls in a row, and a
    cluster's brokers take theirs before any of them binds (a stopped broker keeps its port
    for its restart), so two brokers once shared one and the restart failed.  Under
    pytest-xdist, only a port of this worker's share (_ours)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT and _ours(port):
            _HANDED_OUT.add(port)
            return port


def free_ports(count: int, host: str = "127.0.0.1") -> int:
    """The first of ``count`` consecutive free ports (a multi-core node's processes listen on
    port, port+1, ...), none handed out before."""
    if count <= 1:
        return free_port(host)
    while True:
        first = free_port(host)
        rest = range(first + 1, first + count)
        if any(p in _HANDED_OUT or p > 65535 or not _ours(p) for p in rest):
            continue
        try:
            for p in rest:
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                    s.bind((host, p))
        except OSError:
            continue
        _HANDED_OUT.update(rest)
        return first


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def port_accepts(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def tail(path: os.PathLike | str, max_lines: int = 200) -> str:
    try:
        with open(path, errors="replace") as f:
            lines = f.readlines()
    except OSError as e:
        return f"<cannot read {path}: {e}>"
    cut = len(lines) - max_lines
    head = f"... ({cut} earlier lines in {path})\n" if cut > 0 else ""
    return head + "".join(lines[-max_lines:])


def kill_group(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    """Signal the process group `proc` leads (it was started with start_new_session=True)."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def ctrl_c_as_at_a_terminal() -> None:
    """Give this process (and so every process it starts) Ctrl-C's usual meaning: SIGINT
    raises KeyboardInterrupt.  A test run started in the background by a non-interactive shell
    (``nohup .ci/run &``, a CI runner's ``cmd &``) has SIGINT ignored, Python then leaves it
    ignored, and every child inherits that: a test that stops a CLI with Ctrl-C, as a user at a
    terminal does, would find it deaf to SIGINT.  A handler (unlike SIG_IGN) is reset to the
    default when a child execs, so the children start as a terminal's foreground job does."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
