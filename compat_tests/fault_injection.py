"""Bounded random fault injection on a 3-broker cluster (private ZooKeeper), then a checker.

    python -m compat_tests.fault_injection --minutes 10 [--seed 7] [--workdir DIR] [--keep]
    python -m compat_tests.fault_injection --minutes 10 --network [--kinds a,b]   # root

(compat_tests/test_cluster_fault_injection.py runs it for PYBROKER_FAULT_SECONDS, default
0: each kind once, and with --network for a few partition and disk kinds.)  Exit status 0 when every check
passed, 1 otherwise.

Load: two kafka-python KafkaProducer(enable_idempotence=True, acks='all', retries huge)
threads writing unique payloads round-robin to an RF=3 topic with min.insync.replicas=2; a
confluent-kafka transactional producer (every third transaction aborted) and a kafka-python
read_committed consumer on a second such topic (compat_tests/txn_load.py).

With --network every process runs in a network namespace of its own (ZooKeeper as a 3-node
ensemble, log dirs and ZooKeeper data on small tmpfs: compat_tests/net_cluster.py), and the
network partitions and full disks of compat_tests/net_faults.py join the mix below.

Faults, one at a time on a random broker, at most one broker down at any moment (each fault
is undone and every ISR is full again before the next one, so min.insync.replicas=2 stays
satisfiable):

- kill9: kill -9; wait until every partition it led has a new leader (the failover time is
  recorded); restart it (same port, log dir, chroot).
- sigterm: clean stop (exit code 0 checked), restart.
- pause_short: SIGSTOP for 1-3 s (below zookeeper.session.timeout.ms = 6 s), SIGCONT.
- pause_long: SIGSTOP for 7-10 s (above the session timeout: its session expires, the
  controller moves its leaderships), SIGCONT.
- zk_restart: ZooKeeper itself is stopped and started again (same port and data; the
  brokers' sessions survive a short outage).
- back_to_back: SIGTERM + restart of one broker, then at once (before its ISRs are full) a
  SIGSTOP above the session timeout of a broker that leads a partition, then SIGCONT.
- coordinator_move: the consumer group's coordinator C is stopped (SIGTERM) until a commit is
  acknowledged by the next coordinator D, restarted (coordination comes back to C) until a
  commit is acknowledged by C, and stopped again until D acknowledges one; then restarted.

The first faults of a run go through every kind once (in a seeded order), so even a short run
exercises each; the rest are drawn at random with the weights in ACTIONS.

Beside the producers, a kafka-python group member consumes the topic and commits after every
poll, and compat_tests/invariants.InvariantMonitor checks throughout that what clients are
shown never goes back: ListOffsets(latest) at each partition's leader (the high watermark) and
the group's committed offsets at its coordinator (never behind an acknowledged commit).

After the last fault every ISR must be full again within RECOVERY_TIMEOUT.

Checker, after the load stops:

- every acknowledged record is read back exactly once, at the offset its acknowledgement gave;
  per partition each producer's records are in send order; no payload appears twice; no
  offset was acknowledged to two records (split brain);
- transactions: no aborted record ever shown to read_committed, committed ones wholly visible,
  those of unknown outcome all or nothing (txn_load.check_transactions);
- every broker stops cleanly (SIGTERM, exit 0); then, from the log dirs, each partition's
  replicas hold identical batches (base/last offset, leader epoch, CRC, producer id, base
  sequence) below the smallest high watermark in the replicas' replication-offset-checkpoint,
  and every segment holds whole batches with valid CRCs only.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from compat_tests.invariants import CommittingConsumer, InvariantMonitor
from compat_tests.net_faults import (
    DISK_ACTIONS,
    NETWORK_ACTIONS,
    FaultContext,
    after_network,
    inject_disk,
    inject_network,
)
from compat_tests.txn_load import ReadCommittedWatcher, TxnLoad, check_transactions
from pybroker.testing.cluster_harness import (
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
from pybroker.testing.process import BrokerStartError

PARTITIONS = 3
TOPIC = "faults"
TXN_TOPIC = "faults-txn"
GROUP = "faults-committer"
ACTIONS = {
    "kill9": 3,
    "sigterm": 1,
    "pause_short": 2,
    "pause_long": 2,
    "zk_restart": 1,
    "back_to_back": 1,
    "coordinator_move": 1,
}
RECOVERY_TIMEOUT = 45.0
SUPERVISED_RESTARTS = 3  # a broker that exits while starting is started again (Cluster.restart)
COMMIT_WAIT = 30.0  # coordinator_move: how long a coordinator may take to acknowledge a commit


@dataclass
class FaultReport:
    seed: int
    seconds: float
    faults: Counter = field(default_factory=Counter)
    fault_log: list[str] = field(default_factory=list)
    failover_times: list[float] = field(default_factory=list)  # kill9: until new leaders
    recovery_times: list[float] = field(default_factory=list)  # fault start until ISRs full
    recovery_by_kind: dict[str, list[float]] = field(default_factory=dict)
    # network and disk faults: until their effect was seen (new leader or controller, dir
    # offline, broker halted, ZooKeeper node out)
    detect_by_kind: dict[str, list[float]] = field(default_factory=dict)
    network: bool = False
    txn_checked: int = 0
    load_summaries: list[str] = field(default_factory=list)
    records_read: int = 0
    acked_checked: int = 0
    batches_compared: int = 0
    problems: list[str] = field(default_factory=list)
    known_bugs: dict[str, str] = field(default_factory=dict)  # signature -> reason
    broker_errors: list[str] = field(default_factory=list)  # ERROR lines from broker output
    notes: list[str] = field(default_factory=list)  # the harness's own bounds met (not faults)

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

        by_family = Counter(
            "network" if k in NETWORK_ACTIONS else "disk" if k in DISK_ACTIONS else "process"
            for k in self.faults.elements()
        )
        lines = [
            f"fault injection: seed {self.seed}, {self.seconds:.0f} s of faults"
            + (" (network namespaces)" if self.network else " (loopback)"),
            f"  faults injected: {sum(self.faults.values())} {dict(by_family)} "
            f"{dict(sorted(self.faults.items()))}",
            f"  leader failover after kill -9 (kill until Metadata names new leaders): "
            f"{stats(self.failover_times)}",
            f"  recovery (fault start until every ISR is full): {stats(self.recovery_times)}",
            *(
                f"    {kind}: {stats(times)}"
                for kind, times in sorted(self.recovery_by_kind.items())
            ),
            "  effect seen (fault start until new leaders / controller, dir offline, broker "
            "halted, ZooKeeper node out):" + ("" if self.detect_by_kind else " -"),
            *(f"    {kind}: {stats(times)}" for kind, times in sorted(self.detect_by_kind.items())),
            *(f"  {s}" for s in self.load_summaries),
            f"  records read {self.records_read}, acknowledged records checked "
            f"{self.acked_checked}, transactions checked {self.txn_checked}, replica batches "
            f"compared {self.batches_compared}",
        ]
        lines += [f"  note: {n}" for n in self.notes]
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


def _pause_for(rng: random.Random, long: bool) -> float:
    if long:
        return rng.uniform(SESSION_TIMEOUT_S + 1, SESSION_TIMEOUT_S + 4)
    return rng.uniform(1.0, 3.0)


def _wait_commit_by(
    cluster: Cluster, consumer: CommittingConsumer, coordinator: int, timeout: float
) -> bool:
    """Wait until `coordinator` is the group's coordinator and a commit was acknowledged
    after that."""

    def is_coordinator():
        try:
            err, node = cluster.find_coordinator(GROUP)
        except OSError:
            return False
        return err == 0 and node == coordinator

    try:
        wait_until(is_coordinator, timeout, 0.1, f"broker {coordinator} coordinating {GROUP}")
        before = consumer.commits
        wait_until(lambda: consumer.commits > before + 1, timeout, 0.1, "a commit")
        return True
    except AssertionError:
        return False


def _inject(
    cluster: Cluster,
    rng: random.Random,
    report: FaultReport,
    log,
    action: str,
    consumer: CommittingConsumer,
    ctx: FaultContext | None = None,
) -> bool:
    """One fault, undone; returns False when the cluster did not recover."""
    if action in NETWORK_ACTIONS or action in DISK_ACTIONS:
        assert ctx is not None, f"{action} needs the cluster in network namespaces"
        return _inject_net(ctx, action)
    victim = rng.choice(cluster.ids)
    try:
        controller = cluster.metadata([]).controller_id
    except OSError:
        controller = None
    if action == "coordinator_move":
        try:
            err, node = cluster.find_coordinator(GROUP)
            if err == 0 and node in cluster.ids:
                victim = node
        except OSError:
            pass
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
        _stop(cluster, victim, report, desc)
        time.sleep(rng.uniform(0.5, 3.0))
        cluster.restart(victim)
    elif action in ("pause_short", "pause_long"):
        pause = _pause_for(rng, action == "pause_long")
        extra = f", paused {pause:.1f} s"
        cluster.pause(victim)
        time.sleep(pause)
        cluster.resume(victim)
    elif action == "zk_restart":
        desc = f"#{n} zk_restart (controller {controller})"
        cluster.note("ZooKeeper restart")
        cluster.zookeeper.restart()
    elif action == "back_to_back":
        _stop(cluster, victim, report, desc)
        cluster.restart(victim)
        # at once: pause a broker that leads something now (not the one just restarted)
        others = [i for i in cluster.ids if i != victim]
        leaders = [i for i in others if _led_by(cluster, i)] or others
        second = rng.choice(leaders)
        pause = _pause_for(rng, True)
        extra = f", then broker {second} (leads {_led_by(cluster, second)}) paused {pause:.1f} s"
        cluster.pause(second)
        time.sleep(pause)
        cluster.resume(second)
    elif action == "coordinator_move":
        # C stops; D must take the group's commits; C returns and takes them back; C stops
        # again and D answers: D must not answer from what it knew in its earlier term.
        steps = []
        for round_ in range(2):
            _stop(cluster, victim, report, desc)
            ok = _wait_commit_by(
                cluster, consumer, _coordinator_without(cluster, victim), COMMIT_WAIT
            )
            steps.append(f"stop: {'commit at successor' if ok else 'NO commit at successor'}")
            cluster.restart(victim)
            if round_ == 0:
                ok = ok and _wait_commit_by(cluster, consumer, victim, COMMIT_WAIT)
                steps.append(f"back: {'commit at C' if ok else 'NO commit at C'}")
            if not ok:
                report.problems.append(
                    f"{desc}: no commit acknowledged within {COMMIT_WAIT} s ({', '.join(steps)})"
                )
                break
        extra = ", " + ", ".join(steps)
    else:
        raise ValueError(action)
    return _recovered(cluster, report, log, action, desc, extra, t0, [TOPIC])


def _recovered(
    cluster: Cluster,
    report: FaultReport,
    log,
    action: str,
    desc: str,
    extra: str,
    t0: float,
    topics: list[str],
) -> bool:
    """Every ISR of ``topics`` full again within RECOVERY_TIMEOUT: the recovery time (from
    ``t0``) recorded; else a problem recorded and False."""
    try:
        for topic in topics:
            cluster.wait_isr_full(topic, timeout=RECOVERY_TIMEOUT)
    except AssertionError as e:
        report.problems.append(f"{desc}: not recovered: {e}")
        log(f"{desc}{extra}: NOT RECOVERED: {e}")
        return False
    took = time.monotonic() - t0
    report.recovery_times.append(took)
    report.recovery_by_kind.setdefault(action, []).append(took)
    line = f"{desc}{extra}; ISRs full after {took:.2f} s"
    report.fault_log.append(line)
    log(line)
    return True


def _inject_net(ctx: FaultContext, action: str) -> bool:
    """A network partition or a full disk (compat_tests/net_faults.py), then every ISR full
    again within RECOVERY_TIMEOUT."""
    report, cluster = ctx.report, ctx.cluster
    n = sum(report.faults.values()) + 1
    report.faults[action] += 1
    t0 = time.monotonic()
    cluster.note(f"fault #{n} {action}")
    if action in NETWORK_ACTIONS:
        desc, extra = inject_network(ctx, action, n)
        extra += after_network(ctx, action, desc)
    else:
        desc, extra = inject_disk(ctx, action, n, lambda i, d: _stop(cluster, i, report, d))
    return _recovered(cluster, report, ctx.log, action, desc, extra, t0, [TOPIC, TXN_TOPIC])


def _stop(cluster: Cluster, victim: int, report: FaultReport, desc: str) -> None:
    try:
        cluster.stop_broker(victim)
    except AssertionError as e:
        report.problems.append(f"{desc}: unclean exit: {str(e).splitlines()[0]}")


def _coordinator_without(cluster: Cluster, stopped: int) -> int:
    """The coordinator FindCoordinator names once `stopped` is gone (rendezvous hashing over
    the live brokers, asked of a running broker)."""

    def other():
        try:
            err, node = cluster.find_coordinator(GROUP)
        except OSError:
            return None
        return (node,) if err == 0 and node != stopped else None  # a tuple: node 0 is falsy

    try:
        return wait_until(other, COMMIT_WAIT, 0.1, "a new coordinator")[0]
    except AssertionError:
        return -1


def schedule(rng: random.Random, actions: dict[str, float] | None = None):
    """Every kind once (seeded order), then weighted random draws for ever."""
    actions = actions or ACTIONS
    first = list(actions)
    rng.shuffle(first)
    yield from first
    while True:
        yield rng.choices(list(actions), weights=list(actions.values()))[0]


def campaign_actions(
    network: bool,
    kinds: list[str] | None = None,
    network_weight: float = 1.0,
    disk_weight: float = 1.0,
) -> dict[str, float]:
    """The kinds of fault (with their weights) of a run: the process faults, plus the network
    partitions and full disks when the cluster runs in network namespaces (their weights
    multiplied by ``network_weight`` and ``disk_weight``); ``kinds`` keeps only those."""
    actions: dict[str, float] = dict(ACTIONS)
    if network:
        actions.update({k: w * network_weight for k, w in NETWORK_ACTIONS.items()})
        actions.update({k: w * disk_weight for k, w in DISK_ACTIONS.items()})
    if kinds:
        unknown = [k for k in kinds if k not in actions]
        if unknown:
            raise ValueError(f"unknown or unavailable fault kinds: {unknown}")
        actions = {k: actions[k] for k in kinds}
    return actions


@contextlib.contextmanager
def _campaign_cluster(workdir: Path, network: bool):
    """(cluster, NetworkCluster or None): on loopback, or in network namespaces."""
    if network:
        from compat_tests.net_cluster import running_network_cluster

        with running_network_cluster(workdir, clients=4) as nc:
            yield nc.cluster, nc
    else:
        with running_cluster(workdir) as cluster:
            yield cluster, None


def run(
    workdir: Path,
    seconds: float,
    seed: int | None = None,
    log=print,
    *,
    every_kind: bool = True,
    network: bool = False,
    kinds: list[str] | None = None,
    min_faults: int = 0,
    max_seconds: float | None = None,
    network_weight: float = 1.0,
    disk_weight: float = 1.0,
) -> FaultReport:
    """Inject faults for `seconds` (and, with every_kind, at least until each kind of fault
    was injected once; and past `seconds` until `min_faults` faults, but never past
    `max_seconds`), then check.  ``network``: the cluster in network namespaces
    (compat_tests/net_cluster.py, root only), which adds network partitions and full disks
    to the mix; ``kinds``: only these kinds; ``*_weight``: multiply those kinds' weights."""
    actions = campaign_actions(network, kinds, network_weight, disk_weight)
    seed = seed if seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    report = FaultReport(seed, seconds, network=network)
    log(f"fault injection: seed {seed}, {seconds:.0f} s, workdir {workdir}, kinds {list(actions)}")
    with _campaign_cluster(Path(workdir), network) as (cluster, nc):
        cluster.supervised_restarts = SUPERVISED_RESTARTS
        cluster.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
        cluster.create_topic(TXN_TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})

        def start_in(namespace: str, thread) -> None:
            if nc is None:
                thread.start()
            else:
                with nc.net.entered(namespace):
                    thread.start()

        loads = [
            KafkaPythonLoad(f"idem{i}", cluster.bootstrap, TOPIC, PARTITIONS, 0.003)
            for i in range(2)
        ]
        for i, ld in enumerate(loads):
            ld.flush_timeout = 30.0
            start_in(f"c{i}", ld)
        consumer = CommittingConsumer(cluster.bootstrap, TOPIC, GROUP)
        start_in("c2", consumer)
        txn = TxnLoad(cluster.bootstrap, TXN_TOPIC, PARTITIONS)
        start_in("c3", txn)
        watcher = ReadCommittedWatcher(cluster.bootstrap, TXN_TOPIC, PARTITIONS)
        start_in("c3", watcher)
        monitor = InvariantMonitor(cluster, TOPIC, PARTITIONS, consumer)
        monitor.start()
        ctx = None
        if nc is not None:
            ctx = FaultContext(
                cluster,
                nc,
                rng,
                report,
                loads,
                ["c0", "c1", "c3"],
                [TOPIC, TXN_TOPIC],
                TOPIC,
                log,
            )
        try:
            wait_until(lambda: all(len(ld.stats.acked) >= 100 for ld in loads), 60, 0.1, "load")
            wait_until(lambda: consumer.commits >= 5, 60, 0.1, "the consumer's first commits")
            wait_until(lambda: len(txn.stats.outcomes) >= 3, 60, 0.1, "the first transactions")
            started = time.monotonic()
            deadline = started + seconds
            hard_deadline = started + max(max_seconds or seconds, seconds)
            scheduled = schedule(rng, actions)

            def more() -> bool:
                now, n = time.monotonic(), sum(report.faults.values())
                if now < deadline or (every_kind and len(report.faults) < len(actions)):
                    return True
                return n < min_faults and now < hard_deadline

            while more():
                time.sleep(rng.uniform(1.0, 4.0))
                try:
                    if not _inject(cluster, rng, report, log, next(scheduled), consumer, ctx):
                        break
                except BrokerStartError as e:  # ends the fault phase; the checks still run
                    report.problems.append(f"after fault #{len(report.faults)}: {e}")
                    _start_stopped(cluster, report)
                    break
            time.sleep(2.0)
        finally:
            stats = [ld.stop(timeout=180) for ld in loads]
            txn_stats = txn.stop(timeout=180)
            if txn.unfinished:
                report.notes.append(txn.unfinished)
            report.notes += [
                f"restarted by the harness as a supervisor would: {r}"
                for r in cluster.supervisor_restarts
            ]
            watcher.stop()
            consumer.stop()
            mstats = monitor.stop()
        report.load_summaries = [s.summary() for s in stats]
        report.load_summaries += [txn_stats.summary(), watcher.summary()]
        report.load_summaries += [consumer.summary(), monitor.summary()]
        if consumer.error is not None:
            report.problems.append(f"committing consumer crashed: {consumer.error!r}")
        if watcher.error is not None:
            report.problems.append(f"read_committed watcher crashed: {watcher.error!r}")
        report.problems += [f"invariant: {p}" for p in mstats.problems]
        if mstats.hw_checks == 0 or mstats.offset_checks == 0:
            report.problems.append(f"invariant monitor checked nothing: {monitor.summary()}")
        try:  # (a checker that cannot finish is a problem, reported with the rest)
            read = read_topic(cluster.bootstrap, TOPIC, PARTITIONS)
            result = check_records(read, stats)
            report.records_read, report.acked_checked = result.records_read, result.acked_checked
            report.problems += result.problems
        except AssertionError as e:
            report.problems.append(f"reading {TOPIC} back: {e}")
        try:
            committed = read_topic(
                cluster.bootstrap, TXN_TOPIC, PARTITIONS, isolation_level="read_committed"
            )
            tcheck = check_transactions(txn_stats, committed, watcher)
            report.txn_checked = tcheck.transactions
            report.problems += [f"transactions: {p}" for p in tcheck.problems]
        except AssertionError as e:
            report.problems.append(f"reading {TXN_TOPIC} back (read_committed): {e}")
        if nc is not None:
            nc.net.heal_all()
        stop_problems = cluster.stop()
        report.problems += [f"clean stop: {p}" for p in stop_problems]
        for topic in (TOPIC, TXN_TOPIC):
            for p in range(PARTITIONS):
                rc = compare_replicas(cluster, topic, p)
                report.batches_compared += rc.batches_compared
                log(
                    f"{topic}-{p}: HWs {rc.high_watermarks}, {rc.batches_compared} batches "
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
            tracebacks = broker_tracebacks(b)
            if tracebacks:
                report.problems.append(
                    f"broker {i} logged {len(tracebacks)} traceback(s); the first:\n"
                    + tracebacks[0]
                )
    return report


def _start_stopped(cluster, report: FaultReport) -> None:
    """Start again every broker that is not running (with time to spare: a machine so loaded
    that a restart missed its bound), so that the records can be read back and checked."""
    for i, b in cluster.brokers.items():
        if not b.is_running():
            try:
                cluster.restart(i, timeout=180.0)
            except BrokerStartError as e:
                report.problems.append(f"broker {i} did not start for the checks: {e}")


def broker_tracebacks(b) -> list[str]:
    """Each Python traceback in a broker's output, with the line before it (the log message)
    and up to its exception line.  A broker under faults handles every expected condition
    (a peer gone, a session expired) without one."""
    try:
        lines = Path(b.stderr_path).read_text(errors="replace").splitlines()
    except OSError:
        return []
    out = []
    for n, line in enumerate(lines):
        if line.startswith("Traceback (most recent call last)"):
            end = n + 1
            while end < len(lines) and (lines[end].startswith(" ") or not lines[end].strip()):
                end += 1
            out.append("\n".join(lines[max(n - 1, 0) : end + 1]))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=2.0, help="time spent injecting faults")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--workdir", type=Path, default=None, help="default: a temporary dir")
    ap.add_argument("--keep", action="store_true", help="keep the workdir (broker logs)")
    ap.add_argument(
        "--network",
        action="store_true",
        help="every process in a network namespace of its own (root): adds network "
        "partitions and full disks to the process faults",
    )
    ap.add_argument("--kinds", default="", help="comma-separated fault kinds (default: all)")
    ap.add_argument(
        "--min-faults",
        type=int,
        default=0,
        help="go on past --minutes until this many faults (but not past --max-minutes)",
    )
    ap.add_argument("--max-minutes", type=float, default=None)
    ap.add_argument(
        "--network-weight", type=float, default=1.0, help="multiply the partitions' weights"
    )
    ap.add_argument(
        "--disk-weight", type=float, default=1.0, help="multiply the full disks' weights"
    )
    args = ap.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="pybroker-faults-"))
    kinds = [k for k in args.kinds.split(",") if k] or None
    try:
        report = run(
            workdir,
            args.minutes * 60,
            args.seed,
            network=args.network,
            kinds=kinds,
            min_faults=args.min_faults,
            max_seconds=args.max_minutes * 60 if args.max_minutes else None,
            network_weight=args.network_weight,
            disk_weight=args.disk_weight,
        )
    finally:
        if not args.keep and args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print(report.summary())
    if args.keep or args.workdir is not None:
        print(f"broker logs: {workdir}/broker*/broker.stderr")
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
