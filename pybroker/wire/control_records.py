"""Control records: the transaction markers (Kafka's EndTransactionMarker, ControlRecordType).

A control batch (attributes bit 5 isControl, with bit 4 isTransactional for markers) holds one
record whose key and value are::

    key:   version int16 (0), type int16 (0 = ABORT, 1 = COMMIT; Kafka also has 2 =
           LEADER_CHANGE and KRaft snapshot types, which are not transaction markers)
    value: version int16 (0), coordinator epoch int32

big-endian.  Kafka writes a marker batch with producer id and epoch of the transaction, base
sequence -1, one record at offset delta 0, uncompressed (MemoryRecords.withEndTransactionMarker).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from pybroker.errors import ErrorCode
from pybroker.wire.record_walker import decode_records
from pybroker.wire.records import InvalidRecordError, build_batch

ABORT, COMMIT = 0, 1
CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


class EndTransactionMarker(NamedTuple):
    control_type: int  # ABORT or COMMIT
    coordinator_epoch: int

    @property
    def committed(self) -> bool:
        return self.control_type == COMMIT


def end_txn_marker_batch(
    producer_id: int,
    producer_epoch: int,
    marker: EndTransactionMarker,
    *,
    timestamp: int | None = None,
    partition_leader_epoch: int = -1,
) -> bytes:
    """One control batch holding ``marker`` (base offset 0: the log assigns it)."""
    key = _KEY.pack(CONTROL_KEY_VERSION, marker.control_type)
    value = _VALUE.pack(END_TXN_MARKER_VERSION, marker.coordinator_epoch)
    return build_batch(
        [(key, value, [])],
        timestamp=timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


def read_end_txn_marker(batch: bytes | bytearray | memoryview) -> EndTransactionMarker | None:
    """The transaction marker in a whole control batch, or None when its record is another
    control type (Kafka ignores those in the producer state).  Raises InvalidRecordError on a
    malformed one."""
    records = decode_records(batch)
    if not records:
        return None
    key, value = records[0].key, records[0].value
    if key is None or len(key) < _KEY.size:
        raise InvalidRecordError(ErrorCode.CORRUPT_MESSAGE, "control record without a valid key")
    _version, control_type = _KEY.unpack_from(key)
    if control_type not in (ABORT, COMMIT):
        return None
    if value is None or len(value) < _VALUE.size:
        raise InvalidRecordError(
            ErrorCode.CORRUPT_MESSAGE, "transaction marker without a valid value"
        )
    _vversion, coordinator_epoch = _VALUE.unpack_from(value)
    return EndTransactionMarker(control_type, coordinator_epoch)
