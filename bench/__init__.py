"""Apache Kafka 3.9 vs pybroker on this machine (docs/bench.md): ``python -m bench.run``.

- targets: the brokers under test (pybroker.testing.kafka_reference, pybroker processes)
- workloads/: W1-W17, one module per family; clients: the Java perf tools and topic set-up
- report: the table and bench/results/<date>.md
- other drivers and one-off measurements, each ``python -m bench.<name>``: scale (W21-W24),
  commits (W18, W19), rebalance_trace, share_state_writes, cleaner_cost, console_render,
  metrics_overhead, multicore_costs, freethreaded_cost, offset_commits, validation_cost;
  profiles/ (py-spy profiles of a workload)

The package imports pybroker and pybroker.testing only, never tests/ or compat_tests/
(tests/test_layout.py checks it).
"""
