"""Several listeners (Kafka's listeners / advertised.listeners / inter.broker.listener.name):
Metadata, FindCoordinator and DescribeCluster answer with the endpoints of the listener the
request came in on, as Kafka does, so that clients inside and outside (a container, a NAT)
each get addresses they can reach; brokers without that listener are left out, and a leader
without it is LISTENER_NOT_FOUND (Metadata v6+)."""

from __future__ import annotations

import types
from itertools import islice

from broker_fixture import Client, free_port, unique_topic

from pybroker.coord.metadata.model import BrokerInfo, PartitionState, TopicInfo
from pybroker.errors import ErrorCode
from pybroker.handlers.context import RequestContext
from pybroker.handlers.metadata import topic_metadata

METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER = 3, 10, 60


def test_each_listener_answers_with_its_own_advertised_endpoints(start_broker):
    internal, external = free_port(), free_port()
    b = start_broker(
        **{
            "listeners": f"INTERNAL://127.0.0.1:{internal},EXTERNAL://127.0.0.1:{external}",
            "advertised.listeners": (
                f"INTERNAL://127.0.0.1:{internal},EXTERNAL://localhost:{external}"
            ),
            "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
        }
    )
    topic = unique_topic("listeners")
    seen = {}
    for name, port in (("INTERNAL", internal), ("EXTERNAL", external)):
        with Client("127.0.0.1", port) as c:
            if name == "INTERNAL":
                c.create_topic(topic, 1)
            md = c.request(METADATA, 9, {"topics": [{"name": topic}]})
            (broker,) = md["brokers"]
            fc = c.request(FIND_COORDINATOR, 3, {"key": "g", "key_type": 0})
            dc = c.request(DESCRIBE_CLUSTER, 0, {"include_cluster_authorized_operations": False})
            seen[name] = (
                (broker["host"], broker["port"]),
                (fc["host"], fc["port"]),
                [(x["host"], x["port"]) for x in dc["brokers"]],
            )
            (t,) = md["topics"]
            assert t["partitions"][0]["leader_id"] == b.broker_id
    assert seen["INTERNAL"] == (
        ("127.0.0.1", internal),
        ("127.0.0.1", internal),
        [("127.0.0.1", internal)],
    )
    assert seen["EXTERNAL"] == (
        ("localhost", external),
        ("localhost", external),
        [("localhost", external)],
    )


def test_a_real_client_bootstraps_on_the_second_listener(start_broker):
    """kafka-python reaches the broker only through what Metadata advertises: on the
    EXTERNAL listener it must be given the EXTERNAL address (the INTERNAL one does not
    resolve from here)."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    internal, external = free_port(), free_port()
    start_broker(
        **{
            "listeners": f"INTERNAL://127.0.0.1:{internal},EXTERNAL://127.0.0.1:{external}",
            "advertised.listeners": (
                f"INTERNAL://internal.invalid:{internal},EXTERNAL://localhost:{external}"
            ),
            "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
        }
    )
    topic = unique_topic("external")
    bootstrap = f"localhost:{external}"
    producer = KafkaProducer(bootstrap_servers=bootstrap, max_block_ms=20000)
    try:
        producer.send(topic, b"over the external listener").get(timeout=30)
    finally:
        producer.close()
    consumer = KafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=10000
    )
    try:  # the record, and no other (without an idle consumer_timeout_ms after it)
        assert [m.value for m in islice(consumer, 1)] == [b"over the external listener"]
        tps = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
        assert sum(consumer.end_offsets(tps).values()) == 1
    finally:
        consumer.close()


def test_a_leader_without_the_listener_is_listener_not_found():
    """Kafka's MetadataCache: a live leader that lacks the request's listener answers
    LISTENER_NOT_FOUND from Metadata v6 (LEADER_NOT_AVAILABLE before), leader -1."""
    brokers = {
        0: BrokerInfo(0, "a", 1, None, [("INTERNAL", "a", 1), ("EXTERNAL", "x", 2)]),
        1: BrokerInfo(1, "b", 3, None, [("INTERNAL", "b", 3)]),
    }
    info = TopicInfo(
        "t",
        __import__("uuid").uuid4(),
        {0: PartitionState(0, 1, [0, 1], [0, 1]), 1: PartitionState(1, 1, [1, 0], [1, 0])},
        {},
    )
    cluster = types.SimpleNamespace(brokers=brokers, metadata_brokers=brokers)
    services = types.SimpleNamespace(cluster=cluster)
    for version, expected in (
        (9, ErrorCode.LISTENER_NOT_FOUND),
        (5, ErrorCode.LEADER_NOT_AVAILABLE),
    ):
        ctx = RequestContext(services, METADATA, version, 1, "c", listener="EXTERNAL")
        parts = topic_metadata(ctx, info, False)["partitions"]
        assert (parts[0]["error_code"], parts[0]["leader_id"]) == (ErrorCode.NONE, 0)
        assert (parts[1]["error_code"], parts[1]["leader_id"]) == (expected, -1)
