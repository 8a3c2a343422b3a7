"""Many partitions: W8 (10,000 partitions, 1,000 idle connections: Metadata) and W15 (fetch
sessions: a consumer of 1,000 idle partitions, full vs incremental fetches).
"""

from __future__ import annotations

import itertools
import statistics
import time
import uuid

from bench.clients import WorkloadError, create_topics
from bench.targets import Target
from pybroker.testing import rawkafka
from pybroker.testing.procstat import cpu_seconds, rss_mib


# W8 ---------------------------------------------------------------------------------------
def metadata_v12_all(correlation_id: int) -> bytes:
    """Metadata v12 (flexible) for all topics: null topic array, no auto-creation."""
    body = b"\x00" + b"\x00" + b"\x00" + b"\x00"  # topics=null, auto=false, ops=false, tags
    return rawkafka.frame(
        rawkafka.request_header_v2(rawkafka.API_METADATA, 12, correlation_id, "bench") + body
    )


def w8_setup(target: Target, sizes: dict) -> dict:
    n, per = sizes["w8_topics"], sizes["w8_parts_per_topic"]
    names = [f"w8-{k:03d}" for k in range(n)]
    t0 = time.perf_counter()
    create_topics(target, names, per)
    return {"sizes": sizes, "create_s": time.perf_counter() - t0, "partitions": n * per}


def w8_run(target: Target, st: dict, i: int) -> dict[str, float]:
    host, port = target.first
    # Metadata v12, all topics: median of 20 on one connection, after one warm-up
    times = []
    size = 0
    with rawkafka.Conn(host, port, timeout=60) as c:
        for k in range(21):
            t = time.perf_counter()
            c.send(metadata_v12_all(k))
            got = c.recv_frame()
            if got is None or got[0] != k:
                raise WorkloadError(f"Metadata v12: bad answer {got and got[0]}")
            if k:
                times.append(time.perf_counter() - t)
            size = len(got[1])
    rss_parts = rss_mib(target.pids)
    # idle connections: each did one ApiVersions v0 exchange, then is held open
    conns = []
    n = st["sizes"]["w8_connections"]
    try:
        for k in range(n):
            c = rawkafka.Conn(host, port, timeout=30)
            conns.append(c)
            corr, _ = c.roundtrip(rawkafka.api_versions_v0(k))
            if corr != k:
                raise WorkloadError(f"ApiVersions on connection {k}: correlation {corr}")
        time.sleep(1.0)
        rss_conns = rss_mib(target.pids)
        t = time.perf_counter()
        with rawkafka.Conn(host, port, timeout=30) as c:
            c.roundtrip(metadata_v12_all(1))
        answer_s = time.perf_counter() - t
        # and the held connections still answer
        for k in (0, n // 2, n - 1):
            corr, _ = conns[k].roundtrip(rawkafka.api_versions_v0(10_000 + k))
            if corr != 10_000 + k:
                raise WorkloadError("held connection answered with a wrong correlation id")
    finally:
        for c in conns:
            c.close()
    return {
        "metadata ms": statistics.median(times) * 1000,
        "response KiB": size / 1024,
        "RSS MiB (partitions)": rss_parts,
        "RSS MiB (+conns)": rss_conns,
        "conn RSS KiB each": (rss_conns - rss_parts) * 1024 / n,
        "metadata ms (+conns)": answer_s * 1000,
        "create s": st["create_s"],
    }


def w8_cmds(sizes: dict) -> list[str]:
    n, per, c = sizes["w8_topics"], sizes["w8_parts_per_topic"], sizes["w8_connections"]
    return [
        f"setup: {n} topics x {per} partitions = {n * per} partitions, RF 1 (kafka-python "
        "CreateTopics, 10 topics per request; 'create s' is the time until Metadata shows all)",
        "metadata ms: Metadata v12 for all topics (null topic list) on one raw socket, median of "
        "20 round trips after a warm-up (time to the whole response frame; no client decoding)",
        "RSS MiB (partitions): the broker's VmRSS after that",
        f"RSS MiB (+conns): VmRSS with {c} more idle TCP connections held open, each after one "
        "ApiVersions v0 exchange; then one Metadata v12 on a new connection (metadata ms "
        "(+conns)) and ApiVersions on three held ones",
    ]


# W15 --------------------------------------------------------------------------------------
W15_FETCHES = 200


def w15_setup(target: Target, sizes: dict) -> dict:
    topic = f"w15-{uuid.uuid4().hex[:6]}"
    n = sizes["w15_partitions"]
    create_topics(target, [topic], n)
    # Metadata shows leaders before the broker leads them all (Kafka): wait until a fetch of
    # every partition answers without an error
    host, port = target.first
    deadline = time.monotonic() + 120
    with rawkafka.Conn(host, port, timeout=60) as c:
        for k in itertools.count():
            resp, _ = _w15_fetch(c, k, topic, list(range(n)), 0, -1)
            errors = [p for t in resp["responses"] for p in t["partitions"] if p["error_code"]]
            if not errors:
                break
            if time.monotonic() > deadline:
                raise WorkloadError(f"{len(errors)} partitions still answer errors")
            time.sleep(0.5)
    return {"sizes": sizes, "topic": topic}


def _w15_fetch(conn, corr: int, topic: str, partitions: list[int], sid: int, epoch: int):
    from pybroker.wire.codec import decode_response, encode_request

    body = {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": 50 << 20,
        "isolation_level": 0,
        "session_id": sid,
        "session_epoch": epoch,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": p,
                        "current_leader_epoch": -1,
                        "fetch_offset": 0,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20,
                    }
                    for p in partitions
                ],
            }
        ]
        if partitions
        else [],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    conn.send(encode_request(1, 12, corr, "bench-w15", body))
    got = conn.recv_frame()
    if got is None or got[0] != corr:
        raise WorkloadError(f"Fetch v12: bad answer {got and got[0]}")
    _, resp = decode_response(1, 12, corr.to_bytes(4, "big", signed=True) + got[1])
    if resp["error_code"] != 0:
        raise WorkloadError(f"Fetch v12: error {resp['error_code']}")
    return resp, len(got[1]) + 8


