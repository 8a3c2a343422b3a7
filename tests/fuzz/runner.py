"""The protocol fuzzer's driver: a real broker process, mutated frames, and the checks.

    python -m tests.fuzz.runner --frames 1000000 --seed 7      # (scripts/fuzz-protocol)

1. Starts ``python -m pybroker serve`` (embedded metadata, or ZooKeeper with --zookeeper) with
   the loop-lag monitor on (loop.stall.warn.ms=100) and group.initial.rebalance.delay.ms=0.
2. Creates the fuzz topics (tests/fuzz/frames.py Pool) and a canary topic, and writes known
   record batches (every codec) to the canary.
3. Asks ApiVersions what the broker serves and sends frame 0..N-1 of the seed
   (frames.make_frame, round robin over every advertised (api key, version)) from a few
   concurrent connections.  After each frame an ApiVersions v0 probe follows on the same
   connection: responses come in request order, so the probe's answer closes the exchange
   (acks=0 Produce gets none).  Outcomes: answered, closed by the broker, or no answer within
   --answer-timeout (a long-poll Fetch or JoinGroup may legitimately wait; the broker must then
   still answer a fresh connection).  Every response is decoded with the codec.
4. Meanwhile a well-behaved producer keeps appending to the canary (acks=all), RSS is sampled,
   and the broker's log is watched.  A new traceback or "event loop stalled" line pauses the
   workers and, once the frames in flight are answered, the frames of the window are replayed
   one by one on a fresh connection to find the one that causes it (the reproducer); two
   ApiVersions round trips after each make sure the loop monitor has logged its stall.  A stall is the broker's own only when it
   outlasts the time its loop thread waited for a CPU (the monitor's schedstat figures): a
   loaded machine that held the process off the CPU is no finding.  A frame is a stall's
   reproducer only when each of REPLAYS replays of it brings such a stall back.
5. At the end: the process is alive, its peak RSS (VmHWM) is below --rss-limit-mb, the log
   has no traceback and no stall, the canary reads back exactly (the records written before
   the fuzz and every acknowledged one during it), then SIGTERM must exit 0, the broker must
   start again on the same data dir and the canary must still read back exactly.

Every finding prints the seed, the frame index, the mutation and the frame as hex; the same
frame comes back from ``frames.make_frame(seed, index, ...)`` or ``--replay HEX``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import os
import re
import signal
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pybroker.testing.debug_process import BrokerProcess
from pybroker.wire import codec
from pybroker.wire.record_walker import decode_records as _decode_records
from pybroker.wire.records import COMPRESSION_GZIP, COMPRESSION_NONE, COMPRESSION_ZSTD, build_batch
from pybroker.wire.schema import SCHEMAS

from .frames import BASE_TIMESTAMP, MUTATIONS, Frame, Pool, encode, make_frame

ROOT = Path(__file__).resolve().parents[2]
CANARY = "intact-canary-7d1e"
CANARY_PARTITIONS = 2
PROBE_CORR_BASE = 0x7E570000
TRACEBACK = "Traceback (most recent call last)"
STALL = "event loop stalled"
STALL_LINE = re.compile(
    r"event loop stalled (\d+) ms(?: \(loop thread on CPU (\d+) ms(?:, waiting for a CPU (\d+) ms)?\))?"
)
STALL_MS = 100  # loop.stall.warn.ms of the fuzzed broker
REPLAYS = 3  # a stall's reproducer brings it back on each of this many replays


@dataclasses.dataclass
class Options:
    frames: int = 3000
    seed: int = 1
    workers: int = 4
    answer_timeout: float = 2.0
    rss_limit_mb: int = 300
    zookeeper: str | None = None
    workdir: Path | None = None
    asyncio_debug: bool = False
    progress: bool = False
    strict_stalls: bool = False  # also fail on stalls no frame reproduces
    sweep_every: int = 2500  # frames between sweeps of the stored data
    apis: frozenset[int] | None = None  # only these api keys (default: every advertised one)
    mutations: tuple[str, ...] | None = None  # only these mutation kinds (default: all)
    overrides: dict[str, str] = dataclasses.field(default_factory=dict)  # broker settings
    # what runs as `python -m ...` (before "serve"): tests/fuzz/stalling_broker.py for one
    broker_module: tuple[str, ...] = ("pybroker",)


@dataclasses.dataclass
class Finding:
    kind: str  # traceback | stall | bad_response | unresponsive | exited | rss | canary | restart
    signature: str
    text: str
    frame: Frame | None = None
    count: int = 1

    def render(self, seed: int) -> str:
        out = [f"[{self.kind}] {self.signature} (seen {self.count}x)"]
        if self.frame is not None:
            out.append(f"  seed {seed}, frame {self.frame.describe()}")
            out.append(f"  hex: {self.frame.data.hex()}")
        if self.text:
            out += ["  | " + line for line in self.text.splitlines()[-20:]]
        return "\n".join(out)


@dataclasses.dataclass
class Report:
    seed: int
    frames: int = 0
    seconds: float = 0.0
    per_api: dict[str, collections.Counter] = dataclasses.field(default_factory=dict)
    per_mutation: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    findings: dict[tuple[str, str], Finding] = dataclasses.field(default_factory=dict)
    peak_rss_mb: float = 0.0
    canary_acked: int = 0
    sweeps: int = 0
    interrupted: bool = False
    error_lines: int = 0
    unattributed_stalls: list[str] = dataclasses.field(default_factory=list)

    def add(self, f: Finding) -> None:
        key = (f.kind, f.signature)
        if key in self.findings:
            self.findings[key].count += 1
            if self.findings[key].frame is None and f.frame is not None:
                self.findings[key].frame = f.frame
        else:
            self.findings[key] = f

    def render(self) -> str:
        rate = self.frames / self.seconds if self.seconds else 0.0
        lines = [
            ("INTERRUPTED (SIGTERM/SIGINT) " if self.interrupted else "")
            + f"seed {self.seed}: {self.frames} frames in {self.seconds:.1f} s ({rate:.0f} frames/s), "
            f"peak RSS {self.peak_rss_mb:.0f} MiB, canary batches acknowledged during the run "
            f"{self.canary_acked}, sweeps of the stored data {self.sweeps}, "
            f"ERROR lines in the log {self.error_lines}",
        ]
        lines.append(
            "per mutation: " + ", ".join(f"{k} {n}" for k, n in self.per_mutation.most_common())
        )
        lines.append(f"{'api':<28}{'frames':>8}{'answered':>10}{'closed':>8}{'no answer':>11}")
        for name, c in sorted(self.per_api.items()):
            lines.append(
                f"{name:<28}{c['frames']:>8}{c['answered']:>10}{c['closed']:>8}{c['timeout']:>11}"
            )
        if self.unattributed_stalls:
            lines.append(
                f"stalls no frame reproduced on replay: {len(self.unattributed_stalls)}"
                + "".join("\n  | " + s for s in self.unattributed_stalls[:10])
            )
        lines.append(f"findings: {len(self.findings)}")
        for f in self.findings.values():
            lines.append(f.render(self.seed))
        return "\n".join(lines)


class FuzzBroker(BrokerProcess):
    """The compat harness's broker process, with asyncio debug mode optional (it halves the
    frame rate; the loop-lag monitor reports stalls either way)."""

    asyncio_debug = False
    module: tuple[str, ...] = ("pybroker",)

    def command(self) -> list[str]:
        python, m, _, *rest = super().command()  # python -m pybroker serve ...
        return [python, m, *self.module, *rest]

    def environment(self) -> dict[str, str]:
        env = super().environment()
        if self.module[0] != "pybroker":  # a module of this checkout's tests/
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p
            )
        return env


def rss_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process in MiB."""
    got = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, value = line.split(":")
                got[key] = int(value.split()[0]) / 1024
    return got.get("VmRSS", 0.0), got.get("VmHWM", 0.0)


