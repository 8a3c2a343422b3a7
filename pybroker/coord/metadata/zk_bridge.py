"""The hop from kazoo's threads to the event loop (ZooKeeperStore, zk.py): an inbox of calls
run on the loop in order, one wake-up per batch, and the gathering of many pipelined
requests' results into one hand-over (a hop per result would cost a wake-up of the loop
each), and a client's stop off the loop."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("pybroker.coord.metadata.zk")


class LoopInbox:
    """Calls handed from kazoo's threads to the event loop, run in order, with one
    ``call_soon_threadsafe`` per batch (while the loop has not drained the inbox, later
    calls only join it)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._calls: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []

    def put(self, fn: Callable[..., Any], *args: Any) -> None:
        with self._lock:
            self._calls.append((fn, args))
            if len(self._calls) > 1:
                return  # a drain is scheduled already
        try:
            self._loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop closed meanwhile
            pass

    def _drain(self) -> None:
        with self._lock:
            calls, self._calls = self._calls, []
        for fn, args in calls:
            try:
                fn(*args)
            except Exception:
                log.exception("ZooKeeper callback %r failed", fn)


async def gather_results(
    loop: asyncio.AbstractEventLoop, inbox: LoopInbox, sent: list[Any]
) -> list[tuple[bool, Any]]:
    """The outcomes of kazoo IAsyncResults ``sent`` (requests already sent, pipelined on the
    connection), in order: ``(True, value)`` or ``(False, exception)``, gathered on kazoo's
    thread and handed to the loop once."""
    if not sent:
        return []
    fut: asyncio.Future[list[Any]] = loop.create_future()
    results: list[Any] = [None] * len(sent)
    left = [len(sent)]
    lock = threading.Lock()

    def settle(values: list[Any]) -> None:
        if not fut.done():
            fut.set_result(values)

    def done_at(i: int) -> Callable[[Any], None]:
        def done(result: Any) -> None:  # kazoo's thread
            ok = result.successful()
            results[i] = (ok, result.value if ok else result.exception)
            with lock:
                left[0] -= 1
                last = left[0] == 0
            if last:
                inbox.put(settle, results)

        return done

    for i, r in enumerate(sent):
        r.rawlink(done_at(i))
    return await fut


def _stop_and_close(client: Any) -> None:
    try:
        client.stop()
    finally:
        client.close()


async def stop_and_close_in_thread(client: Any) -> None:
    """A kazoo client's stop() and close(): stop() can block for seconds (its connection thread retries an unreachable
    ensemble): run it in a daemon thread of its own, not the loop's default executor, which
    asyncio.run waits for at exit, so a caller that stops waiting (a bounded shutdown) does
    not keep the process alive."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def run() -> None:
        try:
            _stop_and_close(client)
        except Exception as e:  # reported to the awaiting task
            _settle(done, e)
        else:
            _settle(done, None)

    def _settle(fut: asyncio.Future[None], error: BaseException | None) -> None:
        def apply() -> None:
            if fut.done():
                return
            if error is None:
                fut.set_result(None)
            else:
                fut.set_exception(error)

        try:
            loop.call_soon_threadsafe(apply)
        except RuntimeError:
            pass  # the loop is gone: nobody waits any more

    threading.Thread(target=run, name="zookeeper-close", daemon=True).start()
    await done
