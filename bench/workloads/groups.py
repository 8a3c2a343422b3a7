"""Consumer-group workloads: W7 (a classic rebalance of kafka-python members), W16 (KIP-848:
Java consumers to a stable assignment, consumer vs classic protocol), W17 (KIP-848 online
migration, upgrade and downgrade).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from pathlib import Path

from bench.clients import WorkloadError, create_topics
from bench.targets import Target
from pybroker.testing import java

# W7 ---------------------------------------------------------------------------------------
W7_PARTITIONS = 20
W7_CONSUMER = {"heartbeat_interval_ms": 1000, "session_timeout_ms": 10000}


def w7_setup(target: Target, sizes: dict) -> dict:
    create_topics(target, ["w7"], W7_PARTITIONS)
    return {"sizes": sizes, "topic": "w7"}


class ClientStuck(WorkloadError):
    """A kafka-python member stopped taking part in the group (see W7_ATTEMPTS)."""


# kafka-python 3.0.12 sometimes leaves a member silent after a rebalance: its poll() keeps
# returning, but it sends no heartbeat, JoinGroup or fetch again, so the group never settles
# (seen with Apache Kafka and pybroker alike, about one run in twenty). Such a run is
# abandoned after W7_STUCK_S and taken again with a fresh group; 'retries' counts them.
W7_ATTEMPTS = 3
W7_STUCK_S = 30


def w7_run(target: Target, st: dict, i: int) -> dict[str, float]:
    attempt = 0
    while True:
        try:
            figures = w7_attempt(target, st, f"{i}-{attempt}")
        except ClientStuck:
            attempt += 1
            if attempt == W7_ATTEMPTS:
                raise
            continue
        figures["retries"] = float(attempt)
        return figures


def w7_attempt(
    target: Target, st: dict, i: str, marks: dict[str, float] | None = None
) -> dict[str, float]:
    """One W7 run; ``marks`` (bench/rebalance_trace.py) gets the perf_counter() of the common
    subscribe (t0) and of member 0's close (t1)."""
    from kafka import KafkaConsumer

    members = st["sizes"]["w7_members"]
    group = f"w7-{i}-{uuid.uuid4().hex[:6]}"
    all_parts = set(range(W7_PARTITIONS))
    assignments: list[frozenset[int] | None] = [None] * members
    stop = [False] * members
    errors: list[str] = []
    ready = threading.Barrier(members + 1)

    def member(k: int) -> None:
        c = None
        try:
            c = KafkaConsumer(
                bootstrap_servers=target.bootstrap,
                group_id=group,
                client_id=f"{group}-m{k}",
                enable_auto_commit=False,
                **W7_CONSUMER,
            )
            # The topic's metadata first: a leader without it assigns nothing, then rejoins
            # when its refresh lands (kafka-python sends it retry_backoff_ms after the
            # bootstrap one), and the others learn of that from their next heartbeat.
            if not c.partitions_for_topic(st["topic"]):
                raise WorkloadError(f"member {k}: no metadata for {st['topic']}")
            ready.wait(60)
            c.subscribe([st["topic"]])
            while not stop[k]:
                c.poll(timeout_ms=100)
                assignments[k] = frozenset(tp.partition for tp in c.assignment())
        except Exception as e:  # noqa: BLE001 - reported
            errors.append(f"member {k}: {type(e).__name__}: {e}")
            with contextlib.suppress(threading.BrokenBarrierError):
                ready.abort()
        finally:
            assignments[k] = None
            if c is not None:
                c.close()

    def complete(live: list[int]) -> bool:
        got = [assignments[k] for k in live]
        if any(not a for a in got):
            return False
        union = set().union(*got)
        return union == all_parts and sum(len(a) for a in got) == W7_PARTITIONS

    threads = [
        threading.Thread(target=member, args=(k,), name=f"w7-m{k}", daemon=True)
        for k in range(members)
    ]
    for t in threads:
        t.start()
    try:
        ready.wait(60)
        t0 = time.perf_counter()  # every member subscribes now (the last join is this moment)
        if marks is not None:
            marks["t0"] = t0
        deadline = time.monotonic() + W7_STUCK_S
        live = list(range(members))
        while not complete(live):
            if errors:
                raise WorkloadError(f"W7: {errors}")
            if time.monotonic() > deadline:
                raise ClientStuck(f"W7: {members} members never all assigned")
            time.sleep(0.01)
        join_s = time.perf_counter() - t0
        time.sleep(1.0)  # settled
        t1 = time.perf_counter()
        if marks is not None:
            marks["t1"] = t1
        stop[0] = True  # member 0 leaves: close() sends LeaveGroup
        threads[0].join(30)
        live = list(range(1, members))
        deadline = time.monotonic() + W7_STUCK_S
        # the rest must move to a new assignment that covers all partitions without member 0
        while not complete(live):
            if errors:
                raise WorkloadError(f"W7: {errors}")
            if time.monotonic() > deadline:
                raise ClientStuck("W7: no rebalance after a member left")
            time.sleep(0.01)
        leave_s = time.perf_counter() - t1
    finally:
        for k in range(members):
            stop[k] = True
        for t in threads:
            t.join(30)
    return {"join s": join_s, "leave s": leave_s}


