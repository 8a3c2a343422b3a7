"""Moved to pybroker.testing.procutil (shipped with the package for the pytest plugin); the
names stay importable from here for the compat tests, bench and spark_it."""

from pybroker.testing.procutil import (  # noqa: F401
    free_port,
    kill_group,
    port_accepts,
    tail,
    wait_for_port,
)