# -- a small codec client ----------------------------------------------------------------


class Conn:
    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.corr = 0

    async def open(self) -> Conn:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        return self

    def close(self) -> None:
        if self.writer is not None:
            self.writer.transport.abort()
        self.reader = self.writer = None

    async def close_and_reopen(self) -> None:
        self.close()
        await self.open()

    async def read_frame(self, timeout: float) -> bytes:
        (size,) = struct.unpack(">i", await asyncio.wait_for(self.reader.readexactly(4), timeout))
        return await asyncio.wait_for(self.reader.readexactly(size), timeout)

    async def request(self, api_key: int, version: int, body: dict, timeout: float = 15.0) -> dict:
        if self.writer is None:
            await self.open()
        self.corr += 1
        self.writer.write(codec.encode_request(api_key, version, self.corr, "fuzz-setup", body))
        await self.writer.drain()
        corr, resp = codec.decode_response(api_key, version, await self.read_frame(timeout))
        assert corr == self.corr, (corr, self.corr)
        return resp


def probe_frame(corr: int) -> bytes:
    body = encode(18, 0, corr, {})
    return struct.pack(">i", len(body)) + body


# -- the canary ----------------------------------------------------------------------------


def canary_records(tag: str, n: int) -> list[tuple[bytes, bytes, list]]:
    return [
        (f"{tag}-k{i}".encode(), f"{tag}-value-{i}".encode() * (i + 1), [("h", tag.encode())])
        for i in range(n)
    ]


