"""``pybroker cluster``: cluster id, controller, brokers (host:port, rack), the partitions
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
    result = {
        "cluster_id": r["cluster_id"],
        "controller_id": r["controller_id"],
        "brokers": [
            {"id": b["node_id"], "host": b["host"], "port": b["port"], "rack": b["rack"]}
            for b in sorted(r["brokers"], key=lambda b: b["node_id"])
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
