"""What clients see while the metadata store (ZooKeeper) cannot be reached: a retriable Kafka
error code, never a dropped connection (found by the fault campaign: a broker cut from
ZooKeeper closed the connection of every OffsetFetch with a traceback)."""

from __future__ import annotations

from broker_fixture import NONE, unique_topic

from pybroker.coord.metadata.store import ConnectionLossError

OFFSET_COMMIT, OFFSET_FETCH = 8, 9
COORDINATOR_NOT_AVAILABLE = 15


def _commit(c, group, topic):
    body = c.request(
        OFFSET_COMMIT,
        2,
        {"group_id": group, "generation_id": -1, "member_id": "", "retention_time_ms": -1,
         "topics": [{"name": topic, "partitions": [
             {"partition_index": 0, "committed_offset": 7, "committed_metadata": ""}]}]},
    )  # fmt: skip
    return body["topics"][0]["partitions"][0]["error_code"]


def test_offset_fetch_answers_coordinator_not_available(start_broker, monkeypatch):
    b = start_broker()
    topic, group = unique_topic("off"), f"g-{unique_topic()}"
    offsets = b.broker.groups.offsets
    with b.client() as c:
        c.create_topic(topic, partitions=1)
        assert _commit(c, group, topic) == NONE

        async def unreachable(*args, **kwargs):
            raise ConnectionLossError(f"/consumers/{group}")

        monkeypatch.setattr(offsets, "load", unreachable)
        v1 = c.request(OFFSET_FETCH, 1, {"group_id": group, "topics": [
            {"name": topic, "partition_indexes": [0]}]})  # fmt: skip
        assert v1["topics"][0]["partitions"][0]["error_code"] == COORDINATOR_NOT_AVAILABLE
        v8 = c.request(OFFSET_FETCH, 8, {"groups": [{"group_id": group, "topics": None}],
                                         "require_stable": False})  # fmt: skip
        assert v8["groups"][0]["error_code"] == COORDINATOR_NOT_AVAILABLE
        monkeypatch.undo()
        v1 = c.request(OFFSET_FETCH, 1, {"group_id": group, "topics": [
            {"name": topic, "partition_indexes": [0]}]})  # fmt: skip
        part = v1["topics"][0]["partitions"][0]
        assert (part["error_code"], part["committed_offset"]) == (NONE, 7)
