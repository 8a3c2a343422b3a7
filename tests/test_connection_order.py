"""One connection's answers come in the order of its requests, however each is handled: a
request that finishes at once is answered from data_received (connection.py's _step_now), one
that waits (a long-poll Fetch) is finished by the connection's task, and the requests sent
after it wait their turn."""

from __future__ import annotations

from broker_fixture import FETCH, NONE, fetch_body, unique_topic

API_VERSIONS, METADATA, OFFSET_COMMIT = 18, 3, 8


def _commit(group: str, topic: str, offset: int) -> dict:
    return {
        "group_id": group,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "group_instance_id": None,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {
                        "partition_index": 0,
                        "committed_offset": offset,
                        "committed_leader_epoch": -1,
                        "committed_metadata": None,
                    }
                ],
            }
        ],
    }


def test_requests_sent_after_a_waiting_fetch_are_answered_after_it(client):
    topic = unique_topic()
    client.create_topic(topic)
    for round_ in range(3):
        fetch = client.send(
            FETCH, 11, fetch_body([(topic, 0, 0, 1024)], max_wait_ms=300, min_bytes=1)
        )
        versions = client.send(API_VERSIONS, 3, {"client_software_name": "t",
                                                 "client_software_version": "1"})  # fmt: skip
        commit = client.send(OFFSET_COMMIT, 8, _commit(f"order-{topic}", topic, round_ + 1))
        # receive() checks each answer's correlation id: the fetch's comes first
        (part,) = [
            p for t in client.receive(FETCH, 11, fetch)["responses"] for p in t["partitions"]
        ]
        assert part["error_code"] == NONE and not part["records"]
        assert client.receive(API_VERSIONS, 3, versions)["error_code"] == NONE
        (committed,) = client.receive(OFFSET_COMMIT, 8, commit)["topics"][0]["partitions"]
        assert committed["error_code"] == NONE


def test_answers_at_once_between_waiting_ones_keep_their_order(client):
    """Requests answered at once, then a waiting one, then more, pipelined in one write."""
    topic = unique_topic()
    client.create_topic(topic)
    sent = [("v", client.send(API_VERSIONS, 3, {"client_software_name": "t",
                                                "client_software_version": "1"}))]  # fmt: skip
    sent.append(
        (
            "f",
            client.send(FETCH, 11, fetch_body([(topic, 0, 0, 1024)], max_wait_ms=200, min_bytes=1)),
        )
    )
    for i in range(5):
        sent.append(("c", client.send(OFFSET_COMMIT, 8, _commit(f"o2-{topic}", topic, i + 1))))
    sent.append(("m", client.send(METADATA, 9, {"topics": None, "allow_auto_topic_creation": False,
                                                "include_cluster_authorized_operations": False,
                                                "include_topic_authorized_operations": False})))  # fmt: skip
    for kind, corr in sent:
        if kind == "v":
            assert client.receive(API_VERSIONS, 3, corr)["error_code"] == NONE
        elif kind == "f":
            client.receive(FETCH, 11, corr)
        elif kind == "c":
            (p,) = client.receive(OFFSET_COMMIT, 8, corr)["topics"][0]["partitions"]
            assert p["error_code"] == NONE
        else:
            assert any(t["name"] == topic for t in client.receive(METADATA, 9, corr)["topics"])
