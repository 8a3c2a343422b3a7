"""A model of a power loss for tests: a file keeps only what an fsync of it made durable.

    power = PowerLoss(monkeypatch)   # records every os.fsync from now on
    ...                              # the code under test writes, fsyncs, renames
    power.cut(tmp_path)              # every file under tmp_path: its content at its last
                                     # fsync (followed by inode: a rename keeps it), or empty

The page cache is what a ``kill -9`` keeps; a power loss keeps what was fsynced, and nothing
guarantees more (an unsynced write or rename may come back empty or torn).  The model takes
the worst of that for file contents: whatever the code did not fsync is gone.  Directory
entries are kept (a file that exists stays, with the durable part of its content).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest


class PowerLoss:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.durable: dict[tuple[int, int], bytes] = {}  # (dev, inode) -> content at fsync
        self.fsynced: list[str] = []  # the paths fsynced, in order (directories too)
        real_fsync = os.fsync

        def fsync(fd: int) -> None:
            real_fsync(fd)
            st = os.fstat(fd)
            path = os.readlink(f"/proc/self/fd/{fd}")
            self.fsynced.append(path)
            if stat.S_ISREG(st.st_mode):
                with open(f"/proc/self/fd/{fd}", "rb") as f:  # (fd may be write-only)
                    self.durable[(st.st_dev, st.st_ino)] = f.read()

        monkeypatch.setattr(os, "fsync", fsync)

    def cut(self, root: Path) -> list[Path]:
        """The power goes: every regular file under ``root`` keeps its last fsynced content.
        Returns the files whose content changed."""
        changed = []
        for d, _, files in os.walk(root):
            for name in files:
                path = Path(d) / name
                st = path.stat()
                kept = self.durable.get((st.st_dev, st.st_ino), b"")
                if path.read_bytes() != kept:
                    path.write_bytes(kept)
                    changed.append(path)
        return changed
