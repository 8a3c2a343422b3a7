"""Sans-I/O pieces of the admin CLI (pybroker/cli): the key partitioner, addresses, the
consumer-protocol assignment decoder, tables, and the parser's exit code 2 on bad usage."""

from __future__ import annotations

import struct

import pytest

from pybroker.__main__ import main
from pybroker.cli import acls, users
from pybroker.cli.client import Connection, parse_address
from pybroker.cli.groups import decode_assignment
from pybroker.cli.output import table
from pybroker.cli.produce import (
    BATCH_OVERHEAD,
    DEFAULT_BATCH_SIZE,
    key_partition,
    murmur2,
    record_size,
    split_batches,
)
from pybroker.security.acl import Operation, PatternType, Permission, ResourceType
from pybroker.wire.records import build_batch


def _signed(v: int) -> int:
    return v - (1 << 32) if v >= 1 << 31 else v


# Kafka's own test vectors (clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java)
@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (b"abc", 479470107),
    ],
)
def test_murmur2_matches_kafka(data, expected):
    assert _signed(murmur2(data)) == expected


def test_key_partition_is_kafkas_to_positive_modulo():
    assert key_partition(b"foobar", 7) == (-790332482 & 0x7FFFFFFF) % 7


def test_parse_address():
    assert parse_address("127.0.0.1:9092") == ("127.0.0.1", 9092)
    assert parse_address(" kafka ") == ("kafka", 9092)
    assert parse_address("[::1]:19092") == ("::1", 19092)
    with pytest.raises(ValueError):
        parse_address("host:port")


def test_decode_assignment_reads_every_version_prefix():
    def s(t: str) -> bytes:
        return struct.pack(">h", len(t)) + t.encode()

    data = (
        struct.pack(">h", 3)
        + struct.pack(">i", 2)
        + s("a")
        + struct.pack(">iii", 2, 0, 2)
        + s("b")
        + struct.pack(">ii", 1, 5)
        + struct.pack(">i", -1)  # null user data
    )
    assert decode_assignment(data) == [("a", [0, 2]), ("b", [5])]


def test_table_aligns_and_shows_none_as_dash():
    assert table(["name", "n"], [("a", None), ("long", 10)]) == "NAME  N\na     -\nlong  10"


def test_version_is_the_highest_both_sides_support():
    c = Connection("127.0.0.1", 1)
    c.versions = {3: (0, 12), 1: (0, 19)}
    assert c.version(3) == 12
    assert c.version(1) == 17  # the codec declares Fetch up to v17


@pytest.mark.parametrize(
    "argv",
    [
        ["topics"],
        ["topics", "create"],
        ["groups", "reset-offsets", "g", "--topic", "t"],
        ["consume", "t", "--offset", "1", "--from-beginning"],
    ],
)
def test_usage_errors_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert "error" in capsys.readouterr().err


# -- produce: batches of at most batch.size -----------------------------------------------------


def test_split_batches_keeps_each_batch_under_batch_size_and_the_order():
    recs = [(None if i % 3 else b"k%d" % i, b"v" * (i % 50), [("h", b"x")], 0) for i in range(500)]
    for size in (100, 1000, DEFAULT_BATCH_SIZE):
        parts = split_batches(recs, size)
        assert [r for p in parts for r in p] == recs
        for p in parts:
            assert len(build_batch(p)) <= size or len(p) == 1
        # greedy: each batch but the last could not take the next record
        for p, nxt in zip(parts, parts[1:], strict=False):
            assert len(build_batch(p + nxt[:1])) > size
    huge = [(None, b"x" * 50_000, [], 0), (None, b"y", [], 0)]
    assert split_batches(huge, 1000) == [huge[:1], huge[1:]]  # alone, as Kafka sends it


def test_record_size_is_the_bytes_build_batch_writes():
    for key, value, headers in [(None, b"", []), (b"k" * 200, b"v" * 70_000, [("a", None)])]:
        batch = build_batch([(key, value, headers, 5)])
        assert len(batch) == BATCH_OVERHEAD + record_size(0, key, value, headers)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["produce", "t", "--batch-size", "0"], "--batch-size must be a positive"),
        (["-X", "batch.size=-5", "produce", "t"], "batch.size must be a positive integer"),
        (["-X", "isolation.level=dirty", "consume", "t"], "isolation.level must be"),
        (["consume", "t", "--isolation-level", "read_dirty"], "invalid choice"),
    ],
)
def test_batch_size_and_isolation_level_are_checked_before_connecting(argv, message, capsys):
    # 127.0.0.1:1: nothing listens there, so a usage error must come first
    try:
        code = main(["-b", "127.0.0.1:1", *argv])
    except SystemExit as e:
        code = e.code
    assert code == 2
    assert message in capsys.readouterr().err


