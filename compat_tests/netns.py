"""A private network for fault tests: one Linux network namespace per process, one bridge.

    net = Network()                       # names carry this process's pid: pbf<pid>...
    net.add("zk1"); net.add("b0"); net.add("obs")
    net.start()                           # namespaces, veths, the bridge, addresses
    net.address("b0")                     # "10.213.0.N" (exists only inside the namespaces)
    net.command("b0", [...])              # ["ip", "netns", "exec", "pbf<pid>-b0", ...]
    with net.entered("obs"):              # this thread's sockets (and the threads it starts)
        ...                               #   live in the namespace "obs"
    net.cut("b0", "zk1")                  # b0's packets no longer reach zk1 (one way)
    net.cut_both("b0", "b1")              # both ways
    net.heal_all()
    net.close()                           # always (a finalizer); namespaces, veths, bridge gone

Safety (the rules of this machine): every address is in 10.213.0.0/24 and exists only inside
the namespaces the test created; the bridge has no address (IPv6 off, so not even a link-local
one) and is attached to nothing but the test's veths; the namespaces have no default route, no
NAT and no forwarding, so no packet can leave them.  In the machine's own namespace the subnet
is ``unreachable`` (a route with protocol number 213, removed with the last run): a harness
thread that forgot to enter a namespace fails at once (EHOSTUNREACH) instead of sending its
packets to the default gateway.  A cut is an nftables rule in the
receiving namespace's own table (``inet pbfcut``: input packets whose source address is in the
set ``blocked`` are dropped, silently, as a failed link drops them); nothing is ever added to
the machine's own ruleset.

Every name starts with ``pbf<pid>`` (namespaces ``pbf<pid>-<node>``, interfaces
``pbf<pid>v<n>`` and the bridge ``pbf<pid>br``), so ``sweep_stale()`` -- run before every
start -- removes what a run that died left behind (processes still in its namespaces are
killed by pid first), and never touches a live run's.

Needs root, ``ip`` (iproute2) and ``nft`` (Debian package nftables, in
scripts/install-test-deps); ``unavailable()`` says why not otherwise.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator

from pybroker.testing.procutil import pid_alive

PREFIX = "pbf"
SUBNET = "10.213.0"
PREFIX_LEN = 24
TABLE = "pbfcut"
ROUTE_PROTO = "213"  # marks the host's unreachable route for SUBNET
CLONE_NEWNET = 0x40000000
COMMAND_TIMEOUT = 20.0

_libc = ctypes.CDLL(None, use_errno=True)


def _run(args: list[str], check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(args, capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")
    return r


def unavailable() -> str | None:
    """None when network namespaces can be used here, else the reason."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (scripts/install-test-deps installs nftables)"
    probe = f"{PREFIX}{os.getpid()}-probe"
    try:
        _run(["ip", "netns", "add", probe])
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        return f"cannot create a network namespace: {e}"
    try:
        script = f"add table inet {TABLE}\ndelete table inet {TABLE}\n"
        r = subprocess.run(
            ["ip", "netns", "exec", probe, "nft", "-f", "-"],
            input=script,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
        )
        if r.returncode != 0:
            return f"nftables does not work in a namespace: {r.stderr.strip()}"
    finally:
        _run(["ip", "netns", "del", probe], check=False)
    return None


def require(also: str | None = None) -> None:
    """Skip the calling test, saying why, when network namespaces (or ``also``, another
    missing need) are not available here; under CI=true fail instead, so CI never passes
    without running it (as pybroker/testing/chromium.py does)."""
    import pytest

    why = unavailable() or also
    if why is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{why}; CI=true requires it", pytrace=False)
    pytest.skip(why)


def _owner(name: str) -> int | None:
    m = re.match(rf"{PREFIX}(\d+)", name)
    return int(m.group(1)) if m else None


def sweep_stale() -> list[str]:
    """Remove the namespaces, interfaces and bridges of runs whose process is gone (after
    killing, by pid, whatever still runs in those namespaces).  Returns what it removed."""
    removed = []
    me = os.getpid()
    r = _run(["ip", "netns", "list"], check=False)
    for line in r.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        owner = _owner(name)
        if owner is None or owner == me or pid_alive(owner):
            continue
        pids = _run(["ip", "netns", "pids", name], check=False).stdout.split()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        _run(["ip", "netns", "del", name], check=False)
        removed.append(name)
    r = _run(["ip", "-o", "link", "show"], check=False)
    for line in r.stdout.splitlines():
        m = re.match(r"\d+: ([^:@]+)", line)
        if not m:
            continue
        name = m.group(1)
        owner = _owner(name)
        if owner is None or owner == me or pid_alive(owner):
            continue
        _run(["ip", "link", "del", name], check=False)
        removed.append(name)
    if not _live_runs(exclude=me):
        _run(["ip", "route", "del", *_GUARD_ROUTE], check=False)
    return removed


_GUARD_ROUTE = ["unreachable", f"{SUBNET}.0/{PREFIX_LEN}", "proto", ROUTE_PROTO]


def _live_runs(exclude: int) -> set[int]:
    """Pids of other live runs that own namespaces here."""
    r = _run(["ip", "netns", "list"], check=False)
    owners = {_owner(line.split()[0]) for line in r.stdout.splitlines() if line.split()}
    return {o for o in owners if o is not None and o != exclude and pid_alive(o)}


def _guard_route(present: bool) -> None:
    listed = _run(["ip", "route", "show", "proto", ROUTE_PROTO], check=False).stdout
    if present and f"{SUBNET}.0/{PREFIX_LEN}" not in listed:
        _run(["ip", "route", "add", *_GUARD_ROUTE])
    elif not present and listed.strip():
        _run(["ip", "route", "del", *_GUARD_ROUTE], check=False)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