def w15_run(target: Target, st: dict, i: int) -> dict[str, float]:
    host, port = target.first
    n = st["sizes"]["w15_partitions"]
    parts = list(range(n))
    out: dict[str, float] = {}
    with rawkafka.Conn(host, port, timeout=60) as c:
        _w15_fetch(c, 0, st["topic"], parts, 0, -1)  # warm-up
        cpu0 = cpu_seconds(target.pids)
        for k in range(W15_FETCHES):
            _, full_size = _w15_fetch(c, 1 + k, st["topic"], parts, 0, -1)
        full = (cpu_seconds(target.pids) - cpu0) / W15_FETCHES
        resp, _ = _w15_fetch(c, 10_000, st["topic"], parts, 0, 0)  # open a session
        sid = resp["session_id"]
        if sid == 0:
            raise WorkloadError("the broker opened no fetch session")
        cpu0 = cpu_seconds(target.pids)
        for k in range(W15_FETCHES):
            resp, inc_size = _w15_fetch(c, 20_000 + k, st["topic"], [], sid, 1 + k)
            if resp["responses"]:
                raise WorkloadError("an incremental answer listed idle partitions")
        inc = (cpu_seconds(target.pids) - cpu0) / W15_FETCHES
        _w15_fetch(c, 30_000, st["topic"], [], sid, -1)  # close it
    out["full fetch CPU ms"] = full * 1000
    out["incremental fetch CPU ms"] = inc * 1000
    out["full / incremental"] = full / inc if inc > 0 else float("inf")
    out["full answer KiB"] = full_size / 1024
    out["incremental answer B"] = float(inc_size)
    return out


def w15_cmds(sizes: dict) -> list[str]:
    n = sizes["w15_partitions"]
    return [
        f"topic: {n} partitions, RF 1, no records (all idle)",
        f"full fetch CPU ms: broker CPU seconds over {W15_FETCHES} Fetch v12 requests naming all "
        f"{n} partitions (session_epoch -1, max_wait_ms 0, min_bytes 0), per request, on one raw "
        "socket after a warm-up",
        f"incremental fetch CPU ms: the same after one epoch-0 fetch opened a session: "
        f"{W15_FETCHES} incremental requests naming no partition (nothing changed), per request",
        "answer sizes: one full answer, one incremental answer (frame bytes)",
    ]
