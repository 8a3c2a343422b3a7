"""A broker that several tests of a module share (conftest.py's `shared_broker` marker, the
old clients' tapped broker): starting one per test was most of those modules' time.

    shared = SharedBroker(workdir, zookeeper_connect, {"num.partitions": "3"})
    b = shared.begin(nodeid)      # started if not running; marks where the test's part begins
    problem = shared.end(nodeid)  # "" or why the test fails: the broker exited, or a traceback
    problem = shared.retire()     # SIGTERM: "" or why (not exit 0, a traceback at the stop)

Each test's part of the broker's output lies between two harness marks; the caller retires
the broker of a failed test, so the next test starts with a fresh one.
"""

from __future__ import annotations

from pathlib import Path

from pybroker.testing.debug_process import BrokerProcess

TRACEBACK = "Traceback (most recent call last)"


class SharedBroker:
    """One broker process several tests use in turn (``process``: a BrokerProcess)."""

    def __init__(self, workdir: Path, zookeeper_connect: str | None, settings: dict[str, str]):
        self.process = BrokerProcess(
            workdir, zookeeper_connect=zookeeper_connect, overrides=dict(settings)
        )
        self.offset = 0  # where the output not yet checked for tracebacks starts

    def begin(self, nodeid: str) -> BrokerProcess:
        if not self.process.is_running():
            self.process.start()
        self.process.mark(f"test {nodeid} begins with this shared broker")
        return self.process

    def new_traceback(self) -> str:
        """The first traceback in the output since the last check (since the start at first:
        what the broker wrote between two tests counts for the next one)."""
        try:
            with open(self.process.stderr_path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:  # never started
            return ""
        self.offset += len(data)
        lines = data.decode(errors="replace").splitlines()
        for i, line in enumerate(lines):
            if line.startswith(TRACEBACK):
                return "\n".join(lines[max(0, i - 2) : i + 12])
        return ""

    def end(self, nodeid: str) -> str:
        """What went wrong with the broker during the test ("" if nothing)."""
        if not self.process.is_running():
            return f"the shared broker {self.process.bootstrap} exited during the test"
        self.process.mark(f"test {nodeid} ends")
        excerpt = self.new_traceback()
        if excerpt:
            return (
                f"the broker logged a traceback (an unexpected error inside pybroker; mark "
                f"the test allow_broker_tracebacks if intended):\n{excerpt}"
            )
        return ""

    def retire(self) -> str:
        """Stop the broker: what went wrong ("" if it exited 0 and logged no traceback)."""
        try:
            if self.process.is_running():
                self.process.stop()
        except AssertionError as e:
            return f"shared broker {self.process.bootstrap} did not shut down cleanly: {e}"
        finally:
            self.process.cleanup()
        excerpt = self.new_traceback()
        return f"the shared broker logged a traceback at its stop:\n{excerpt}" if excerpt else ""