class Network:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.tag = f"{PREFIX}{self.pid}"
        self.bridge = f"{self.tag}br"
        self.nodes: dict[str, int] = {}  # node -> host number in SUBNET
        self.started = False
        self.cuts: set[tuple[str, str]] = set()  # (from, to): packets from -> to dropped
        self._lock = threading.Lock()

    # -- facts ------------------------------------------------------------------------------
    def namespace(self, node: str) -> str:
        return f"{self.tag}-{node}"

    def address(self, node: str) -> str:
        return f"{SUBNET}.{self.nodes[node]}"

    def command(self, node: str, args: list[str]) -> list[str]:
        """``args`` run inside the node's namespace (exec'ed: the pid is the program's)."""
        return ["ip", "netns", "exec", self.namespace(node), *args]

    # -- set up / tear down -----------------------------------------------------------------
    def add(self, node: str) -> str:
        assert not self.started, "add nodes before start()"
        assert re.fullmatch(r"[a-z0-9]{1,8}", node), node
        self.nodes[node] = len(self.nodes) + 2  # .1 stays unused: no gateway
        return node

    def start(self) -> Network:
        sweep_stale()
        self.started = True
        try:
            _guard_route(True)
            _run(["ip", "link", "add", self.bridge, "type", "bridge"])
            self._ipv6_off(self.bridge)
            _run(["ip", "link", "set", self.bridge, "up"])
            for n, (node, host) in enumerate(self.nodes.items()):
                self._start_node(node, host, n)
        except BaseException:
            self.close()
            raise
        return self

    @staticmethod
    def _ipv6_off(dev: str, ns: str | None = None) -> None:
        path = f"/proc/sys/net/ipv6/conf/{dev}/disable_ipv6"
        if ns is None:
            if os.path.exists(path):
                with open(path, "w") as f:
                    f.write("1")
        else:
            _run(
                ["ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=1"]
            )

    def _start_node(self, node: str, host: int, n: int) -> None:
        ns = self.namespace(node)
        veth = f"{self.tag}v{n}"
        _run(["ip", "netns", "add", ns])
        _run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns])
        self._ipv6_off(veth)
        _run(["ip", "link", "set", veth, "master", self.bridge, "up"])
        for dev in ("all", "default", "eth0"):
            self._ipv6_off(dev, ns)
        ip = ["ip", "-n", ns]
        _run([*ip, "addr", "add", f"{SUBNET}.{host}/{PREFIX_LEN}", "dev", "eth0"])
        _run([*ip, "link", "set", "eth0", "up"])
        _run([*ip, "link", "set", "lo", "up"])
        table = (
            f"add table inet {TABLE}\n"
            f"add set inet {TABLE} blocked {{ type ipv4_addr; }}\n"
            f"add chain inet {TABLE} input {{ type filter hook input priority 0; policy accept; }}\n"
            f"add rule inet {TABLE} input ip saddr @blocked drop\n"
        )
        self._nft(node, table)

    def close(self) -> None:
        """Remove every namespace, veth and the bridge of this network (idempotent)."""
        if not self.started:
            return
        for node in self.nodes:
            ns = self.namespace(node)
            pids = _run(["ip", "netns", "pids", ns], check=False).stdout.split()
            for pid in pids:  # (the caller ended its processes; this is the safety net)
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            _run(["ip", "netns", "del", ns], check=False)
        _run(["ip", "link", "del", self.bridge], check=False)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # veths go with their namespaces, asynchronously
            left = _run(["ip", "-o", "link", "show"], check=False).stdout
            if f"{self.tag}v" not in left and self.bridge not in left:
                break
            time.sleep(0.1)
        if not _live_runs(exclude=os.getpid()):
            _guard_route(False)
        self.started = False
        self.cuts.clear()

    # -- threads in a namespace -------------------------------------------------------------
    @contextlib.contextmanager
    def entered(self, node: str) -> Iterator[None]:
        """Run the block with this thread in the node's namespace: sockets created meanwhile
        (and threads started meanwhile, which inherit it) live there for good."""
        with (
            open("/proc/thread-self/ns/net", "rb") as back,
            open(f"/run/netns/{self.namespace(node)}", "rb") as target,
        ):
            _setns(target.fileno())
            try:
                yield
            finally:
                _setns(back.fileno())

    # -- cuts -------------------------------------------------------------------------------
    def _nft(self, node: str, script: str) -> None:
        r = subprocess.run(
            self.command(node, ["nft", "-f", "-"]),
            input=script,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
        )
        if r.returncode != 0:
            raise RuntimeError(f"nft in {node}: {r.stderr.strip()}\n{script}")

    def _set_blocked(self, src: str, dst: str, blocked: bool) -> None:
        op = "add" if blocked else "delete"
        self._nft(dst, f"{op} element inet {TABLE} blocked {{ {self.address(src)} }}\n")

    def cut(self, src: str, dst: str) -> None:
        """Packets from ``src`` no longer reach ``dst`` (``dst`` still reaches ``src``)."""
        with self._lock:
            if (src, dst) not in self.cuts:
                self._set_blocked(src, dst, True)
                self.cuts.add((src, dst))

    def cut_both(self, a: str, b: str) -> None:
        self.cut(a, b)
        self.cut(b, a)

    def heal(self, src: str, dst: str) -> None:
        with self._lock:
            if (src, dst) in self.cuts:
                self._set_blocked(src, dst, False)
                self.cuts.discard((src, dst))

    def heal_all(self) -> None:
        for src, dst in sorted(self.cuts):
            self.heal(src, dst)
