"""The results: ``Outcome`` per workload and broker, the table of medians and ratios
pybroker / Kafka, and the Markdown file under bench/results/ (machine, versions, commands, every
run's figure).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from bench.clients import CLIENT_HEAP
from bench.targets import KAFKA, KAFKA_OVERRIDES, PYBROKER, PYBROKER_OVERRIDES
from bench.workloads.base import Workload
from pybroker.testing import java, kafka_reference

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Outcome:
    runs: dict[str, list[float]] = field(default_factory=dict)  # metric -> one value per run
    peak_rss: float | None = None  # MiB, summed VmHWM of the broker processes
    sampled_rss: float | None = None  # MiB, largest sampled sum of VmRSS
    extra_rss: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    start_s: float | None = None
    wall_s: float | None = None
    load: list[str] = field(default_factory=list)  # /proc/loadavg 1-min before, after

    def median(self, metric: str) -> float | None:
        vals = self.runs.get(metric)
        return statistics.median(vals) if vals else None


def log_excerpt(text: str, max_lines: int = 25) -> str:
    keys = ("ERROR", "WARNING", "Traceback", "Error", "Exception", "WARN")
    lines = [ln for ln in text.splitlines() if any(k in ln for k in keys)]
    return "\n".join(lines[-max_lines:]) or "\n".join(text.splitlines()[-max_lines:])


def loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "?"


def fmt(v: float | None) -> str:
    if v is None:
        return "—"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def ratio(k: float | None, p: float | None) -> str:
    if k is None or p is None or k == 0:
        return "—"
    return f"{p / k:.2f}"


def table(selected: list[Workload], results: dict[str, dict[str, Outcome]]) -> str:
    rows = [
        "| workload | metric | Kafka | pybroker | ratio pybroker/Kafka |",
        "|---|---|---|---|---|",
    ]
    for w in selected:
        res = results.get(w.wid, {})
        k, p = res.get(KAFKA, Outcome()), res.get(PYBROKER, Outcome())
        for m in w.metrics:
            better = "higher" if m.higher_is_better else "lower"
            kv, pv = k.median(m.name), p.median(m.name)
            kcell = fmt(kv) if kv is not None else ("FAILED" if k.error else "—")
            pcell = fmt(pv) if pv is not None else ("FAILED" if p.error else "—")
            rows.append(
                f"| {w.wid} | {m.name} ({better} is better) | {kcell} | {pcell} | {ratio(kv, pv)} |"
            )
        rows.append(
            f"| {w.wid} | broker peak RSS MiB | {fmt(k.peak_rss)} | {fmt(p.peak_rss)} "
            f"| {ratio(k.peak_rss, p.peak_rss)} |"
        )
    return "\n".join(rows)


def _cmd_out(cmd: list[str]) -> str:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=30, cwd=ROOT)
        return (r.stdout + r.stderr).strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"<{e}>"


def machine_facts() -> dict[str, str]:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    return {
        "cores (nproc)": str(os.cpu_count()),
        "cpu": cpu,
        "memory": mem,
        "kernel": platform.release(),
        "disk (log dirs)": _cmd_out(["df", "-h", "--output=source,fstype", tempfile.gettempdir()])
        .splitlines()[-1]
        .strip(),
    }


def versions() -> dict[str, str]:
    import kafka

    rev = _cmd_out(["git", "rev-parse", "--short", "HEAD"])
    dirty = _cmd_out(["git", "status", "--porcelain", "--", "pybroker"])
    if dirty:
        rev += f" + {len(dirty.splitlines())} uncommitted change(s) under pybroker/"
    zk = _cmd_out(["dpkg-query", "-W", "-f=${Version}", "zookeeper"])
    return {
        "Apache Kafka": f"{java.kafka_version()} (KRaft, org.apache.kafka:kafka_2.13 from Maven "
        f"Central; -Xms{kafka_reference.HEAP} -Xmx{kafka_reference.HEAP}, G1)",
        "pybroker": f"git {rev}",
        "Python": f"{platform.python_implementation()} {platform.python_version()}",
        "Java": _cmd_out([java.java_executable() or "java", "-version"]).splitlines()[0],
        "kafka-python": kafka.__version__,
        "ZooKeeper (pybroker W6)": zk if zk and "no packages" not in zk else "n/a",
    }


def report(
    selected: list[Workload],
    results: dict[str, dict[str, Outcome]],
    args: argparse.Namespace,
    sizes: dict,
    wall_s: float,
) -> str:
    now = dt.datetime.now()
    lines = [f"# pybroker vs Apache Kafka — {now:%Y-%m-%d %H:%M}", ""]
    lines += [
        f"`python -m bench.run {' '.join(sys.argv[1:])}` (scale {args.scale}, "
        f"{args.runs} run(s) per workload and broker, median shown; total {wall_s / 60:.1f} min)",
        "",
        table(selected, results),
        "",
        "Ratio = pybroker / Kafka (above 1 is better for pybroker where higher is better, worse "
        "where lower is better). MB = MiB (as the Java tools count). Broker peak RSS = VmHWM of "
        "the broker process(es), summed over the 3 brokers for W6, over the broker's whole life "
        "in that workload (start, setup, all runs).",
        "",
        "## Machine",
        "",
    ]
    lines += [f"- {k}: {v}" for k, v in machine_facts().items()]
    lines += [
        "- Client and broker share the machine's cores: every figure includes the client's "
        "CPU use (the Java tools, kafka-python), on both sides alike.",
        "- The 1-minute load average before and after each broker's part is in 'Every run'. "
        "The bench's own client and broker keep it at about 2-3 on 2 cores; a higher value "
        "means other work shared the cores, and Kafka's and pybroker's parts of one workload "
        "may then have seen different load.",
        "",
        "## Versions and settings",
        "",
    ]
    lines += [f"- {k}: {v}" for k, v in versions().items()]
    lines += [
        "- Kafka: pybroker/testing/kafka_reference.py (one KRaft node = broker + controller; W6: 3 nodes, "
        "node 1 broker+controller). Overrides: "
        + ", ".join(f"{k}={v}" for k, v in KAFKA_OVERRIDES.items())
        + ". Its heap is fixed at 512 MiB (-Xms = -Xmx, pages touched as used), which "
        "dominates its RSS.",
        "- pybroker: `python -m pybroker serve --override listeners=... --override log.dirs=... "
        + " ".join(f"--override {k}={v}" for k, v in PYBROKER_OVERRIDES.items())
        + "` (embedded metadata store; asyncio debug off). W6: 3 brokers on one private "
        "ZooKeeper (pybroker/testing/cluster_harness.py settings, min.insync.replicas=2, "
        "default.replication.factor=3); ZooKeeper's RSS is listed separately, not in the table.",
        "- Open-file limit (RLIMIT_NOFILE soft/hard) inherited by both brokers: "
        + "/".join(
            str(x) for x in __import__("resource").getrlimit(__import__("resource").RLIMIT_NOFILE)
        )
        + ".",
        "- Neither broker fsyncs per write (Kafka's default log.flush.* unset; pybroker the "
        "same). Log dirs: one temp dir on the same disk for both.",
        f"- Java tools: `java -Xmx{CLIENT_HEAP}` default JVM flags, classpath "
        "`.cache/java/classpath.txt` (scripts/fetch-java-deps).",
        "",
        "## Commands",
        "",
    ]
    for w in selected:
        lines.append(f"- **{w.wid}** {w.title}")
        lines += [f"  - `{c}`" if c.startswith("java") else f"  - {c}" for c in w.commands(sizes)]
    lines += ["", "## Every run", ""]
    lines += ["| workload | broker | metric | runs | median |", "|---|---|---|---|---|"]
    for w in selected:
        for kind in (KAFKA, PYBROKER):
            o = results.get(w.wid, {}).get(kind)
            if o is None:
                continue
            for metric, vals in o.runs.items():
                lines.append(
                    f"| {w.wid} | {kind} | {metric} | {', '.join(fmt(v) for v in vals)} "
                    f"| {fmt(o.median(metric))} |"
                )
            extra = "".join(f"; {k} peak RSS {fmt(v)} MiB" for k, v in o.extra_rss.items())
            lines.append(
                f"| {w.wid} | {kind} | (broker) | start {fmt(o.start_s)} s, workload wall "
                f"{fmt(o.wall_s)} s; peak RSS {fmt(o.peak_rss)} MiB (VmHWM), largest sampled "
                f"VmRSS {fmt(o.sampled_rss)} MiB{extra}; load average (1 min) before/after "
                f"{' / '.join(o.load)} | |"
            )
    failures = [
        (w.wid, kind, o) for w in selected for kind, o in results.get(w.wid, {}).items() if o.error
    ]
    if failures:
        lines += ["", "## Failures", ""]
        for wid, kind, o in failures:
            lines += [f"### {wid} on {kind}", "", "```", o.error.rstrip(), "```", ""]
    return "\n".join(lines) + "\n"


def write_results(text: str, args: argparse.Namespace) -> Path:
    out_dir = Path(args.results_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{dt.date.today():%Y-%m-%d}.md"
    path.write_text(text)
    return path
