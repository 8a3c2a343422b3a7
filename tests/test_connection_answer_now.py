"""A request reaching an idle connection is handled in the callback that read it
(connection.py's _answer_now, issue 28); a handler that waits is finished by the connection's
task.  Such a request is in hand: when the connection is lost before the task takes it up, it
still runs to its end (its answer goes nowhere), as a request the task had begun does, and no
coroutine is left unawaited."""

from __future__ import annotations

import asyncio
import gc
import socket
import warnings
from types import SimpleNamespace

from pybroker.config import Config
from pybroker.connection import KafkaConnection
from pybroker.registry import HANDLERS, Registration
from pybroker.wire import codec

API_VERSIONS = 18


def test_a_waiting_request_in_hand_when_the_connection_is_lost_runs_to_its_end(monkeypatch):
    finished: list[int] = []

    async def waits(ctx, req):  # noqa: ANN001, ANN202
        await asyncio.sleep(0.01)
        finished.append(ctx.correlation_id)
        return {"error_code": 0, "api_keys": [], "throttle_time_ms": 0}

    monkeypatch.setitem(HANDLERS, API_VERSIONS, Registration(API_VERSIONS, 0, 3, waits))

    async def main() -> None:
        ours, theirs = socket.socketpair()
        services = SimpleNamespace(
            config=Config(), share_groups=None, shares=None, metrics=None, quotas=None
        )
        conn = KafkaConnection(services=services, max_request_bytes=1 << 20)
        loop = asyncio.get_running_loop()
        await loop.create_connection(lambda: conn, sock=ours)
        conn.data_received(codec.encode_request(API_VERSIONS, 0, 7, "c", {}))
        conn.connection_lost(None)  # before the task has run
        await asyncio.wait_for(conn.task, 5)
        theirs.close()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(main())
        gc.collect()
    assert finished == [7]
    assert not [w for w in caught if "never awaited" in str(w.message)], caught
