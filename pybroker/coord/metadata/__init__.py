"""The metadata store (ZooKeeper's data model: ZooKeeper via kazoo, or in process), Kafka's znode
layout, and the cluster's metadata cache fed by its watches."""
