"""The replicas' files on disk, read without the broker: batch headers of each segment
(Kafka's 61-byte record batch header), torn or corrupt segments, the high-watermark
checkpoint, and ``compare_replicas``, which holds every replica to the leader's log up to the
high watermark.  pybroker.testing.cluster_harness names them too.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pybroker.testing.cluster_harness import Cluster
    from pybroker.testing.process import BrokerProcess

# ------------------------------------------------------------------------------------------
# on-disk replicas: batch headers (Kafka's format, 61-byte record batch header)
# ------------------------------------------------------------------------------------------

BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")  # 61 bytes
assert BATCH_HEADER.size == 61


@dataclass(frozen=True)
class BatchHeader:
    base_offset: int
    last_offset: int
    leader_epoch: int
    crc: int
    producer_id: int
    base_sequence: int


def read_batches(partition_dir: Path) -> list[BatchHeader]:
    """Batch headers of every .log segment of a partition dir, in offset order (a torn tail is
    ignored)."""
    out: list[BatchHeader] = []
    for seg in sorted(partition_dir.glob("*.log")):
        data = seg.read_bytes()
        pos = 0
        while pos + BATCH_HEADER.size <= len(data):
            (
                base,
                length,
                epoch,
                _magic,
                crc,
                _attrs,
                last_delta,
                _t0,
                _t1,
                pid,
                _pepoch,
                bseq,
                _count,
            ) = BATCH_HEADER.unpack_from(data, pos)
            if length <= 0 or pos + 12 + length > len(data):
                break
            out.append(BatchHeader(base, base + last_delta, epoch, crc, pid, bseq))
            pos += 12 + length
    return out


def segment_problems(partition_dir: Path) -> list[str]:
    """Every .log segment of a partition dir must be whole batches back to back, each with
    magic 2 and a CRC-32C (over attributes .. end) that matches: after clean stops, a torn or
    corrupt batch anywhere is a problem (a write that failed, ENOSPC, must leave none)."""
    import crc32c

    problems = []
    for seg in sorted(partition_dir.glob("*.log")):
        data = seg.read_bytes()
        pos = 0
        while pos + BATCH_HEADER.size <= len(data):
            length = struct.unpack_from(">i", data, pos + 8)[0]
            magic = data[pos + 16]
            end = pos + 12 + length
            if length < BATCH_HEADER.size - 12 or magic != 2 or end > len(data):
                break
            (crc,) = struct.unpack_from(">I", data, pos + 17)
            if crc32c.crc32c(data[pos + 21 : end]) != crc:
                problems.append(f"{seg}: batch at byte {pos}: CRC mismatch")
            pos = end
        if pos != len(data):
            problems.append(f"{seg}: {len(data) - pos} bytes after the last whole batch")
    return problems


def read_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    try:
        lines = path.read_text().split("\n")
    except OSError:
        return {}
    out = {}
    for line in lines[2:]:
        parts = line.split()
        if len(parts) == 3:
            out[(parts[0], int(parts[1]))] = int(parts[2])
    return out


def log_dirs_of(b: BrokerProcess) -> list[Path]:
    """A broker process's log dirs (its log.dirs setting, in order)."""
    return [Path(d) for d in b.settings()["log.dirs"].split(",")]


def replica_dirs(b: BrokerProcess, topic: str, partition: int) -> list[Path]:
    """The log dirs of broker process ``b`` holding the partition's current log (a
    ``-future`` or ``-delete`` copy is named otherwise and is not one).  What a broker's disk
    holds is looked at only once it is there: see Cluster.wait_replicas_on_disk."""
    return [d for d in log_dirs_of(b) if (d / f"{topic}-{partition}").is_dir()]


@dataclass
class ReplicaCheck:
    partition: int
    high_watermarks: dict[int, int]
    compared_below: int
    batches_compared: int
    problems: list[str]


def compare_replicas(cluster: Cluster, topic: str, partition: int) -> ReplicaCheck:
    """Call with every broker stopped.  Reads each replica's replication-offset-checkpoint
    (high watermark) and segment files and compares the batch headers (base offset, last
    offset, leader epoch, CRC, producer id, base sequence) below the smallest high watermark;
    every segment must hold whole batches with valid CRCs only (segment_problems)."""
    hws: dict[int, int] = {}
    batches: dict[int, list[BatchHeader]] = {}
    torn: list[str] = []
    for i, b in cluster.brokers.items():
        found = replica_dirs(b, topic, partition)
        if not found:
            continue
        log_dir = found[0]
        hws[i] = read_checkpoint(log_dir / "replication-offset-checkpoint").get(
            (topic, partition), 0
        )
        batches[i] = read_batches(log_dir / f"{topic}-{partition}")
        torn += [f"broker {i}: {t}" for t in segment_problems(log_dir / f"{topic}-{partition}")]
    problems: list[str] = list(torn)
    if len(batches) < 2:
        problems.append(f"{topic}-{partition}: replicas on disk: {sorted(batches)}")
        return ReplicaCheck(partition, hws, 0, 0, problems)
    limit = min(hws.values())
    below = {i: [h for h in bs if h.base_offset < limit] for i, bs in batches.items()}
    ref_id = max(hws, key=lambda i: hws[i])
    ref = below[ref_id]
    for i, bs in below.items():
        if bs != ref:
            n = next(
                (k for k, (x, y) in enumerate(zip(bs, ref, strict=False)) if x != y),
                min(len(bs), len(ref)),
            )
            problems.append(
                f"{topic}-{partition}: broker {i} differs from broker {ref_id} below HW {limit} "
                f"at batch #{n}: {bs[n] if n < len(bs) else None} vs "
                f"{ref[n] if n < len(ref) else None} ({len(bs)} vs {len(ref)} batches)"
            )
        if bs and bs[-1].last_offset + 1 < limit:
            problems.append(
                f"{topic}-{partition}: broker {i} log ends at {bs[-1].last_offset + 1} "
                f"below HW {limit}"
            )
    return ReplicaCheck(partition, hws, limit, len(ref), problems)
