"""The broker's CPU per OffsetCommit, without a client library in the way: W18's commit loop
from a raw asyncio client, so that a change to the commit path is measured by itself.

    python -m bench.commit_cost [--groups 256] [--seconds 10] [--storage kafka|zookeeper]
                                [--zk] [--version 8] [--profile out.txt] [--loop uvloop]

One pybroker process (embedded metadata store, or a 1-node ZooKeeper with ``--zk``); ``--groups``
connections, each committing offset n+1 of partition 0 of one topic for its own group as a
simple consumer (generation -1, no member id: what Kafka accepts while the group has no
members), one request outstanding per connection, as W18's synchronous committers.  No fetches,
heartbeats or joins: the figure is the commit path alone (decode, coordinator, the store's
write, encode, the socket).  Prints one JSON line: commits/s, broker cores, broker µs per
commit (utime + stime of the broker over the timed part), client cores, the load averages.
``--profile`` runs ``py-spy record --format raw`` on the broker over the timed part.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pybroker.testing.process import BrokerProcess
from pybroker.wire import codec

TOPIC = "commit-cost"


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.corr = reader, writer, 0

    async def request(self, api_key: int, version: int, body: dict) -> dict:
        self.corr += 1
        self.writer.write(codec.encode_request(api_key, version, self.corr, "cost", body))
        (size,) = struct.unpack(">i", await self.reader.readexactly(4))
        frame = await self.reader.readexactly(size)
        corr, out = codec.decode_response(api_key, version, frame)
        assert corr == self.corr
        return out


def commit_body(group: str, offset: int) -> dict:
    return {
        "group_id": group,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "group_instance_id": None,
        "retention_time_ms": -1,
        "topics": [
            {
                "name": TOPIC,
                "partitions": [
                    {
                        "partition_index": 0,
                        "committed_offset": offset,
                        "committed_leader_epoch": -1,
                        "commit_timestamp": -1,
                        "committed_metadata": "",
                    }
                ],
            }
        ],
    }


async def client(port: int, groups: int, seconds: float, version: int, pid: int, spy: str) -> dict:
    conns = [Conn(*await asyncio.open_connection("127.0.0.1", port)) for _ in range(groups)]
    await conns[0].request(
        19,
        4,
        {
            "topics": [
                {
                    "name": TOPIC,
                    "num_partitions": 1,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [],
                }
            ],
            "timeout_ms": 30000,
        },
    )

    async def ready(i: int, c: Conn) -> None:
        group = f"cost-{i}"
        while True:
            fc = await c.request(10, 3, {"key": group, "key_type": 0})
            if fc["error_code"] == 0:
                r = await c.request(8, version, commit_body(group, 1))
                if r["topics"][0]["partitions"][0]["error_code"] == 0:
                    return
            await asyncio.sleep(0.1)

    await asyncio.wait_for(asyncio.gather(*(ready(i, c) for i, c in enumerate(conns))), 300)
    stop = [False]
    done = [0]
    errors: list[int] = []

    async def run(i: int, c: Conn) -> None:
        group = f"cost-{i}"
        n = 2
        while not stop[0]:
            r = await c.request(8, version, commit_body(group, n))
            code = r["topics"][0]["partitions"][0]["error_code"]
            if code:
                errors.append(code)
            n += 1
            done[0] += 1

    tasks = [asyncio.ensure_future(run(i, c)) for i, c in enumerate(conns)]
    await asyncio.sleep(1.0)  # steady state
    spy_proc = None
    if spy:
        cmd = ["py-spy", "record", "--nonblocking", "--rate", "200", "--pid", str(pid)]
        cmd += ["--format", "raw", "-o", spy]
        spy_proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        await asyncio.sleep(1.0)
    t0, c0, me0, snap0 = time.monotonic(), _cpu_s(pid), time.process_time(), done[0]
    await asyncio.sleep(seconds)
    snap1 = done[0]
    t1, c1, me1 = time.monotonic(), _cpu_s(pid), time.process_time()
    if spy_proc is not None:
        spy_proc.send_signal(signal.SIGINT)
        spy_proc.wait(60)
    stop[0] = True
    await asyncio.gather(*tasks)
    commits = snap1 - snap0
    secs = t1 - t0
    return {
        "commits/s": round(commits / secs),
        "broker cores": round((c1 - c0) / secs, 3),
        "broker us/commit": round((c1 - c0) / commits * 1e6, 1),
        "client cores": round((me1 - me0) / secs, 3),
        "errors": errors[:5],
        "load": os.getloadavg(),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--storage", default="kafka")
    ap.add_argument("--zk", action="store_true")
    ap.add_argument("--version", type=int, default=8)
    ap.add_argument("--profile", default="")
    ap.add_argument("--loop", default="", help="the broker's event.loop (default: its default)")
    args = ap.parse_args()
    overrides: dict[str, object] = {"offsets.storage": args.storage}
    if args.loop:
        overrides["event.loop"] = args.loop
    if args.storage == "kafka":
        overrides["offsets.topic.replication.factor"] = 1
    work = Path(tempfile.mkdtemp(prefix="commit-cost-"))
    zk = None
    connect = None
    if args.zk:
        from pybroker.testing.zookeeper import ZooKeeperServer

        zk = ZooKeeperServer(work / "zk")
        zk.start(timeout=120)
        connect = zk.connect
    broker = BrokerProcess(work / "b", zookeeper_connect=connect, overrides=overrides)
    broker.start(timeout=120)
    try:
        assert broker.pid is not None
        out = asyncio.run(
            client(broker.port, args.groups, args.seconds, args.version, broker.pid, args.profile)
        )
    finally:
        broker.stop()
        if zk is not None:
            zk.stop()
    out["loop"] = args.loop or "default"
    out["notes"] = [
        line.split("group commit: ", 1)[1]
        for line in broker.output(400).splitlines()
        if "group commit: " in line
    ]
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
