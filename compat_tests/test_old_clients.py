"""Clients speaking the protocol of Kafka 0.8-0.10 (issue 25): message format v0/v1 produced
and consumed, as Kafka 3.9 serves them (up-conversion on append, down-conversion on fetch).

* kcat (Debian: librdkafka 2.0.2) and confluent-kafka with ``api.version.request=false`` and
  ``broker.version.fallback`` 0.8.2.2 (Produce v0, Fetch v0, magic 0) or 0.9.0.0 (Produce v1,
  Fetch v1, magic 0), every codec; librdkafka's balanced consumer (-G) on 0.9's group APIs.
  librdkafka asks ApiVersions whatever api.version.request says once the fallback is 0.10 or
  later, so it never writes magic 1 to a broker that offers v2 (checked below).
* kafka-python with ``api_version`` (0, 8, 1) (OffsetCommit/OffsetFetch v0), (0, 8, 2),
  (0, 9) (magic 0) and (0, 10, 0) (Produce v2 / Fetch v2, magic 1 with timestamps).

A recording proxy (compat_tests/wire_tap.py) between client and broker shows the versions and
message formats really used.  Every record comes back once, in order, with its key and value
(and timestamp where the format has one), through the old client and a current one.
"""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from compat_tests.shared_broker import SharedBroker
from compat_tests.wire_tap import WireTap

pytestmark = pytest.mark.timeout(180)

PRODUCE, FETCH, LIST_OFFSETS, OFFSET_COMMIT, OFFSET_FETCH, API_VERSIONS = 0, 1, 2, 8, 9, 18
FALLBACKS = {"0.8.2.2": 0, "0.9.0.0": 1}  # librdkafka's fallback -> Produce/Fetch version
CODECS = [None, "gzip", "snappy", "lz4"]
N = 200


