"""Scale benchmarks W21-W24 (issue 27): pybroker beside Apache Kafka 3.9 at Kafka's upper limits.

``python -m bench.scale`` (cli.py); one module per workload family, what they share in
harness.py:

* partitions.py, W21: one broker, ``n`` partitions (topics of 100, RF 1; CreateTopics 50
  topics at a time): time (and broker CPU) until every partition answers ListOffsets; RSS and
  open descriptors at rest; Metadata for all topics (time, bytes); a producer writing
  round-robin to min(n, 10,000) partitions and a consumer group reading them (MB/s, broker CPU
  s per GiB); a clean restart and a restart after kill -9 until the broker listens and until
  every partition answers.  pybroker with its embedded store (target ``pybroker-zk``: on
  ZooKeeper) beside Kafka in KRaft mode (one node).
* failover.py, W22: three brokers on one ZooKeeper, ``n`` partition replicas (n/3 partitions,
  RF 3): controller failover (kill -9 of the controller) until every partition has a live
  leader and a produce to every partition succeeds; the killed broker restarted until it is
  back in every ISR; a controlled shutdown (SIGTERM) of another broker until it exits, and how
  many partitions had no live leader meanwhile.  ZooKeeper requests (its ``srvr`` Received
  count) during each step.  Beside Kafka 3.9 in ZooKeeper mode.
* connections.py, W23: ``n`` concurrent client connections to one broker (idle, then each
  sending a small request per second; the produce probe in a process of its own): broker RSS
  per connection, accept rate, p99 of a produce meanwhile, and the broker's longest event-loop
  stall during a storm of 1,000 connects in one second.  Beside Kafka KRaft.
* groups.py, W24: groups of ``n`` members (classic with the cooperative-sticky assignor, and
  KIP-848): time from the last join to a stable assignment, time to settle after one member
  leaves, coordinator CPU, the largest JoinGroup/SyncGroup (or heartbeat) request and
  response.  Beside Kafka KRaft.

Every figure goes to ``--results`` (default bench/results/<date>-scale.md) with the command,
the load average before and after, and the machine.  Wall times on a shared machine are
distorted by its load: CPU seconds and counts (ZooKeeper requests, bytes) are given too.
docs/scale.md discusses the curves.
"""
