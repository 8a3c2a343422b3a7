"""Per-member timelines of the rebalance workloads (W7, W16, W17) on Kafka and pybroker, alternately.

    python -m bench.rebalance_trace --workloads W7 --runs 4   (or W16, W17) [--out DIR] [--raw]
        [--set K=V] [--kafka-set K=V] [--pybroker-set K=V]   (broker settings beside the
        workload's: both, Kafka only, pybroker only)

Both brokers run at once (bench/targets.py's start_target, the workload's overrides on both);
each round runs the workload once on Kafka, then once on pybroker, so that the machine's load
falls on both alike.  What is traced is what the clients see, the same way on both sides:

- W7: kafka-python's DEBUG log (kafka.coordinator*: JoinGroup, SyncGroup, Heartbeat and
  LeaveGroup requests and their answers), stamped with the seconds since the common subscribe
  (join) or since member 0's close() (leave), per member thread.
- W16 and W17: the Java 4.1 consumers' slf4j-simple log at DEBUG for
  org.apache.kafka.clients.consumer.internals (AbstractCoordinator / ConsumerCoordinator for
  classic; the membership manager and heartbeat request manager for consumer), stamped with
  the wall clock, shown as seconds since the first JVM's start (W17: since the three
  consumer-protocol members are stopped, the downgrade).

Each run prints the figure (as bench/run.py measures it) and the condensed events; --raw keeps
the whole logs under --out.  The load average is printed with every run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import re
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench.targets import Target, start_target
from bench.workloads import SIZES
from bench.workloads.groups import (
    W16_OVERRIDES,
    W16_PARTITIONS,
    W17_OVERRIDES,
    ClientStuck,
    w7_attempt,
    w7_setup,
    w16_setup,
    w16_until_stable,
    w17_wait_split,
)
from pybroker.testing import java


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# -- W7: kafka-python's log ---------------------------------------------------------------
_W7_EVENTS = [  # (pattern of kafka-python's message, short form)
    (re.compile(r"^Sending JoinGroup"), lambda m: "JoinGroup ->"),
    (
        re.compile(r"^Received JoinGroup response: .*error_code=(\d+), generation_id=(-?\d+)"),
        lambda m: f"JoinGroup <- error {m[1]} generation {m[2]}",
    ),
    (re.compile(r"^Elected group leader"), lambda m: "(leader)"),
    (re.compile(r"^Sending (leader|follower) SyncGroup"), lambda m: f"SyncGroup -> ({m[1]})"),
    (
        re.compile(r"^Received SyncGroup response: .*error_code=(\d+)"),
        lambda m: f"SyncGroup <- error {m[1]}",
    ),
    (re.compile(r"^Sending HeartbeatRequest"), lambda m: "Heartbeat ->"),
    (
        re.compile(r"^Received heartbeat response .*error_code=(\d+)"),
        lambda m: f"Heartbeat <- error {m[1]}",
    ),
    (re.compile(r"^Sending LeaveGroupRequest"), lambda m: "LeaveGroup ->"),
    (re.compile(r"^Received LeaveGroupResponse"), lambda m: "LeaveGroup <-"),
    (re.compile(r"^need_rejoin: True \((\w+)"), lambda m: f"need_rejoin ({m[1]})"),
    (re.compile(r"^Sending metadata request"), lambda m: "Metadata ->"),
    (re.compile(r"^Metadata refresh: success"), lambda m: "Metadata <-"),
    (re.compile(r"^Sleeping ([\d.]+) for next Metadata"), lambda m: f"Metadata wait {m[1]} s"),
]
_W7_LOGGERS = ("kafka.coordinator", "kafka.cluster")  # (kafka.coordinator.heartbeat propagates)


class _Recorder(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[tuple[float, str, str]] = []  # (handle() holds the handler's lock)

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((time.perf_counter(), record.threadName, record.getMessage()))


def _member_of(thread: str, msg: str) -> str:
    m = re.search(
        r"-m(\d+)", thread
    )  # kafka-io-<group>-m<k>, or bench/workloads/groups.py's w7-m<k>
    return f"m{m.group(1)}" if m else thread


def _condense(msg: str) -> str | None:
    for pat, short in _W7_EVENTS:
        m = pat.search(msg)
        if m:
            return short(m)
    return None


def _w7_summary(events: list[tuple[str, float, str, str]], phase: str) -> str:
    """Generations completed; when the members learned of the rebalance from a heartbeat
    (REBALANCE_IN_PROGRESS, error 27); JoinGroups sent right after a successful SyncGroup with
    nothing in between that asked for one (kafka-python 3.0.12 discards a join/sync result
    that completes while no poll() waits for it, and joins again)."""
    gens: set[str] = set()
    learned: list[tuple[str, float]] = []
    synced: set[str] = set()
    discarded: list[str] = []
    for ph, t, who, event in events:
        if ph != phase:
            continue
        m = re.match(r"JoinGroup <- error 0 generation (\d+)", event)
        if m:
            gens.add(m[1])
        if event == "Heartbeat <- error 27" and who not in {w for w, _ in learned}:
            learned.append((who, t))
        if event == "SyncGroup <- error 0":
            synced.add(who)
        elif event == "JoinGroup ->" and who in synced:
            discarded.append(f"{who}@{t:.3f}")
            synced.discard(who)
        elif event.startswith(("Heartbeat <- error 27", "SyncGroup <- error 27")):
            synced.discard(who)
    first = min((t for _, t in learned), default=None)
    last = max((t for _, t in learned), default=None)
    told = f"{len(learned)} by heartbeat" + (
        f" between {first:+.3f} and {last:+.3f} s" if learned else ""
    )
    return (
        f"generations {sorted(gens, key=int)}; members told {told}; "
        f"joins after a completed sync: {discarded or 'none'}"
    )


def trace_w7(target: Target, st: dict, tag: str, out: Path, raw: bool) -> str:
    rec = _Recorder()
    for name in _W7_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG)
        logging.getLogger(name).addHandler(rec)
    marks: dict[str, float] = {}
    try:
        figures: object = w7_attempt(target, st, tag, marks)
    except ClientStuck as e:  # the trace shows who went silent
        figures = f"stuck: {e}"
    finally:
        for name in _W7_LOGGERS:
            logging.getLogger(name).removeHandler(rec)
            logging.getLogger(name).setLevel(logging.WARNING)
    t0, t1 = marks["t0"], marks.get("t1", float("inf"))
    events: list[tuple[str, float, str, str]] = []  # (phase, seconds, member, event)
    last: dict[str, str] = {}
    for ts, thread, msg in rec.records:
        event = _condense(msg)
        if ts < t0 - 0.5 or event is None:
            continue
        who = _member_of(thread, msg)
        if event.startswith("need_rejoin") and last.get(who) == event:
            continue  # asked on every poll
        last[who] = event
        phase, ref = ("leave", t1) if ts >= t1 else ("join", t0)
        events.append((phase, ts - ref, who, event))
    lines = [f"figures {figures}  load {loadavg()}"]
    lines += [f"summary {phase}: {_w7_summary(events, phase)}" for phase in ("join", "leave")]
    lines += [f"{phase} {t:+7.3f} {who:>4} {event}" for phase, t, who, event in events]
    if raw:
        (out / f"w7-{tag}.log").write_text(
            "\n".join(f"{ts - t0:+8.3f} {thread} {msg}" for ts, thread, msg in rec.records)
        )
    return "\n".join(lines)


# -- W16: the Java consumers' log ---------------------------------------------------------
W16_LOG = [
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
    "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
    "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.clients.consumer.internals=debug",
]
_W16_EVENTS = [  # (pattern of the Java client's message, short form)
    (re.compile(r"Sending JoinGroup"), lambda m: "JoinGroup ->"),
    (
        re.compile(r"JoinGroup failed due to non-fatal error: (\w+)"),
        lambda m: f"JoinGroup <- {m[1]}",
    ),
    (
        re.compile(r"Received successful JoinGroup response: .*generationId=(\d+)"),
        lambda m: f"JoinGroup <- generation {m[1]}",
    ),
    (re.compile(r"Sending (leader|follower) SyncGroup"), lambda m: f"SyncGroup -> ({m[1]})"),
    (re.compile(r"Received successful SyncGroup"), lambda m: "SyncGroup <-"),
    (re.compile(r"SyncGroup failed: (.{0,60})"), lambda m: f"SyncGroup <- failed: {m[1]}"),
    (
        re.compile(r"Attempt to heartbeat failed .*? (\w+Exception|since .{0,50})"),
        lambda m: f"Heartbeat <- {m[1]}",
    ),
    (re.compile(r"Request joining group due to: (.{0,80})"), lambda m: f"rejoin: {m[1]}"),
    (
        re.compile(r"with epoch (-?\d+) transitioned from (\w+) to (\w+)"),
        lambda m: f"epoch {m[1]}: {m[2]} -> {m[3]}",
    ),
]
_STAMP = re.compile(r"^(\d\d):(\d\d):(\d\d)\.(\d\d\d) ")


def _stamp(line: str, day: dt.date) -> float | None:
    m = _STAMP.match(line)
    if not m:
        return None
    h, mi, s, ms = (int(x) for x in m.groups())
    return dt.datetime(day.year, day.month, day.day, h, mi, s, ms * 1000).timestamp()


def _java_events(
    procs: list[tuple[str, java.JavaProcess]], t0_wall: float, since: float = float("-inf")
) -> list[tuple[float, str, str]]:
    """The Java clients' condensed log events and GroupConsumer's assigned/revoked/lost events,
    as (seconds since ``t0_wall``, who, text), those from ``since`` on, in time order."""
    day = dt.date.today()
    events: list[tuple[float, str, str]] = []
    for who, p in procs:
        for line in p.stderr_path.read_text(errors="replace").splitlines():
            ts = _stamp(line, day)
            if ts is None:
                continue
            for pat, short in _W16_EVENTS:
                m = pat.search(line)
                if m:
                    events.append((ts - t0_wall, who, short(m)))
                    break
        for line in p.stdout_text().splitlines():
            m = re.search(r'"event":"(\w+)","partitions":(\[[^\]]*\]),"t":(\d+)', line)
            if m:
                parts = re.sub(r'"[^"]*-(\d+)"', r"\1", m[2])
                events.append((int(m[3]) / 1000 - t0_wall, who, f"{m[1]} {parts}"))
    return sorted(e for e in events if e[0] >= since)


def trace_w16(target: Target, st: dict, protocol: str, tag: str, out: Path, raw: bool) -> str:
    group = f"w16-{protocol}-{tag}-{uuid.uuid4().hex[:6]}"
    t0_wall = time.time()
    took, procs = w16_until_stable(
        target,
        st,
        protocol,
        group,
        workdir=out / "w16",
        name=f"{target.kind}-{group}",
        jvm_args=W16_LOG,
    )
    events = _java_events([(f"c{k}", p) for k, p in enumerate(procs)], t0_wall)
    lines = [f"{protocol}: {took:.2f} s  load {loadavg()}"]
    lines += [f"{ts:+7.3f} {who} {text}" for ts, who, text in events]
    if not raw:
        for p in procs:
            for path in (p.stdout_path, p.stderr_path):
                path.unlink(missing_ok=True)
    return "\n".join(lines)


def trace_w17(target: Target, st: dict, tag: str, out: Path, raw: bool) -> str:
    """W17 as bench/workloads/groups.py runs it, the downgrade traced: events from 12 s before
    the three consumer-protocol members stop (t = 0) on, and when the two classic members
    last completed a JoinGroup or SyncGroup before it (their heartbeat timer's phase)."""
    group = f"w17-{tag}-{uuid.uuid4().hex[:6]}"

    def start(name: str, protocol: str) -> java.JavaProcess:
        return java.start_main(
            "GroupConsumer",
            [target.bootstrap, group, st["topic"], "0", "0", f"group.protocol={protocol}"],
            workdir=out / "w17",
            name=f"{target.kind}-{group}-{name}",
            cp=st["cp"],
            log4j=None,
            jvm_args=W16_LOG,
        )

    classic = [start(f"c{k}", "classic") for k in range(2)]
    modern: list[java.JavaProcess] = []
    stops: list[float] = []
    try:
        w17_wait_split(classic, W16_PARTITIONS // 2, "classic members", time.monotonic())
        t0 = time.monotonic()
        modern = [start(f"k{k}", "consumer") for k in range(3)]
        upgrade = w17_wait_split(classic + modern, 2, "after the upgrade", t0)
        t1_wall, t1 = time.time(), time.monotonic()
        for p in modern:
            p.stop()
            stops.append(time.time() - t1_wall)
        downgrade = w17_wait_split(classic, W16_PARTITIONS // 2, "after the downgrade", t1)
    finally:
        for p in classic + modern:
            p.stop()
    named = [("c0", classic[0]), ("c1", classic[1])]
    named += [(f"k{k}", p) for k, p in enumerate(modern)]
    events = _java_events(named, t1_wall, since=-12.0)
    last = {
        who: t
        for t, who, text in events
        if t < 0 and who.startswith("c") and text.startswith(("JoinGroup <- gen", "SyncGroup <-"))
    }
    lines = [
        f"upgrade {upgrade:.2f} s, downgrade {downgrade:.2f} s; consumer members stopped at "
        f"{', '.join(f'{s:+.3f}' for s in stops)} s; classic members' last join/sync "
        f"{', '.join(f'{w} {t:+.3f}' for w, t in sorted(last.items()))} s  load {loadavg()}"
    ]
    lines += [f"{ts:+7.3f} {who} {text}" for ts, who, text in events if ts > -0.5]
    if not raw:
        for p in classic + modern:
            for path in (p.stdout_path, p.stderr_path):
                path.unlink(missing_ok=True)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workloads", default="W7")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--brokers", default="kafka,pybroker")
    ap.add_argument("--protocols", default="consumer,classic", help="W16's group protocols")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--raw", action="store_true", help="keep the whole client logs under --out")
    ap.add_argument("--set", action="append", default=[], metavar="K=V", help="both brokers")
    ap.add_argument("--kafka-set", action="append", default=[], metavar="K=V")
    ap.add_argument("--pybroker-set", action="append", default=[], metavar="K=V")
    args = ap.parse_args(argv)
    extra = {
        "kafka": dict(kv.split("=", 1) for kv in args.set + args.kafka_set),
        "pybroker": dict(kv.split("=", 1) for kv in args.set + args.pybroker_set),
    }
    out = args.out or Path(tempfile.mkdtemp(prefix="rebalance-trace-"))
    out.mkdir(parents=True, exist_ok=True)
    kinds = args.brokers.split(",")
    for w in args.workloads.split(","):
        overrides = {"W16": W16_OVERRIDES, "W17": W17_OVERRIDES}.get(w, {})
        setup = w7_setup if w == "W7" else w16_setup
        targets, states = {}, {}
        try:
            for kind in kinds:
                props = dict(overrides, **extra[kind])
                targets[kind] = start_target(kind, 1, out / f"{w}-{kind}", props)
                states[kind] = setup(targets[kind], SIZES["full"])
            for i in range(args.runs):
                for kind in kinds:
                    if w == "W7":
                        text = trace_w7(targets[kind], states[kind], f"{kind}{i}", out, args.raw)
                        print(f"=== W7 {kind} run {i} ===\n{text}\n", flush=True)
                    elif w == "W17":
                        text = trace_w17(targets[kind], states[kind], f"{kind}{i}", out, args.raw)
                        print(f"=== W17 {kind} run {i} ===\n{text}\n", flush=True)
                    else:
                        for protocol in args.protocols.split(","):
                            text = trace_w16(
                                targets[kind], states[kind], protocol, f"{kind}{i}", out, args.raw
                            )
                            print(f"=== W16 {kind} run {i} ===\n{text}\n", flush=True)
        finally:
            for t in targets.values():
                t.stop()
    print(f"logs under {out}" if args.raw else "", file=sys.stderr)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