@pytest.fixture(scope="module")
def tapped_shared(tmp_path_factory):
    """One broker behind one tap for the module's tapped tests (each uses topics and groups of
    its own; starting a broker per test was most of the module's time): [SharedBroker, tap]."""
    workdir = tmp_path_factory.mktemp("tapped")
    shared = SharedBroker(workdir / "broker0", None, {"group.initial.rebalance.delay.ms": "0"})
    tap = WireTap(("127.0.0.1", shared.process.port)).start()
    shared.process.overrides["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{tap.port}"
    state = [shared, tap]
    try:
        yield state
        problem = state[0].retire()
        assert not problem, problem
    finally:
        tap.close()
        state[0].process.cleanup()


@pytest.fixture
def tapped(request, tapped_shared):
    """(broker, tap): the shared broker, and its tap with no connection and nothing recorded
    yet.  A traceback in the broker's output during the test fails it; after a failed test the
    broker is stopped (exit 0 required) and the next one gets a fresh broker behind the tap."""
    shared, tap = tapped_shared
    tap.reset()
    b = shared.begin(request.node.nodeid)
    request.node._shared_pybrokers = [b]
    yield b, tap
    problem = shared.end(request.node.nodeid)
    if problem or getattr(request.node, "_pybroker_call_failed", False):
        problem = problem or shared.retire()
        workdir = b.workdir.parent / f"broker{len(list(b.workdir.parent.iterdir()))}"
        fresh = SharedBroker(workdir, None, dict(b.overrides))
        tap.target = ("127.0.0.1", fresh.process.port)
        tapped_shared[0] = fresh
    if problem:
        pytest.fail(problem, pytrace=False)


def topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def versions(tap: WireTap, api_key: int) -> set[int]:
    return {e.version for e in tap.exchanges(api_key)}


def produced_magics(tap: WireTap, topic: str) -> set[int]:
    """The message format of every record set produced to ``topic`` (the byte at 16)."""
    return {
        bytes(p["records"])[16]
        for e in tap.exchanges(PRODUCE)
        for t in e.request["topic_data"]
        if t["name"] == topic
        for p in t["partition_data"]
        if p["records"]
    }


def produced_codecs(tap: WireTap, topic: str) -> set[int]:
    """The codec of the first message of every record set produced to ``topic`` (a v0/v1
    message's attributes are its byte 17)."""
    return {
        bytes(p["records"])[17] & 7
        for e in tap.exchanges(PRODUCE)
        for t in e.request["topic_data"]
        if t["name"] == topic
        for p in t["partition_data"]
        if p["records"]
    }


CODEC_IDS = {None: 0, "gzip": 1, "snappy": 2, "lz4": 3}


def produce_errors(tap: WireTap) -> list[int]:
    return [
        p["error_code"]
        for e in tap.exchanges(PRODUCE)
        for t in e.response["responses"]
        for p in t["partition_responses"]
        if p["error_code"]
    ]


# -- kcat ------------------------------------------------------------------------------------


def kcat(*args: str, stdin: str | None = None) -> str:
    assert shutil.which("kcat"), "kcat missing: scripts/install-test-deps installs it"
    proc = subprocess.run(["kcat", *args], input=stdin, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"kcat {args}: {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def old(fallback: str) -> list[str]:
    return ["-X", "api.version.request=false", "-X", f"broker.version.fallback={fallback}"]


def kcat_read(bootstrap: str, topic: str, *extra: str) -> list[tuple[int, str, str]]:
    out = kcat("-b", bootstrap, *extra, "-C", "-t", topic, "-o", "beginning", "-e",
               "-f", "%o|%k|%s\n")  # fmt: skip
    return [(int(o), k, v) for o, k, v in (line.split("|", 2) for line in out.splitlines())]


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed")
@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("fallback", sorted(FALLBACKS))
def test_kcat_with_an_old_broker_version_fallback(tapped, fallback, codec):
    b, tap = tapped
    topic = topic_name("kcat-old")
    lines = [f"key{i}:value {i} {'z' * (i % 40)}" for i in range(N)]
    args = ["-b", tap.bootstrap, *old(fallback), "-P", "-t", topic, "-K", ":", "-p", "0"]
    if codec:
        args += ["-z", codec]
    kcat(*args, stdin="\n".join(lines) + "\n")
    want = [(i, *line.split(":", 1)) for i, line in enumerate(lines)]
    assert kcat_read(tap.bootstrap, topic, *old(fallback)) == want
    assert kcat_read(tap.bootstrap, topic) == want  # a current client reads the same
    v = FALLBACKS[fallback]
    assert versions(tap, PRODUCE) == {v} and produced_magics(tap, topic) == {0}
    assert CODEC_IDS[codec] in produced_codecs(tap, topic)
    assert produce_errors(tap) == []
    assert v in versions(tap, FETCH) and 0 in versions(tap, LIST_OFFSETS)
    print(f"kcat {fallback}/{codec}: Produce v{v} magic 0, Fetch v{v}: {N} records round trip")


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed")
def test_kcat_balanced_consumer_with_fallback_0_9(broker):
    topic = topic_name("kcat-group")
    group = topic_name("g")
    bootstrap = broker.bootstrap
    kcat("-b", bootstrap, *old("0.9.0.0"), "-P", "-t", topic, "-K", ":",
         stdin="".join(f"k{i}:first {i}\n" for i in range(50)))  # fmt: skip

    def consume() -> list[str]:  # (-o would override the committed offsets)
        out = kcat("-b", bootstrap, *old("0.9.0.0"), "-G", group, "-X", "auto.offset.reset=earliest", "-e",
                   "-f", "%s\n", topic)  # fmt: skip
        return out.splitlines()

    assert consume() == [f"first {i}" for i in range(50)]
    kcat("-b", bootstrap, *old("0.9.0.0"), "-P", "-t", topic, "-K", ":",
         stdin="".join(f"k{i}:second {i}\n" for i in range(20)))  # fmt: skip
    # the group's committed offsets (OffsetCommit v2, OffsetFetch v1) resume it
    assert consume() == [f"second {i}" for i in range(20)]
    print(f"[{broker.backend}] kcat -G with fallback 0.9.0.0: 70 records, resumed once")


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed")
def test_librdkafka_asks_api_versions_from_fallback_0_10(tapped):
    b, tap = tapped
    topic = topic_name("kcat-010")
    kcat("-b", tap.bootstrap, *old("0.10.0.0"), "-P", "-t", topic, stdin="x\n")
    assert tap.exchanges(API_VERSIONS)  # not magic 1: it negotiates
    assert produced_magics(tap, topic) == {2}


# -- confluent-kafka -------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("fallback", sorted(FALLBACKS))
def test_confluent_kafka_with_an_old_broker_version_fallback(tapped, fallback, codec):
    b, tap = tapped
    topic = topic_name("ck-old")
    conf = {
        "bootstrap.servers": tap.bootstrap,
        "api.version.request": False,
        "broker.version.fallback": fallback,
    }
    p = Producer({**conf, "compression.codec": codec or "none", "linger.ms": 20})
    errors = []
    for i in range(N):
        p.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode() * (i % 7 + 1),
                  partition=0, on_delivery=lambda err, _m: err and errors.append(err))  # fmt: skip
    assert p.flush(30) == 0 and errors == []
    c = Consumer({**conf, "group.id": topic_name("g"), "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < N and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append((m.offset(), m.key(), m.value()))
    c.close()
    assert got == [(i, f"k{i}".encode(), f"v{i}".encode() * (i % 7 + 1)) for i in range(N)]
    v = FALLBACKS[fallback]
    assert versions(tap, PRODUCE) == {v} and produced_magics(tap, topic) == {0}
    assert CODEC_IDS[codec] in produced_codecs(tap, topic)
    assert versions(tap, FETCH) == {v}
    print(f"confluent-kafka {fallback}/{codec}: {N} records round trip")


# -- kafka-python ----------------------------------------------------------------------------

KAFKA_PYTHON = [
    # api_version, codec, (Produce, Fetch, OffsetCommit, OffsetFetch), magic
    ((0, 8, 1), None, (0, 0, 0, 0), 0),
    ((0, 8, 2), "gzip", (0, 0, 1, 1), 0),
    ((0, 9), None, (1, 1, 2, 1), 0),
    ((0, 9), "snappy", (1, 1, 2, 1), 0),
    ((0, 10, 0), None, (2, 2, 2, 1), 1),
    ((0, 10, 0), "gzip", (2, 2, 2, 1), 1),
    ((0, 10, 0), "lz4", (2, 2, 2, 1), 1),
]  # (kafka-python's magic-0 LZ4 needs the xxhash package, which is not installed)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize(
    ("api_version", "codec", "want", "magic"),
    KAFKA_PYTHON,
    ids=[f"{'.'.join(map(str, v))}-{c}" for v, c, _, _ in KAFKA_PYTHON],
)
def test_kafka_python_with_an_old_api_version(tapped, api_version, codec, want, magic):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition
    from kafka.structs import OffsetAndMetadata

    b, tap = tapped
    topic = topic_name("kp-old")
    p = KafkaProducer(bootstrap_servers=tap.bootstrap, api_version=api_version,
                      compression_type=codec)  # fmt: skip
    sent = [p.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=0) for i in range(50)]
    meta = [f.get(timeout=30) for f in sent]
    p.close()
    assert [m.offset for m in meta] == list(range(50))
    group = topic_name("g")
    c = KafkaConsumer(bootstrap_servers=tap.bootstrap, api_version=api_version, group_id=group,
                      enable_auto_commit=False, auto_offset_reset="earliest",
                      consumer_timeout_ms=5000)  # fmt: skip
    tp = KTopicPartition(topic, 0)
    c.assign([tp])
    got = [(m.offset, m.key, m.value, m.timestamp) for m in c]
    c.commit({tp: OffsetAndMetadata(50, "", -1)})
    committed = c.committed(tp)
    c.close()
    assert [(o, k, v) for o, k, v, _ in got] == [(i, b"k%d" % i, b"v%d" % i) for i in range(50)]
    if magic == 1:  # the producer's timestamps come back
        assert [ts for *_, ts in got] == [m.timestamp for m in meta]
    assert committed == 50
    produce_v, fetch_v, commit_v, offset_fetch_v = want
    assert versions(tap, PRODUCE) == {produce_v} and produced_magics(tap, topic) == {magic}
    assert produced_codecs(tap, topic) == {CODEC_IDS[codec]}
    assert versions(tap, FETCH) == {fetch_v}
    assert versions(tap, OFFSET_COMMIT) == {commit_v}
    assert versions(tap, OFFSET_FETCH) == {offset_fetch_v}
    print(f"kafka-python {api_version}/{codec}: Produce v{produce_v} magic {magic}, "
          f"Fetch v{fetch_v}, OffsetCommit v{commit_v}: 50 records round trip")  # fmt: skip
