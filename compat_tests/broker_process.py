"""The compat tests' broker process: pybroker.testing.process.BrokerProcess (shipped with the
package for the pytest plugin) with the compat harness's two choices:

- readiness is an ApiVersions v0 round trip in hand-built bytes (compat_tests/rawkafka.py), so
  what the harness waits for does not depend on pybroker's codec;
- the broker runs with asyncio's debug mode on (PYTHONASYNCIODEBUG=1).

    b = BrokerProcess(workdir, zookeeper_connect=None, overrides={"num.partitions": "3"})
    b.start(); b.bootstrap; b.kill9(); b.restart(); b.stop()
"""

from __future__ import annotations

from compat_tests import rawkafka
from pybroker.testing import process as _process
from pybroker.testing.process import (  # noqa: F401
    HOST,
    START_TIMEOUT,
    ZK_SESSION_TIMEOUT_MS,
    BrokerStartError,
    start_all,
)


def api_versions_ok(host: str, port: int, timeout: float = 2.0) -> bool:
    """One ApiVersions v0 round trip on a fresh connection (hand-built bytes)."""
    try:
        with rawkafka.Conn(host, port, timeout=timeout) as c:
            corr, body = c.roundtrip(rawkafka.api_versions_v0(7))
        error, ranges = rawkafka.parse_api_versions_v0(body)
        return corr == 7 and error == 0 and 18 in ranges
    except Exception:  # refused, reset, short answer: not ready
        return False


class BrokerProcess(_process.BrokerProcess):
    asyncio_debug = True

    def ready(self) -> bool:
        # every process of a multi-core node (each listens only once it registered)
        return all(api_versions_ok(self.host, p) for p in self.ports)