# -- acls: kafka-acls' rules ------------------------------------------------------------------


def _acl_args(*argv: str):
    from pybroker.__main__ import _parser

    return _parser().parse_args(["acls", *argv])


def test_acls_entries_are_every_principal_host_and_operation():
    args = _acl_args("add", "--allow-principal", "User:alice", "--allow-principal", "User:bob",
                     "--operation", "Read", "--operation", "describe", "--topic", "orders",
                     "--deny-principal", "User:mallory", "--deny-host", "10.0.0.1")  # fmt: skip
    ((resource, entries),) = acls.bindings(args).items()
    assert resource == (ResourceType.TOPIC, "orders", PatternType.LITERAL)
    assert entries == {
        (p, "*", op, Permission.ALLOW)
        for p in ("User:alice", "User:bob")
        for op in (Operation.READ, Operation.DESCRIBE)
    } | {
        ("User:mallory", "10.0.0.1", op, Permission.DENY)
        for op in (Operation.READ, Operation.DESCRIBE)
    }


def test_acls_producer_and_consumer_roles_are_kafkas():
    args = _acl_args("add", "--allow-principal", "User:app", "--producer", "--consumer",
                     "--idempotent", "--topic", "t", "--group", "g",
                     "--transactional-id", "tx")  # fmt: skip
    got = {r[0]: {e[2] for e in entries} for r, entries in acls.bindings(args).items()}
    assert got == {
        ResourceType.TOPIC: {Operation.WRITE, Operation.DESCRIBE, Operation.CREATE,
                             Operation.READ},
        ResourceType.TRANSACTIONAL_ID: {Operation.WRITE, Operation.DESCRIBE},
        ResourceType.CLUSTER: {Operation.IDEMPOTENT_WRITE},
        ResourceType.GROUP: {Operation.READ},
    }  # fmt: skip
    # prefixed patterns; --cluster counts only with literal ones, as in kafka-acls
    args = _acl_args("list", "--topic", "orders-", "--cluster", "--resource-pattern-type",
                     "PREFIXED")  # fmt: skip
    assert acls._resources(args, required=False) == [
        (ResourceType.TOPIC, "orders-", PatternType.PREFIXED)
    ]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--topic", "t"], "exactly one action"),
        (["add", "--remove", "--topic", "t"], "exactly one action"),
        (["add", "--topic", "t"], "--allow-principal, --deny-principal"),
        (["add", "--allow-principal", "User:a"], "at least one resource"),
        (["add", "--allow-principal", "alice", "--topic", "t"], "principalType:principalName"),
        (["add", "--allow-principal", "User:a", "--operation", "Fly", "--topic", "t"],
         "unknown operation 'Fly'"),
        (["add", "--allow-principal", "User:a", "--operation", "Write", "--group", "g"],
         "ResourceType GROUP only supports operations All, Delete, Describe, Read"),
        (["add", "--allow-principal", "User:a", "--topic", "t", "--resource-pattern-type",
          "match"], "'MATCH' is not valid when adding acls"),
        (["list", "--allow-principal", "User:a"], "--list does not accept --allow-principal"),
        (["remove", "--principal", "User:a", "--topic", "t"], "only available if --list"),
        (["add", "--producer", "--allow-principal", "User:a"], "With --producer you must"),
        (["add", "--consumer", "--topic", "t", "--allow-principal", "User:a"],
         "With --consumer you must specify a --topic and a --group"),
        (["add", "--producer", "--operation", "Read", "--topic", "t"],
         "--producer does not accept --operation"),
    ],
)  # fmt: skip
def test_acls_usage_errors_exit_2_before_connecting(argv, message, capsys):
    assert main(["-b", "127.0.0.1:1", "acls", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err, err


# -- users: kafka-configs' SCRAM syntax -----------------------------------------------------------


def test_users_parse_kafka_configs_scram_syntax():
    assert users.parse_specs(
        ["SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=p=q]"]
    ) == [("SCRAM-SHA-256", "alice-secret", 8192), ("SCRAM-SHA-512", "p=q", 4096)]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["add", "alice"], "give the credentials"),
        (["add", "alice", "SCRAM-SHA-1=[password=x]"], "expected 'SCRAM-SHA-256=["),
        (["add", "alice", "SCRAM-SHA-256=[iterations=8192]"], "needs password="),
        (["add", "alice", "SCRAM-SHA-256=[password=x,iterations=100]"], "between 4096 and 16384"),
        (["add", "alice", "--mechanism", "SCRAM-SHA-256"], "go together"),
    ],
)
def test_users_usage_errors_exit_2_before_connecting(argv, message, capsys):
    assert main(["-b", "127.0.0.1:1", "users", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err, err
