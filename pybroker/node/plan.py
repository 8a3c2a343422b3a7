"""What each broker process of a multi-core node is given (pure: settings in, settings out).

A node with ``node.cores=N`` (N > 1) runs N broker processes; process k (0-based) is an
ordinary pybroker broker with these settings, all others as the node's:

    broker.id             the node's broker.id + k
    listeners             every listener's port + k (same names, same hosts)
    advertised.listeners  when set: every port + k
    log.dirs              k = 0: the node's log dirs as they are (so a one-core node that
                          grows keeps its partitions on broker.id); k >= 1: <dir>/broker.<id>
                          inside each of them (a name with no '-', so never taken for a
                          partition's directory by process 0)
    broker.rack           the node's broker.rack, or else the node's name, the host and first
                          port of its first advertised listener ("127.0.0.1:9092"): rack-aware
                          placement then never puts two replicas of a partition on one node
                          while there are nodes enough (docs/multicore.md)
    metrics.listener      when the node has one: http://127.0.0.1:0 (a private port; the
                          supervisor serves the node's metrics.listener for all of them)
    node.cores            1

The embedded metadata store is the supervisor's (served to the processes over a Unix socket);
with zookeeper.connect every process is a ZooKeeper client of its own.
"""

from __future__ import annotations

import os
from pathlib import Path

from pybroker.config import Config, Endpoint


def cores_wanted(config: Config) -> int:
    """node.cores, 0 meaning every core this process may run on."""
    if config.node_cores > 0:
        return config.node_cores
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _endpoints(endpoints: tuple[Endpoint, ...], k: int) -> str:
    out = []
    for e in endpoints:
        host = f"[{e.host}]" if ":" in e.host else e.host
        port = e.port + k if e.port else 0
        out.append(f"{e.listener}://{host}:{port}")
    return ",".join(out)


def node_rack(config: Config) -> str:
    if config.broker_rack is not None:
        return config.broker_rack
    first = config.advertised[0]
    return f"{first.host}:{first.port}"


def log_dirs(config: Config, k: int) -> list[Path]:
    dirs = config.log_dir_list
    if k == 0:
        return dirs
    return [d / f"broker.{config.broker_id + k}" for d in dirs]


def worker_settings(settings: dict[str, str], config: Config, k: int) -> dict[str, str]:
    """The settings of process k of the node (see the module docstring)."""
    out = dict(settings)
    out.pop("log.dir", None)
    out["broker.id"] = str(config.broker_id + k)
    out["listeners"] = _endpoints(config.listeners, k)
    if config.advertised_listeners is not None:
        out["advertised.listeners"] = _endpoints(config.advertised_listeners, k)
    out["log.dirs"] = ",".join(str(d) for d in log_dirs(config, k))
    out["broker.rack"] = node_rack(config)
    if config.metrics_listener is not None:
        out["metrics.listener"] = "http://127.0.0.1:0"
    out["node.cores"] = "1"
    return out


def port_clashes(config: Config, cores: int) -> list[str]:
    """Ports the node's processes would need that another of its listeners already uses."""
    used: dict[int, str] = {}
    clashes = []
    for k in range(cores):
        for e in config.listeners:
            if not e.port:
                continue
            port = e.port + k
            if port > 65535:
                clashes.append(f"{e.listener} port {e.port}+{k} is above 65535")
            elif port in used:
                clashes.append(f"port {port} is both {used[port]} and {e.listener}+{k}")
            else:
                used[port] = f"{e.listener}+{k}"
    if config.metrics_listener is not None and config.metrics_listener.port in used:
        clashes.append(
            f"metrics.listener port {config.metrics_listener.port} is "
            f"{used[config.metrics_listener.port]}"
        )
    return clashes
