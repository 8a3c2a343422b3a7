"""Kafka admin views of consumer groups, through kafka-python 3.0's KafkaAdminClient.

kafka-python 3.0 names them list_groups / describe_groups / list_group_offsets /
delete_groups (2.x: list_consumer_groups / describe_consumer_groups /
list_consumer_group_offsets / delete_consumer_groups): ListGroups, DescribeGroups,
OffsetFetch (all topics: null topic list, v2+) and DeleteGroups on the wire.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from itertools import islice

import pytest
from kafka import KafkaAdminClient, TopicPartition

from compat_tests.group_member import (
    GROUP_BROKER_OVERRIDES,
    ThreadMember,
    close_all,
    produce,
    wait_stable,
    wait_until,
)
from pybroker.testing.client_helpers import create_topic, unique_topic

pytestmark = [pytest.mark.timeout(180), pytest.mark.broker_overrides(GROUP_BROKER_OVERRIDES)]

PARTITIONS = 4


def _admin(broker) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id="compat-group-admin")


def _assigned(member: dict) -> set[tuple[str, int]]:
    assignment = member.get("member_assignment") or {}
    if not isinstance(assignment, dict):  # undecodable bytes
        return set()
    return {
        (tp["topic"], p)
        for tp in assignment.get("assigned_partitions", [])
        for p in tp["partitions"]
    }


def _consume_and_commit(broker, topic, group, n):
    """Two members consume n records, commit them, then leave (close). Returns the end
    offset of every partition."""
    members = [ThreadMember(broker.bootstrap, topic, group, f"adm{i}") for i in range(2)]
    try:
        wait_stable(members, PARTITIONS, 60)
        sent = produce(broker.bootstrap, topic, PARTITIONS, n, "adm")
        wait_until(
            lambda: set(sent) <= {(p, o) for m in members for p, o, _ in m.records()},
            60,
            what="records consumed",
        )
        # every batch is committed synchronously right after poll() returned it; the member
        # thread has committed the last batch once it polls again, which close() waits for
        for m in members:
            m.close()
            m.check()
            assert not m.commit_failures, m.commit_failures
    finally:
        close_all(members)
    ends: dict[int, int] = {}
    for p, o in sent:
        ends[p] = max(ends.get(p, 0), o + 1)
    return ends


def test_admin_views_of_an_empty_group(broker):
    """After both members left: ListGroups, DescribeGroups, OffsetFetch (all topics), then
    DeleteGroups and the same views again. Every mismatch is collected, then reported at once.

    Kafka keeps the protocol type "consumer" when the last member leaves (GroupMetadata /
    ClassicGroup.initNextGeneration clear only the protocol name), so ListGroups and
    DescribeGroups still say "consumer" for the Empty group.
    """
    topic, group = unique_topic("grp"), f"adm-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    ends = _consume_and_commit(broker, topic, group, 200)
    problems: list[str] = []

    def expect(ok: bool, what: str) -> None:
        if not ok:
            problems.append(what)

    admin = _admin(broker)
    try:
        listed = admin.list_groups()
        mine = [g for g in listed if g["group_id"] == group]
        print(f"[{broker.backend}] list_groups: {len(listed)} groups, ours: {mine}")
        assert len(mine) == 1, f"group {group} not listed exactly once: {listed}"
        expect(
            mine[0]["protocol_type"] == "consumer",
            f"list_groups protocol_type {mine[0]['protocol_type']!r}, want 'consumer'",
        )
        if "group_state" in mine[0]:  # ListGroups v4+
            expect(
                mine[0]["group_state"] == "Empty",
                f"list_groups group_state {mine[0]['group_state']!r}, want 'Empty'",
            )

        desc = admin.describe_groups([group])[group]
        print(f"[{broker.backend}] describe_groups: {desc}")
        expect(desc["error"] is None, f"describe_groups error {desc['error']}")
        expect(
            desc["group_state"] == "Empty",
            f"describe_groups group_state {desc['group_state']!r}, want 'Empty'",
        )
        expect(
            desc["protocol_type"] == "consumer",
            f"describe_groups protocol_type {desc['protocol_type']!r}, want 'consumer'",
        )
        expect(desc["members"] == [], f"describe_groups members {desc['members']}, want []")

        offsets = admin.list_group_offsets(group)[group]
        print(f"[{broker.backend}] list_group_offsets: {offsets}")
        got = {tp: om.offset for tp, om in offsets.items()}
        want = {TopicPartition(topic, p): end for p, end in ends.items()}
        expect(got == want, f"list_group_offsets {got}, want {want}")
        print(f"[{broker.backend}] committed total {sum(got.values())} of 200 records")

        deleted = admin.delete_groups([group])
        print(f"[{broker.backend}] delete_groups: {deleted}")
        expect(deleted == {group: "OK"}, f"delete_groups {deleted}, want {{{group!r}: 'OK'}}")

        after = [g for g in admin.list_groups() if g["group_id"] == group]
        gone = admin.describe_groups([group])[group]
        left = admin.list_group_offsets(group)[group]
        print(
            f"[{broker.backend}] after delete: listed {after}, state {gone['group_state']!r} "
            f"(error {gone['error']}), offsets {left}"
        )
        expect(after == [], f"deleted group still listed: {after}")
        # Kafka answers a group it does not know with state Dead (DescribeGroups v0-5) or
        # GROUP_ID_NOT_FOUND (v6+), and no committed offsets
        expect(
            gone["group_state"] == "Dead" or "GroupIdNotFound" in str(gone["error"]),
            f"deleted group described as {gone['group_state']!r} (error {gone['error']})",
        )
        expect(left == {}, f"deleted group still has offsets {left}")
    finally:
        admin.close()
    print(f"[{broker.backend}] {len(problems)} mismatches")
    assert not problems, "\n".join(problems)


def _cli_groups(broker) -> dict[str, dict]:
    r = subprocess.run(
        [sys.executable, "-m", "pybroker", "groups", "list", "-b", broker.bootstrap,
         "--output", "json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return {g["group"]: g for g in json.loads(r.stdout)}


def _admin_views(broker, group: str) -> dict[str, object]:
    """Everything an admin tool shows of an idle group: ListGroups' entry, DescribeGroups,
    OffsetFetch (all topics) and `pybroker groups list`."""
    admin = _admin(broker)
    try:
        listed = [g for g in admin.list_groups() if g["group_id"] == group]
        described = admin.describe_groups([group])[group]
        offsets = admin.list_group_offsets(group)[group]
    finally:
        admin.close()
    return {
        "list_groups": listed,
        "describe_groups": described,
        "list_group_offsets": {(tp.topic, tp.partition): om for tp, om in offsets.items()},
        "pybroker groups list": _cli_groups(broker).get(group),
    }


def test_an_empty_groups_admin_views_are_the_same_after_a_broker_restart(broker, storage):
    """Kafka stores a classic group's metadata (protocol type, generation, state time) with
    its offsets and loads it when the coordinator starts: an Empty group that had "consumer"
    members is listed and described as "consumer" after a restart too.  The check for the
    class: every admin view of the idle group is equal before and after the restart."""
    topic, group = unique_topic("grp"), f"restart-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    _consume_and_commit(broker, topic, group, 40)
    before = _admin_views(broker, group)
    assert [(g["protocol_type"], g.get("group_state")) for g in before["list_groups"]] == [
        ("consumer", "Empty")
    ], before
    assert before["describe_groups"]["protocol_type"] == "consumer", before
    assert before["pybroker groups list"]["protocol_type"] == "consumer", before
    broker.restart()
    after = wait_until(
        lambda: (lambda got: got if got["list_groups"] else None)(_admin_views(broker, group)),
        60,
        interval=0.5,
        what="the group listed again after the restart",
    )
    print(f"[{broker.backend}] before restart {before}\nafter {after}")
    assert after == before


def test_admin_describe_stable_group_and_refuse_delete(broker):
    """DescribeGroups of a live group: Stable, both members, their decoded assignments;
    DeleteGroups of a non-empty group is refused (NON_EMPTY_GROUP)."""
    topic, group = unique_topic("grp"), f"adm-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    members = [ThreadMember(broker.bootstrap, topic, group, f"live{i}") for i in range(2)]
    admin = _admin(broker)
    try:
        sets = wait_stable(members, PARTITIONS, 60)
        desc = admin.describe_groups([group])[group]
        print(f"[{broker.backend}] describe_groups (live): {desc}")
        assert desc["error"] is None
        assert desc["group_state"] == "Stable"
        assert desc["protocol_type"] == "consumer"
        assert desc["protocol_data"] in ("range", "roundrobin", "sticky")
        assert sorted(m["client_id"] for m in desc["members"]) == ["live0", "live1"]
        described = sorted(sorted(p for _, p in _assigned(m)) for m in desc["members"])
        assert described == sorted(sorted(s) for s in sets)
        for m in desc["members"]:
            assert {t for t, _ in _assigned(m)} == {topic}
            assert m["member_metadata"]["topics"] == [topic]

        deleted = admin.delete_groups([group])
        print(f"[{broker.backend}] delete_groups on a live group: {deleted}")
        assert deleted == {group: "NonEmptyGroupError"}
    finally:
        admin.close()
        close_all(members)


def test_groups_with_odd_names_work_across_a_restart(broker):
    """Kafka accepts any group id (offsets live in __consumer_offsets); pybroker escapes them
    into store paths: groups ".", "..", "a/b" and "grüße" consume, commit, are listed and
    described, keep their offsets across a restart and are deleted."""
    from kafka import KafkaConsumer, KafkaProducer

    topic = unique_topic("odd")
    create_topic(broker.bootstrap, topic, 1)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    for i in range(5):
        producer.send(topic, f"v{i}".encode(), partition=0)
    producer.flush(30)
    producer.close()
    groups = [".", "..", "a/b", "grüße"]
    for g in groups:
        consumer = KafkaConsumer(
            topic,
            bootstrap_servers=broker.bootstrap,
            group_id=g,
            auto_offset_reset="earliest",
            consumer_timeout_ms=10000,
            enable_auto_commit=False,
        )
        try:
            got = [m.value for m in islice(consumer, 5)]  # not an idle 10 s after them
            consumer.commit()
        finally:
            consumer.close()
        assert got == [f"v{i}".encode() for i in range(5)], (g, got)

    def views() -> dict:
        admin = _admin(broker)
        try:
            listed = {x["group_id"]: x["protocol_type"] for x in admin.list_groups()}
            return {
                g: (
                    listed.get(g),
                    admin.describe_groups([g])[g]["group_state"],
                    {tp.partition: om.offset for tp, om in admin.list_group_offsets(g)[g].items()},
                )
                for g in groups
            }
        finally:
            admin.close()

    want = {g: ("consumer", "Empty", {0: 5}) for g in groups}
    assert views() == want
    broker.restart()
    assert wait_until(lambda: views() == want or None, 60, 0.5, "the groups back") is True
    admin = _admin(broker)
    try:
        assert admin.delete_groups(groups) == dict.fromkeys(groups, "OK")
    finally:
        admin.close()
