"""``pybroker cluster``: cluster id, controller, brokers (host:port, rack), the racks (a
multi-core node's brokers share one: the node, docs/multicore.md) with their brokers and the
partitions they lead, the partitions
whose in-sync replicas are fewer than their replicas (under-replicated, as kafka-topics
--under-replicated-partitions) and those without a leader (offline, as
--unavailable-partitions), from one Metadata request for every topic, internal ones included."""

from __future__ import annotations

import argparse

from pybroker.cli.client import Client
from pybroker.cli.output import emit, section, table


def add_parser(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    sub.add_parser("cluster", parents=[common], help="brokers, controller, under-replicated")


def run(client: Client, args: argparse.Namespace) -> int:
    r = client.metadata(None)
    under, offline = [], []
    for t in sorted(r["topics"], key=lambda t: t["name"] or ""):
        for p in sorted(t["partitions"], key=lambda p: p["partition_index"]):
            if p["leader_id"] < 0:
                offline.append(
                    {
                        "topic": t["name"],
                        "partition": p["partition_index"],
                        "replicas": p["replica_nodes"],
                    }
                )
            if len(p["isr_nodes"]) < len(p["replica_nodes"]):
                under.append(
                    {
                        "topic": t["name"],
                        "partition": p["partition_index"],
                        "leader": p["leader_id"],
                        "replicas": p["replica_nodes"],
                        "isr": p["isr_nodes"],
                    }
                )
    led: dict[int, int] = {}
    for t in r["topics"]:
        for p in t["partitions"]:
            led[p["leader_id"]] = led.get(p["leader_id"], 0) + 1
    racks: dict[str, list[int]] = {}
    for b in r["brokers"]:
        if b["rack"] is not None:
            racks.setdefault(b["rack"], []).append(b["node_id"])
    result = {
        "cluster_id": r["cluster_id"],
        "controller_id": r["controller_id"],
        "brokers": [
            {"id": b["node_id"], "host": b["host"], "port": b["port"], "rack": b["rack"]}
            for b in sorted(r["brokers"], key=lambda b: b["node_id"])
        ],
        "racks": [
            {"rack": rack, "brokers": sorted(ids), "leaders": sum(led.get(i, 0) for i in ids)}
            for rack, ids in sorted(racks.items())
        ],
        "under_replicated": under,
        "offline": offline,
    }
    emit(args.output, result, _text)
    return 0


def _text(r: dict) -> str:
    summary = table(
        ["cluster-id", "controller", "brokers", "under-replicated", "offline"],
        [
            (
                r["cluster_id"],
                r["controller_id"],
                len(r["brokers"]),
                len(r["under_replicated"]),
                len(r["offline"]),
            )
        ],
    )
    brokers = table(
        ["id", "address", "rack"],
        [
            (
                f"{b['id']}*" if b["id"] == r["controller_id"] else b["id"],
                f"{b['host']}:{b['port']}",
                b["rack"],
            )
            for b in r["brokers"]
        ],
    )
    parts = [section("CLUSTER", summary), section("BROKERS (* controller)", brokers)]
    if r["racks"]:
        parts.append(
            section(
                "RACKS (a multi-core node is one)",
                table(
                    ["rack", "brokers", "leaders"],
                    [
                        (x["rack"], ",".join(map(str, x["brokers"])), x["leaders"])
                        for x in r["racks"]
                    ],
                ),
            )
        )
    if r["under_replicated"]:
        parts.append(
            section(
                "UNDER-REPLICATED PARTITIONS",
                table(
                    ["topic", "partition", "leader", "replicas", "isr"],
                    [
                        (
                            u["topic"],
                            u["partition"],
                            u["leader"],
                            ",".join(map(str, u["replicas"])),
                            ",".join(map(str, u["isr"])),
                        )
                        for u in r["under_replicated"]
                    ],
                ),
            )
        )
    if r["offline"]:
        parts.append(
            section(
                "OFFLINE PARTITIONS",
                table(
                    ["topic", "partition", "replicas"],
                    [
                        (o["topic"], o["partition"], ",".join(map(str, o["replicas"])))
                        for o in r["offline"]
                    ],
                ),
            )
        )
    return "\n".join(parts)
