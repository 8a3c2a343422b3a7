"""A broker restarted right after kill -9 starts by itself (issue 10, defect 8).

Its previous process left the ephemeral /brokers/ids/<id> of a ZooKeeper session that lives
until the session times out.  The broker waits for that registration to expire and then
starts, in one attempt: no retry loop outside the broker.  A live broker holding the same
broker.id is still refused (the new process exits with an error instead of waiting for ever).
"""

from __future__ import annotations

import pytest

from pybroker.testing.cluster_harness import running_cluster
from pybroker.testing.debug_process import BrokerProcess
from pybroker.testing.process import BrokerStartError

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def cluster(request, tmp_path):
    with running_cluster(tmp_path, size=1) as c:
        request.node._pybrokers = list(c.brokers.values())
        yield c
    if c.stop_problems:
        pytest.fail("brokers did not stop cleanly: " + "; ".join(c.stop_problems))


def test_restart_right_after_kill9_waits_for_the_old_registration(cluster):
    b = cluster.brokers[0]
    b.kill9()
    b.start()  # one attempt: raises BrokerStartError if the process exits
    assert b.is_running()
    out = b.output(400)
    assert "waiting up to" in out, out  # it did find the old registration and waited
    assert "registered at /brokers/ids/0" in out, out
    md = cluster.metadata([])
    assert set(md.brokers) == {0}


def test_a_live_broker_with_the_same_id_is_still_refused(cluster, tmp_path):
    live = cluster.brokers[0]
    twin = BrokerProcess(
        tmp_path / "twin",
        zookeeper_connect=cluster.zookeeper.connect,
        overrides={"zookeeper.session.timeout.ms": 2000},
        broker_id=0,
        chroot=live.chroot,
    )
    with pytest.raises(BrokerStartError) as e:
        twin.start()
    assert "already registered" in str(e.value), str(e.value)[-3000:]
    twin.cleanup()
    assert live.is_running()
    assert set(cluster.metadata([]).brokers) == {0}
