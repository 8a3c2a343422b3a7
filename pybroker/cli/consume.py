"""``pybroker consume TOPIC``: records to stdout, as values or JSON lines.

Start position of each partition: ``--offset N``, ``--timestamp MS`` (the first record at or
after it; the log end when there is none), ``--from-beginning`` (the log start), otherwise the
log end; with ``-g GROUP`` the group's committed offset wins over the log start/end (as
kafka-console-consumer's auto.offset.reset), but not over --offset/--timestamp.  The group is
used without joining it (manual assignment, as ``assign()`` in a Java consumer): its committed
offsets are read with OffsetFetch and the positions reached are committed with OffsetCommit
(generation -1) every 5 s and at exit, so the group must have no active members.

Fetch v4+ goes to each partition's leader; control batches are skipped.  ``--isolation-level``
is Kafka's consumer setting: ``read_uncommitted`` (default, as kafka-console-consumer) reads up
to the high watermark; ``read_committed`` reads up to the last stable offset and drops the
batches of aborted transactions, as Kafka's consumer does (the Fetch answer's
aborted_transactions: a producer's transactional batches from an aborted transaction's first
offset up to its ABORT marker).  ``-e`` stops once every partition has reached the end it
reported (high watermark, or last stable offset with read_committed); ``-n N`` stops after N
records; otherwise it follows until interrupted (exit 0).  A leader that goes away or
moves is looked up again in the metadata for up to 30 s before the command gives up.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections import defaultdict

from pybroker.cli.client import Client, ClientError, KafkaCliError, UsageError, check
from pybroker.cli.groups import committed_offsets
from pybroker.cli.offsets import EARLIEST, LATEST, list_offsets
from pybroker.cli.output import json_line
from pybroker.errors import ErrorCode
from pybroker.wire.control_records import ABORT, read_end_txn_marker
from pybroker.wire.record_walker import decode_records
from pybroker.wire.records import InvalidRecordError, scan_batches

FETCH = 1
OFFSET_COMMIT = 8
FOLLOW_WAIT_MS = 500
COMMIT_EVERY_S = 5.0
PARTITION_MAX_BYTES = 1 << 20
# (Fetch v13+ names the topic by id: UNKNOWN_TOPIC_ID until every broker knows a new topic,
# INCONSISTENT_TOPIC_ID after it was re-created: both answered by refreshing the metadata)
RETRIABLE = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_TOPIC_ID,
    ErrorCode.INCONSISTENT_TOPIC_ID,
}
RECOVER_S = 30.0
ISOLATION_LEVELS = {"read_uncommitted": 0, "read_committed": 1}
ZERO_UUID = uuid.UUID(int=0)


def add_parser(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("consume", parents=[common], help="print records of a topic")
    p.add_argument("topic")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="start at the log start")
    start.add_argument("--offset", type=int, metavar="N", help="start at offset N")
    start.add_argument("--timestamp", type=int, metavar="MS", help="start at this time (ms)")
    p.add_argument(
        "-p", "--partition", type=int, action="append", metavar="N", help="only this partition"
    )
    p.add_argument("-g", "--group", help="read and commit this group's offsets (no join)")
    p.add_argument("-n", "--max-messages", type=int, metavar="N", help="stop after N records")
    p.add_argument("--format", choices=["value", "json"], default="value")
    p.add_argument(
        "-e", "--exit-at-end", action="store_true", help="stop at the end of every partition"
    )
    p.add_argument(
        "--isolation-level",
        choices=list(ISOLATION_LEVELS),
        help="read_uncommitted (default; -X isolation.level) or read_committed: only "
        "committed transactions, up to the last stable offset",
    )


def _text(b: bytes | None) -> str | None:
    return None if b is None else bytes(b).decode("utf-8", "backslashreplace")


class Consumer:
    def __init__(self, client: Client, args: argparse.Namespace) -> None:
        self.client = client
        self.args = args
        self.topic = args.topic
        level = args.isolation_level or getattr(args, "client_config", {}).get(
            "isolation.level", "read_uncommitted"
        )
        if level not in ISOLATION_LEVELS:
            raise UsageError(f"isolation.level must be read_uncommitted or read_committed: {level}")
        self.isolation = ISOLATION_LEVELS[level]
        self.meta = client.topic(self.topic)
        known = sorted(p["partition_index"] for p in self.meta["partitions"])
        self.partitions = known if not args.partition else sorted(set(args.partition))
        missing = set(self.partitions) - set(known)
        if missing:
            raise KafkaCliError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"topic '{self.topic}' has no partition {min(missing)}",
            )
        self.positions = self._start_positions()
        self.committed = dict(self.positions) if args.group else {}
        self.at_end: set[int] = set()
        self.count = 0
        self.out = sys.stdout.buffer

    def _start_positions(self) -> dict[int, int]:
        a, parts = self.args, self.partitions
        if a.offset is not None:
            if a.offset < 0:
                raise UsageError("--offset must be 0 or more")
            return dict.fromkeys(parts, a.offset)
        iso = self.isolation
        if a.timestamp is not None:
            found = list_offsets(self.client, self.meta, a.timestamp, parts, isolation=iso)
            ends = list_offsets(self.client, self.meta, LATEST, parts, isolation=iso)
            return {p: found[p][0] if found[p][0] >= 0 else ends[p][0] for p in parts}
        reset = list_offsets(
            self.client, self.meta, EARLIEST if a.from_beginning else LATEST, parts, isolation=iso
        )
        out = {p: reset[p][0] for p in parts}
        if a.group:
            for (t, p), offset in committed_offsets(self.client, a.group).items():
                if t == self.topic and p in out:
                    out[p] = offset
        return out

    def done(self) -> bool:
        if self.args.max_messages is not None and self.count >= self.args.max_messages:
            return True
        return self.args.exit_at_end and self.at_end >= set(self.partitions)

    def run(self) -> None:
        last_commit = time.monotonic()
        failing_since: float | None = None
        while not self.done():
            try:
                refresh = self._fetch_round()
                failing_since = None
            except (ClientError, KafkaCliError) as e:
                # a broker went away or a partition lost its leader: find the new leaders,
                # for up to RECOVER_S, as a Kafka consumer does
                retriable = isinstance(e, ClientError) or e.code in RETRIABLE
                now = time.monotonic()
                failing_since = failing_since or now
                if not retriable or now - failing_since > RECOVER_S:
                    raise
                refresh = True
            self.out.flush()
            if refresh:
                time.sleep(0.2)
                try:
                    self.meta = self.client.topic(self.topic)
                except ClientError:
                    if failing_since and time.monotonic() - failing_since > RECOVER_S:
                        raise
            if self.args.group and time.monotonic() - last_commit >= COMMIT_EVERY_S:
                self.commit()
                last_commit = time.monotonic()

    def _fetch_round(self) -> bool:
        """One Fetch to each leader; True when the metadata must be refreshed."""
        leaders = self.client.leaders(self.meta)
        by_leader: dict[int, list[int]] = defaultdict(list)
        for p in self.partitions:
            by_leader[leaders[p]].append(p)
        refresh = False
        for leader, parts in by_leader.items():
            try:
                refresh |= self._fetch(leader, parts)
            except ClientError:
                self.client.forget(leader)
                raise
            if self.done():
                break
        return refresh

    def _fetch(self, leader: int, parts: list[int]) -> bool:
        """One Fetch to one leader; True when leadership moved (refresh the metadata)."""
        wait = 0 if self.args.exit_at_end else FOLLOW_WAIT_MS
        body = {
            "replica_id": -1,
            "max_wait_ms": wait,
            "min_bytes": 1,
            "max_bytes": 50 * PARTITION_MAX_BYTES,
            "isolation_level": self.isolation,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": self.topic,  # up to v12
                    "topic_id": self.meta.get("topic_id") or ZERO_UUID,  # v13+
                    "partitions": [
                        {
                            "partition": p,
                            "fetch_offset": self.positions[p],
                            "log_start_offset": -1,
                            "partition_max_bytes": PARTITION_MAX_BYTES,
                        }
                        for p in parts
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        }
        _, r = self.client.request_to(leader, FETCH, body, timeout_s=30 + wait / 1000)
        check(r.get("error_code", 0), "Fetch")
        moved = False
        for t in r["responses"]:
            for pd in t["partitions"]:
                p, code = pd["partition_index"], pd["error_code"]
                if code in RETRIABLE:
                    moved = True
                    continue
                if code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    raise KafkaCliError(
                        code,
                        f"offset {self.positions[p]} is out of range for {self.topic}-{p}",
                    )
                check(code, f"Fetch {self.topic}-{p}")
                aborted = pd.get("aborted_transactions") if self.isolation else None
                self._records(p, pd["records"] or b"", aborted or [])
                end = pd["last_stable_offset"] if self.isolation else pd["high_watermark"]
                if end < 0:  # (a broker that does not report the last stable offset)
                    end = pd["high_watermark"]
                if self.positions[p] >= end:
                    self.at_end.add(p)
                else:
                    self.at_end.discard(p)
                if self.done():
                    return moved
        return moved

    def _records(self, p: int, data: bytes | memoryview, aborted: list[dict]) -> None:
        """Emit the records of ``data`` from the partition's position on; ``aborted`` (the
        Fetch answer's aborted transactions, read_committed only) drops their batches."""
        data = bytes(data)
        pending = sorted((a["first_offset"], a["producer_id"]) for a in aborted)
        aborting: set[int] = set()  # producers inside an aborted transaction here
        for h in scan_batches(data):
            while pending and pending[0][0] <= h.last_offset:
                aborting.add(pending.pop(0)[1])
            if h.is_control:
                batch = data[h.position : h.position + h.size]
                try:
                    marker = read_end_txn_marker(batch) if h.is_transactional else None
                except InvalidRecordError:
                    marker = None
                if marker is not None and marker.control_type == ABORT:
                    aborting.discard(h.producer_id)
            skip = h.is_control or (h.is_transactional and h.producer_id in aborting)
            if h.next_offset <= self.positions[p]:
                continue
            if not skip:
                for rec in decode_records(data[h.position : h.position + h.size]):
                    if rec.offset < self.positions[p]:
                        continue
                    self._emit(p, rec)
                    self.positions[p] = rec.offset + 1
                    if self.done():
                        return
            self.positions[p] = max(self.positions[p], h.next_offset)

    def _emit(self, p: int, rec) -> None:
        self.count += 1
        if self.args.format == "json":
            line = json_line(
                {
                    "topic": self.topic,
                    "partition": p,
                    "offset": rec.offset,
                    "timestamp": rec.timestamp,
                    "key": _text(rec.key),
                    "value": _text(rec.value),
                    "headers": [[k, _text(v)] for k, v in rec.headers],
                }
            ).encode()
        else:
            line = bytes(rec.value or b"")
        self.out.write(line + b"\n")

    def commit(self) -> None:
        changed = {p: o for p, o in self.positions.items() if self.committed.get(p) != o}
        if not changed:
            return
        body = {
            "group_id": self.args.group,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {
                    "name": self.topic,
                    "partitions": [
                        {"partition_index": p, "committed_offset": o, "committed_metadata": ""}
                        for p, o in sorted(changed.items())
                    ],
                }
            ],
        }
        _, r = self.client.group_request(self.args.group, OFFSET_COMMIT, body)
        for t in r["topics"]:
            for pr in t["partitions"]:
                check(pr["error_code"], f"OffsetCommit for group '{self.args.group}'")
        self.committed.update(changed)


def run(client: Client, args: argparse.Namespace) -> int:
    if args.max_messages is not None and args.max_messages < 0:
        raise UsageError("--max-messages must be 0 or more")
    consumer = Consumer(client, args)
    try:
        consumer.run()
    except KeyboardInterrupt:
        pass
    finally:
        try:
            consumer.out.flush()
        finally:
            if args.group:
                consumer.commit()
    return 0
