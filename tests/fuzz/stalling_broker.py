"""A broker with a known stall, to test the fuzzer's stall attribution (test_protocol_fuzz):
its handler of one API keeps the event loop busy for a while before it answers, as a handler
that decompresses a whole batch or walks a whole log would.

    python -m tests.fuzz.stalling_broker API_KEY CPU_MS serve --override ...

The rest of the command line is ``python -m pybroker``'s.
"""

from __future__ import annotations

import dataclasses
import sys
import time

from pybroker import handlers  # noqa: F401  (registers every handler)
from pybroker.__main__ import main
from pybroker.registry import HANDLERS


def spin(cpu_ms: float) -> None:
    """Keep this thread on the CPU for ``cpu_ms`` of its own CPU time (however long a loaded
    machine makes that in wall time)."""
    end = time.thread_time() + cpu_ms / 1000.0
    while time.thread_time() < end:
        pass


def install(api_key: int, cpu_ms: float) -> None:
    reg = HANDLERS[api_key]
    inner = reg.fn

    def stalling(ctx, request):  # type: ignore[no-untyped-def]
        spin(cpu_ms)
        return inner(ctx, request)

    HANDLERS[api_key] = dataclasses.replace(reg, fn=stalling)


if __name__ == "__main__":
    install(int(sys.argv[1]), float(sys.argv[2]))
    sys.exit(main(sys.argv[3:]))
