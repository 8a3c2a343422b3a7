"""Client quotas, as Kafka's ClientQuotaManager keeps them (docs/internals.md, Quotas).

* ``rate``: Kafka's windowed rate (SampledStat + Rate) and throttle-time arithmetic.
* ``entities``: quota entities, their ZooKeeper paths and Kafka's eight-level precedence.
* ``store``: the quotas in the metadata store, read and written as Kafka on ZooKeeper does,
  kept current through the store's watches.
* ``manager``: per (user, client-id) sensors, recording and throttle times per quota type.
"""
