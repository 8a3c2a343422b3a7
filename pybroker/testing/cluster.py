"""A local multi-broker cluster for tests: a private ZooKeeper plus N pybroker processes.

    cluster = LocalCluster(workdir, size=3, overrides={"num.partitions": 3})
    cluster.start()            # ZooKeeper, then brokers 0..N-1 in parallel (one chroot, free
                               # loopback ports); returns once every broker answers Metadata
                               # listing all N brokers and a controller
    cluster.bootstrap_servers  # "127.0.0.1:p0,127.0.0.1:p1,127.0.0.1:p2"
    cluster.brokers            # {broker id: BrokerProcess}
    cluster.stop()             # SIGTERM each broker; returns the ones that did not exit 0
    cluster.cleanup()          # kill whatever is left, stop ZooKeeper (always call it)

Needs Debian's ZooKeeper (``zookeeper_available()``).  The richer cluster harness
(cluster_harness.Cluster: kill -9, restart, loads, checks) shares CLUSTER_OVERRIDES and the
parallel start with it.
"""

from __future__ import annotations

import time
from pathlib import Path

from pybroker.testing.client import UNREACHABLE, Connection
from pybroker.testing.process import BrokerProcess, start_all, stop_all
from pybroker.testing.zookeeper import ZooKeeperServer

# settings every cluster broker gets: faster failure detection and group joins
CLUSTER_OVERRIDES: dict[str, object] = {
    "zookeeper.session.timeout.ms": 6000,
    "replica.lag.time.max.ms": 5000,
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,
}


class LocalCluster:
    def __init__(
        self,
        workdir: Path,
        size: int = 3,
        overrides: dict[str, object] | None = None,
        broker_class: type[BrokerProcess] = BrokerProcess,
    ) -> None:
        self.workdir = Path(workdir)
        self.size = size
        self.settings = {**CLUSTER_OVERRIDES, **(overrides or {})}
        self.broker_class = broker_class
        self.zookeeper = ZooKeeperServer(self.workdir / "zookeeper")
        self.brokers: dict[int, BrokerProcess] = {}

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def start(self, timeout: float = 60.0) -> LocalCluster:
        self.zookeeper.start()
        chroot = None
        for i in range(self.size):
            b = self.broker_class(
                self.workdir / f"broker{i}",
                zookeeper_connect=self.zookeeper.connect,
                overrides=self.settings,
                broker_id=i,
                chroot=chroot,
            )
            chroot = b.chroot
            self.brokers[i] = b
        start_all(self.brokers.values())
        deadline = time.monotonic() + timeout
        while not all(self.sees_everyone(b) for b in self.brokers.values()):
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"not every broker of {self.bootstrap_servers} lists all {self.size} "
                    f"brokers and a controller within {timeout}s"
                )
            time.sleep(0.05)
        return self

    def sees_everyone(self, broker: BrokerProcess) -> bool:
        """broker answers Metadata listing every broker of the cluster and a controller."""
        try:
            with Connection(broker.host, broker.port, timeout=2.0) as c:
                md = c.metadata([])
        except UNREACHABLE:
            return False
        return set(md.brokers) == set(self.brokers) and md.controller_id in self.brokers

    def stop(self) -> list[str]:
        """SIGTERM every running broker; the problems (a broker that did not exit 0)."""
        return stop_all(self.brokers)

    def cleanup(self) -> None:
        for b in self.brokers.values():
            b.cleanup()
        self.zookeeper.stop()
