"""What moving a request's bytes between processes costs, for docs/multicore.md's options.

    python -m bench.multicore_costs [--mib 1024]

Three figures, in CPU seconds (user + system of both processes, from getrusage) so that the
machine's load distorts them less than wall time:

1. a bulk hop: bytes written by one process into a Unix socket and read by another, in
   1 MiB and 16 KiB chunks (a produce batch handed from a connection-owning process to the
   partition-owning one, option (b); the reverse for a fetch served by copying);
2. serving a file to a TCP loopback reader: os.sendfile against read() + send() (what a fetch
   costs today, against what it costs once its bytes pass through user space);
3. a small request and answer between two processes over a Unix socket (the per-request
   routing cost of option (b) when the bytes themselves do not move: an owner told to
   append, or asked for a fetch's file positions), in microseconds of CPU per round trip.
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import sys
import tempfile
import time

MIB = 1024 * 1024
GIB = 1024 * MIB


def _cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def _drain(sock: socket.socket, total: int, chunk: int) -> None:
    buf = bytearray(max(chunk, 256 * 1024))
    view = memoryview(buf)
    got = 0
    while got < total:
        n = sock.recv_into(view)
        if not n:
            break
        got += n


def bulk_hop(total: int, chunk: int) -> float:
    """CPU s per GiB to move ``total`` bytes from this process to a child over a Unix socket."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    c0, k0 = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
    pid = os.fork()
    if pid == 0:
        a.close()
        _drain(b, total, chunk)
        os._exit(0)
    b.close()
    data = memoryview(os.urandom(chunk))
    sent = 0
    while sent < total:
        a.sendall(data)
        sent += chunk
    a.close()
    os.waitpid(pid, 0)
    cpu = _cpu(resource.RUSAGE_SELF) - c0 + _cpu(resource.RUSAGE_CHILDREN) - k0
    return cpu / (total / GIB)


def file_to_tcp(path: str, size: int, rounds: int, use_sendfile: bool) -> float:
    """CPU s per GiB of the serving process (the reader's not counted) to send the file
    ``rounds`` times to a TCP loopback reader."""
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    total = size * rounds
    pid = os.fork()
    if pid == 0:
        srv.close()
        with socket.create_connection(("127.0.0.1", port)) as c:
            _drain(c, total, MIB)
        os._exit(0)
    conn, _ = srv.accept()
    srv.close()
    fd = os.open(path, os.O_RDONLY)
    buf = bytearray(MIB)
    c0 = _cpu(resource.RUSAGE_SELF)
    for _ in range(rounds):
        if use_sendfile:
            off = 0
            while off < size:
                off += os.sendfile(conn.fileno(), fd, off, size - off)
        else:
            os.lseek(fd, 0, os.SEEK_SET)
            while True:
                n = os.readv(fd, [buf])
                if not n:
                    break
                conn.sendall(memoryview(buf)[:n])
    cpu = _cpu(resource.RUSAGE_SELF) - c0
    conn.close()
    os.close(fd)
    os.waitpid(pid, 0)
    return cpu / (total / GIB)


def round_trips(n: int, size: int = 64) -> float:
    """CPU microseconds (both processes) per request + answer of ``size`` bytes."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    c0, k0 = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
    pid = os.fork()
    if pid == 0:
        a.close()
        for _ in range(n):
            msg = b.recv(size)
            b.sendall(msg)
        os._exit(0)
    b.close()
    msg = b"x" * size
    for _ in range(n):
        a.sendall(msg)
        a.recv(size)
    os.waitpid(pid, 0)
    cpu = _cpu(resource.RUSAGE_SELF) - c0 + _cpu(resource.RUSAGE_CHILDREN) - k0
    return cpu / n * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=1024, help="bytes moved per figure (MiB)")
    args = ap.parse_args(argv)
    total = args.mib * MIB
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    t0 = time.monotonic()
    for chunk in (MIB, 16 * 1024):
        print(
            f"bulk hop over a Unix socket, {chunk // 1024} KiB chunks: "
            f"{bulk_hop(total, chunk):.3f} CPU s/GiB"
        )
    size = 128 * MIB
    with tempfile.NamedTemporaryFile(dir=os.environ.get("TMPDIR")) as f:
        block = os.urandom(MIB)
        for _ in range(size // MIB):
            f.write(block)
        f.flush()
        rounds = max(1, total // size)
        file_to_tcp(f.name, size, 1, True)  # page cache warm
        print(
            f"file -> TCP loopback, sendfile: "
            f"{file_to_tcp(f.name, size, rounds, True):.3f} CPU s/GiB (server side)"
        )
        print(
            f"file -> TCP loopback, read + send: "
            f"{file_to_tcp(f.name, size, rounds, False):.3f} CPU s/GiB (server side)"
        )
    print(
        f"request + answer of 64 bytes between two processes: "
        f"{round_trips(100_000):.1f} CPU us each"
    )
    print(f"load average after: {os.getloadavg()[0]:.1f}; {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
