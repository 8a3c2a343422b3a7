"""A multi-core node (node.cores, docs/multicore.md): one broker process per core behind one
supervisor.  What a user sees: the node's brokers in Metadata with the node's rack, a broker
process killed with kill -9 started again by the node with no acknowledged record lost and its
partitions served again, one metrics.listener for the whole node, and a start refused when a
process's port is taken.  (The client, group, transaction and kill -9 suites run on such a node
too: the tests marked ``multicore``, backend "multicore".)"""

from __future__ import annotations

import socket
import time
import urllib.request

import pytest

from compat_tests.broker_process import BrokerProcess, BrokerStartError
from compat_tests.cluster import KafkaPythonLoad, check_records, read_topic, wait_until
from compat_tests.helpers import unique_topic
from pybroker.cli.client import Client

pytestmark = pytest.mark.timeout(300)


def metadata(node: BrokerProcess, topics: list[str] | None) -> dict:
    """A Metadata answer as the CLI's client decodes it (brokers with their racks)."""
    client = Client(node.bootstrap, timeout_s=10)
    try:
        return client.metadata(topics)
    finally:
        client.close()


def partitions_of(node: BrokerProcess, topic: str) -> list[dict]:
    (t,) = metadata(node, [topic])["topics"]
    return t["partitions"]


def create_topic(node: BrokerProcess, name: str, count: int, rf: int = 1) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=node.bootstrap)
    try:
        admin.create_topics([NewTopic(name, count, rf)], timeout_ms=30000)
    finally:
        admin.close()
    wait_until(
        lambda: (
            len(ps := partitions_of(node, name)) == count and all(p["leader_id"] >= 0 for p in ps)
        ),
        30,
        what=f"{name}'s partitions to have leaders",
    )


@pytest.fixture
def node(tmp_path, request):
    overrides = {"node.cores": "2", "metrics.listener": "http://127.0.0.1:0"}
    b = BrokerProcess(tmp_path / "node", overrides=overrides)
    request.node._pybrokers = [b]
    b.start()
    yield b
    try:
        if b.is_running():
            b.stop(timeout=90)
    finally:
        b.cleanup()


def http_port(node: BrokerProcess) -> int:
    for line in node.output(400).splitlines():
        if "pybroker.http_server: HTTP listener on" in line and "[broker" not in line:
            return int(line.rsplit(":", 1)[1])
    raise AssertionError(f"the node's HTTP listener is not in its log\n{node.output()}")


def test_the_node_is_its_brokers_with_the_node_rack_and_partitions_spread(node):
    brokers = {b["node_id"]: b for b in metadata(node, None)["brokers"]}
    assert sorted(brokers) == [0, 1]
    assert {b["rack"] for b in brokers.values()} == {f"127.0.0.1:{node.port}"}
    assert [brokers[i]["port"] for i in (0, 1)] == [node.port, node.port + 1]
    topic = unique_topic("spread")
    create_topic(node, topic, 4)
    leaders = [p["leader_id"] for p in partitions_of(node, topic)]
    assert sorted(set(leaders)) == [0, 1], leaders  # both processes lead partitions


def test_a_broker_process_killed_loses_no_acked_record_and_serves_again(node):
    topic = unique_topic("kill9")
    count = 4
    create_topic(node, topic, count)
    victim = 1
    mine = [p["partition_index"] for p in partitions_of(node, topic) if p["leader_id"] == victim]
    assert mine, "broker 1 leads none of the partitions"
    load = KafkaPythonLoad("mc", node.bootstrap, topic, count, interval=0.002)
    load.start()
    wait_until(lambda: len(load.stats.acked) > 300, 60, what="acknowledgements before the kill")
    old_pid = node.kill9_worker(victim)
    wait_until(
        lambda: node.worker_pid(victim) not in (None, old_pid), 60, what="broker 1 started again"
    )
    t_restart = time.monotonic()
    wait_until(
        lambda: all(
            p["leader_id"] == victim
            for p in partitions_of(node, topic)
            if p["partition_index"] in mine
        ),
        90,
        what="broker 1's partitions to have it as leader again",
    )
    wait_until(
        lambda: load.stats.first_ack_after(t_restart, mine[0]) is not None,
        90,
        what=f"an acknowledgement from partition {mine[0]} after the restart",
    )
    stats = load.stop()
    assert stats.acked, stats.summary()
    result = check_records(read_topic(node.bootstrap, topic, count), [stats])
    assert not result.problems, "\n".join(result.problems) + "\n" + stats.summary()
    assert "starting it again" in node.output(2000)
    node.stop(timeout=90)
    assert node.exit_codes[-1] == 0


def test_one_metrics_listener_for_the_node(node):
    topic = unique_topic("metrics")
    create_topic(node, topic, 2)
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=node.bootstrap)
    for i in range(20):
        producer.send(topic, value=b"x" * 100, partition=i % 2)
    producer.flush(30)
    producer.close()
    port = http_port(node)
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    assert "pybroker_node_processes 2" in text
    assert "pybroker_node_processes_serving 2" in text
    for b in (0, 1):
        assert (
            f'kafka_server_brokertopicmetrics_bytesin_total{{broker="{b}",topic="{topic}"}}' in text
        )
    assert text.count("# TYPE kafka_server_brokertopicmetrics_bytesin_total ") == 1
    page = urllib.request.urlopen(f"http://127.0.0.1:{port}/node", timeout=10).read().decode()
    assert page.count("<td>serving</td>") == 2
    overview = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10).read().decode()
    assert f"127.0.0.1:{node.port + 1}" in overview  # the console, served by a process


def test_a_taken_port_of_a_process_stops_the_start(tmp_path):
    b = BrokerProcess(tmp_path / "node", overrides={"node.cores": "2"})
    with socket.socket() as s:
        s.bind(("127.0.0.1", b.port + 1))
        s.listen()
        with pytest.raises(BrokerStartError) as e:
            b.start(timeout=60)
    out = str(e.value)
    assert "listeners" in out and str(b.port + 1) in out, out
    assert b.exit_codes and b.exit_codes[-1] != 0


def test_a_node_on_zookeeper(tmp_path, zookeeper, request):
    """With zookeeper.connect each process is a ZooKeeper client (no shared embedded store)."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    b = BrokerProcess(
        tmp_path / "node", zookeeper_connect=zookeeper.connect, overrides={"node.cores": "2"}
    )
    request.node._pybrokers = [b]
    try:
        b.start()
        assert sorted(x["node_id"] for x in metadata(b, None)["brokers"]) == [0, 1]
        topic = unique_topic("zk")
        create_topic(b, topic, 2)
        assert sorted(p["leader_id"] for p in partitions_of(b, topic)) == [0, 1]
        producer = KafkaProducer(bootstrap_servers=b.bootstrap, acks="all")
        for i in range(100):
            producer.send(topic, value=str(i).encode(), partition=i % 2)
        producer.flush(30)
        producer.close()
        consumer = KafkaConsumer(bootstrap_servers=b.bootstrap, consumer_timeout_ms=20000)
        consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        consumer.seek_to_beginning()
        got = [r.value for _, r in zip(range(100), consumer, strict=False)]
        consumer.close()
        assert sorted(got) == sorted(str(i).encode() for i in range(100))
        b.stop(timeout=90)
    finally:
        b.cleanup()
