"""Transaction markers: the control records a coordinator writes to end a transaction.

A marker is a batch with the control and transactional bits set holding one record whose
key is ``version int16 | type int16`` (0 ABORT, 1 COMMIT) and whose value is Kafka's
EndTransactionMarker, ``version int16 | coordinatorEpoch int32``. Control batches are
never compressed, so their single record is read straight from the batch bytes.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from protocol.record_batch import BatchHeader
from protocol.records import ControlRecordType, InvalidRecordError, build_batch, iter_records

__all__ = [
    "ControlRecordType",
    "EndTxnMarker",
    "build_control_batch",
    "decode_control_key",
    "decode_end_txn_marker",
    "encode_control_key",
    "encode_end_txn_marker",
    "read_marker",
]

_CONTROL_KEY = struct.Struct(">hh")
_END_TXN_MARKER = struct.Struct(">hi")
CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0


class EndTxnMarker(NamedTuple):
    commit: bool
    coordinator_epoch: int


def encode_control_key(kind: ControlRecordType) -> bytes:
    return _CONTROL_KEY.pack(CONTROL_KEY_VERSION, kind)


def decode_control_key(key: bytes | memoryview) -> ControlRecordType:
    """The record type of a control record key; InvalidRecordError for anything else."""
    if len(key) < _CONTROL_KEY.size:
        raise InvalidRecordError("a control record key is 4 bytes: version, type")
    version, kind = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise InvalidRecordError(f"negative control record version {version}")
    try:
        return ControlRecordType(kind)
    except ValueError:
        raise InvalidRecordError(f"unknown control record type {kind}") from None


def encode_end_txn_marker(coordinator_epoch: int) -> bytes:
    return _END_TXN_MARKER.pack(END_TXN_MARKER_VERSION, coordinator_epoch)


def decode_end_txn_marker(value: bytes | memoryview) -> int:
    """The coordinator epoch of an EndTransactionMarker value (later versions may append fields)."""
    if len(value) < _END_TXN_MARKER.size:
        raise InvalidRecordError("an end transaction marker value is 6 bytes: version, coordinatorEpoch")
    version, coordinator_epoch = _END_TXN_MARKER.unpack_from(value)
    if version < 0:
        raise InvalidRecordError(f"negative end transaction marker version {version}")
    return int(coordinator_epoch)


def build_control_batch(producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool, timestamp: int) -> bytes:
    """A COMMIT or ABORT marker batch (record batch v2, CRC32C), ready for ``append_as_leader``."""
    kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    record = (encode_control_key(kind), encode_end_txn_marker(coordinator_epoch), (), timestamp)
    return build_batch([record], producer_id=producer_id, producer_epoch=producer_epoch, is_transactional=True, is_control=True)


def read_marker(batch: bytes | memoryview, header: BatchHeader) -> EndTxnMarker | None:
    """The marker a control batch holds, None for an empty one (its transaction was compacted away).

    ``batch`` starts at the batch (``header`` read from it at position 0).
    """
    # kio's varint reader wants a read-only buffer; a marker batch is tens of bytes.
    for record in iter_records(bytes(batch), header):
        if record.key is None or record.value is None:
            raise InvalidRecordError("a transaction marker has a key and a value")
        kind = decode_control_key(record.key)
        return EndTxnMarker(kind == ControlRecordType.COMMIT, decode_end_txn_marker(record.value))
    return None
