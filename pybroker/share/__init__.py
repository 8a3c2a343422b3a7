"""Share groups' leader side (KIP-932): the share-partitions this broker leads (partition.py),
their manager with the share sessions and the durable writes (manager.py, session.py)."""
