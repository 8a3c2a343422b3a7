"""One broker process of a multi-core node: ``python -m pybroker.node.worker``.

Started by the node's supervisor (node/supervisor.py), never by hand.  Its handoff with the
supervisor, all through what the supervisor gives it at spawn:

* stdin: the broker's settings as one JSON object (node/plan.py made them), read whole at
  start (so secrets in them never show in a process listing);
* ``PYBROKER_NODE_STORE``: the Unix socket of the node's embedded metadata store (absent with
  ZooKeeper): the broker's store is a RemoteStore on it;
* ``PYBROKER_NODE_READY_FD``: a pipe; once the broker serves, one JSON line goes there
  (``{"broker_id": .., "metrics_port": ..}``) and the pipe is closed;
* ``PYBROKER_NODE_PARENT``: the supervisor's pid.  The process asks the kernel for SIGTERM when
  its parent dies (PR_SET_PDEATHSIG), and stops by itself if the parent is already gone, so no
  broker outlives its node.

SIGTERM and SIGINT stop the broker cleanly (controlled shutdown first), as ``pybroker serve``.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import logging
import os
import signal
import sys

from pybroker import event_loop, logthrottle
from pybroker.broker import Broker
from pybroker.config import ConfigError, build_config
from pybroker.coord.metadata.remote import RemoteStore

PR_SET_PDEATHSIG = 1
PARENT_CHECK_S = 1.0


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the parent check below still runs
        pass


async def _serve(broker: Broker, ready_fd: int | None, parent: int | None) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with broker.serving():
        if ready_fd is not None:
            port = broker.http.bound[1] if broker.http is not None and broker.http.bound else None
            line = json.dumps({"broker_id": broker.config.broker_id, "metrics_port": port})
            os.write(ready_fd, line.encode() + b"\n")
            os.close(ready_fd)

        async def watch_parent() -> None:
            while os.getppid() == parent:
                await asyncio.sleep(PARENT_CHECK_S)
            logging.getLogger("pybroker.node").error("the node's supervisor is gone: stopping")
            stop.set()

        watcher = asyncio.create_task(watch_parent()) if parent is not None else None
        await stop.wait()
        if watcher is not None:
            watcher.cancel()
    return 0


def main() -> int:
    settings = json.loads(sys.stdin.read())
    broker_id = settings.get("broker.id", "?")
    logging.basicConfig(
        level=os.environ.get("PYBROKER_NODE_LOG_LEVEL", "INFO").upper(),
        format=f"%(asctime)s %(levelname)s [broker {broker_id}] %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logthrottle.install()
    parent = (
        int(os.environ["PYBROKER_NODE_PARENT"]) if "PYBROKER_NODE_PARENT" in os.environ else None
    )
    _die_with_parent()
    if parent is not None and os.getppid() != parent:
        return 1  # the supervisor died before the request above
    ready = os.environ.get("PYBROKER_NODE_READY_FD")
    ready_fd = int(ready) if ready else None
    try:
        config = build_config(settings)
    except ConfigError as e:
        print(f"pybroker [broker {broker_id}]: {e}", file=sys.stderr)
        return 2
    socket_path = os.environ.get("PYBROKER_NODE_STORE")
    store = RemoteStore(socket_path) if socket_path and not config.zookeeper_connect else None
    try:
        serving = _serve(Broker(config, store=store), ready_fd, parent)
        loop = event_loop.configured(config.event_loop, "event.loop" in config.explicit_keys)
        return event_loop.run(serving, loop)
    except Exception as e:
        logging.getLogger("pybroker").error(
            "fatal: %s", e, exc_info=logging.getLogger().isEnabledFor(logging.DEBUG)
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