async def produce(conn: Conn, topic: str, partition: int, batch: bytes) -> dict:
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 10000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}],
    }
    resp = await conn.request(0, 8, body)
    return resp["responses"][0]["partition_responses"][0]


class FetchError(AssertionError):
    pass


class PoisonBatch(Exception):
    def __init__(self, offset: int, batch: bytes, why: str) -> None:
        super().__init__(why)
        self.offset, self.batch, self.why = offset, batch, why


async def fetch_all(conn: Conn, topic: str, partition: int, strict: bool = False) -> list[tuple]:
    """(offset, key, value, headers) of every record of a partition, from its log start.
    A batch that does not decode raises PoisonBatch."""
    out: list[tuple] = []
    offset = 0
    for _ in range(100000):
        body = {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 8 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{
                "partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
                "log_start_offset": -1, "partition_max_bytes": 8 << 20}]}],
            "forgotten_topics_data": [], "rack_id": "",
        }  # fmt: skip
        p = (await conn.request(1, 11, body))["responses"][0]["partitions"][0]
        if p["error_code"] == 1 and strict and offset < p["log_start_offset"]:  # deleted records
            offset = p["log_start_offset"]
            continue
        if p["error_code"] != 0:
            raise FetchError(f"fetch {topic}-{partition}@{offset}: error {p['error_code']}")
        data = bytes(p["records"] or b"")
        got = []
        pos = 0
        last = None
        while pos + 12 <= len(data):
            base, length = struct.unpack_from(">qi", data, pos)
            if pos + 12 + length > len(data):
                break
            batch = data[pos : pos + 12 + length]
            try:
                recs = _decode_records(batch)
            except Exception as e:
                raise PoisonBatch(base, batch, f"{type(e).__name__}: {e}") from None
            for r in recs:
                got.append((r.offset, r.key, r.value, tuple(r.headers)))
            last = base + struct.unpack_from(">i", batch, 23)[0]
            pos += 12 + length
        if last is None:
            return out
        out += [g for g in got if g[0] >= offset]
        offset = last + 1
    return out


class Canary:
    """Known records on CANARY: written before the fuzz, appended during it, checked after."""

    def __init__(self) -> None:
        self.expected: dict[int, dict[int, tuple]] = {p: {} for p in range(CANARY_PARTITIONS)}
        self.acked = 0

    async def write(self, conn: Conn, partition: int, tag: str, compression: int) -> None:
        recs = canary_records(tag, 3)
        resp = await produce(conn, CANARY, partition, build_batch(recs, compression=compression))
        if resp["error_code"] != 0:
            raise AssertionError(f"canary produce answered error {resp['error_code']}")
        base = resp["base_offset"]
        for i, (k, v, h) in enumerate(recs):
            self.expected[partition][base + i] = (k, v, tuple((hk, hv) for hk, hv in h))
        self.acked += 1

    async def verify(self, conn: Conn) -> list[str]:
        problems = []
        for p, want in self.expected.items():
            got = {o: (k, v, h) for o, k, v, h in await fetch_all(conn, CANARY, p)}
            for offset, rec in sorted(want.items()):
                if got.get(offset) != rec:
                    problems.append(f"{CANARY}-{p}@{offset}: want {rec!r}, got {got.get(offset)!r}")
            extra = sorted(set(got) - set(want))
            if extra:
                problems.append(f"{CANARY}-{p}: records nobody acknowledged at {extra[:10]}")
        return problems


# -- the log -------------------------------------------------------------------------------


_CHAINED = ("The above exception was the direct cause", "During handling of the above exception")


def _traceback_end_impl(lines: list[str], i: int) -> int | None:
    """Index of the exception line that ends the traceback starting at ``i`` (chained
    tracebacks count as one), or None when it has not been written yet."""
    while True:
        j = i + 1
        while j < len(lines) and (lines[j].startswith((" ", "\t")) or not lines[j]):
            j += 1
        if j >= len(lines):
            return None
        k = j + 1
        while k < len(lines) and not lines[k]:
            k += 1
        if k < len(lines) and lines[k].startswith(_CHAINED):
            k += 1
            while k < len(lines) and not lines[k]:
                k += 1
            if k >= len(lines):
                return None
            if lines[k].startswith(TRACEBACK):
                i = k
                continue
        if k >= len(lines) and j + 1 < len(lines):  # a blank tail: a chain may follow
            return None
        return j


