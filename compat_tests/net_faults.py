"""The fault campaign's network partitions and full disks (compat_tests/fault_injection.py
draws them beside the process faults when the cluster runs in network namespaces,
compat_tests/net_cluster.py).

Each function injects one fault, waits while it holds, undoes it, and returns what to log;
findings go to ``ctx.report.problems``, the time until the fault's effect was seen (a new
leader or controller named, a dir offline, a broker halted, a ZooKeeper node out) to
``ctx.report.detect_by_kind``.  The caller then waits until every ISR is full again.

Network partitions (nftables drops in the receiving namespace, compat_tests/netns.py; the
observer ``obs`` that measures is never cut).  "LONG" holds outlast the ZooKeeper session
timeout (6 s) and replica.lag.time.max.ms (5 s); what Apache Kafka 3.9 in ZooKeeper mode does
in each case is the reference (docs/cluster-testing.md):

- part_leader_followers: a partition's leader cut from its followers (both ways).  It keeps
  its ZooKeeper session, so it stays leader; it shrinks its ISR to itself and answers
  acks=all with NOT_ENOUGH_REPLICAS.  Checked: on the partitions it still leads at the heal,
  no acknowledged offset is beyond what its followers hold (read from their segment files
  1 s into the cut: they receive nothing more), i.e. nothing is acknowledged that only the
  leader has.  Kafka acknowledges nothing of that kind either.
- part_broker_peers: a random broker cut from the other brokers (ZooKeeper and clients still
  reach it): the same check for what it leads.
- part_broker_zk: a broker that is not the controller cut from every ZooKeeper node (clients
  and peers still reach it): its session expires, the controller moves its leaderships.
  Checked: new leaders within SESSION + 14 s.
- part_controller_zk: the controller cut from every ZooKeeper node: another broker becomes
  controller (a higher epoch fences the old one).  Checked: a new controller within
  SESSION + 14 s, and after the heal every broker agrees on the controller and on each
  partition's leader and leader epoch.
- part_broker_isolated: a broker cut from everyone (ZooKeeper, brokers, clients).
- part_zk_brokers: every ZooKeeper node cut from every broker (long or short).
- part_zk_node: one ZooKeeper node (the leader half the time) cut from the other two; brokers
  still reach it.  Checked: the ensemble serves again with all three within 60 s of the heal.
- part_client_leader: one producer's namespace cut from one partition's leader only.
- asym_leader_followers: one way only, leader -> followers or followers -> leader.
- asym_broker_zk: one way only, broker -> ZooKeeper or ZooKeeper -> broker.

Full disks (compat_tests/small_disk.py tmpfs under each log dir and each ZooKeeper dataDir):

- disk_full_dir: one log dir of a broker fills while the producers write: that dir goes
  offline (its partitions' leadership moves, the broker leaves their ISRs), the broker keeps
  serving its other dir.  Checked: within 30 s, and the broker still runs.  Then space is
  freed and the broker restarted (clean stop, exit 0), as Kafka needs a restart too.
- disk_full_broker: both log dirs of a broker fill: it halts with status 1 ("all log dirs
  have failed", as Kafka).  Then freed and restarted.
- zk_disk_full: one ZooKeeper node's disk fills (the harness adds a burst of 1 KiB znodes so
  ZooKeeper writes at once): the node stops serving, the others keep the quorum.  Then freed;
  the node rejoins (restarted if it exited).  Checked: every filler write ZooKeeper
  acknowledged is there, the topics still have all their partitions.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from compat_tests.net_cluster import OBSERVER, NetworkCluster, broker_node
from pybroker.testing.cluster_harness import SESSION_TIMEOUT_S, Cluster, read_batches, wait_until

NETWORK_ACTIONS = {
    "part_leader_followers": 2,
    "part_broker_peers": 1,
    "part_broker_zk": 2,
    "part_controller_zk": 2,
    "part_broker_isolated": 1,
    "part_zk_brokers": 1,
    "part_zk_node": 1,
    "part_client_leader": 1,
    "asym_leader_followers": 1,
    "asym_broker_zk": 1,
}
DISK_ACTIONS = {"disk_full_dir": 2, "disk_full_broker": 1, "zk_disk_full": 1}
MOVE_TIMEOUT = SESSION_TIMEOUT_S + 14.0
ZK_FILLER_PATH = "/pbf-filler"
_QUIET = logging.getLogger("compat_tests.net_faults.kazoo")
_QUIET.setLevel(logging.ERROR)  # (its reconnections while a node is out are expected)


@dataclass
class FaultContext:
    cluster: Cluster
    nc: NetworkCluster
    rng: random.Random
    report: object  # compat_tests.fault_injection.FaultReport
    loads: list  # pybroker.testing.cluster_harness.Load (their .stats.acked)
    clients: list[str]  # the producers' namespaces
    topics: list[str]  # topics whose partitions must all survive
    topic: str  # the topic the loads write
    log: Callable[[str], None]

    def problem(self, text: str) -> None:
        self.report.problems.append(text)

    def detected(self, kind: str, seconds: float) -> None:
        self.report.detect_by_kind.setdefault(kind, []).append(seconds)


def _long(rng: random.Random) -> float:
    return rng.uniform(SESSION_TIMEOUT_S + 2.5, SESSION_TIMEOUT_S + 5.5)


def _short(rng: random.Random) -> float:
    return rng.uniform(1.5, 4.0)


def _metadata(ctx: FaultContext, topics: list[str] | None, avoid: set[int] = frozenset()):
    """Metadata from a running broker not in ``avoid`` (a cut broker answers from a stale
    view); None if none answered."""
    via = [i for i in ctx.cluster.running() if i not in avoid] or ctx.cluster.running()
    try:
        return ctx.cluster.metadata(topics, via=via)
    except OSError:
        return None


def _partitions(ctx: FaultContext, avoid: set[int] = frozenset()):
    md = _metadata(ctx, [ctx.topic], avoid)
    return md.topic(ctx.topic) if md is not None else {}


def _led_by(ctx: FaultContext, broker: int, avoid: set[int] = frozenset()) -> list[int]:
    return sorted(p for p, i in _partitions(ctx, avoid).items() if i.leader == broker)


def _follower_log_ends(ctx: FaultContext, partitions: list[int], leader: int) -> dict[int, int]:
    """{partition: the highest log end offset among its followers}, read from their segment
    files (whole batches only).  Called during a cut of the leader from its followers: they
    append nothing for these partitions then, so this is what the ISR can hold."""
    out = {}
    for p in partitions:
        ends = [0]
        for i, disks in ctx.nc.log_disks.items():
            if i == leader:
                continue
            for d in disks:
                pdir = d.path / f"{ctx.topic}-{p}"
                if pdir.is_dir():
                    batches = read_batches(pdir)
                    if batches:
                        ends.append(batches[-1].last_offset + 1)
        out[p] = max(ends)
    return out


def _acks_at_or_above(ctx: FaultContext, floor: dict[int, int]) -> int:
    """Acknowledgements of offsets at or above ``floor[partition]``."""
    n = 0
    for ld in ctx.loads:
        with ld.stats.lock:
            n += sum(
                1 for a in ld.stats.acked if a.partition in floor and a.offset >= floor[a.partition]
            )
    return n


def _wait_leaders_moved(
    ctx: FaultContext, victim: int, partitions: list[int], timeout: float
) -> float | None:
    """Seconds until Metadata (from the other brokers) names another leader for each of
    ``partitions``; None if not within ``timeout``."""
    t0 = time.monotonic()

    def moved():
        parts = _partitions(ctx, {victim})
        return parts and all(
            parts[p].leader not in (victim, -1) and parts[p].leader in ctx.cluster.running()
            for p in partitions
        )

    try:
        wait_until(moved, timeout, 0.05, "new leaders")
    except AssertionError:
        return None
    return time.monotonic() - t0


def _converged(ctx: FaultContext, timeout: float = 30.0) -> str | None:
    """Every running broker answers the same controller and, for each partition, the same
    leader and leader epoch; None when so within ``timeout``, else what differed."""
    last = ""

    def same():
        nonlocal last
        views = {}
        for i in ctx.cluster.running():
            try:
                md = ctx.cluster.metadata(ctx.topics, via=[i])
            except OSError:
                last = f"broker {i} did not answer"
                return False
            views[i] = (
                md.controller_id,
                tuple(sorted((k, v.leader, v.leader_epoch) for k, v in md.partitions.items())),
            )
        if len(set(views.values())) == 1:
            return True
        last = "; ".join(f"broker {i}: controller {v[0]}" for i, v in sorted(views.items()))
        return False

    try:
        wait_until(same, timeout, 0.2, "metadata converged")
        return None
    except AssertionError:
        return last


def _cut_one_way(net, node: str, others: list[str], outward: bool) -> None:
    """Packets from ``node`` to each of ``others`` dropped (``outward``), else from each of
    them to ``node``: the other direction still passes."""
    for other in others:
        if outward:
            net.cut(node, other)
        else:
            net.cut(other, node)


def _hold(ctx: FaultContext, seconds: float) -> None:
    time.sleep(seconds)


# ------------------------------------------------------------------------------------------
# network partitions
# ------------------------------------------------------------------------------------------


def inject_network(ctx: FaultContext, action: str, n: int) -> tuple[str, str]:
    """One partition of kind ``action``, held and healed; (description, details)."""
    net, nc, rng = ctx.nc.net, ctx.nc, ctx.rng
    cluster = ctx.cluster
    zks = nc.zk_nodes()
    md = _metadata(ctx, [ctx.topic])
    controller = md.controller_id if md is not None else -1
    parts = md.topic(ctx.topic) if md is not None else {}
    extra = ""
    t0 = time.monotonic()
    try:
        if action in ("part_leader_followers", "part_broker_peers"):
            if action == "part_leader_followers" and parts:
                p = rng.choice(sorted(parts))
                victim = parts[p].leader
                peers = [r for r in parts[p].replicas if r != victim]
                what = f"leader {victim} of {ctx.topic}-{p} cut from its followers {peers}"
            else:
                victim = rng.choice(cluster.ids)
                peers = [i for i in cluster.ids if i != victim]
                what = f"broker {victim} cut from its peers {peers}"
            led = _led_by(ctx, victim)
            for f in peers:
                net.cut_both(broker_node(victim), broker_node(f))
            hold = _long(rng)
            time.sleep(1.0)  # appends under way when the cut came are done
            # the followers receive nothing more: what they hold now is all the ISR can hold
            held = _follower_log_ends(ctx, led, victim)
            _hold(ctx, hold - 1.0)
            now = _partitions(ctx)
            still = [p for p in led if p in now and now[p].leader == victim]
            floor = {p: held[p] for p in still}
            above = _acks_at_or_above(ctx, floor)
            extra = (
                f", held {hold:.1f} s, acknowledged at or above its followers' log ends "
                f"{floor}: {above}"
            )
            if above:
                ctx.problem(
                    f"#{n} {action}: {what}: it acknowledged {above} acks=all writes on "
                    f"{still} that no follower had (Kafka: none)"
                )
            return f"#{n} {action}: {what} (leads {led}, controller {controller})", extra
        if action in ("part_broker_zk", "part_controller_zk"):
            if action == "part_controller_zk":
                victim = controller if controller in cluster.ids else rng.choice(cluster.ids)
                what = f"controller {victim} cut from ZooKeeper"
            else:
                others = [i for i in cluster.ids if i != controller] or cluster.ids
                leaders = [i for i in others if _led_by(ctx, i)]
                victim = rng.choice(leaders or others)
                what = f"broker {victim} cut from ZooKeeper"
            led = _led_by(ctx, victim)
            for z in zks:
                net.cut_both(broker_node(victim), z)
            hold = _long(rng)
            moved = None
            if led:
                moved = _wait_leaders_moved(ctx, victim, led, MOVE_TIMEOUT)
                if moved is None:
                    ctx.problem(
                        f"#{n} {action}: {what}: no new leader for {led} within "
                        f"{MOVE_TIMEOUT:.0f} s"
                    )
                else:
                    ctx.detected(action, moved)
                    extra += f", new leaders after {moved:.2f} s"
            if action == "part_controller_zk":
                took = _wait_new_controller(ctx, victim, MOVE_TIMEOUT, t0)
                if took is None:
                    ctx.problem(
                        f"#{n} {action}: {what}: no new controller within {MOVE_TIMEOUT:.0f} s"
                    )
                else:
                    extra += f", new controller after {took:.2f} s"
                    ctx.report.detect_by_kind.setdefault("new controller", []).append(took)
            _hold(ctx, max(0.0, hold - (time.monotonic() - t0)))
            extra = f", held {max(hold, time.monotonic() - t0):.1f} s" + extra
            return f"#{n} {action}: {what} (leads {led})", extra
        if action == "part_broker_isolated":
            victim = rng.choice(cluster.ids)
            led = _led_by(ctx, victim)
            for other in [
                *zks,
                *nc.broker_nodes([i for i in cluster.ids if i != victim]),
                *nc.clients,
            ]:
                net.cut_both(broker_node(victim), other)
            hold = _long(rng)
            if led:
                moved = _wait_leaders_moved(ctx, victim, led, MOVE_TIMEOUT)
                if moved is None:
                    ctx.problem(
                        f"#{n} {action}: no new leader for {led} within {MOVE_TIMEOUT:.0f} s"
                    )
                else:
                    ctx.detected(action, moved)
                    extra += f", new leaders after {moved:.2f} s"
            _hold(ctx, max(0.0, hold - (time.monotonic() - t0)))
            return (
                f"#{n} {action}: broker {victim} cut from everyone (leads {led}, "
                f"controller {controller == victim})",
                f", held {max(hold, time.monotonic() - t0):.1f} s" + extra,
            )
        if action == "part_zk_brokers":
            hold = _long(rng) if rng.random() < 0.5 else _short(rng)
            for z in zks:
                for b in nc.broker_nodes():
                    net.cut_both(z, b)
            _hold(ctx, hold)
            return f"#{n} {action}: every ZooKeeper node cut from every broker", (
                f", held {hold:.1f} s"
            )
        if action == "part_zk_node":
            leader = nc.ensemble.leader()
            ids = sorted(nc.ensemble.nodes)
            zid = leader if (leader is not None and rng.random() < 0.5) else rng.choice(ids)
            z = nc.ensemble.nodes[zid].node
            for other in zks:
                if other != z:
                    net.cut_both(z, other)
            hold = _long(rng)
            _hold(ctx, hold)
            return (
                f"#{n} {action}: ZooKeeper node {zid} (leader: {zid == leader}) cut from the "
                "other two",
                f", held {hold:.1f} s",
            )
        if action == "part_client_leader":
            client = rng.choice(ctx.clients)
            p = rng.choice(sorted(parts)) if parts else 0
            leader = parts[p].leader if parts else rng.choice(cluster.ids)
            net.cut_both(client, broker_node(leader))
            hold = rng.uniform(4.0, 10.0)
            _hold(ctx, hold)
            return (
                f"#{n} {action}: client {client} cut from broker {leader} (leader of "
                f"{ctx.topic}-{p})",
                f", held {hold:.1f} s",
            )
        if action == "asym_leader_followers":
            p = rng.choice(sorted(parts)) if parts else 0
            leader = parts[p].leader if parts else rng.choice(cluster.ids)
            followers = [r for r in (parts[p].replicas if parts else cluster.ids) if r != leader]
            outward = rng.random() < 0.5
            _cut_one_way(net, broker_node(leader), [broker_node(f) for f in followers], outward)
            hold = _long(rng)
            _hold(ctx, hold)
            way = "leader -> followers" if outward else "followers -> leader"
            return (
                f"#{n} {action}: {ctx.topic}-{p}: packets {way} dropped (leader {leader}, "
                f"followers {followers})",
                f", held {hold:.1f} s",
            )
        if action == "asym_broker_zk":
            leaders = [i for i in cluster.ids if _led_by(ctx, i)]
            victim = rng.choice(leaders or cluster.ids)
            outward = rng.random() < 0.5
            _cut_one_way(net, broker_node(victim), zks, outward)
            hold = _long(rng)
            _hold(ctx, hold)
            way = "broker -> ZooKeeper" if outward else "ZooKeeper -> broker"
            return (
                f"#{n} {action}: broker {victim} (controller {controller == victim}): "
                f"packets {way} dropped",
                f", held {hold:.1f} s",
            )
        raise ValueError(action)
    finally:
        net.heal_all()


def after_network(ctx: FaultContext, action: str, desc: str) -> str:
    """After the heal: the ZooKeeper ensemble serves with every node, and every broker agrees
    on the controller and the leaders (within bounds); details to log."""
    extra = ""
    try:
        t0 = time.monotonic()
        ctx.nc.ensemble.wait_quorum(60.0, nodes=sorted(ctx.nc.ensemble.nodes))
        if action == "part_zk_node":
            extra += f", ensemble whole again after {time.monotonic() - t0:.2f} s"
    except RuntimeError as e:
        ctx.problem(f"{desc}: {e}")
    differs = _converged(ctx)
    if differs is not None:
        ctx.problem(f"{desc}: brokers disagree on the metadata 30 s after the heal: {differs}")
    return extra


def _wait_new_controller(ctx: FaultContext, old: int, timeout: float, t0: float) -> float | None:
    """Seconds from ``t0`` (the cut) until the other brokers name another controller."""

    def other():
        md = _metadata(ctx, [], {old})
        return md is not None and md.controller_id not in (old, -1)

    try:
        wait_until(other, timeout, 0.05, "a new controller")
    except AssertionError:
        return None
    return time.monotonic() - t0


# ------------------------------------------------------------------------------------------
# full disks
# ------------------------------------------------------------------------------------------


def _replicas_in(dir_: Path, topic: str) -> list[int]:
    out = []
    for d in dir_.iterdir() if dir_.is_dir() else []:
        name = d.name
        if d.is_dir() and name.startswith(f"{topic}-") and name[len(topic) + 1 :].isdigit():
            out.append(int(name[len(topic) + 1 :]))
    return sorted(out)


def inject_disk(ctx: FaultContext, action: str, n: int, stop_broker) -> tuple[str, str]:
    """One full disk (``stop_broker(id, desc)``: the campaign's clean stop)."""
    cluster, rng, nc = ctx.cluster, ctx.rng, ctx.nc
    if action == "zk_disk_full":
        return _zk_disk_full(ctx, n)
    leaders = [i for i in cluster.ids if _led_by(ctx, i)]
    victim = rng.choice(leaders or cluster.ids)
    disks = nc.log_disks[victim]
    b = cluster.brokers[victim]
    led = _led_by(ctx, victim)
    t0 = time.monotonic()
    if action == "disk_full_dir":
        holding = [d for d in disks if _replicas_in(d.path, ctx.topic)] or disks
        disk = rng.choice(holding)
        lost = _replicas_in(disk.path, ctx.topic)
        desc = (
            f"#{n} {action}: broker {victim}'s log dir {disk.path.name} (replicas of "
            f"{ctx.topic} {lost}, leads {led})"
        )
        cluster.note(f"fill {disk.path}")
        filled = disk.fill()
        extra = f", filled {filled >> 20} MiB"
        try:

            def offline():
                parts = _partitions(ctx, {victim})
                return parts and all(
                    parts[p].leader != victim and victim not in parts[p].isr for p in lost
                )

            try:
                wait_until(offline, 30.0, 0.05, "the full dir's replicas offline")
                took = time.monotonic() - t0
                ctx.detected(action, took)
                extra += f", its replicas out of leadership and ISR after {took:.2f} s"
            except AssertionError:
                ctx.problem(f"{desc}: its replicas still lead or are in the ISR after 30 s")
            if not b.is_running():
                ctx.problem(f"{desc}: the broker exited ({b.proc.returncode}) with a dir online")
            elif f"log dir {disk.path}" not in b.output(400):
                ctx.problem(f"{desc}: no 'log dir ... is offline' in the broker's log")
            time.sleep(rng.uniform(0.5, 2.0))
        finally:
            disk.free()
        stop_broker(victim, desc)
        cluster.restart(victim)
        return desc, extra + ", freed, broker restarted"
    if action == "disk_full_broker":
        desc = f"#{n} {action}: both log dirs of broker {victim} (leads {led})"
        cluster.note(f"fill every log dir of broker {victim}")
        try:
            sizes = [d.fill() for d in disks]
            extra = f", filled {sum(sizes) >> 20} MiB"
            try:
                wait_until(lambda: not b.is_running(), 30.0, 0.05, "the broker halting")
                took = time.monotonic() - t0
                ctx.detected(action, took)
                code = b.proc.returncode
                b.exit_codes.append(code)
                b.mark(f"pid {b.proc.pid} exited with {code} (all log dirs full)")
                extra += f", broker halted with status {code} after {took:.2f} s"
                if code != 1:
                    ctx.problem(f"{desc}: the broker exited with {code}, not 1 (Kafka's halt)")
                if "Shutdown broker because all log dirs" not in b.output(400):
                    ctx.problem(f"{desc}: no 'all log dirs have failed' in the broker's log")
            except AssertionError:
                ctx.problem(f"{desc}: the broker still runs 30 s after both its dirs filled")
                stop_broker(victim, desc)
            if led:
                moved = _wait_leaders_moved(ctx, victim, led, MOVE_TIMEOUT)
                if moved is None:
                    ctx.problem(f"{desc}: no new leader for {led}")
                else:
                    extra += f", new leaders after {moved:.2f} s"
            time.sleep(rng.uniform(0.5, 2.0))
        finally:
            for d in disks:
                d.free()
        cluster.restart(victim)
        return desc, extra + ", freed, broker restarted"
    raise ValueError(action)


def _zk_disk_full(ctx: FaultContext, n: int) -> tuple[str, str]:
    from kazoo.client import KazooClient
    from kazoo.exceptions import KazooException

    rng, ens = ctx.rng, ctx.nc.ensemble
    leader = ens.leader()
    zid = leader if (leader is not None and rng.random() < 0.5) else rng.choice(sorted(ens.nodes))
    node = ens.nodes[zid]
    desc = f"#{n} zk_disk_full: ZooKeeper node {zid} (leader: {zid == leader})"
    before = {t: len(ps) for t, ps in _topic_partitions(ctx).items()}
    extra = ""
    with ctx.nc.net.entered(OBSERVER):
        zk = KazooClient(
            hosts=ens.connect,
            timeout=10.0,
            connection_retry={"max_tries": -1, "max_delay": 1},
            logger=_QUIET,
        )
        zk.start(timeout=15)
    acked = 0
    t0 = time.monotonic()
    try:
        zk.ensure_path(ZK_FILLER_PATH)
        node.note("disk filled")
        filled = node.disk.fill()
        extra = f", filled {filled >> 20} MiB"
        deadline = time.monotonic() + 20.0
        for _ in range(4000):  # ZooKeeper writes now: its log needs the space
            if time.monotonic() > deadline or node.mode() is None:
                break
            try:
                zk.create(f"{ZK_FILLER_PATH}/n", b"z" * 1024, sequence=True)
                acked += 1
            except KazooException:
                time.sleep(0.05)
        if node.mode() is None:
            took = time.monotonic() - t0
            ctx.detected("zk_disk_full", took)
            extra += f", the node stopped serving after {took:.2f} s ({acked} filler writes)"
        else:
            extra += f", the node still serves after 20 s ({acked} filler writes)"
        time.sleep(rng.uniform(0.5, 2.0))
    finally:
        node.disk.free()
        try:  # ZooKeeper may stop serving, or exit (a supervisor restarts it: so do we)
            t1 = time.monotonic()
            restarted = ens.wait_quorum(60.0, nodes=sorted(ens.nodes), restart=True)
            for zid_, code in restarted:
                extra += f", node {zid_} had exited with {code}: restarted"
            extra += f", whole again after {time.monotonic() - t1:.2f} s"
        except RuntimeError as e:
            ctx.problem(f"{desc}: {e}")
        try:
            wait_until(lambda: zk.connected, 30.0, 0.1, "kazoo reconnected")
            kept = len(zk.get_children(ZK_FILLER_PATH))
            if kept < acked:
                ctx.problem(f"{desc}: {acked} filler znodes acknowledged, {kept} left")
            zk.delete(ZK_FILLER_PATH, recursive=True)
        except (KazooException, AssertionError) as e:
            ctx.problem(f"{desc}: could not check the filler znodes: {e!r}")
        finally:
            zk.stop()
            zk.close()
    after = {t: len(ps) for t, ps in _topic_partitions(ctx).items()}
    if before and after and after != before:
        ctx.problem(f"{desc}: topics' partitions {before} before, {after} after")
    return desc, extra


def _topic_partitions(ctx: FaultContext) -> dict[str, dict]:
    md = _metadata(ctx, ctx.topics)
    return {t: md.topic(t) for t in ctx.topics} if md is not None else {}
