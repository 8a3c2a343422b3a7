"""Share-group (KIP-932) test clients: the Java KafkaShareConsumer (java/kafka4/src/
ShareConsumerTool.java, kafka-clients 4.4.0) as a background process with its JSON events,
confluent-kafka's ShareConsumer, and admin requests over pybroker's own wire client.

    cp = share_tool_cp(tmp_path_factory)
    c = JavaShareConsumer(cp, workdir, bootstrap, group, topic, "accept", "count=100")
    c.wait_for(lambda: len(c.records()) >= 10)
    c.records()      # [{"partition", "offset", "delivery", "value"}, ...] in arrival order
    set_group_config(bootstrap, group, {"share.auto.offset.reset": "earliest"})
    wait_members(bootstrap, group, 4)   # until ShareGroupDescribe shows 4 assigned members
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pybroker.cli.client import Client
from pybroker.testing import java

SHARE_GROUP_DESCRIBE, INCREMENTAL_ALTER_CONFIGS, DESCRIBE_SHARE_GROUP_OFFSETS = 77, 44, 90
GROUP_RESOURCE = 32

# the share-group settings the share-group client tests run with: short sessions and locks
SHARE_OVERRIDES = {
    "group.share.heartbeat.interval.ms": "1000",
    "group.share.min.heartbeat.interval.ms": "1000",
    "group.share.session.timeout.ms": "10000",
    "group.share.min.session.timeout.ms": "6000",
    "group.share.record.lock.duration.ms": "4000",
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.delivery.count.limit": "3",
}


def share_tool_cp(tmp_path_factory) -> str:
    with java.deps_or_fail():
        return java.compile_app(
            "ShareConsumerTool.java", tmp_path_factory.mktemp("share-classes"), kafka4=True
        )


class JavaShareConsumer:
    """One ShareConsumerTool process (see its javadoc for the policies and settings)."""

    def __init__(
        self,
        cp: str,
        workdir: Path,
        bootstrap: str,
        group: str,
        topic: str,
        policy: str,
        *settings: str,
        name: str = "share",
    ) -> None:
        self.name = name
        self.proc = java.start_main(
            "ShareConsumerTool",
            [bootstrap, group, topic, policy, *settings],
            workdir=workdir,
            name=name,
            cp=cp,
            log4j=None,
            jvm_args=[f"-Dlog4j2.configurationFile={java.KAFKA4_TOOLS_LOG4J2}"],
        )

    def events(self) -> list[dict]:
        return self.proc.events()

    def records(self) -> list[dict]:
        return [e for e in self.events() if e["event"] == "record"]

    def acks(self) -> list[dict]:
        return [e for e in self.events() if e["event"] == "ack"]

    def done(self) -> bool:
        return any(e["event"] == "done" for e in self.events())

    def wait_for(self, what: str, cond: Callable[[], bool], timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                pytest.fail(f"{self.name}: {what} not reached\n{self.describe()}", pytrace=False)
            time.sleep(0.2)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        try:
            os.killpg(self.proc.proc.pid, sig)
        except ProcessLookupError:
            pass

    def stop(self) -> None:
        if self.proc.is_running():
            self.proc.stop(timeout=30)

    def describe(self) -> str:
        r = self.proc.result()
        return f"{self.name}: rc={r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"


def set_group_config(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    """IncrementalAlterConfigs SET on the group's configs (resource type GROUP)."""
    c = Client(bootstrap)
    try:
        _, r = c.any().request(
            INCREMENTAL_ALTER_CONFIGS,
            {
                "resources": [
                    {
                        "resource_type": GROUP_RESOURCE,
                        "resource_name": group,
                        "configs": [
                            {"name": k, "config_operation": 0, "value": v}
                            for k, v in configs.items()
                        ],
                    }
                ],
                "validate_only": False,
            },
        )
    finally:
        c.close()
    res = r["responses"][0]
    assert res["error_code"] == 0, res


def describe_group(bootstrap: str, group: str) -> dict:
    c = Client(bootstrap)
    try:
        _, r = c.group_request(
            group,
            SHARE_GROUP_DESCRIBE,
            {"group_ids": [group], "include_authorized_operations": False},
        )
    finally:
        c.close()
    return r["groups"][0]


def wait_members(bootstrap: str, group: str, n: int, timeout: float = 120.0) -> dict:
    """Until the group has ``n`` members, each with an assignment; its description."""
    deadline = time.monotonic() + timeout
    desc: dict = {}
    while time.monotonic() < deadline:
        desc = describe_group(bootstrap, group)
        members = desc.get("members") or []
        if len(members) == n and all(m["assignment"]["topic_partitions"] for m in members):
            return desc
        time.sleep(0.3)
    pytest.fail(f"group {group} did not reach {n} assigned members: {desc}", pytrace=False)


def share_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], dict]:
    """DescribeShareGroupOffsets v1: {(topic, partition): {"start_offset", "lag", ...}}."""
    c = Client(bootstrap)
    try:
        _, r = c.group_request(
            group, DESCRIBE_SHARE_GROUP_OFFSETS, {"groups": [{"group_id": group, "topics": None}]}
        )
    finally:
        c.close()
    g = r["groups"][0]
    assert g["error_code"] == 0, g
    return {
        (t["topic_name"], p["partition_index"]): p for t in g["topics"] for p in t["partitions"]
    }
