"""What a workload is: its metrics and its setup / run / commands functions."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from bench.targets import Target

MIB = 1024 * 1024
GIB = 1024 * MIB
CPU_METRIC = "CPU s/GiB"  # broker CPU seconds (user + system, all threads) per GiB moved


@dataclass
class Metric:
    name: str
    unit: str
    higher_is_better: bool


@dataclass
class Workload:
    wid: str
    title: str
    metrics: list[Metric]
    setup: Callable[[Target, dict], dict]  # (target, sizes) -> state
    run: Callable[[Target, dict, int], dict[str, float]]  # (target, state, run index)
    commands: Callable[[dict], list[str]]  # (sizes) -> command lines for the results
    brokers: int = 1
    repeat: bool = True  # False: run() is called once, its lists are the runs
    overrides: dict[str, object] = field(default_factory=dict)  # broker configs, both brokers
    tls: str = ""  # "SSL" / "SASL_SSL": clients use such a listener (Target.tls_bootstrap)
    kafka4: bool = False  # the reference is Apache Kafka 4.4 (java/kafka4/pom.xml), not 3.9


def no_setup(target: Target, sizes: dict) -> dict:
    return {"sizes": sizes}
