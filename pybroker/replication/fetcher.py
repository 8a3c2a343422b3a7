"""The replica fetcher: one task per leader broker copying its partitions to this broker.  After
every leader change a partition is truncated to Kafka's choice (truncation on fetch: the
leader's diverging epoch; OffsetForLeaderEpoch only when that cannot tell), so a replica never
keeps records the current leader's log does not have; then Fetch v12 in an incremental session
appends the leader's batches unchanged, and the local high watermark is min(leader's high
watermark, local log end).  Steps, throttles, backoffs and failures: docs/internals.md ("pybroker/replication/fetcher.py").
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pybroker.errors import ErrorCode
from pybroker.replication.changes import AuditPace
from pybroker.replication.client import BrokerConnection
from pybroker.replication.session_handler import FetchSessionHandler
from pybroker.wire.records import InvalidRecordError, parse_batches

if TYPE_CHECKING:
    from collections.abc import Iterable

    from pybroker.replication.manager import Replica, ReplicaManager

log = logging.getLogger("pybroker.replication.fetcher")

FETCH_VERSION = 12
EPOCH_VERSION = 4
MAX_WAIT_MS = 500
PARTITION_MAX_BYTES = 1024 * 1024
MAX_BYTES = 16 * 1024 * 1024
THROTTLE_BACKOFF_S = 1.0  # Kafka's replica.fetch.backoff.ms, when every partition is held
# A partition's first retry after an error comes after this long (pybroker's own), doubling
# while the error persists up to replica.fetch.backoff.ms (Kafka's delay, every time): a
# leader learns of a new partition or leader epoch milliseconds after its followers (each
# broker reads ZooKeeper itself), and a new leader's high watermark waits for their fetch.
FIRST_BACKOFF_S = 0.05
monotonic = time.monotonic  # the clock of the partitions' error delays
# An answer's partitions are applied (appends, leader-epoch checkpoints) this many at a time
# between passes of the event loop: after a produce to every partition, one answer of 16,000
# partitions at a new leader epoch held the loop for seconds, past a third of the ZooKeeper
# session, and the broker suspended its leadership (W22 at 100,000 replicas, docs/scale.md).
APPLY_BATCH = 256
SESSION_ERRORS = (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH)


@dataclass
class _Fetching:
    replica: Replica
    leader_epoch: int
    truncated: bool = False
    last_error: int = ErrorCode.NONE  # logged once per change, not per retry
    # the fetch parameters last built and what they were built from (leader epoch, log end,
    # last fetched epoch, log start): rebuilt only when that changes, so the session handler
    # sees the same dict for an unchanged partition (FetchSessionHandler.build)
    params: dict | None = None
    built_from: tuple = ()
    # after a partition error: left out of the requests until then (monotonic seconds), as
    # Kafka's PartitionFetchState delay of replica.fetch.backoff.ms
    delayed_until: float = 0.0
    errors: int = 0  # errors in a row (the delay doubles with each)
    serial: int = 0  # the fetcher's _version when added (an answer for an older entry is lost)


class ReplicaFetcher:
    def __init__(self, manager: ReplicaManager, leader_id: int) -> None:
        self.manager = manager
        self.leader_id = leader_id
        self.partitions: dict[tuple[str, int], _Fetching] = {}
        self._changed = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._conn: BrokerConnection | None = None
        self._addr: tuple[str, int] | None = None
        self._stopped = False
        self._session = FetchSessionHandler()
        self._newly_failing: dict[int, list[_Fetching]] = {}  # this answer's, by error code
        self.backoff_s = manager.replica_fetch_backoff_ms / 1000.0
        self._version = 0  # moves on every add / remove
        self._round_version = 0  # _version when the current round of the loop began
        # What each round sends, kept across rounds (docs/internals.md, "pybroker/replication/
        # fetcher.py"): a round looks only at the partitions noted changed (``touch``) since
        # the last, not at every partition of the fetcher.
        self._wanted: dict[tuple[str, int], dict] = {}  # the ready ones' fetch parameters
        self._dirty: set[tuple[str, int]] = set()  # noted since the last refresh
        self._sent_changed: set[tuple[str, int]] = set()  # _wanted entries since the last build
        self._untruncated: set[tuple[str, int]] = set()  # waiting for truncation
        self._delays: list[tuple[float, int, tuple[str, int]]] = []  # (until, n, key) heap
        self._delay_n = 0
        self._compare_all = False  # the next build compares every partition (after a hold)
        self._audit_keys: list[tuple[str, int]] = []
        self._audit_at = 0
        self._audit_pace = AuditPace()

    missed = 0  # missed change notes the audits found (all fetchers)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"fetcher-{self.leader_id}")

    async def stop(self) -> None:
        # The flag ends the loop even if a cancellation is lost inside asyncio.wait_for
        # (Python 3.11 can drop one when the awaited read completes at the same moment).
        self._stopped = True
        self._drop_connection()
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait({self._task}, timeout=2.0)

    def add(self, replica: Replica) -> None:
        # Kafka's truncation on fetch (KAFKA-10554, Fetch v12+): a log with leader epochs is
        # fetched at once with its last fetched epoch, and the leader answers a diverging
        # epoch when the tail must go; OffsetForLeaderEpoch only when that cannot tell
        # (OFFSET_OUT_OF_RANGE above the leader's log end, records the leader refused).  The
        # first fetch at a new leader is one round trip sooner: it is what advances the new
        # leader's high watermark.
        has_epochs = replica.log.leader_epochs.latest_epoch() >= 0
        key = (replica.topic, replica.partition)
        self._version += 1
        self.partitions[key] = _Fetching(
            replica, replica.leader_epoch, truncated=has_epochs, serial=self._version
        )
        self.touch(key)
        self._changed.set()

    def remove(self, topic: str, partition: int) -> None:
        if self.partitions.pop((topic, partition), None) is not None:
            self._version += 1
            self.touch((topic, partition))
            self._changed.set()

    def touch(self, key: tuple[str, int]) -> None:
        """Note that what the next fetch asks for this partition may have changed: added or
        removed, truncated or to be truncated, delayed or no longer, its log end, last epoch
        or log start moved (appends, truncations, DeleteRecords, retention: the fetcher's own
        calls and the replica manager's log-start listener).  Each round refreshes only
        these; an unnoted change is found by the audit and logged."""
        self._dirty.add(key)

    def _current(self, key: tuple[str, int], f: _Fetching) -> bool:
        return self.partitions.get(key) is f

    # -- the loop ------------------------------------------------------------------------------
    async def _run(self) -> None:
        backoff = 0.05
        me = asyncio.current_task()
        # cancelling(): a cancellation that something below swallowed still ends the loop
        while not self._stopped and not (me is not None and me.cancelling()):
            self._round_version = self._version
            if not self.partitions:
                self._changed.clear()
                await self._changed.wait()
                continue
            try:
                conn = self._connection()
                if conn is None:
                    await asyncio.sleep(0.2)
                    continue
                await self._round(conn)
                backoff = 0.05
            except asyncio.CancelledError:
                raise
            except (ConnectionError, OSError) as e:
                log.debug("fetcher for leader %d: %s", self.leader_id, e)
                self._drop_connection()
                await self._pause(backoff)
                backoff = min(backoff * 2, 1.0)
            except Exception:
                log.exception("fetcher for leader %d failed; retrying", self.leader_id)
                self._drop_connection()
                await self._pause(1.0)

    async def _round(self, conn: BrokerConnection) -> None:
        """One round: truncate the partitions that wait for it, then fetch the ready ones."""
        now = self._refresh()
        pending = {}
        for key in self._untruncated:
            f = self.partitions.get(key)
            if f is not None and f.delayed_until <= now:
                pending[key] = f
        if pending:
            await self._truncate(conn, pending)
            self._refresh()  # (those truncated now join this round's fetch)
        if self._wanted:
            await self._fetch(conn)
        elif not pending:
            # every partition is delayed after an error: wait for the first delay to end
            # (Kafka's fetcher awaits the backoff when no partition is ready)
            first = self._delays[0][0] if self._delays else now + FIRST_BACKOFF_S
            await self._pause(max(first - monotonic(), 0.001))

    def _refresh(self) -> float:
        """Bring the kept state in line for the partitions noted since the last refresh (and
        those whose delay ended): the ready ones' fetch parameters in ``_wanted`` (a new dict
        only when they changed), the others out of it.  Returns the time it used."""
        now = monotonic()
        delays, dirty = self._delays, self._dirty
        while delays and delays[0][0] <= now:
            dirty.add(heapq.heappop(delays)[2])
        self._audit(now)
        if not dirty:
            return now
        partitions, wanted, untruncated = self.partitions, self._wanted, self._untruncated
        changed = self._sent_changed
        for key in dirty:
            f = partitions.get(key)
            if f is None or not f.truncated or f.delayed_until > now:
                if f is not None and not f.truncated:
                    untruncated.add(key)
                else:
                    untruncated.discard(key)
                if wanted.pop(key, None) is not None:
                    changed.add(key)
                continue
            untruncated.discard(key)
            params = self._params(key, f)
            if wanted.get(key) is not params:
                wanted[key] = params
                changed.add(key)
        dirty.clear()  # (after the pass: one that failed half-way is done again)
        return now

    @staticmethod
    def _params(key: tuple[str, int], f: _Fetching) -> dict:
        """The partition's fetch parameters: the same dict while they are unchanged (the
        session handler passes over it by identity)."""
        plog = f.replica.log
        now = (
            f.leader_epoch,
            plog.log_end_offset,
            plog.leader_epochs.latest_epoch(),
            plog.log_start_offset,
        )
        if f.params is None or now != f.built_from:
            f.built_from = now
            f.params = {
                "partition": key[1],
                "current_leader_epoch": now[0],
                "fetch_offset": now[1],
                "last_fetched_epoch": now[2],
                "log_start_offset": now[3],
                "partition_max_bytes": PARTITION_MAX_BYTES,
            }
        return f.params

    def stale(self, key: tuple[str, int], now: float) -> bool:
        """Whether the kept state of this partition is not what its logs and flags say now
        (a change nobody noted)."""
        f = self.partitions.get(key)
        kept = self._wanted.get(key)
        if f is None or not f.truncated or f.delayed_until > now:
            return kept is not None or (
                f is not None and not f.truncated and key not in self._untruncated
            )
        if kept is None or kept is not f.params or key in self._untruncated:
            return True
        plog = f.replica.log
        return f.built_from != (
            f.leader_epoch,
            plog.log_end_offset,
            plog.leader_epochs.latest_epoch(),
            plog.log_start_offset,
        )

    def _audit(self, now: float) -> None:
        """Compare the next few partitions' kept state with their logs, so many that each is
        compared at least once every ``audit_period`` (changes.py: 10 s, longer for more than
        5,000 partitions); one that differs without having been noted is a missed ``touch``
        (a defect): logged, and refreshed."""
        budget = self._audit_pace.budget(len(self.partitions), now)
        if not budget:
            return
        keys, i, dirty = self._audit_keys, self._audit_at, self._dirty
        for _ in range(budget):
            if i >= len(keys):
                keys, i = list(self.partitions), 0
                self._audit_keys = keys
                if not keys:
                    break
            key = keys[i]
            i += 1
            if key in dirty or not self.stale(key, now):
                continue
            dirty.add(key)
            ReplicaFetcher.missed += 1
            m = ReplicaFetcher.missed
            if m & (m - 1) == 0:
                log.warning(
                    "a replica fetcher missed a change of %s-%d (%d so far)", key[0], key[1], m
                )
        self._audit_at = i

    async def _pause(self, seconds: float) -> None:
        """Back off, but no longer than until the partitions change: a partition handed over
        after a leader change is taken up at once, not after a backoff of another's errors."""
        if self._version != self._round_version:
            return  # changed since this round began
        self._changed.clear()
        try:
            await asyncio.wait_for(self._changed.wait(), seconds)
        except TimeoutError:
            pass

    def _connection(self) -> BrokerConnection | None:
        broker = self.manager.cluster.brokers.get(self.leader_id)
        if broker is None:
            return None
        addr = broker.endpoint(self.manager.inter_broker_listener)
        if addr is None:  # the leader has no inter-broker listener of ours: nothing to reach
            return None
        if self._conn is None or self._addr != addr:
            self._drop_connection()
            self._conn = BrokerConnection(
                addr[0],
                addr[1],
                f"replica-fetcher-{self.manager.broker_id}",
                ssl=self.manager.inter_broker_ssl,
                sasl=self.manager.inter_broker_sasl,
            )
            self._addr = addr
        return self._conn

    def _drop_connection(self) -> None:
        self._session = FetchSessionHandler()  # a new connection starts a new session
        if self._conn is not None:
            self._conn.close()
        self._conn = None

    # -- truncation ------------------------------------------------------------------------------
    async def _truncate(
        self, conn: BrokerConnection, pending: dict[tuple[str, int], _Fetching]
    ) -> None:
        by_topic: dict[str, list[dict]] = {}
        asked: dict[tuple[str, int], int] = {}
        for (topic, p), f in pending.items():
            epoch = f.replica.log.leader_epochs.latest_epoch()
            if epoch < 0:
                f.truncated = True  # nothing of ours to compare: fetch from our log end
                self.touch((topic, p))
                continue
            asked[(topic, p)] = epoch
            by_topic.setdefault(topic, []).append(
                {"partition": p, "current_leader_epoch": f.leader_epoch, "leader_epoch": epoch}
            )
        if not by_topic:
            return
        resp = await conn.request(
            23,
            EPOCH_VERSION,
            {
                "replica_id": self.manager.broker_id,
                "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
            },
        )
        for t in resp["topics"]:
            for p in t["partitions"]:
                key = (t["topic"], p["partition"])
                f = pending.get(key)
                if f is None or not self._current(key, f):
                    continue
                if p["error_code"] != ErrorCode.NONE:
                    # mostly the leader not knowing yet of the epoch we learned: this
                    # partition is asked again after the backoff, the others go on
                    log.debug("%s-%d: OffsetForLeaderEpoch error %d", *key, p["error_code"])
                    continue
                self._truncate_to_leader(f, asked[key], p["leader_epoch"], p["end_offset"])
                f.errors = 0
        # an error, or a partition the answer left out: not asked again before the backoff
        self._delay(f for key, f in pending.items() if key in asked and not f.truncated)

    def _delay(self, failed: Iterable[_Fetching]) -> None:
        """Kafka's delayPartitions: a partition that failed is left out of the requests for a
        while (FIRST_BACKOFF_S, doubling up to replica.fetch.backoff.ms); the fetcher goes on
        with the others.  A partition handed over again (a new leader or epoch) is a new
        entry, not delayed."""
        now = monotonic()
        for f in failed:
            if f.delayed_until <= now:  # not delayed already
                f.delayed_until = now + min(FIRST_BACKOFF_S * 2**f.errors, self.backoff_s)
                f.errors = min(f.errors + 1, 30)
                key = (f.replica.topic, f.replica.partition)
                self._delay_n += 1
                heapq.heappush(self._delays, (f.delayed_until, self._delay_n, key))
                self.touch(key)

    def _truncate_to_leader(
        self, f: _Fetching, asked: int, leader_epoch: int, end_offset: int
    ) -> None:
        r = f.replica
        plog = r.log
        leo = plog.log_end_offset
        if leader_epoch < 0 or end_offset < 0:
            target = min(plog.high_watermark, leo)  # the leader knows nothing of our epochs
        elif leader_epoch == asked:
            target = min(end_offset, leo)
        else:
            _, local_end = plog.leader_epochs.end_offset_for(leader_epoch, leo)
            target = min(end_offset, local_end if local_end >= 0 else leo, leo)
        if target < leo:
            log.info(
                "%s-%d: truncating divergent tail %d..%d (leader %d epoch %d)",
                r.topic,
                r.partition,
                target,
                leo,
                self.leader_id,
                f.leader_epoch,
            )
        # Always, even at the log end: it also drops epochs of ours that start at the target
        # (an epoch we led without appending to it), which the leader never knew.
        plog.truncate_to(target)
        f.truncated = True
        self.touch((r.topic, r.partition))

    # -- fetching ----------------------------------------------------------------------------------
    async def _fetch(self, conn: BrokerConnection) -> None:
        wanted = self._wanted
        changed: set | None = self._sent_changed
        throttles = self.manager.throttles
        held = False
        if throttles is not None and throttles.follower_exceeded():
            # Kafka's shouldFollowerThrottle: throttled partitions not in the ISR are left
            # out of this fetch (a pass over the partitions only while the quota is exceeded)
            me = self.manager.broker_id
            partitions = self.partitions
            wanted = {
                key: params
                for key, params in wanted.items()
                if me in partitions[key].replica.isr or not throttles.follower_throttled(*key)
            }
            held = len(wanted) < len(self._wanted)
        if held or self._compare_all:
            changed = None  # (the held ones come back: every partition compared once)
        if not wanted and held:
            self._compare_all = True
            await asyncio.sleep(THROTTLE_BACKOFF_S)
            return
        data = self._session.build(wanted, changed)
        self._sent_changed = set()
        self._compare_all = held
        built_at = self._version
        by_topic: dict[str, list[dict]] = {}
        for (topic, _), params in data.partitions.items():
            by_topic.setdefault(topic, []).append(params)
        forgotten: dict[str, list[int]] = {}
        for topic, index in data.forgotten:
            forgotten.setdefault(topic, []).append(index)
        try:
            resp = await conn.request(
                1,
                FETCH_VERSION,
                {
                    "replica_id": self.manager.broker_id,
                    "max_wait_ms": MAX_WAIT_MS,
                    "min_bytes": 1,
                    "max_bytes": MAX_BYTES,
                    "isolation_level": 0,
                    "session_id": data.session_id,
                    "session_epoch": data.epoch,
                    "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
                    "forgotten_topics_data": [
                        {"topic": t, "partitions": ps} for t, ps in forgotten.items()
                    ],
                    "rack_id": "",
                },
                timeout_s=MAX_WAIT_MS / 1000.0 + 30,
            )
        except BaseException:
            self._session.handle_error()
            raise
        self._session.handle_response(data, resp["error_code"], resp["session_id"])
        if resp["error_code"] in SESSION_ERRORS:
            return  # the next request is a full one
        if resp["error_code"] != ErrorCode.NONE:
            raise ConnectionError(f"fetch error {resp['error_code']}")
        failed: list[_Fetching] = []
        self._newly_failing = {}
        applied = 0
        for t in resp["responses"]:
            for p in t["partitions"]:
                applied += 1
                if applied % APPLY_BATCH == 0:
                    await asyncio.sleep(0)  # (a partition removed meanwhile is skipped below)
                key = (t["topic"], p["partition_index"])
                f = self.partitions.get(key)
                if f is None or f.serial > built_at or key not in self._wanted:
                    # what the leader sent for it is lost: start the session again in full
                    self._session.handle_error()
                    continue
                if self._apply(f, p):
                    failed.append(f)
                else:
                    f.errors = 0
        # errors come back at once (the leader does not long-poll a request with one): the
        # failed partitions wait out the backoff, the next request long-polls the others
        self._delay(failed)
        self._log_new_errors()

    def _log_new_errors(self) -> None:
        """One line per error code for the partitions that began failing with it in this
        answer, not one per partition: after a leader's lease is suspended (its loop held up)
        every partition fails at once, and 16,000 lines held the follower's own loop for
        seconds (W22 at 100,000 replicas, docs/scale.md)."""
        for code, fs in self._newly_failing.items():
            names = ", ".join(f"{f.replica.topic}-{f.replica.partition}" for f in fs[:3])
            log.info(
                "fetch from leader %d answered error %d for %d partition(s) (%s%s); retrying",
                self.leader_id,
                code,
                len(fs),
                names,
                ", ..." if len(fs) > 3 else "",
            )
        self._newly_failing = {}

    def _apply(self, f: _Fetching, p: dict) -> bool:
        """Apply one partition's answer; True when it was an error."""
        r = f.replica
        plog = r.log
        code = p["error_code"]
        if code != f.last_error:
            if code != ErrorCode.NONE:  # logged by _log_new_errors, one line per code
                self._newly_failing.setdefault(code, []).append(f)
            f.last_error = code
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            start = p.get("log_start_offset", -1)
            if start > plog.log_end_offset:
                log.info(
                    "%s-%d: leader's log starts at %d; restarting there",
                    r.topic,
                    r.partition,
                    start,
                )
                plog.truncate_fully_and_start_at(start)
                self.touch((r.topic, r.partition))
                return False
            f.truncated = False  # our log end is beyond the leader's: truncate again
            self.touch((r.topic, r.partition))
            return False
        if code != ErrorCode.NONE:
            return True
        diverging = p.get("diverging_epoch") or {}
        if diverging.get("epoch", -1) >= 0:
            self._truncate_to_leader(
                f, plog.leader_epochs.latest_epoch(), diverging["epoch"], diverging["end_offset"]
            )
            return False
        records = p["records"]
        if records:
            buf = bytearray(records)
            try:
                batches = parse_batches(buf, allow_control=True)
            except InvalidRecordError as e:
                log.warning("%s-%d: leader sent invalid records: %s", r.topic, r.partition, e)
                f.truncated = False  # (noted with its delay, _delay)
                return True
            if batches:
                try:
                    plog.append_as_follower(buf, batches)
                except OSError as e:  # the log dir failed (LogManager.fail_dir: offline)
                    self.manager.logs.fail_dir(plog.directory.parent, e)
                    return True
                self.touch((r.topic, r.partition))
                self.manager.replication_bytes_in += len(buf)
                throttles = self.manager.throttles
                if throttles is not None and throttles.follower_throttled(r.topic, r.partition):
                    throttles.record_follower(len(buf))
        leader_start = p.get("log_start_offset", -1)
        plog.high_watermark = min(max(p["high_watermark"], 0), plog.log_end_offset)
        if plog.log_start_offset < leader_start <= plog.high_watermark:
            plog.delete_records_before(leader_start)
            self.touch((r.topic, r.partition))
        self.manager.purgatory.notify((r.topic, r.partition))
        return False
