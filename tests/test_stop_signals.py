"""SIGTERM stops the broker even when the event loop's self-pipe is full.

asyncio's add_signal_handler learns of a signal from a byte written to the loop's self-pipe;
other threads' wake-ups (kazoo delivering thousands of ZooKeeper results during a failover
while the loop was busy) filled it, the signal's byte was dropped ("Exception ignored when
trying to write to the signal wakeup fd: BlockingIOError") and a broker in a 30,000-partition
cluster ignored SIGTERM.  Each case runs in a child process (signal handlers are per process).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import asyncio, os, signal, sys, threading, time
    from pybroker.__main__ import _on_stop_signals

    async def main(use_asyncio_handler):
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        if use_asyncio_handler:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
        else:
            _on_stop_signals(loop, stop)
        await asyncio.sleep(0)

        def flood():  # another thread's wake-ups while the loop is busy
            for _ in range(5_000):  # (a socketpair fills after ~300 one-byte writes)
                loop.call_soon_threadsafe(lambda: None)

        t = threading.Thread(target=flood)
        t.start()
        t.join()
        os.kill(os.getpid(), signal.SIGTERM)  # the loop is still blocked: the pipe is full
        try:
            await asyncio.wait_for(stop.wait(), 5)
        except TimeoutError:
            print("SIGTERM lost")
            return 1
        print("stopped")
        return 0

    sys.exit(asyncio.run(main(sys.argv[1] == "asyncio")))
    """
)


def run(mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, timeout=120
    )


def test_sigterm_is_not_lost_when_the_self_pipe_is_full():
    r = run("pybroker")
    assert r.returncode == 0 and "stopped" in r.stdout, r.stdout + r.stderr


def test_asyncio_handler_loses_it_in_the_same_situation():
    """The scenario is real: the handler pybroker used before loses the signal here."""
    r = run("asyncio")
    assert r.returncode == 1 and "SIGTERM lost" in r.stdout, r.stdout + r.stderr
