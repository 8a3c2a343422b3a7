"""The broker's event loop, chosen by ``event.loop`` (pybroker's own key): ``uvloop`` (libuv's
loop, the ``uvloop`` package; the default) or ``asyncio`` (the standard library's selector
loop).  Where uvloop cannot be imported (no wheel for the platform, PyPy, Windows) the default
falls back to asyncio's loop with one WARN line saying why (:func:`configured`); an explicit
``event.loop=uvloop`` there stops the start.

Every entry point that runs a broker (``pybroker serve``, a node's supervisor and its broker
processes) runs its main coroutine through :func:`run`.  What differs on uvloop, and how the
broker copes (docs/internals.md, "pybroker/event_loop.py"):

* uvloop's loop has no ``sendfile`` (``AbstractEventLoop.sendfile`` raises
  NotImplementedError): a plaintext log region goes straight onto the socket with
  ``os.sendfile`` on both loops (transport_layer.py), once the transport's buffer is empty;
* uvloop has no ``_make_socket_transport``: an accepted plaintext connection takes
  ``connect_accepted_socket`` (server.py), as TLS does on both loops.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

try:
    import uvloop
except ImportError as e:  # the broker runs on asyncio's loop without it
    uvloop = None
    UVLOOP_MISSING = f"{type(e).__name__}: {e}"
else:
    UVLOOP_MISSING = ""

T = TypeVar("T")
log = logging.getLogger("pybroker.event_loop")

LOOPS = ("asyncio", "uvloop")


def available(name: str) -> bool:
    """Whether the loop ``name`` can run here (uvloop: the package is installed)."""
    return name == "asyncio" or (name == "uvloop" and uvloop is not None)


def configured(name: str, explicit: bool) -> str:
    """The loop to run for ``event.loop=name``: ``name``, except the default (uvloop, not set
    explicitly) where uvloop cannot be imported: then asyncio's, with one WARN line."""
    if name == "uvloop" and uvloop is None and not explicit:
        log.warning(
            "event.loop: uvloop (the default) cannot be imported here (%s); running on "
            "asyncio's loop (set event.loop=asyncio to choose it)",
            UVLOOP_MISSING,
        )
        return "asyncio"
    return name


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """A new loop of kind ``name``; None: asyncio's default (what ``asyncio.run`` makes)."""
    if name == "asyncio":
        return None
    if name == "uvloop":
        if uvloop is None:
            raise RuntimeError("event.loop=uvloop but the uvloop package is not installed")
        return uvloop.new_event_loop
    raise ValueError(f"unknown event loop {name!r} (one of {', '.join(LOOPS)})")


def run(main: Coroutine[Any, Any, T], name: str) -> T:
    """``asyncio.run(main)`` on a loop of kind ``name``."""
    with asyncio.Runner(loop_factory=loop_factory(name)) as runner:
        loop = runner.get_loop()
        log.info("event loop: %s (%s.%s)", name, type(loop).__module__, type(loop).__name__)
        return runner.run(main)


def native_sendfile(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop.sendfile`` is implemented (asyncio's loops; not uvloop's)."""
    return type(loop).sendfile is not asyncio.AbstractEventLoop.sendfile
