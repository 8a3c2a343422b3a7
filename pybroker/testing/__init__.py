"""Test support shipped with pybroker: real brokers for your own tests.

- ``pytest_plugin``: the pytest plugin (fixtures ``kafka_broker``, ``kafka_topic``,
  ``kafka_cluster``; options ``--kafka-bootstrap``, ``--kafka-broker-config``), registered
  through the ``pytest11`` entry point, so installing pybroker is enough.
- ``process.BrokerProcess``: one ``python -m pybroker serve`` process on a free loopback port.
- ``cluster.LocalCluster``: a private ZooKeeper plus N brokers.
- ``client.AdminClient``: create and delete topics over the Kafka protocol (pybroker's codec).
- ``zookeeper.ZooKeeperServer``, ``procutil``: the pieces underneath.

Nothing in the broker imports this package (an import-linter contract).
"""