def w7_cmds(sizes: dict) -> list[str]:
    return [
        f"topic w7: {W7_PARTITIONS} partitions; {sizes['w7_members']} kafka-python "
        f"KafkaConsumer threads in one fresh group per run ({W7_CONSUMER}, range assignor), "
        "subscribe together (barrier), poll(100 ms)",
        "join s: from the common subscribe to all members holding a disjoint assignment "
        "covering every partition. Each member fetched the topic's metadata before the "
        "common subscribe (partitions_for_topic): without it, a group leader whose metadata "
        "refresh had not landed yet assigned nothing and rejoined. Still two modes, on both "
        "brokers, by timing: ~0.2 s when every member's JoinGroup arrives before the first "
        "generation completes; up to ~1.2 s when the first member(s) complete a generation "
        "alone (group.initial.rebalance.delay.ms=0) and learn of the next one from their next "
        "heartbeat (interval 1 s). The median shows the mode most runs landed in",
        "leave s: from member 0's close() (LeaveGroup) to the other 9 covering every partition",
        f"retries: runs taken again because a kafka-python member went silent after a "
        f"rebalance (a client bug in kafka-python 3.0.12, seen with both brokers): abandoned "
        f"after {W7_STUCK_S} s, at most {W7_ATTEMPTS - 1} retries per run",
    ]


# W16 --------------------------------------------------------------------------------------
W16_MEMBERS, W16_PARTITIONS = 5, 10
# Kafka 3.9 serves KIP-848 once the consumer protocol is listed (pybroker's default lists it);
# group.consumer.heartbeat.interval.ms is 5 s on both (Kafka's default)
W16_OVERRIDES: dict[str, object] = {"group.coordinator.rebalance.protocols": "classic,consumer"}


def w16_setup(target: Target, sizes: dict) -> dict:
    topic = f"w16-{uuid.uuid4().hex[:6]}"
    create_topics(target, [topic], W16_PARTITIONS)
    workdir = Path(target.log_dirs[0]).parent / "w16"
    cp = java.compile_app("GroupConsumer.java", workdir / "classes", clients4=True)
    return {"sizes": sizes, "topic": topic, "cp": cp, "workdir": workdir}


def w16_owned(proc: java.JavaProcess) -> set[str]:
    owned: set[str] = set()
    for line in proc.stdout_text().splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("event") == "assigned":
            owned |= set(e["partitions"])
        elif e.get("event") in ("revoked", "lost"):
            owned -= set(e["partitions"])
    return owned


def w16_until_stable(
    target: Target,
    st: dict,
    protocol: str,
    group: str,
    *,
    workdir: Path | str,
    name: str,
    jvm_args: list[str] | None = None,
) -> tuple[float, list[java.JavaProcess]]:
    """Start the W16 consumers (``name``-k) in ``group`` and wait until each owns its share of
    the partitions: (seconds from their start, the processes, stopped by then)."""
    procs: list[java.JavaProcess] = []
    t0 = time.monotonic()
    try:
        for k in range(W16_MEMBERS):
            procs.append(
                java.start_main(
                    "GroupConsumer",
                    [target.bootstrap, group, st["topic"], "0", "0", f"group.protocol={protocol}"],
                    workdir=workdir,
                    name=f"{name}-{k}",
                    cp=st["cp"],
                    log4j=None,
                    jvm_args=jvm_args,
                )
            )
        want = W16_PARTITIONS // W16_MEMBERS
        while True:
            owned = [w16_owned(p) for p in procs]
            if all(len(o) == want for o in owned) and len(set().union(*owned)) == W16_PARTITIONS:
                return time.monotonic() - t0, procs
            if time.monotonic() - t0 > 180:
                raise WorkloadError(f"{protocol}: no stable assignment in 180 s: {owned}")
            time.sleep(0.05)
    finally:
        for p in procs:
            p.stop()


