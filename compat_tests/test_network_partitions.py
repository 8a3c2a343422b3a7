"""Network partitions on three brokers in network namespaces (compat_tests/net_cluster.py; root
only, skipped with the reason otherwise), one scenario each, deterministic.

- A follower cut from ZooKeeper only keeps fetching from its leader while its session is gone:
  the controller takes it out of the ISR, and the leader must not put it back until it is a
  live broker again (Kafka's ZooKeeper-mode isReplicaIsrEligible: hasAliveBroker).  Found by
  the fault campaign: the leader re-added it at every fetch and the controller removed it
  again, a write to ZooKeeper every ~100 ms until the session came back.
"""

from __future__ import annotations

import time

import pytest

from compat_tests.cluster import KafkaPythonLoad, check_records, read_topic, wait_until
from compat_tests.net_cluster import broker_node, running_network_cluster
from compat_tests.netns import require
from tests.small_disk import can_mount

pytestmark = pytest.mark.timeout(300)
TOPIC = "netpart"


@pytest.fixture
def net_cluster(tmp_path):
    require(can_mount())
    with running_network_cluster(tmp_path, clients=1) as nc:
        yield nc


def test_a_follower_cut_from_zookeeper_stays_out_of_the_isr_until_it_is_back(net_cluster):
    nc = net_cluster
    cluster = nc.cluster
    cluster.create_topic(TOPIC, 1, 3, {"min.insync.replicas": "2"})
    md = cluster.metadata([TOPIC])
    info = md.topic(TOPIC)[0]
    leader = info.leader
    follower = next(r for r in info.replicas if r not in (leader, md.controller_id))
    load = KafkaPythonLoad("np", cluster.bootstrap, TOPIC, 1, 0.005)
    with nc.net.entered(nc.clients[0]):
        load.start()
    try:
        wait_until(lambda: len(load.stats.acked) >= 50, 60, what="load")
        for z in nc.zk_nodes():
            nc.net.cut_both(broker_node(follower), z)
        others = [i for i in cluster.ids if i != follower]

        def isr():
            return cluster.metadata([TOPIC], via=others).topic(TOPIC)[0].isr

        wait_until(lambda: follower not in isr(), 30, 0.1, "the follower out of the ISR")
        seen = []
        deadline = time.monotonic() + 4.0
        while time.monotonic() < deadline:  # its session is gone: it must stay out
            seen.append(isr())
            time.sleep(0.1)
        assert all(follower not in s for s in seen), seen
        acked = len(load.stats.acked)
        wait_until(lambda: len(load.stats.acked) > acked + 20, 30, what="acks=all go on")
        nc.net.heal_all()
        wait_until(lambda: follower in isr(), 60, 0.2, "the follower back in the ISR")
    finally:
        nc.net.heal_all()
        stats = load.stop()
    leader_log = cluster.brokers[leader].output(2000)
    readds = [ln for ln in leader_log.splitlines() if f"{TOPIC}-0: ISR" in ln and "caught up" in ln]
    assert len(readds) <= 2, "the ISR flapped:\n" + "\n".join(readds)
    result = check_records(read_topic(cluster.bootstrap, TOPIC, 1), [stats])
    assert result.problems == [], result.problems
