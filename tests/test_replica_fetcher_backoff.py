"""replication/fetcher.py against a leader that answers errors for some partitions (a follower
learning of new partitions before their leader does, as while many topics are created).

Kafka's AbstractFetcherThread leaves a failed partition out of its fetches for
replica.fetch.backoff.ms and keeps long-polling the others; pybroker's first retry comes
sooner (FIRST_BACKOFF_S), the delay doubling up to replica.fetch.backoff.ms.  The leader here is a small Fetch
server on a loopback port: it answers at once when a partition fails or has records, and
otherwise holds the request for its max_wait_ms, as a Kafka leader does.  What is asserted
are counts and orderings of the requests it saw, with margins that load can only widen.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from types import SimpleNamespace

from pybroker.clock import ManualClock
from pybroker.coord.metadata.model import BrokerInfo
from pybroker.errors import ErrorCode
from pybroker.log.partition_log import LogConfig, PartitionLog
from pybroker.replication.fetcher import FIRST_BACKOFF_S, ReplicaFetcher
from pybroker.replication.replica import FOLLOWER, Replica
from pybroker.wire import codec
from pybroker.wire.records import build_batch

BACKOFF_MS = 1000  # Kafka's replica.fetch.backoff.ms default
LEADER, FOLLOWER_ID = 0, 1


class FakeLeader:
    """Fetch v12 without sessions: ``good`` partitions hold records, ``bad`` ones answer
    NOT_LEADER_OR_FOLLOWER (the leader has not taken them up)."""

    def __init__(self, good: list[tuple[str, int]], bad: set[tuple[str, int]]) -> None:
        self.logs: dict[tuple[str, int], list[bytes]] = {k: [] for k in good}
        self.bad = bad
        self.requests: list[tuple[float, bool, bool]] = []  # (arrival, asked a bad one, long poll)
        self.appended = asyncio.Event()
        self.server: asyncio.Server | None = None

    def append(self, key: tuple[str, int], n: int) -> None:
        base = sum(1 for _ in self.logs[key]) * n
        self.logs[key].append(
            bytes(build_batch([(None, b"v", [])] * n, base_offset=base, partition_leader_epoch=0))
        )
        self.appended.set()

    def end(self, key: tuple[str, int]) -> int:
        return 3 * len(self.logs[key])

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        assert self.server is not None
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big")
                header, body = codec.decode_request(await reader.readexactly(size))
                assert header["request_api_key"] == 1, header
                answer = await self._fetch(body)
                parts = codec.encode_response(
                    1, header["request_api_version"], header["correlation_id"], answer
                )
                writer.write(b"".join(bytes(p) for p in parts))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    def _answer(self, body: dict) -> tuple[list[dict], bool, bool]:
        out, errors, data = [], False, False
        for t in body["topics"]:
            parts = []
            for p in t["partitions"]:
                key = (t["topic"], p["partition"])
                entry = {"partition_index": key[1], "high_watermark": 0, "records": b""}
                if key in self.bad or key not in self.logs:
                    entry["error_code"] = ErrorCode.NOT_LEADER_OR_FOLLOWER
                    entry["high_watermark"] = -1
                    errors = True
                else:
                    end = self.end(key)
                    entry["error_code"] = ErrorCode.NONE
                    entry["high_watermark"] = end
                    entry["last_stable_offset"] = end
                    if p["fetch_offset"] < end:
                        entry["records"] = b"".join(self.logs[key])[
                            self._position(key, p["fetch_offset"]) :
                        ]
                        data = True
                parts.append(entry)
            out.append({"topic": t["topic"], "partitions": parts})
        return out, errors, data

    def _position(self, key: tuple[str, int], offset: int) -> int:
        return sum(len(b) for b in self.logs[key][: offset // 3])

    async def _fetch(self, body: dict) -> dict:
        arrival = time.monotonic()
        asked_bad = any(
            (t["topic"], p["partition"]) in self.bad
            for t in body["topics"]
            for p in t["partitions"]
        )
        self.appended.clear()
        responses, errors, data = self._answer(body)
        long_poll = not errors and not data
        if long_poll:  # nothing to send: hold it for max_wait_ms unless records arrive
            try:
                await asyncio.wait_for(self.appended.wait(), body["max_wait_ms"] / 1000.0)
            except TimeoutError:
                pass
            responses, _, _ = self._answer(body)
        self.requests.append((arrival, asked_bad, long_poll))
        return {"error_code": 0, "session_id": 0, "responses": responses}


def _manager(port: int, backoff_ms: int = BACKOFF_MS) -> SimpleNamespace:
    return SimpleNamespace(
        broker_id=FOLLOWER_ID,
        cluster=SimpleNamespace(brokers={LEADER: BrokerInfo(LEADER, "127.0.0.1", port)}),
        inter_broker_listener=None,
        inter_broker_ssl=None,
        inter_broker_sasl=None,
        throttles=None,
        logs=None,
        purgatory=SimpleNamespace(notify=lambda key: None),
        replication_bytes_in=0,
        replica_fetch_backoff_ms=backoff_ms,
    )


def _replica(tmp: Path, key: tuple[str, int]) -> Replica:
    log = PartitionLog.open(tmp / f"{key[0]}-{key[1]}", LogConfig(), ManualClock())
    return Replica(key[0], key[1], log, role=FOLLOWER, leader=LEADER, leader_epoch=0, isr=[0, 1])


async def _until(check, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


def _bad_gaps(requests: list[tuple[float, bool, bool]]) -> list[float]:
    times = [t for t, asked_bad, _ in requests if asked_bad]
    return [b - a for a, b in zip(times, times[1:], strict=False)]


def _assert_backed_off(gaps: list[float]) -> None:
    """The k-th retry of failing partitions comes no sooner than the k-th delay (the first,
    doubling, up to the backoff); the last ones a whole backoff apart.  Load only widens the
    gaps.  (The old fetcher asked again within milliseconds.)"""
    backoff = BACKOFF_MS / 1000
    floors = [min(FIRST_BACKOFF_S * 2**k, backoff) for k in range(len(gaps))]
    assert all(g >= 0.9 * f for g, f in zip(gaps, floors, strict=True)), (gaps, floors)
    assert floors[-1] == backoff, "wait for more retries"


def test_failing_partitions_wait_out_the_backoff_while_the_others_replicate(tmp_path):
    good = [("good", 0), ("good", 1)]
    bad = {("bad", 0), ("bad", 1)}

    async def main() -> None:
        leader = FakeLeader(good, bad)
        for key in good:
            leader.append(key, 3)
        port = await leader.start()
        fetcher = ReplicaFetcher(_manager(port), LEADER)  # type: ignore[arg-type]
        replicas = {key: _replica(tmp_path, key) for key in [*good, *sorted(bad)]}
        try:
            for r in replicas.values():
                fetcher.add(r)
            fetcher.start()
            await _until(lambda: all(replicas[k].log.log_end_offset == 3 for k in good))
            # the leader's records keep arriving while the bad partitions keep failing
            for key in good:
                leader.append(key, 3)
            await _until(lambda: all(replicas[k].log.log_end_offset == 6 for k in good))
            # the failing partitions are asked again (not dropped), until the delay is whole
            await _until(lambda: sum(1 for _, b, _ in leader.requests if b) >= 9)
        finally:
            await fetcher.stop()
            await leader.close()
        # ... but each time only after its delay, and in between the others are long-polled:
        # the leader held requests for them (one with a failing partition is answered at once)
        _assert_backed_off(_bad_gaps(leader.requests))
        assert any(long_poll for _, _, long_poll in leader.requests), leader.requests
        assert all(replicas[k].log.log_end_offset == 0 for k in bad)

    asyncio.run(main())


def test_a_fetcher_whose_partitions_all_fail_waits_between_requests(tmp_path, caplog):
    bad = {("bad", 0), ("bad", 1), ("bad", 2)}

    async def main() -> None:
        leader = FakeLeader([], bad)
        port = await leader.start()
        fetcher = ReplicaFetcher(_manager(port), LEADER)  # type: ignore[arg-type]
        try:
            for key in sorted(bad):
                fetcher.add(_replica(tmp_path, key))
            fetcher.start()
            await _until(lambda: len(leader.requests) >= 9)
        finally:
            await fetcher.stop()
            await leader.close()
        _assert_backed_off(_bad_gaps(leader.requests))

    caplog.set_level(logging.INFO, logger="pybroker.replication.fetcher")
    asyncio.run(main())
    # partitions that begin failing together are logged in one line (a leader suspended at
    # 100,000 replicas made 16,000 lines, which held the follower's loop for seconds)
    lines = [r.getMessage() for r in caplog.records if "answered error" in r.getMessage()]
    assert len(lines) == 1 and "for 3 partition(s)" in lines[0], lines


def test_a_partition_handed_over_again_is_not_delayed_by_its_old_errors(tmp_path):
    """Kafka's addPartitions with a new leader epoch starts a new fetch state: a partition
    that failed, then is handed over again (the leader took it up), is asked at once, not
    after the backoff (an hour here: the wait below would time out first)."""
    key = ("late", 0)

    async def main() -> None:
        leader = FakeLeader([key], {key})
        leader.append(key, 3)
        port = await leader.start()
        fetcher = ReplicaFetcher(_manager(port, backoff_ms=3_600_000), LEADER)  # type: ignore[arg-type]
        replica = _replica(tmp_path, key)
        try:
            fetcher.add(replica)
            fetcher.start()
            await _until(lambda: len(leader.requests) >= 1)
            assert replica.log.log_end_offset == 0
            leader.bad = set()  # the leader took it up
            replica.leader_epoch = 1
            fetcher.add(replica)
            await _until(lambda: replica.log.log_end_offset == 3)
        finally:
            await fetcher.stop()
            await leader.close()

    asyncio.run(main())
