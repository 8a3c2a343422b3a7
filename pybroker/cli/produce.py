"""``pybroker produce TOPIC``: one record per line of stdin.

Lines are read as they arrive and sent whenever stdin has nothing more ready (so an interactive
line goes out at once) or 512 KiB / 10,000 records are waiting.  Each partition's records go in
v2 record batches of at most ``--batch-size`` bytes (``-X batch.size``; Kafka's producer default,
16384), counted before compression; a record larger than that goes alone in its batch, as
Kafka's producer sends it.  A Produce request carries one batch per partition (Kafka's rule
from v3), one request per leader at a time.  Records with a key (``-k SEP``: the text before the
first SEP is the key; a line without SEP has none) go to Kafka's default partition for the key
(murmur2, as the Java client and librdkafka's ``murmur2_random``); records without one go to
one partition per batch, in turn (a sticky partitioner).  ``--partition`` pins every record.
NOT_LEADER_OR_FOLLOWER / LEADER_NOT_AVAILABLE refresh the metadata and retry (nothing was
written); any other error stops with that error.  No idempotence, no transactions.
"""

from __future__ import annotations

import argparse
import os
import select
import sys
import time
from collections import defaultdict
from collections.abc import Iterator

from pybroker.cli.client import Client, KafkaCliError, UsageError
from pybroker.cli.output import emit, progress, progress_done, table
from pybroker.cli.security import positive_int
from pybroker.cli.topics import key_value
from pybroker.errors import ErrorCode
from pybroker.wire.records import build_batch

PRODUCE = 0
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
ACKS = {"all": -1, "-1": -1, "0": 0, "1": 1}
MAX_BATCH_BYTES = 512 * 1024
MAX_BATCH_RECORDS = 10_000
RETRIABLE = {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE}
ATTEMPTS = 5
DEFAULT_BATCH_SIZE = 16384  # Kafka's batch.size
BATCH_OVERHEAD = 61  # a v2 batch's header (Kafka's RECORD_BATCH_OVERHEAD)


