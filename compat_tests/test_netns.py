"""The network-namespace harness itself (compat_tests/netns.py, root only): a cut drops
packets one way only, a heal restores them, a thread entered into a namespace (and the
threads it starts) connect from there, the machine's own namespace cannot reach the test
subnet, and closing leaves no namespace, interface or route behind."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

import pytest

from compat_tests.netns import ROUTE_PROTO, Network, _live_runs, require

pytestmark = pytest.mark.timeout(120)

SERVER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 9000)); s.listen()
while True:
    c, _ = s.accept(); c.sendall(b"hi"); c.close()
"""


def _hello(address: str) -> str:
    try:
        with socket.create_connection((address, 9000), timeout=1.0) as c:
            return c.recv(2).decode()
    except TimeoutError:
        return "timeout"
    except OSError as e:
        return type(e).__name__


def _leftovers(tag: str) -> list[str]:
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    return [w for w in (names + links).split() if w.startswith(tag)]


def test_cut_heal_enter_and_clean_up():
    require()
    net = Network()
    for node in ("srv", "cli", "obs"):
        net.add(node)
    net.start()
    server = None
    try:
        addr = net.address("srv")
        server = subprocess.Popen(net.command("srv", [sys.executable, "-c", SERVER, addr]))
        assert _hello(addr) != "hi"  # the machine's namespace: unreachable, at once
        with net.entered("cli"):
            for _ in range(200):  # the server starting
                if _hello(addr) == "hi":
                    break
                time.sleep(0.1)
            assert _hello(addr) == "hi"
            net.cut("cli", "srv")
            assert _hello(addr) == "timeout"  # dropped silently, as a failed link
            net.heal_all()
            assert _hello(addr) == "hi"
            net.cut("srv", "cli")  # the answers are lost: no connection either
            assert _hello(addr) == "timeout"
            net.heal_all()
            got = []
            t = threading.Thread(target=lambda: got.append(_hello(addr)))
            t.start()  # started inside: lives in "cli" too
            t.join()
            assert got == ["hi"]
        with net.entered("obs"):
            net.cut_both("cli", "srv")
            assert _hello(addr) == "hi"  # only the cli <-> srv link is cut
            net.heal_all()
    finally:
        if server is not None:
            server.kill()
            server.wait()
        net.close()
    assert _leftovers(net.tag) == []
    if _live_runs(exclude=net.pid):
        return  # another run's namespaces still use the route
    routes = subprocess.run(
        ["ip", "route", "show", "proto", ROUTE_PROTO], capture_output=True, text=True
    ).stdout
    assert routes.strip() == ""
