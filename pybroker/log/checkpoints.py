"""The files a log dir keeps beside its partitions' directories, in Kafka's formats.

Checkpoint files (Kafka's CheckpointFile), UTF-8 text, replaced atomically (temporary file,
fsync, rename, fsync of the directory)::

    0                       version
    <n>                     number of entries
    <entry>                 n lines: ``<topic> <partition> <offset>`` in the offset
                            checkpoints (OffsetCheckpointFile), ``<epoch> <start offset>`` in
                            a partition's leader-epoch-checkpoint

A log dir holds three offset checkpoints (recovery points, log start offsets, high
watermarks) and, only after a clean shutdown, the ``.kafka_cleanshutdown`` marker.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
# The high watermarks (Kafka's replication-offset-checkpoint), so that a restarted replica does
# not expose records the ISR may not hold: it starts from the last checkpointed value and the
# leader (or, for a follower, the leader's fetch answers) moves it on.
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"

Key = tuple[str, int]


def fsync_dir(directory: Path) -> None:
    """fsync a directory (its entries: a rename, a new file); errors are ignored."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_checkpoint_file(path: Path, version: int, lines: list[str], *, sync: bool = True) -> None:
    """Replace ``path`` atomically with a checkpoint of ``lines`` (Kafka's CheckpointFile
    .write); with ``sync`` the file is fsynced before the rename and the directory after it."""
    data = "\n".join([str(version), str(len(lines)), *lines]) + "\n"
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data.encode())
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync:
        fsync_dir(path.parent)


def write_checkpoint(path: Path, entries: Iterable[tuple[str, int, int]]) -> None:
    """An offset checkpoint of (topic, partition, offset) entries."""
    write_checkpoint_file(path, 0, [f"{t} {p} {o}" for t, p, o in entries])


def read_checkpoint(path: Path) -> dict[Key, int]:
    """Parse an offset checkpoint; a missing or malformed file reads as empty (full recovery)."""
    try:
        lines = path.read_text().splitlines()
    except (FileNotFoundError, UnicodeDecodeError):
        return {}
    try:
        if lines[0].strip() != "0":
            return {}
        n = int(lines[1])
        out = {}
        for line in lines[2 : 2 + n]:
            topic, part, off = line.split()
            out[(topic, int(part))] = int(off)
        if len(out) != n:
            return {}
        return out
    except (IndexError, ValueError):
        return {}


class DirCheckpoints(NamedTuple):
    """A log dir's three offset checkpoints, by partition."""

    recovery_points: dict[Key, int]
    log_start_offsets: dict[Key, int]
    high_watermarks: dict[Key, int]


def read_dir_checkpoints(directory: Path) -> DirCheckpoints:
    return DirCheckpoints(
        read_checkpoint(directory / RECOVERY_POINT_CHECKPOINT),
        read_checkpoint(directory / LOG_START_OFFSET_CHECKPOINT),
        read_checkpoint(directory / REPLICATION_OFFSET_CHECKPOINT),
    )


def write_dir_checkpoints(directory: Path, entries: list[tuple[Key, int, int, int]]) -> None:
    """The three checkpoints from (partition, recovery point, log start offset, high
    watermark) entries."""
    for name, i in (
        (RECOVERY_POINT_CHECKPOINT, 1),
        (LOG_START_OFFSET_CHECKPOINT, 2),
        (REPLICATION_OFFSET_CHECKPOINT, 3),
    ):
        write_checkpoint(directory / name, [(*e[0], e[i]) for e in entries])


def write_clean_shutdown_marker(directory: Path) -> None:
    """The marker that says every log of the dir was closed cleanly (no recovery at start)."""
    fd = os.open(directory / CLEAN_SHUTDOWN_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(directory)
