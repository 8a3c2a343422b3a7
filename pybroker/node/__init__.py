"""A pybroker node that uses several cores: a supervisor and one broker process per core
(supervisor.py), the settings each process gets (plan.py), the node's metrics.listener
(http.py) and the broker process's entry point (worker.py).  docs/multicore.md has the design."""
