"""A broker under a low RLIMIT_NOFILE (issue 10, defect 6): many partitions, a kill -9, and more
connections than descriptors must leave it serving, restartable, and with a small log.

The broker process gets its limit from a ``preexec_fn`` setrlimit (soft = hard, so the broker's
own raise to the hard limit cannot lift it)."""

from __future__ import annotations

import os
import re
import resource
import socket
import subprocess
import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from pybroker.testing import rawkafka
from pybroker.testing.debug_process import BrokerProcess, api_versions_ok


class LimitedBroker(BrokerProcess):
    """BrokerProcess with RLIMIT_NOFILE set to ``nofile`` (soft, hard) in the child."""

    def __init__(self, *args, nofile: tuple[int, int], **kw) -> None:
        super().__init__(*args, **kw)
        self.nofile = nofile

    def spawn(self) -> None:
        nofile = self.nofile

        def limit() -> None:
            resource.setrlimit(resource.RLIMIT_NOFILE, nofile)

        with open(self.stderr_path, "ab") as out:
            out.write(f"\n===== start (nofile {nofile}): {' '.join(self.command())}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                self.command(),
                stdout=out,
                stderr=out,
                stdin=subprocess.DEVNULL,
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
                start_new_session=True,
                preexec_fn=limit,
            )

    def log_text(self) -> str:
        return self.stderr_path.read_text(errors="replace")


def end_offsets(bootstrap: str, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, request_timeout_ms=30000)
    try:
        return c.end_offsets(tps)
    finally:
        c.close()


def test_many_partitions_under_a_low_descriptor_limit_serve_and_restart_after_kill9(tmp_path):
    # 600 partitions, 256 descriptors: one open file per partition cannot work
    b = LimitedBroker(
        tmp_path, nofile=(256, 256), overrides={"max.broker.partitions": "100000"}
    ).start()
    try:
        admin = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=60000)
        try:
            admin.create_topics(
                [NewTopic(f"many-{k}", num_partitions=200, replication_factor=1) for k in range(3)]
            )
        finally:
            admin.close()
        tps = [TopicPartition(f"many-{k}", p) for k in range(3) for p in range(200)]
        producer = KafkaProducer(bootstrap_servers=b.bootstrap, acks="all", linger_ms=5)
        try:
            futures = [producer.send(tp.topic, b"v", partition=tp.partition) for tp in tps]
            producer.flush(60)
            for f in futures:
                f.get(timeout=30)
        finally:
            producer.close()
        assert set(end_offsets(b.bootstrap, tps).values()) == {1}
        assert api_versions_ok(b.host, b.port)  # still accepts new connections

        b.kill9()
        b.start()  # starts again under the same limit (recovery opens files one by one)
        assert set(end_offsets(b.bootstrap, tps).values()) == {1}
        assert api_versions_ok(b.host, b.port)
        text = b.log_text()
        assert "Too many open files" not in text, b.output()
        assert "Traceback" not in text, b.traceback_excerpt()
        assert len(text) < 500_000  # INFO lines per partition; no flood of errors
        b.stop()
    finally:
        b.cleanup()


def test_raises_the_soft_descriptor_limit_to_the_hard_limit(tmp_path):
    b = LimitedBroker(tmp_path, nofile=(200, 2048)).start()
    try:
        limits = open(f"/proc/{b.pid}/limits").read()
        (line,) = [s for s in limits.splitlines() if s.startswith("Max open files")]
        assert re.split(r"\s{2,}", line)[1:3] == ["2048", "2048"], line
        b.stop()
    finally:
        b.cleanup()


def test_out_of_descriptors_on_accept_keeps_serving_and_accepts_again(tmp_path):
    b = LimitedBroker(tmp_path, nofile=(128, 128)).start()
    flood: list[socket.socket] = []
    try:
        with rawkafka.Conn(b.host, b.port, timeout=15) as old:
            corr, _ = old.roundtrip(rawkafka.api_versions_v0(1))
            assert corr == 1
            # more connections than the broker has descriptors: the kernel completes the
            # handshakes (listen backlog), the broker's accept() fails with EMFILE
            for _ in range(300):
                flood.append(socket.create_connection((b.host, b.port), timeout=15))
            time.sleep(3)  # let the broker run into EMFILE for a few seconds
            corr, _ = old.roundtrip(rawkafka.api_versions_v0(2))  # existing: still served
            assert corr == 2
            for s in flood[:250]:
                s.close()
            del flood[:250]
            # a new connection is accepted once descriptors are free again
            with rawkafka.Conn(b.host, b.port, timeout=30) as new:
                corr, _ = new.roundtrip(rawkafka.api_versions_v0(3))
                assert corr == 3
        text = b.log_text()
        assert "Traceback" not in text, b.traceback_excerpt()
        emfile_lines = [s for s in text.splitlines() if "Too many open files" in s]
        assert 1 <= len(emfile_lines) <= 3, emfile_lines[:10]
        assert len(text) < 100_000
        b.stop()
    finally:
        for s in flood:
            s.close()
        b.cleanup()
