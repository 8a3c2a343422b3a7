"""The client side of the workloads: Kafka's Java perf tools with a benchmark JVM
(``run_java``, ``producer_perf``), topics created with Kafka's TopicCommand and waited for with
a hand-built Metadata v7, the command lines the report prints, and confluent-kafka's produce
waiting out a full queue (``produce_retrying``).
"""

from __future__ import annotations

import re
import struct
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.targets import Target
from pybroker.testing import java, rawkafka

CLIENT_HEAP = "512m"  # the Java perf tools' heap
CLIENT_FAST_START = False  # --smoke: quick-starting client JVMs (serial GC, C1 only)


class WorkloadError(RuntimeError):
    pass


def run_java(
    main_class: str, args: list[object], timeout: float, *, kafka4_cp: str | None = None
) -> java.JavaResult:
    """A Java tool with a benchmark JVM (512 MiB heap, default GC and JIT, not the fast-start
    flags compat_tests uses for short tools); ``kafka4_cp``: a Kafka 4.4 client program's
    classpath (its log4j2 configuration)."""
    cmd = java.java_command(
        main_class,
        [str(a) for a in args],
        heap=CLIENT_HEAP,
        fast_start=CLIENT_FAST_START,
        cp=kafka4_cp,
        log4j=None if kafka4_cp else java.TOOLS_LOG4J,
        jvm_args=[f"-Dlog4j2.configurationFile={java.KAFKA4_TOOLS_LOG4J2}"] if kafka4_cp else None,
    )
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        java.kill_group(proc, 9)
        out, err = proc.communicate()
    r = java.JavaResult(cmd, proc.returncode, out, err, time.monotonic() - start, timed_out)
    if not r.ok:
        raise WorkloadError(r.describe(3000))
    return r


def show_cmd(main_class: str, args: list[object]) -> str:
    short = main_class.rsplit(".", 1)[-1]
    return f"java -Xmx{CLIENT_HEAP} -cp $CP {short} " + " ".join(map(str, args))


def produce_retrying(
    producer: Any,
    topic: str,
    value: bytes,
    key: bytes | None = None,
    *,
    backoff_s: float = 0.05,
    **options: Any,
) -> None:
    """confluent-kafka's ``Producer.produce``; while its queue is full (BufferError), poll
    (serving delivery callbacks) ``backoff_s`` and try again."""
    while True:
        try:
            producer.produce(topic, value, key, **options)
            return
        except BufferError:
            producer.poll(backoff_s)


def create_topics(
    target: Target, names: list[str], partitions: int, rf: int = 1, configs=None, batch=10
):
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=target.bootstrap, request_timeout_ms=300_000)
    try:
        for i in range(0, len(names), batch):
            admin.create_topics(
                [
                    NewTopic(n, partitions, rf, topic_configs=configs or {})
                    for n in names[i : i + batch]
                ],
                timeout_ms=300_000,
            )
    finally:
        admin.close()
    wait_topics_ready(target, names, partitions, timeout=600)


def metadata_v7(host: str, port: int, topics: list[str] | None, timeout: float = 30.0):
    from pybroker.testing.cluster_harness import metadata_v7_request, parse_metadata_v7

    with rawkafka.Conn(host, port, timeout=timeout) as c:
        _corr, body = c.roundtrip(metadata_v7_request(1, topics))
    return parse_metadata_v7(body, -1)


def wait_topics_ready(target: Target, names: list[str], partitions: int, timeout: float) -> None:
    """Until Metadata lists every partition with a leader and ISR == replicas."""
    host, port = target.first
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            md = metadata_v7(host, port, names)
            ok = all(md.topic_errors.get(n) == 0 for n in names) and all(
                len(md.topic(n)) == partitions
                and all(
                    p.error == 0 and p.leader >= 0 and set(p.isr) == set(p.replicas)
                    for p in md.topic(n).values()
                )
                for n in names
            )
            if ok:
                return
            last = {n: md.topic_errors.get(n) for n in names[:3]}
        except (OSError, struct.error, AssertionError) as e:
            last = e
        time.sleep(0.3)
    raise WorkloadError(f"topics {names[:3]}... not ready within {timeout}s (last: {last})")


_PP_FINAL = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th"
)


def producer_perf(
    target: Target, topic: str, records: int, size: int, props: list[str], tls: bool = False
):
    """ProducerPerformance (over the secure listener with ``tls``: its client properties go
    in a --producer.config file, since --producer-props cannot carry values with '=')."""
    extra: list[object] = []
    if tls:
        config = Path(tempfile.mkdtemp(prefix="pp-")) / "producer.properties"
        config.write_text("".join(p + "\n" for p in target.tls_props))
        extra = ["--producer.config", config]
    bootstrap = target.tls_bootstrap if tls else target.bootstrap
    args = _pp_args(topic, records, size, bootstrap, props, extra)
    r = run_java(java.PRODUCER_PERFORMANCE, args, timeout=900)
    found = list(_PP_FINAL.finditer(r.stdout))
    m = found[-1] if found else None
    if m is None or int(m.group(1)) != records:
        raise WorkloadError(f"ProducerPerformance summary missing or short\n{r.describe(3000)}")
    errors = java.java_errors(r.stderr + r.stdout)
    if errors:
        raise WorkloadError(f"ProducerPerformance reported errors: {errors}\n{r.describe(2000)}")
    return {
        "records/s": float(m.group(2)),
        "MB/s": float(m.group(3)),
        "avg ms": float(m.group(4)),
        "p99 ms": float(m.group(8)),
    }


def _pp_args(
    topic: str,
    records: int,
    size: int,
    bootstrap: str,
    props: list[str],
    extra: list[object] | None = None,
) -> list[object]:
    """ProducerPerformance's arguments: ``records`` of ``size`` bytes, unthrottled."""
    return [
        "--topic",
        topic,
        "--num-records",
        records,
        "--record-size",
        size,
        "--throughput",
        -1,
        *(extra or []),
        "--producer-props",
        f"bootstrap.servers={bootstrap}",
        *props,
    ]


def pp_cmd(topic: str, records: int, size: int, props: list[str]) -> str:
    return show_cmd(java.PRODUCER_PERFORMANCE, _pp_args(topic, records, size, "<bootstrap>", props))
