"""kcat (Debian build, librdkafka 2.0.2: strict about advertised API versions)."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from pybroker.testing.client_helpers import create_topic, unique_topic

# tests share a broker per backend: each uses topics of its own (conftest.py)
pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.shared_broker,
    pytest.mark.skipif(
        shutil.which("kcat") is None and not __import__("os").environ.get("CI"),
        reason="kcat not installed (scripts/install-test-deps installs it)",
    ),
]

KCAT_TIMEOUT = 60


def kcat(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    assert shutil.which("kcat"), "kcat missing: scripts/install-test-deps installs it"
    proc = subprocess.run(
        ["kcat", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=KCAT_TIMEOUT,
    )
    assert proc.returncode == 0, (
        f"kcat {' '.join(args)} exited {proc.returncode}\nstdout:\n{proc.stdout}\n"
        f"stderr:\n{proc.stderr}"
    )
    return proc


def test_metadata_listing(broker):
    topic = unique_topic("kcatmd")
    create_topic(broker.bootstrap, topic, 3)
    out = kcat("-b", broker.bootstrap, "-L", "-J", "-m", "10").stdout
    md = json.loads(out)
    assert [b["id"] for b in md["brokers"]] == [0]
    assert md["brokers"][0]["name"] == f"127.0.0.1:{broker.port}"
    assert md["controllerid"] == 0
    topics = {t["topic"]: t for t in md["topics"]}
    assert topic in topics
    parts = topics[topic]["partitions"]
    assert sorted(p["partition"] for p in parts) == [0, 1, 2]
    assert all(p["leader"] == 0 for p in parts)
    text = kcat("-b", broker.bootstrap, "-L", "-t", topic, "-m", "10").stdout
    assert f'topic "{topic}" with 3 partitions' in text
    print(f"[{broker.backend}] kcat -L: {len(topics)} topics; {topic}: 3 partitions, leader 0")


@pytest.mark.parametrize("compression", [None, "snappy", "gzip", "lz4"])
def test_produce_and_consume(broker, compression):
    topic = unique_topic("kcat")
    create_topic(broker.bootstrap, topic, 1)
    n = 200
    lines = [f"key{i}:value {i} {'z' * (i % 30)}" for i in range(n)]
    args = ["-b", broker.bootstrap, "-P", "-t", topic, "-K", ":", "-p", "0"]
    if compression:
        args += ["-z", compression]
    kcat(*args, stdin="\n".join(lines) + "\n")
    print(f"[{broker.backend}/{compression}] kcat produced {n}")
    out = kcat(
        "-b",
        broker.bootstrap,
        "-C",
        "-t",
        topic,
        "-o",
        "beginning",
        "-e",
        "-f",
        "%p|%o|%k|%s\n",
    ).stdout
    got = [line.split("|", 3) for line in out.splitlines() if line]
    print(f"[{broker.backend}/{compression}] kcat consumed {len(got)}")
    assert len(got) == n
    assert [int(o) for _, o, _, _ in got] == list(range(n))
    assert [f"{k}:{v}" for _, _, k, v in got] == lines
