"""``--reset-offsets`` of consumer groups and share groups (kafka-consumer-groups and
kafka-share-groups): the new offset of each partition asked for, from ListOffsets
(--to-earliest, --to-latest, --to-datetime) or the command line (--to-offset, --shift-by from
the group's current offset), clamped into [log start offset, log end offset] as Kafka's tools
do; and the table that shows them.  What is written (OffsetCommit, AlterShareGroupOffsets) is
the caller's.
"""

from __future__ import annotations

import argparse
from typing import Any

from pybroker.cli.client import Client, ClientError, KafkaCliError
from pybroker.cli.offsets import EARLIEST, LATEST, list_offsets
from pybroker.cli.output import emit, progress, progress_done, table
from pybroker.errors import ErrorCode


def plan(
    client: Client,
    args: argparse.Namespace,
    specs: list[tuple[str, list[int] | None]],
    target_ts: int | None,
    current: dict[tuple[str, int], int],
    unshiftable: str,
) -> list[dict[str, Any]]:
    """One row {group, topic, partition, old, new} per partition of ``specs`` ((topic, None
    for all its partitions)); ``unshiftable`` is the error for --shift-by on a partition
    without a current offset (formatted with ``tp``, "topic-partition")."""
    rows = []
    for name, wanted in specs:
        meta = client.topic(name)
        known = sorted(p["partition_index"] for p in meta["partitions"])
        parts = known if wanted is None else wanted
        missing = set(parts) - set(known)
        if missing:
            raise KafkaCliError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"topic '{name}' has no partition {min(missing)}",
            )
        progress(f"reading offsets of {name} ({len(parts)} partitions)")
        earliest = list_offsets(client, meta, EARLIEST, parts)
        latest = list_offsets(client, meta, LATEST, parts)
        at_time = list_offsets(client, meta, target_ts, parts) if target_ts is not None else {}
        for p in parts:
            lo, hi = earliest[p][0], latest[p][0]
            old = current.get((name, p))
            if args.to_earliest:
                new = lo
            elif args.to_latest:
                new = hi
            elif target_ts is not None:
                new = at_time[p][0] if at_time[p][0] >= 0 else hi
            elif args.to_offset is not None:
                new = args.to_offset
            else:
                if old is None:
                    raise ClientError(unshiftable.format(tp=f"{name}-{p}"))
                new = old + args.shift_by
            new = min(max(new, lo), hi)  # out of range: clamped, as Kafka's tool does
            rows.append(
                {"group": args.group, "topic": name, "partition": p, "old": old, "new": new}
            )
    progress_done()
    return rows


def show(args: argparse.Namespace, rows: list[dict[str, Any]], what: str, nothing: str) -> None:
    """The rows as the tools print them: columns old-``what``/new-``what``; ``nothing`` is
    what a dry run says it did not do."""
    result = {"group": args.group, "dry_run": args.dry_run, "offsets": rows}
    emit(
        args.output,
        result,
        lambda x: (
            table(
                ["group", "topic", "partition", f"old-{what}", f"new-{what}"],
                [
                    (r["group"], r["topic"], r["partition"], r["old"], r["new"])
                    for r in x["offsets"]
                ],
            )
            + (f"\n(dry run: {nothing})" if x["dry_run"] else "")
        ),
    )
