"""A Fetch answer of many partitions holds few segment descriptors (handlers/fetch.py's
PINNED_REGIONS / SMALL_REGION), so that it never pushes the broker past RLIMIT_NOFILE.

Found with W22 at 100,000 replicas (docs/scale.md): after a produce to every partition, a
follower's fetch of 11,000+ partitions with one record each held one descriptor per
partition on top of the descriptor cache's 10,000 (half of the limit); the leader's next
checkpoint write failed with EMFILE, its only log dir went offline and the broker stopped.
Here: a broker whose open-files limit is 256 (a descriptor cache of 128), 400 partitions
with a record each, one Fetch of all of them.
"""

from __future__ import annotations

import sys

from pybroker.testing.process import BrokerProcess
from pybroker.testing.scale import (
    Conn,
    create_topics,
    metadata,
    produce_everywhere,
    wait_all_answer,
)

NOFILE = 256
PARTITIONS = 400
FETCH = 1
# the broker raises its soft limit to the hard one at start (builder.raise_open_files_limit):
# both are set before it runs
LIMITED = (
    "import os, resource, sys; "
    f"resource.setrlimit(resource.RLIMIT_NOFILE, ({NOFILE}, {NOFILE})); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)


class LimitedBroker(BrokerProcess):
    def command(self) -> list[str]:
        return [sys.executable, "-c", LIMITED, *super().command()[1:]]


def test_a_fetch_of_more_partitions_than_the_open_files_limit_is_answered(tmp_path):
    broker = LimitedBroker(tmp_path / "b", overrides={"max.broker.partitions": 1000})
    broker.start(60)
    try:
        address = ("127.0.0.1", broker.port)
        create_topics(address, ["many"], PARTITIONS, 1, 60)
        wait_all_answer(address, ["many"], PARTITIONS, 60, poll_s=0.2)
        with Conn(*address) as c:
            md = metadata(c, ["many"])
        assert produce_everywhere(address, md) == 0
        body = {
            "replica_id": -1,
            "max_wait_ms": 0,
            "min_bytes": 1,
            "max_bytes": 16 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": "many",
                    "partitions": [
                        {
                            "partition": p,
                            "current_leader_epoch": -1,
                            "fetch_offset": 0,
                            "last_fetched_epoch": -1,
                            "log_start_offset": -1,
                            "partition_max_bytes": 1 << 20,
                        }
                        for p in range(PARTITIONS)
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        }
        for _ in range(3):  # (the descriptor cache full of the last answer's segments)
            with Conn(*address) as c:
                _, answer = c.request(FETCH, body, version=12)
            assert answer["error_code"] == 0
            parts = answer["responses"][0]["partitions"]
            assert len(parts) == PARTITIONS
            assert all(p["error_code"] == 0 and p["records"] for p in parts), [
                (p["partition_index"], p["error_code"]) for p in parts if p["error_code"]
            ][:5]
        assert broker.is_running()
        stderr = broker.stderr_path.read_text(errors="replace")
        assert "Too many open files" not in stderr
        assert "is offline" not in stderr
    finally:
        broker.stop()
        broker.cleanup()
