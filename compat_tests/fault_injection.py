"""Bounded random fault injection on a 3-broker cluster (private ZooKeeper), then a checker.

    python -m compat_tests.fault_injection --minutes 10 [--seed 7] [--workdir DIR] [--keep]

(compat_tests/test_cluster_fault_injection.py runs it for PYBROKER_FAULT_SECONDS, default
120.)  Exit status 0 when every check passed, 1 otherwise.

Load: two kafka-python KafkaProducer(enable_idempotence=True, acks='all', retries huge)
threads writing unique payloads round-robin to an RF=3 topic with min.insync.replicas=2.

Faults, one at a time on a random broker, at most one broker down at any moment (each fault
is undone and every ISR is full again before the next one, so min.insync.replicas=2 stays
satisfiable):

- kill9: kill -9; wait until every partition it led has a new leader (the failover time is
  recorded); restart it (same port, log dir, chroot).
- sigterm: clean stop (exit code 0 checked), restart.
- pause_short: SIGSTOP for 1-3 s (below zookeeper.session.timeout.ms = 6 s), SIGCONT.
- pause_long: SIGSTOP for 7-10 s (above the session timeout: its session expires, the
  controller moves its leaderships), SIGCONT.

Checker, after the load stops:

- every acknowledged record is read back exactly once, at the offset its acknowledgement gave;
  per partition each producer's records are in send order; no payload appears twice;
- every broker stops cleanly (SIGTERM, exit 0); then, from the log dirs, each partition's
  replicas hold identical batches (base/last offset, leader epoch, CRC, producer id, base
  sequence) below the smallest high watermark in the replicas' replication-offset-checkpoint.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from compat_tests.cluster import (
    KNOWN_PROBLEMS,
    SESSION_TIMEOUT_S,
    Cluster,
    KafkaPythonLoad,
    broker_log_excerpt,
    check_records,
    compare_replicas,
    known_bugs_seen,
    read_topic,
    running_cluster,
    wait_until,
)

PARTITIONS = 3
TOPIC = "faults"
ACTIONS = {"kill9": 3, "sigterm": 1, "pause_short": 2, "pause_long": 2}
RECOVERY_TIMEOUT = 45.0


@dataclass
class FaultReport:
    seed: int
    seconds: float
    faults: Counter = field(default_factory=Counter)
    fault_log: list[str] = field(default_factory=list)
    failover_times: list[float] = field(default_factory=list)  # kill9: until new leaders
    recovery_times: list[float] = field(default_factory=list)  # fault start until ISRs full
    load_summaries: list[str] = field(default_factory=list)
    records_read: int = 0
    acked_checked: int = 0
    batches_compared: int = 0
    problems: list[str] = field(default_factory=list)
    known_bugs: dict[str, str] = field(default_factory=dict)  # signature -> reason
    broker_errors: list[str] = field(default_factory=list)  # ERROR lines from broker output

    def unexplained_problems(self) -> list[str]:
        """Problems no known bug explains: a known problem text, or a recovery failure
        while a known bug's signature is in a broker's output."""
        out = []
        for p in self.problems:
            if any(text in p for text in KNOWN_PROBLEMS):
                continue
            if self.known_bugs and ("not recovered" in p or "no new leader" in p):
                continue
            out.append(p)
        return out

    def summary(self) -> str:
        def stats(xs):
            if not xs:
                return "-"
            xs = sorted(xs)
            return f"n={len(xs)} min {xs[0]:.2f} median {xs[len(xs) // 2]:.2f} max {xs[-1]:.2f} s"

        lines = [
            f"fault injection: seed {self.seed}, {self.seconds:.0f} s of faults",
            f"  faults injected: {sum(self.faults.values())} {dict(self.faults)}",
            f"  leader failover after kill -9 (kill until Metadata names new leaders): "
            f"{stats(self.failover_times)}",
            f"  recovery (fault start until every ISR is full): {stats(self.recovery_times)}",
            *(f"  {s}" for s in self.load_summaries),
            f"  records read {self.records_read}, acknowledged records checked "
            f"{self.acked_checked}, replica batches compared {self.batches_compared}",
        ]
        if self.broker_errors:
            lines.append("  broker ERROR lines (first of each broker):")
            lines += [f"    {e}" for e in self.broker_errors]
        for reason in self.known_bugs.values():
            lines.append(f"  known bug seen: {reason}")
        if self.problems:
            lines.append(f"  PROBLEMS ({len(self.problems)}):")
            lines += [f"    - {p}" for p in self.problems]
        else:
            lines.append("  all checks passed")
        return "\n".join(lines)


def _led_by(cluster: Cluster, broker_id: int) -> list[int]:
    try:
        md = cluster.metadata([TOPIC])
    except OSError:
        return []
    return sorted(p for p, i in md.topic(TOPIC).items() if i.leader == broker_id)


def _wait_moved(cluster: Cluster, victim: int, partitions: list[int], timeout: float) -> bool:
    def moved():
        try:
            md = cluster.metadata([TOPIC])
        except OSError:
            return False
        live = cluster.running()
        return all(md.partitions[(TOPIC, p)].leader in live for p in partitions)

    try:
        wait_until(moved, timeout, 0.02, "new leaders")
        return True
    except AssertionError:
        return False


def _inject(cluster: Cluster, rng: random.Random, report: FaultReport, log) -> bool:
    """One fault, undone; returns False when the cluster did not recover."""
    action = rng.choices(list(ACTIONS), weights=list(ACTIONS.values()))[0]
    victim = rng.choice(cluster.ids)
    try:
        controller = cluster.metadata([]).controller_id
    except OSError:
        controller = None
    led = _led_by(cluster, victim)
    n = sum(report.faults.values()) + 1
    desc = f"#{n} {action} broker {victim} (controller: {controller == victim}, leads {led})"
    report.faults[action] += 1
    t0 = time.monotonic()
    extra = ""
    if action == "kill9":
        cluster.kill9(victim)
        if led:
            if _wait_moved(cluster, victim, led, RECOVERY_TIMEOUT):
                report.failover_times.append(time.monotonic() - t0)
                extra = f", new leaders after {report.failover_times[-1]:.2f} s"
            else:
                report.problems.append(f"{desc}: no new leader within {RECOVERY_TIMEOUT} s")
        time.sleep(rng.uniform(0.5, 3.0))
        cluster.restart(victim)
    elif action == "sigterm":
        try:
            cluster.stop_broker(victim)
        except AssertionError as e:
            report.problems.append(f"{desc}: unclean exit: {str(e).splitlines()[0]}")
        time.sleep(rng.uniform(0.5, 3.0))
        cluster.restart(victim)
    else:
        pause = (
            rng.uniform(1.0, 3.0)
            if action == "pause_short"
            else rng.uniform(SESSION_TIMEOUT_S + 1, SESSION_TIMEOUT_S + 4)
        )
        extra = f", paused {pause:.1f} s"
        cluster.pause(victim)
        time.sleep(pause)
        cluster.resume(victim)
    try:
        cluster.wait_isr_full(TOPIC, timeout=RECOVERY_TIMEOUT)
    except AssertionError as e:
        report.problems.append(f"{desc}: not recovered: {e}")
        log(f"{desc}{extra}: NOT RECOVERED: {e}")
        return False
    report.recovery_times.append(time.monotonic() - t0)
    line = f"{desc}{extra}; ISRs full after {report.recovery_times[-1]:.2f} s"
    report.fault_log.append(line)
    log(line)
    return True


def run(workdir: Path, seconds: float, seed: int | None = None, log=print) -> FaultReport:
    seed = seed if seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    report = FaultReport(seed, seconds)
    log(f"fault injection: seed {seed}, {seconds:.0f} s, workdir {workdir}")
    with running_cluster(Path(workdir)) as cluster:
        cluster.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
        loads = [
            KafkaPythonLoad(f"idem{i}", cluster.bootstrap, TOPIC, PARTITIONS, 0.003)
            for i in range(2)
        ]
        for ld in loads:
            ld.flush_timeout = 30.0
            ld.start()
        try:
            wait_until(lambda: all(len(ld.stats.acked) >= 100 for ld in loads), 60, 0.1, "load")
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                time.sleep(rng.uniform(1.0, 4.0))
                if not _inject(cluster, rng, report, log):
                    break
            time.sleep(2.0)
        finally:
            stats = [ld.stop(timeout=180) for ld in loads]
        report.load_summaries = [s.summary() for s in stats]
        read = read_topic(cluster.bootstrap, TOPIC, PARTITIONS)
        result = check_records(read, stats)
        report.records_read, report.acked_checked = result.records_read, result.acked_checked
        report.problems += result.problems
        stop_problems = cluster.stop()
        report.problems += [f"clean stop: {p}" for p in stop_problems]
        for p in range(PARTITIONS):
            rc = compare_replicas(cluster, TOPIC, p)
            report.batches_compared += rc.batches_compared
            log(
                f"{TOPIC}-{p}: HWs {rc.high_watermarks}, {rc.batches_compared} batches "
                f"compared below {rc.compared_below}"
            )
            report.problems += rc.problems
        report.known_bugs = known_bugs_seen(cluster)
        for problem in report.problems:
            for text, reason in KNOWN_PROBLEMS.items():
                if text in problem:
                    report.known_bugs[text] = reason
        for i, b in cluster.brokers.items():
            excerpt = broker_log_excerpt(b, [" ERROR ", "Error: "], 3)
            report.broker_errors += [f"broker {i}: {ln[:300]}" for ln in excerpt.splitlines()]
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=2.0, help="time spent injecting faults")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--workdir", type=Path, default=None, help="default: a temporary dir")
    ap.add_argument("--keep", action="store_true", help="keep the workdir (broker logs)")
    args = ap.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="pybroker-faults-"))
    try:
        report = run(workdir, args.minutes * 60, args.seed)
    finally:
        if not args.keep and args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print(report.summary())
    if args.keep or args.workdir is not None:
        print(f"broker logs: {workdir}/broker*/broker.stderr")
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
