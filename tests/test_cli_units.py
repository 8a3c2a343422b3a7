"""Sans-I/O pieces of the admin CLI (pybroker/cli): the key partitioner, addresses, the
consumer-protocol assignment decoder, tables, and the parser's exit code 2 on bad usage."""

from __future__ import annotations

import struct

import pytest

from pybroker.__main__ import main
from pybroker.cli.client import Connection, parse_address
from pybroker.cli.groups import decode_assignment
from pybroker.cli.output import table
from pybroker.cli.produce import key_partition, murmur2


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