class LogWatch:
    """New complete tracebacks and stall lines in the broker's output since the last look."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.pos = path.stat().st_size if path.exists() else 0
        self.pending = ""

    _traceback_end = staticmethod(_traceback_end_impl)

    def poll(self) -> tuple[list[str], list[str], int]:
        with open(self.path, "rb") as f:
            f.seek(self.pos)
            data = f.read()
        self.pos += len(data)
        text = self.pending + data.decode("utf-8", "replace")
        lines = text.split("\n")
        self.pending = lines.pop()  # an incomplete last line
        tracebacks, stalls, errors = [], [], 0
        i = 0
        while i < len(lines):
            line = lines[i]
            if STALL in line:
                stalls.append(line)
            if " ERROR " in line:
                errors += 1
            if line.startswith(TRACEBACK):
                j = self._traceback_end(lines, i)
                if j is None:  # the exception line has not arrived yet: look again later
                    self.pending = "\n".join(lines[i:] + [self.pending])
                    break
                tracebacks.append("\n".join(lines[max(0, i - 1) : j + 1]))
                i = j
            i += 1
        return tracebacks, stalls, errors


def own_stall_ms(line: str) -> float:
    """How long the loop was held up by the broker itself: the lateness of a stall line less
    the time its thread waited for a CPU (the machine's share; loop_monitor.py)."""
    m = STALL_LINE.search(line)
    if m is None:
        return 0.0
    late, waited = int(m.group(1)), m.group(3)
    return late - int(waited) if waited is not None else float(late)


def own_stalls(lines: list[str]) -> list[str]:
    """The stall lines the broker caused (held up past the threshold without the machine)."""
    return [ln for ln in lines if own_stall_ms(ln) > STALL_MS]


def traceback_signature(tb: str) -> str:
    lines = tb.splitlines()
    files = [ln.strip() for ln in lines if ln.strip().startswith("File ")]
    where = re.sub(r'File ".*/(pybroker/[^"]+)"', r"\1", files[-1]) if files else "?"
    return f"{lines[-1].strip()[:160]} at {where}"


# -- the run -------------------------------------------------------------------------------


class Fuzzer:
    def __init__(self, opts: Options, broker: FuzzBroker) -> None:
        self.opts = opts
        self.broker = broker
        self.report = Report(seed=opts.seed)
        self.pool = Pool()
        self.next_index = 0
        self.pairs: list[tuple[int, int]] = []
        self.kinds = {k: MUTATIONS[k] for k in opts.mutations or MUTATIONS}
        self.gate = asyncio.Event()
        self.gate.set()
        self.in_flight = 0
        self.recent: collections.deque[Frame] = collections.deque(maxlen=4 * opts.workers + 8)
        self.watch = LogWatch(broker.stderr_path)
        self.canary = Canary()
        self.stop = False
        self.probe_corr = PROBE_CORR_BASE
        self.checking = asyncio.Lock()
        self.pipelined: dict[int, list] = {}

    # -- set-up -----------------------------------------------------------------------
    async def setup(self) -> None:
        conn = await Conn(self.broker.host, self.broker.port).open()
        try:
            for name, n in [(t, self.pool.partitions) for t in self.pool.topics] + [
                (CANARY, CANARY_PARTITIONS)
            ]:
                body = {"topics": [{"name": name, "num_partitions": n, "replication_factor": 1,
                                    "assignments": [], "configs": []}],
                        "timeout_ms": 10000, "validate_only": False}  # fmt: skip
                res = (await conn.request(19, 5, body))["topics"][0]
                assert res["error_code"] in (0, 36), res
            await self._wait_leaders(conn)
            for p in range(CANARY_PARTITIONS):
                for c in (COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_ZSTD):
                    await self.canary.write(conn, p, f"before-{p}-{c}", c)
            self.canary.acked = 0
            versions = (await conn.request(18, 3, {"client_software_name": "fuzz",
                                                   "client_software_version": "1"}))["api_keys"]  # fmt: skip
            for k in versions:
                schema = SCHEMAS.by_key.get(k["api_key"])
                if schema is None:
                    continue
                if self.opts.apis is not None and k["api_key"] not in self.opts.apis:
                    continue
                for v in range(k["min_version"], k["max_version"] + 1):
                    if v in schema.request.versions:
                        self.pairs.append((k["api_key"], v))
        finally:
            conn.close()

    async def _wait_leaders(self, conn: Conn) -> None:
        names = list(self.pool.topics) + [CANARY]
        for _ in range(200):
            md = await conn.request(3, 9, {"topics": [{"name": n} for n in names],
                                           "allow_auto_topic_creation": False})  # fmt: skip
            if all(t["error_code"] == 0 and all(p["leader_id"] >= 0 for p in t["partitions"])
                   for t in md["topics"]):  # fmt: skip
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"topics have no leader: {md}")

    # -- workers ----------------------------------------------------------------------
    async def worker(self) -> None:
        conn: Conn | None = None
        while not self.stop:
            await self.gate.wait()
            if self.next_index >= self.opts.frames:
                break
            index = self.next_index
            self.next_index += 1
            if index and index % self.opts.sweep_every == 0:
                await self.sweep()
            frame = make_frame(self.opts.seed, index, self.pairs, self.pool, self.kinds)
            self.in_flight += 1
            try:
                if conn is None:
                    conn = await Conn(self.broker.host, self.broker.port).open()
                outcome = await self.exchange(conn, frame)
                if outcome != "answered":
                    conn.close()
                    conn = None
            except OSError as e:
                self.report.add(Finding("unresponsive", f"cannot connect: {e}", "", frame))
                self.stop = True
                break
            finally:
                self.in_flight -= 1
            self.recent.append(frame)
            self.count(frame, outcome)
            if outcome == "timeout":
                await self.check_alive(frame)
            await self.check_log()
        if conn is not None:
            conn.close()

    def count(self, frame: Frame, outcome: str) -> None:
        name = SCHEMAS.by_key[frame.api_key].name
        c = self.report.per_api.setdefault(name, collections.Counter())
        c["frames"] += 1
        c[outcome] += 1
        self.report.frames += 1
        self.report.per_mutation[frame.mutation] += 1

    async def exchange(self, conn: Conn, frame: Frame) -> str:
        """Send one fuzz frame (and a probe after it); 'answered', 'closed' or 'timeout'."""
        self.probe_corr += 1
        probe = self.probe_corr
        try:
            conn.writer.write(frame.data)
            if frame.half_close:
                conn.writer.write_eof()
            else:
                conn.writer.write(probe_frame(probe))
            await conn.writer.drain()
            while True:
                data = await conn.read_frame(self.opts.answer_timeout)
                (corr,) = struct.unpack_from(">i", data)
                if corr == probe:
                    return "answered"
                self.check_response(frame, data)
        except (asyncio.IncompleteReadError, ConnectionError):
            return "closed"
        except TimeoutError:
            return "timeout"
        finally:
            self.pipelined.pop(id(frame), None)

    def check_response(self, frame: Frame, data: bytes) -> None:
        if frame.requests:
            self.check_pipelined(frame, data)
            return
        body = frame.data[4:]
        if len(body) < 8:
            self.report.add(
                Finding("bad_response", "a response to a frame under 8 bytes", "", frame)
            )
            return
        api_key, version, corr = struct.unpack_from(">hhi", body)
        (got,) = struct.unpack_from(">i", data)
        if got != corr:
            self.report.add(Finding("bad_response", f"correlation id {got} for {corr}", "", frame))
            return
        try:
            codec.decode_response(api_key, version, data)
        except Exception as e:
            if api_key == 18:  # an unsupported ApiVersions version is answered in v0
                try:
                    codec.decode_response(18, 0, data)
                    return
                except Exception:
                    pass
            name = SCHEMAS.by_key[api_key].name if api_key in SCHEMAS.by_key else api_key
            self.report.add(Finding("bad_response", f"{name} v{version} response does not decode: "
                                    f"{type(e).__name__}", data.hex()[:400], frame))  # fmt: skip

    def check_pipelined(self, frame: Frame, data: bytes) -> None:
        """Answers of pipelined requests come in request order (acks=0 Produce: none)."""
        (got,) = struct.unpack_from(">i", data)
        pending = self.pipelined.setdefault(id(frame), list(frame.requests))
        while pending and pending[0][2] != got:
            pending.pop(0)  # no answer for it (acks=0) or an answer skipped
        if not pending:
            self.report.add(
                Finding("bad_response", f"pipelined answer {got} out of order", "", frame)
            )
            return
        api_key, version, _ = pending.pop(0)
        try:
            codec.decode_response(api_key, version, data)
        except Exception as e:
            self.report.add(Finding("bad_response", f"{SCHEMAS.by_key[api_key].name} v{version} "
                                    f"response does not decode: {type(e).__name__}",
                                    data.hex()[:400], frame))  # fmt: skip

    async def check_alive(self, frame: Frame | None) -> bool:
        if not self.broker.is_running():
            self.report.add(Finding("exited", f"broker exited with {self.broker.proc.returncode}",
                                    self.broker.output(40), frame))  # fmt: skip
            self.stop = True
            return False
        conn = Conn(self.broker.host, self.broker.port)
        try:
            # a loaded machine may hold the broker up for seconds: the deadline is generous
            await asyncio.wait_for(conn.open(), 30)
            await conn.request(18, 0, {}, timeout=30)
            return True
        except (OSError, TimeoutError, asyncio.IncompleteReadError) as e:
            self.report.add(Finding("unresponsive", f"no ApiVersions answer: {e!r}", "", frame))
            self.stop = True
            return False
        finally:
            conn.close()

    # -- log findings and their reproducers ------------------------------------------
    async def check_log(self, final: bool = False) -> None:
        if self.checking.locked():
            return
        async with self.checking:
            tracebacks, stalls, errors = self.watch.poll()
            self.report.error_lines += errors
            if not tracebacks and not stalls:
                return
            self.gate.clear()
            try:
                while self.in_flight:
                    await asyncio.sleep(0.01)
                # the window once the frames in flight are answered: the one that stalled the
                # loop is often still in flight when another connection's answer, held up
                # behind the stall, comes back first and its worker sees the line
                window = list(self.recent)
                await asyncio.sleep(0.2)
                more_tb, more_st, more_err = self.watch.poll()
                tracebacks += more_tb
                stalls += more_st
                self.report.error_lines += more_err
                own = own_stalls(stalls)
                culprit = None
                if not final and (tracebacks or own):
                    culprit = await self.replay_window(window, stalls=bool(own))
                for tb in tracebacks:
                    self.report.add(Finding("traceback", traceback_signature(tb), tb, culprit))
                for line in stalls:
                    if culprit is None or line not in own:
                        # the machine held the loop up (it waited for a CPU), or no frame of
                        # the window brings the stall back on every replay (a collection, a
                        # neighbour): counted, shown, and fatal only with --strict-stalls
                        self.report.unattributed_stalls.append(line)
                        if not self.opts.strict_stalls:
                            continue
                    sig = "event loop stalled over 100 ms"
                    self.report.add(Finding("stall", sig, line, culprit))
            finally:
                self.gate.set()

    async def replay_window(self, window: list[Frame], stalls: bool = True) -> Frame | None:
        """Send the frames of the window one by one, newest first: the reproducer is the first
        after which a traceback is logged, or (``stalls``) after which a stall of the broker's
        own (own_stall_ms) is logged on each of REPLAYS replays.  One replay that happens to
        meet a stall is no proof on a loaded machine."""
        for frame in reversed(window):
            tbs, sts = await self.replay_once(frame)
            if tbs is None or tbs:
                return frame
            if not stalls or not own_stalls(sts):
                continue
            for _ in range(REPLAYS - 1):
                tbs, sts = await self.replay_once(frame)
                if tbs is None or tbs:
                    return frame
                if not own_stalls(sts):
                    break
            else:
                return frame
        return None

    async def replay_once(self, frame: Frame) -> tuple[list[str] | None, list[str]]:
        """Send the frame on a fresh connection; the tracebacks and stall lines logged after
        it (None for the tracebacks: the broker could not be reached)."""
        conn = Conn(self.broker.host, self.broker.port)
        try:
            await conn.open()
            await self.exchange(conn, frame)
            await self.monitor_woken()
        except (OSError, TimeoutError, asyncio.IncompleteReadError):
            return None, []
        finally:
            conn.close()
        await asyncio.sleep(0.15)
        tbs, sts, errs = self.watch.poll()
        self.report.error_lines += errs
        return tbs, sts

    async def monitor_woken(self) -> None:
        """Return once the broker's loop monitor has logged a stall the frame just answered
        caused, however late a loaded machine lets the broker run: two ApiVersions round
        trips, one after the other, on a fresh connection.  The loop monitor's timer fell due
        during the stall and runs in the loop's next round, after that round's reads, which
        may answer the first request at once (connection.py answers in data_received); the
        second request is read only after that answer, so in a later round, after the monitor
        wrote its line (loop_monitor.py logs it there and then)."""
        conn = Conn(self.broker.host, self.broker.port)
        try:
            await asyncio.wait_for(conn.open(), 30)
            for _ in range(2):
                await conn.request(18, 0, {}, timeout=30)
        finally:
            conn.close()

    # -- the stored data -------------------------------------------------------------
    async def sweep(self) -> None:
        """Read back what the fuzz left on its topics, as consumers and admin tools would:
        ListOffsets by timestamp (-3 max timestamp, a time, earliest, latest) on every
        partition, and a Fetch of every batch, each of which must decode (only valid batches
        may be appended).  Workers pause meanwhile; log findings are the sweep's."""
        await self.check_log()
        async with self.checking:
            await self._sweep()

    async def _sweep(self) -> None:
        self.gate.clear()
        conn = Conn(self.broker.host, self.broker.port)
        try:
            while self.in_flight:
                await asyncio.sleep(0.01)
            await conn.open()
            md = await conn.request(3, 9, {"topics": [{"name": t} for t in self.pool.topics],
                                           "allow_auto_topic_creation": False})  # fmt: skip
            for t in md["topics"]:
                for p in sorted(p["partition_index"] for p in t["partitions"]):
                    await self.sweep_partition(conn, t["name"], p)
        except (OSError, TimeoutError, asyncio.IncompleteReadError, AssertionError) as e:
            conn.close()
            if await self.check_alive(None):
                self.report.add(Finding("sweep", f"reading stored data failed: {e!r}", ""))
        finally:
            conn.close()
            self.report.sweeps += 1
            self.gate.set()
        await asyncio.sleep(0.2)
        tracebacks, stalls, errors = self.watch.poll()
        self.report.error_lines += errors
        for tb in tracebacks:
            self.report.add(
                Finding("traceback", "reading stored data: " + traceback_signature(tb), tb)
            )
        own = own_stalls(stalls)
        for line in stalls:
            if line not in own:  # the machine held the loop up meanwhile
                self.report.unattributed_stalls.append(line)
                if not self.opts.strict_stalls:
                    continue
            self.report.add(Finding("stall", "reading stored data: event loop stalled", line))

    async def sweep_partition(self, conn: Conn, topic: str, partition: int) -> None:
        for ts in (-3, BASE_TIMESTAMP, -2, -1):
            body = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic,
                    "partitions": [{"partition_index": partition, "current_leader_epoch": -1,
                                    "timestamp": ts}]}]}  # fmt: skip
            try:
                await conn.request(2, 7, body, timeout=30)
            except (asyncio.IncompleteReadError, ConnectionError):
                self.report.add(Finding("sweep", f"ListOffsets({ts}) closed the connection", ""))
                await conn.close_and_reopen()
        try:
            await fetch_all(conn, topic, partition, strict=True)
        except (asyncio.IncompleteReadError, ConnectionError):
            self.report.add(Finding("sweep", "Fetch of stored data closed the connection", ""))
            await conn.close_and_reopen()
        except PoisonBatch as e:
            self.report.add(Finding("stored_poison", f"a stored batch does not decode: {e.why}",
                                    f"{topic}-{partition}@{e.offset}: {e.batch[:300].hex()}"))  # fmt: skip
        except FetchError:
            pass  # a fuzz topic deleted or shrunk meanwhile: nothing to read

    # -- background checks ------------------------------------------------------------
    async def canary_writer(self) -> None:
        conn = await Conn(self.broker.host, self.broker.port).open()
        n = 0
        try:
            while not self.stop:
                await asyncio.sleep(0.25)
                n += 1
                codec_id = (COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_ZSTD)[n % 3]
                try:
                    await self.canary.write(conn, n % CANARY_PARTITIONS, f"during-{n}", codec_id)
                except (OSError, TimeoutError, asyncio.IncompleteReadError, AssertionError) as e:
                    self.report.add(Finding("canary", f"a valid produce failed: {e!r}", ""))
                    conn.close()
                    conn = await Conn(self.broker.host, self.broker.port).open()
        finally:
            conn.close()

    async def rss_sampler(self) -> None:
        while not self.stop:
            if not self.broker.is_running():
                await self.check_alive(self.recent[-1] if self.recent else None)
                return
            _, hwm = rss_mb(self.broker.pid)
            self.report.peak_rss_mb = max(self.report.peak_rss_mb, hwm)
            await asyncio.sleep(0.5)

    async def progress(self, start: float) -> None:
        while not self.stop:
            await asyncio.sleep(10)
            rate = self.report.frames / max(time.monotonic() - start, 1e-9)
            print(f"  {self.report.frames} frames, {rate:.0f}/s, findings {len(self.report.findings)}, "
                  f"peak RSS {self.report.peak_rss_mb:.0f} MiB", file=sys.stderr, flush=True)  # fmt: skip

    def interrupt(self) -> None:
        """SIGTERM / Ctrl-C: send no more frames, then run the final checks and report."""
        if self.opts.frames > self.next_index:
            print(f"interrupted: stopping after frame {self.next_index}", file=sys.stderr)
            self.opts.frames = self.next_index
            self.report.interrupted = True

    async def run(self) -> Report:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.interrupt)
        await self.setup()
        start = time.monotonic()
        bg = [asyncio.create_task(self.canary_writer()), asyncio.create_task(self.rss_sampler())]
        if self.opts.progress:
            bg.append(asyncio.create_task(self.progress(start)))
        await asyncio.gather(*(self.worker() for _ in range(self.opts.workers)))
        self.report.seconds = time.monotonic() - start
        self.stop = True
        await asyncio.gather(*bg, return_exceptions=True)
        self.report.canary_acked = self.canary.acked
        await self.final_checks()
        return self.report

    async def final_checks(self) -> None:
        if not await self.check_alive(None):
            return
        await self.sweep()
        await asyncio.sleep(0.3)
        await self.check_log(final=True)
        _, hwm = rss_mb(self.broker.pid)
        self.report.peak_rss_mb = max(self.report.peak_rss_mb, hwm)
        if self.report.peak_rss_mb > self.opts.rss_limit_mb:
            self.report.add(Finding("rss", f"peak RSS {self.report.peak_rss_mb:.0f} MiB above "
                                    f"{self.opts.rss_limit_mb} MiB", ""))  # fmt: skip
        await self.verify_canary("after the fuzz")
        # a clean stop and a start on the same data dir
        try:
            await asyncio.to_thread(self.broker.stop)
            await asyncio.to_thread(self.broker.restart)
        except (AssertionError, RuntimeError) as e:
            self.report.add(Finding("restart", "SIGTERM / start again failed", str(e)))
            return
        await self.verify_canary("after a restart")
        await self.check_log(final=True)

    async def verify_canary(self, when: str) -> None:
        conn = Conn(self.broker.host, self.broker.port)
        try:
            problems = await self.canary.verify(conn)
        except (OSError, AssertionError, TimeoutError, asyncio.IncompleteReadError) as e:
            problems = [repr(e)]
        finally:
            conn.close()
        if problems:
            self.report.add(Finding("canary", f"canary damaged {when}", "\n".join(problems[:20])))


