"""A small filesystem a test can fill: a tmpfs of a few MiB mounted by the test (root only).

    disk = SmallDisk(tmp_path / "d1", size_mb=16)
    disk.mount()              # mount -t tmpfs -o size=16m pbfdisk<pid> <path>
    disk.fill()               # a filler file grows until the kernel answers ENOSPC
    disk.free()               # the filler is removed: space again
    disk.unmount()            # always (a finalizer); also swept by the next run if left

The mount's source names this process (``pbfdisk<pid>``), so ``sweep_stale_mounts()`` (called
before every mount) unmounts what a run that died left behind, and never a live run's.  A
tmpfs answers ENOSPC exactly as a full disk does (``write`` short, then ``OSError(ENOSPC)``);
a write into the unfilled rest of a page a file already has still succeeds, as on a real disk.
"""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

from pybroker.testing.procutil import pid_alive

SOURCE_PREFIX = "pbfdisk"
FILLER = ".filler"
CHUNK = 1 << 20


def can_mount() -> str | None:
    """None when this process may mount a tmpfs, else why not."""
    if os.geteuid() != 0:
        return "mounting a small filesystem needs root"
    return None


def _mounts() -> list[tuple[str, str]]:
    """(source, mount point) of every mount, from /proc/self/mounts."""
    out = []
    with open("/proc/self/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2:
                out.append((parts[0], parts[1].replace("\\040", " ")))
    return out


def sweep_stale_mounts() -> list[str]:
    """Unmount the small disks of runs that are gone (their pid in the mount source)."""
    swept = []
    for source, target in _mounts():
        if not source.startswith(SOURCE_PREFIX):
            continue
        try:
            pid = int(source[len(SOURCE_PREFIX) :])
        except ValueError:
            continue
        if pid != os.getpid() and not pid_alive(pid):
            subprocess.run(["umount", "-l", target], check=False, capture_output=True)
            swept.append(target)
    return swept


class SmallDisk:
    def __init__(self, path: Path, size_mb: int = 16) -> None:
        self.path = Path(path)
        self.size_mb = size_mb
        self.mounted = False

    @property
    def source(self) -> str:
        return f"{SOURCE_PREFIX}{os.getpid()}"

    def mount(self) -> SmallDisk:
        sweep_stale_mounts()
        self.path.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                "mount",
                "-t",
                "tmpfs",
                "-o",
                f"size={self.size_mb}m,mode=0755",
                self.source,
                str(self.path),
            ],
            check=True,
            capture_output=True,
        )
        self.mounted = True
        return self

    def usage(self) -> tuple[int, int]:
        """(bytes free, bytes total)."""
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize

    def fill(self) -> int:
        """Grow the filler file until the filesystem answers ENOSPC (1 MiB writes, then 4 KiB
        ones for the rest); returns the bytes the filler holds.  Bounded: at most the
        filesystem's size is written."""
        _, total = self.usage()
        written = 0
        fd = os.open(self.path / FILLER, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            for chunk in (CHUNK, 4096):
                data = bytes(chunk)
                while written <= total:
                    try:
                        n = os.write(fd, data)
                    except OSError as e:
                        if e.errno != errno.ENOSPC:
                            raise
                        break
                    written += n
                    if n < chunk:
                        break
        finally:
            os.close(fd)
        return os.path.getsize(self.path / FILLER)

    def is_full(self) -> bool:
        return self.usage()[0] == 0

    def free(self) -> None:
        try:
            os.unlink(self.path / FILLER)
        except FileNotFoundError:
            pass

    def unmount(self) -> None:
        if not self.mounted:
            return
        r = subprocess.run(["umount", str(self.path)], check=False, capture_output=True)
        if r.returncode != 0:  # still in use (a process that has not exited yet): detach
            subprocess.run(["umount", "-l", str(self.path)], check=False, capture_output=True)
        self.mounted = False