def add_parser(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("produce", parents=[common], help="produce lines of stdin as records")
    p.add_argument("topic")
    p.add_argument(
        "-k", "--key-separator", metavar="SEP", help="split each line into key SEP value"
    )
    p.add_argument(
        "-H", "--header", type=key_value, action="append", default=[], metavar="KEY=VALUE"
    )
    p.add_argument("--acks", choices=list(ACKS), default="all")
    p.add_argument("--compression", choices=list(CODECS), default="none")
    p.add_argument("--partition", type=int, metavar="N", help="every record to this partition")
    p.add_argument(
        "--batch-size",
        type=int,
        metavar="BYTES",
        help=f"largest record batch before compression (-X batch.size; {DEFAULT_BATCH_SIZE})",
    )


def murmur2(data: bytes) -> int:
    """Kafka's Utils.murmur2 (seed 0x9747b28c), as an unsigned 32-bit value."""
    m, length = 0x5BD1E995, len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail, extra = length & ~3, length % 4
    if extra == 3:
        h ^= data[tail + 2] << 16
    if extra >= 2:
        h ^= data[tail + 1] << 8
    if extra >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def key_partition(key: bytes, partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def _varint_size(n: int) -> int:
    """Bytes of ``n`` as a zigzag varint (the record format's varint)."""
    z = (n << 1) ^ (n >> 63)
    return max(1, (z.bit_length() + 6) // 7)


def _bytes_size(b: bytes | None) -> int:
    return _varint_size(-1) if b is None else _varint_size(len(b)) + len(b)


def record_size(offset_delta: int, key: bytes | None, value: bytes | None, headers) -> int:
    """Bytes of one v2 record in a batch whose records share its first timestamp (Kafka's
    DefaultRecord.sizeInBytes)."""
    body = 1 + _varint_size(0) + _varint_size(offset_delta) + _bytes_size(key)
    body += _bytes_size(value) + _varint_size(len(headers))
    for k, v in headers:
        body += _bytes_size(k.encode()) + _bytes_size(v)
    return _varint_size(body) + body


def split_batches(records: list[tuple], batch_size: int) -> list[list[tuple]]:
    """``records`` cut into runs whose uncompressed v2 batch is at most ``batch_size`` bytes
    (a record too big for any batch goes alone)."""
    out: list[list[tuple]] = []
    current: list[tuple] = []
    size = BATCH_OVERHEAD
    for rec in records:
        grown = size + record_size(len(current), rec[0], rec[1], rec[2])
        if current and grown > batch_size:
            out.append(current)
            current, size = [], BATCH_OVERHEAD
            grown = size + record_size(0, rec[0], rec[1], rec[2])
        current.append(rec)
        size = grown
    if current:
        out.append(current)
    return out


def read_lines(fd: int) -> Iterator[list[bytes]]:
    """Groups of complete lines (without the newline) from ``fd``: a group ends when no more
    input is ready or it is large; the last line may lack its newline."""
    pending = b""
    group: list[bytes] = []
    size = 0
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            if pending:
                group.append(pending)
            if group:
                yield group
            return
        *lines, pending = (pending + chunk).split(b"\n")
        group.extend(lines)
        size += sum(len(x) for x in lines)
        ready = select.select([fd], [], [], 0)[0]
        if group and (not ready or size >= MAX_BATCH_BYTES or len(group) >= MAX_BATCH_RECORDS):
            yield group
            group, size = [], 0


class Producer:
    def __init__(self, client: Client, args: argparse.Namespace) -> None:
        self.client = client
        self.topic = args.topic
        self.sep = args.key_separator.encode() if args.key_separator else None
        self.headers = [(k, v.encode()) for k, v in args.header]
        self.acks = ACKS[args.acks]
        self.codec = CODECS[args.compression]
        self.fixed = args.partition
        batch_size = args.batch_size
        if batch_size is None:
            configured = getattr(args, "client_config", {}).get("batch.size")
            batch_size = (
                positive_int("batch.size", configured) if configured else DEFAULT_BATCH_SIZE
            )
        if batch_size <= 0:
            raise UsageError(f"--batch-size must be a positive number of bytes: {batch_size}")
        self.batch_size = batch_size
        self.sticky = 0
        self.meta = client.topic(self.topic)
        self.count = len(self.meta["partitions"])
        if self.fixed is not None and not 0 <= self.fixed < self.count:
            raise KafkaCliError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"topic '{self.topic}' has no partition {self.fixed}",
            )
        self.stats: dict[int, dict] = {}
        self.total = 0

    def send_lines(self, lines: list[bytes]) -> None:
        by_partition: dict[int, list[tuple]] = defaultdict(list)
        now = int(time.time() * 1000)
        for line in lines:
            key, value = None, line
            if self.sep is not None and self.sep in line:
                key, value = line.split(self.sep, 1)
            if self.fixed is not None:
                p = self.fixed
            elif key is not None:
                p = key_partition(key, self.count)
            else:
                p = self.sticky
            by_partition[p].append((key, value, self.headers, now))
        self.sticky = (self.sticky + 1) % self.count
        batches = {p: split_batches(recs, self.batch_size) for p, recs in by_partition.items()}
        while batches:  # one batch per partition per request, in order
            self._send_round({p: bs.pop(0) for p, bs in batches.items()})
            batches = {p: bs for p, bs in batches.items() if bs}
        self.total += len(lines)
        progress(f"produced {self.total} records to {self.topic}")

    def _send_round(self, by_partition: dict[int, list[tuple]]) -> None:
        """One batch per partition, sent again to the new leaders while leadership moves."""
        for _ in range(ATTEMPTS):
            failed = self._send(by_partition)
            if not failed:
                return
            by_partition = {p: by_partition[p] for p in failed}
            time.sleep(0.5)
            self.meta = self.client.topic(self.topic)
        raise KafkaCliError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "no leader took the records")

    def _send(self, by_partition: dict[int, list[tuple]]) -> list[int]:
        """Send; the partitions whose leader moved (to retry)."""
        leaders = self.client.leaders(self.meta)
        by_leader: dict[int, list[int]] = defaultdict(list)
        for p in by_partition:
            by_leader[leaders[p]].append(p)
        retry = []
        for leader, parts in by_leader.items():
            body = {
                "transactional_id": None,
                "acks": self.acks,
                "timeout_ms": 30_000,
                "topic_data": [
                    {
                        "name": self.topic,
                        "partition_data": [
                            {
                                "index": p,
                                "records": build_batch(by_partition[p], compression=self.codec),
                            }
                            for p in parts
                        ],
                    }
                ],
            }
            _, r = self.client.request_to(leader, PRODUCE, body, expect_response=self.acks != 0)
            if self.acks == 0:
                for p in parts:
                    self._count(p, len(by_partition[p]), None)
                continue
            for t in r["responses"]:
                for pr in t["partition_responses"]:
                    p, code = pr["index"], pr["error_code"]
                    if code in RETRIABLE:
                        retry.append(p)
                        continue
                    if code:
                        errors = pr.get("record_errors") or []
                        detail = pr.get("error_message") or (
                            errors[0]["batch_index_error_message"] if errors else None
                        )
                        raise KafkaCliError(code, detail or f"partition {self.topic}-{p}")
                    self._count(p, len(by_partition[p]), pr["base_offset"])
        return retry

    def _count(self, p: int, n: int, base: int | None) -> None:
        s = self.stats.setdefault(p, {"partition": p, "records": 0, "first_offset": None})
        s["records"] += n
        if base is not None:
            if s["first_offset"] is None:
                s["first_offset"] = base
            s["last_offset"] = base + n - 1
        else:
            s["last_offset"] = None


def run(client: Client, args: argparse.Namespace) -> int:
    if args.key_separator == "":
        raise UsageError("--key-separator must not be empty")
    producer = Producer(client, args)
    for lines in read_lines(sys.stdin.fileno()):
        producer.send_lines(lines)
    progress_done()
    result = {
        "topic": args.topic,
        "records": producer.total,
        "partitions": [producer.stats[p] for p in sorted(producer.stats)],
    }
    emit(
        args.output,
        result,
        lambda x: table(
            ["partition", "records", "first-offset", "last-offset"],
            [
                (s["partition"], s["records"], s["first_offset"], s["last_offset"])
                for s in x["partitions"]
            ],
        ),
    )
    return 0
