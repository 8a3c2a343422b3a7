"""The records of Kafka's internal topics, as Kafka 3.9 writes them (sans-I/O).

__consumer_offsets (group-coordinator/src/main/resources/common/message/*.json): every key and
value starts with an int16 version; the key's version says what the record is.

    OffsetCommitKey   v0-1   group string, topic string, partition int32        (v1 written)
    GroupMetadataKey  v2     group string
    OffsetCommitValue v0-4   offset int64, [v3+ leaderEpoch int32], metadata string,
                             commitTimestamp int64, [v1 expireTimestamp int64]; v4 flexible
                             (written: v1 when the commit has an expire timestamp, else v3)
    GroupMetadataValue v0-4  protocolType string, generation int32, protocol nullable string,
                             leader nullable string, [v2+ currentStateTimestamp int64],
                             members [memberId string, [v3+ groupInstanceId nullable string],
                             clientId string, clientHost string, [v1+ rebalanceTimeout int32],
                             sessionTimeout int32, subscription bytes, assignment bytes];
                             v4 flexible (written: v3)

__transaction_state (transaction-coordinator/.../TransactionLogKey.json, ...Value.json):

    TransactionLogKey   v0   transactionalId string
    TransactionLogValue v0-1 producerId int64, producerEpoch int16, transactionTimeoutMs int32,
                             transactionStatus int8, transactionPartitions nullable
                             [topic string, partitionIds [int32]] (null when Empty),
                             lastUpdateTimestampMs int64, startTimestampMs int64; v1 flexible
                             (written: v0, as Kafka 3.9 without transaction.version 1)

A tombstone (null value) deletes the key.  Flexible versions are read (compact strings and
arrays, tagged fields skipped), never written.  Decoders raise DecodeError (a ValueError).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from pybroker.wire.primitives import DecodeError, Reader, Writer

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
TXN_LOG_KEY_VERSION = 0

_KEY = struct.Struct(">hh")  # version, the group's length
_LEN = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_TWO_I64 = struct.Struct(">qq")
_V1_HEAD = struct.Struct(">hqh")  # version, offset, the metadata's length
_V3_HEAD = struct.Struct(">hqih")  # version, offset, leader epoch, the metadata's length

#: TransactionState ids (TransactionState.scala) by pybroker's state names (coord/txn/state.py)
TXN_STATUS_IDS = {
    "Empty": 0,
    "Ongoing": 1,
    "PrepareCommit": 2,
    "PrepareAbort": 3,
    "CompleteCommit": 4,
    "CompleteAbort": 5,
    "Dead": 6,
    "PrepareEpochFence": 7,
}
TXN_STATUS_NAMES = {v: k for k, v in TXN_STATUS_IDS.items()}


@dataclass(frozen=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int  # -1: none
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1  # -1: none (only version 1 carries one)


@dataclass(frozen=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: tuple[MemberMetadata, ...] = field(default=())


@dataclass(frozen=True)
class TransactionLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: str  # a key of TXN_STATUS_IDS
    partitions: tuple[tuple[str, int], ...]  # sorted
    last_update_ms: int
    start_ms: int


# ------------------------------------------------------------------------------ keys


def offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    g, t = group.encode(), topic.encode()  # (struct, not Writer: on every commit's path)
    return (
        _KEY.pack(OFFSET_COMMIT_KEY_VERSION, len(g))
        + g
        + _LEN.pack(len(t))
        + t
        + _I32.pack(partition)
    )


def group_metadata_key(group: str) -> bytes:
    w = Writer()
    w.int16(GROUP_METADATA_KEY_VERSION)
    w.string(group)
    return w.getvalue()


def read_group_key(key: bytes | memoryview) -> OffsetCommitKey | GroupMetadataKey | int:
    """An __consumer_offsets key; an int (its version) when it is none of these two (Kafka
    4's KIP-848 and share-group records: version 3 and up)."""
    r = Reader(key)
    version = r.int16()
    if version in (0, 1):
        return OffsetCommitKey(r.string(), r.string(), r.int32())
    if version == 2:
        return GroupMetadataKey(r.string())
    return version


def txn_log_key(transactional_id: str) -> bytes:
    w = Writer()
    w.int16(TXN_LOG_KEY_VERSION)
    w.string(transactional_id)
    return w.getvalue()


def read_txn_key(key: bytes | memoryview) -> str | int:
    """The transactional.id of a __transaction_state key; an int (its version) if unknown."""
    r = Reader(key)
    version = r.int16()
    if version == 0:
        return r.string()
    return version


# ------------------------------------------------------------------------------ values


def offset_commit_value(v: OffsetCommitValue) -> bytes:
    return offset_commit_value_of(
        v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp
    )


def offset_commit_value_of(
    offset: int, leader_epoch: int, metadata: str, commit_timestamp: int, expire_timestamp: int
) -> bytes:
    """``offset_commit_value`` from the fields (the commit path builds no OffsetCommitValue):
    version 1 when the commit has an expire timestamp (only v1 carries one), else version 3."""
    m = metadata.encode()
    if expire_timestamp >= 0:
        return (
            _V1_HEAD.pack(1, offset, len(m)) + m + _TWO_I64.pack(commit_timestamp, expire_timestamp)
        )
    return _V3_HEAD.pack(3, offset, leader_epoch, len(m)) + m + _I64.pack(commit_timestamp)


def _skip_tags(r: Reader) -> None:
    for _ in range(r.uvarint()):
        r.uvarint()
        r.raw(r.uvarint())


def _versioned(value: bytes | memoryview, latest: int, what: str) -> tuple[Reader, int]:
    """A reader past the value's version (0..``latest``, else DecodeError), and the version."""
    r = Reader(value)
    version = r.int16()
    if not 0 <= version <= latest:
        raise DecodeError(f"unknown {what} version {version}")
    return r, version


def read_offset_commit_value(value: bytes | memoryview) -> OffsetCommitValue:
    r, version = _versioned(value, 4, "offset commit value")
    flexible = version >= 4
    offset = r.int64()
    epoch = r.int32() if version >= 3 else -1
    metadata = r.compact_string() if flexible else r.string()
    commit = r.int64()
    expire = r.int64() if version == 1 else -1
    if flexible:
        _skip_tags(r)
    return OffsetCommitValue(offset, epoch, metadata, commit, expire)


def group_metadata_value(v: GroupMetadataValue) -> bytes:
    w = Writer()
    w.int16(3)
    w.string(v.protocol_type)
    w.int32(v.generation)
    w.string(v.protocol)
    w.string(v.leader)
    w.int64(v.current_state_timestamp)
    w.int32(len(v.members))
    for m in v.members:
        w.string(m.member_id)
        w.string(m.group_instance_id)
        w.string(m.client_id)
        w.string(m.client_host)
        w.int32(m.rebalance_timeout)
        w.int32(m.session_timeout)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
    return w.getvalue()


def read_group_metadata_value(value: bytes | memoryview) -> GroupMetadataValue:
    r, version = _versioned(value, 4, "group metadata value")
    flex = version >= 4
    string = r.compact_string if flex else r.string
    nullable = r.compact_nullable_string if flex else r.nullable_string
    blob = r.compact_bytes if flex else r.bytes_
    protocol_type = string()
    generation = r.int32()
    protocol = nullable()
    leader = nullable()
    state_ts = r.int64() if version >= 2 else -1
    count = r.compact_array_length(8) if flex else r.array_length(8)
    members = []
    for _ in range(max(count, 0)):
        member_id = string()
        instance = nullable() if version >= 3 else None
        client_id = string()
        client_host = string()
        rebalance = r.int32() if version >= 1 else -1
        session = r.int32()
        subscription = bytes(blob())
        assignment = bytes(blob())
        if flex:
            _skip_tags(r)
        members.append(
            MemberMetadata(
                member_id,
                instance,
                client_id,
                client_host,
                session if version == 0 else rebalance,
                session,
                subscription,
                assignment,
            )
        )
    if flex:
        _skip_tags(r)
    return GroupMetadataValue(protocol_type, generation, protocol, leader, state_ts, tuple(members))


def txn_log_value(v: TransactionLogValue) -> bytes:
    w = Writer()
    w.int16(0)
    w.int64(v.producer_id)
    w.int16(v.producer_epoch)
    w.int32(v.timeout_ms)
    w.int8(TXN_STATUS_IDS[v.status])
    if v.status == "Empty":
        w.int32(-1)
    else:
        by_topic: dict[str, list[int]] = {}
        for t, p in v.partitions:
            by_topic.setdefault(t, []).append(p)
        w.int32(len(by_topic))
        for t, ps in by_topic.items():
            w.string(t)
            w.int32(len(ps))
            for p in ps:
                w.int32(p)
    w.int64(v.last_update_ms)
    w.int64(v.start_ms)
    return w.getvalue()


def read_txn_log_value(value: bytes | memoryview) -> TransactionLogValue:
    r, version = _versioned(value, 1, "transaction log value")
    flex = version == 1
    producer_id = r.int64()
    epoch = r.int16()
    timeout = r.int32()
    status_id = r.int8()
    status = TXN_STATUS_NAMES.get(status_id)
    if status is None:
        raise DecodeError(f"unknown transaction status {status_id}")
    count = r.compact_array_length(4) if flex else r.array_length(4)
    partitions: list[tuple[str, int]] = []
    for _ in range(max(count, 0)):
        topic = r.compact_string() if flex else r.string()
        n = r.compact_array_length(4) if flex else r.array_length(4)
        partitions.extend((topic, r.int32()) for _ in range(max(n, 0)))
        if flex:
            _skip_tags(r)
    last_update = r.int64()
    start = r.int64()
    if flex:
        _skip_tags(r)
    if status == "Empty":
        partitions = []
    return TransactionLogValue(
        producer_id, epoch, timeout, status, tuple(sorted(partitions)), last_update, start
    )


__all__ = [
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberMetadata",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "TransactionLogValue",
    "group_metadata_key",
    "group_metadata_value",
    "offset_commit_key",
    "offset_commit_value",
    "read_group_key",
    "read_group_metadata_value",
    "read_offset_commit_value",
    "read_txn_key",
    "read_txn_log_value",
    "txn_log_key",
    "txn_log_value",
]