def _w16_time_to_stable(target: Target, st: dict, protocol: str, i: int) -> float:
    """Seconds from starting five Java 4.1 consumers to each owning two partitions."""
    group = f"w16-{protocol}-{i}-{uuid.uuid4().hex[:6]}"
    took, _ = w16_until_stable(target, st, protocol, group, workdir=st["workdir"], name=group)
    return took


def w16_run(target: Target, st: dict, i: int) -> dict[str, float]:
    consumer = _w16_time_to_stable(target, st, "consumer", i)
    classic = _w16_time_to_stable(target, st, "classic", i)
    return {"consumer protocol s": consumer, "classic protocol s": classic}


def w16_cmds(sizes: dict) -> list[str]:
    return [
        f"topic: {W16_PARTITIONS} partitions, RF 1; brokers with "
        "group.coordinator.rebalance.protocols=classic,consumer (Kafka 3.9: KIP-848 enabled)",
        f"{W16_MEMBERS} processes of java/clients4/src/GroupConsumer.java (kafka-clients 4.1.1, "
        "-Xmx256m serial GC) started together in a fresh group, group.protocol=consumer then "
        "=classic: seconds from the first start until each owns "
        f"{W16_PARTITIONS // W16_MEMBERS} partitions (their assigned/revoked events); "
        "JVM start-up is in both figures",
    ]


# W17 --------------------------------------------------------------------------------------
# Kafka 3.9 serves the online migration with group.consumer.migration.policy (4.0's default,
# bidirectional, set on both brokers)
W17_OVERRIDES: dict[str, object] = dict(
    W16_OVERRIDES, **{"group.consumer.migration.policy": "bidirectional"}
)


def _w17_start(target: Target, st: dict, group: str, name: str, protocol: str):
    return java.start_main(
        "GroupConsumer",
        [target.bootstrap, group, st["topic"], "0", "0", f"group.protocol={protocol}"],
        workdir=st["workdir"],
        name=name,
        cp=st["cp"],
        log4j=None,
    )


def w17_wait_split(procs: list, want: int, what: str, t0: float) -> float:
    while True:
        owned = [w16_owned(p) for p in procs]
        if all(len(o) == want for o in owned) and len(set().union(*owned)) == W16_PARTITIONS:
            return time.monotonic() - t0
        if time.monotonic() - t0 > 180:
            raise WorkloadError(f"{what}: no even split in 180 s: {owned}")
        time.sleep(0.05)


def w17_run(target: Target, st: dict, i: int) -> dict[str, float]:
    """Two classic members hold the group; three consumer-protocol members join it (the
    upgrade); then those three leave (the downgrade)."""
    group = f"w17-{i}-{uuid.uuid4().hex[:6]}"
    classic = [_w17_start(target, st, group, f"{group}-c{k}", "classic") for k in range(2)]
    modern: list = []
    try:
        w17_wait_split(classic, W16_PARTITIONS // 2, "classic members", time.monotonic())
        t0 = time.monotonic()
        modern = [_w17_start(target, st, group, f"{group}-k{k}", "consumer") for k in range(3)]
        upgrade = w17_wait_split(classic + modern, 2, "after the upgrade", t0)
        t1 = time.monotonic()
        for p in modern:
            p.stop()
        downgrade = w17_wait_split(classic, W16_PARTITIONS // 2, "after the downgrade", t1)
        return {"upgrade s": upgrade, "downgrade s": downgrade}
    finally:
        for p in classic + modern:
            p.stop()


def w17_cmds(sizes: dict) -> list[str]:
    return [
        f"topic: {W16_PARTITIONS} partitions, RF 1; brokers with "
        "group.coordinator.rebalance.protocols=classic,consumer and "
        "group.consumer.migration.policy=bidirectional (Kafka 3.9 and pybroker alike)",
        "2 GroupConsumer processes (kafka-clients 4.1.1) with group.protocol=classic own 5 "
        "partitions each; then 3 with group.protocol=consumer start: upgrade s = seconds until "
        "the 5 own 2 each; then the 3 stop (close: leave): downgrade s = seconds until the 2 "
        "classic members own 5 each again. JVM start-up is in the upgrade figure",
    ]