def run(opts: Options) -> Report:
    workdir = Path(opts.workdir or tempfile.mkdtemp(prefix="pybroker-fuzz-"))
    broker = FuzzBroker(
        workdir,
        zookeeper_connect=opts.zookeeper,
        overrides={
            "loop.stall.warn.ms": STALL_MS,
            "group.initial.rebalance.delay.ms": 0,
            "group.min.session.timeout.ms": 100,  # members the fuzz abandons expire soon
            "num.partitions": 3,
            **opts.overrides,
        },
    )
    broker.asyncio_debug = opts.asyncio_debug
    broker.module = opts.broker_module
    broker.start()
    try:
        return asyncio.run(Fuzzer(opts, broker).run())
    finally:
        if broker.is_running():
            try:
                broker.stop()
            except AssertionError:
                pass
        broker.cleanup()


def replay(hex_frames: list[str], host: str, port: int) -> None:
    """Send frames (hex, size prefix included) one per connection and print what came back."""

    async def go() -> None:
        for h in hex_frames:
            conn = await Conn(host, port).open()
            conn.writer.write(bytes.fromhex(h))
            await conn.writer.drain()
            try:
                data = await conn.read_frame(5)
                print(f"answered {len(data)} bytes: {data[:64].hex()}")
            except (asyncio.IncompleteReadError, ConnectionError):
                print("closed by the broker")
            except TimeoutError:
                print("no answer within 5 s")
            conn.close()

    asyncio.run(go())


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="fuzz-protocol", description=__doc__.split("\n")[0])
    p.add_argument("--frames", type=int, default=1_000_000)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--rss-limit-mb", type=int, default=300)
    p.add_argument("--answer-timeout", type=float, default=2.0)
    p.add_argument("--apis", help="only these api keys, e.g. 0,2,37 (default: all served)")
    p.add_argument("--mutations", help="only these mutation kinds, e.g. name,valid (default: all)")
    p.add_argument("--zookeeper", metavar="HOST:PORT", help="metadata in this ZooKeeper")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="a broker setting, e.g. auto.create.topics.enable=false")  # fmt: skip
    p.add_argument("--workdir", type=Path)
    p.add_argument(
        "--asyncio-debug", action="store_true", help="PYTHONASYNCIODEBUG=1 in the broker"
    )
    p.add_argument("--strict-stalls", action="store_true",
                   help="a stall no frame reproduces on replay is a finding too")  # fmt: skip
    p.add_argument("--replay", nargs="+", metavar="HEX", help="send these frames to --broker")
    p.add_argument("--broker", default="127.0.0.1:9092")
    args = p.parse_args(argv)
    if args.replay:
        host, port = args.broker.rsplit(":", 1)
        replay(args.replay, host, int(port))
        return 0
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(3), "big")
    opts = Options(
        frames=args.frames, seed=seed, workers=args.workers, answer_timeout=args.answer_timeout,
        rss_limit_mb=args.rss_limit_mb,
        zookeeper=args.zookeeper, workdir=args.workdir, asyncio_debug=args.asyncio_debug,
        strict_stalls=args.strict_stalls,
        apis=frozenset(int(k) for k in args.apis.split(",")) if args.apis else None,
        mutations=tuple(args.mutations.split(",")) if args.mutations else None,
        overrides=dict(o.split("=", 1) for o in args.override),
        progress=True,
    )  # fmt: skip
    # during the run the fuzzer's own handler ends it early with the final checks and the
    # report; before and after it, stop the broker on the way out
    signal.signal(signal.SIGTERM, _interrupt)
    print(f"fuzzing with seed {seed}, {args.frames} frames", file=sys.stderr, flush=True)
    report = run(opts)
    print(report.render())
    return 1 if report.findings else 0


if __name__ == "__main__":
    sys.exit(main())
