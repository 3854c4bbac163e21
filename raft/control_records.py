"""The Raft core's control records: LeaderChange, snapshot header and footer, KRaftVersion, Voters.

Each is a record in a control batch (record batch v2 with the control bit, never compressed)
whose key is Kafka's ControlRecordType key, ``version int16 | type int16``, and whose value is
the message in its own schema (kio's entity, which begins with its ``version`` field). The
transaction markers (types 0 and 1) live in protocol/control_records.py.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from enum import IntEnum
from functools import cache
from typing import Any, Callable, Iterable, Sequence

from kio.schema.k_raft_version_record.v0.data import KRaftVersionRecord
from kio.schema.leader_change_message.v0.data import LeaderChangeMessage
from kio.schema.leader_change_message.v0.data import Voter as LeaderChangeVoter
from kio.schema.snapshot_footer_record.v0.data import SnapshotFooterRecord
from kio.schema.snapshot_header_record.v0.data import SnapshotHeaderRecord
from kio.schema.voters_record.v0.data import VotersRecord
from kio.serial import entity_reader, entity_writer

from protocol.record_batch import NO_PARTITION_LEADER_EPOCH
from protocol.records import InvalidRecordError, Record, build_batch

_KEY = struct.Struct(">hh")
CONTROL_KEY_VERSION = 0


class ControlRecordType(IntEnum):
    """Kafka's ControlRecordType ids (ABORT 0 and COMMIT 1 are transaction markers)."""

    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


class KRaftVersion(IntEnum):
    """kraft.version: 0 is a static voter set (controller.quorum.voters); 1 keeps it in the log (KIP-853)."""

    KRAFT_VERSION_0 = 0
    KRAFT_VERSION_1 = 1


_SCHEMAS: dict[ControlRecordType, type] = {
    ControlRecordType.LEADER_CHANGE: LeaderChangeMessage,
    ControlRecordType.SNAPSHOT_HEADER: SnapshotHeaderRecord,
    ControlRecordType.SNAPSHOT_FOOTER: SnapshotFooterRecord,
    ControlRecordType.KRAFT_VERSION: KRaftVersionRecord,
    ControlRecordType.KRAFT_VOTERS: VotersRecord,
}
_TYPES = {schema: kind for kind, schema in _SCHEMAS.items()}


@dataclass(frozen=True, slots=True)
class ControlRecord:
    type: ControlRecordType
    message: Any


@cache
def _writer(schema: type) -> Callable[[Any, Any], None]:
    return entity_writer(schema)


@cache
def _reader(schema: type) -> Callable[[Any, int], Any]:
    return entity_reader(schema)


def leader_change_message(leader_id: int, voters: Iterable[int], granting_voters: Iterable[int]) -> LeaderChangeMessage:
    return LeaderChangeMessage(
        version=0,
        leader_id=leader_id,
        voters=tuple(LeaderChangeVoter(voter_id=v) for v in sorted(voters)),
        granting_voters=tuple(LeaderChangeVoter(voter_id=v) for v in sorted(granting_voters)),
    )


def snapshot_header(last_contained_log_time_ms: int) -> SnapshotHeaderRecord:
    return SnapshotHeaderRecord(version=0, last_contained_log_timestamp=last_contained_log_time_ms)


def snapshot_footer() -> SnapshotFooterRecord:
    return SnapshotFooterRecord(version=0)


def kraft_version_record(version: KRaftVersion) -> KRaftVersionRecord:
    return KRaftVersionRecord(version=0, k_raft_version=int(version))


def encode_control_record(message: Any) -> tuple[bytes, bytes]:
    """The (key, value) of the control record holding ``message``."""
    kind = _TYPES.get(type(message))
    if kind is None:
        raise TypeError(f"{type(message).__name__} is not a Raft control record")
    out = io.BytesIO()
    _writer(type(message))(out, message)
    return _KEY.pack(CONTROL_KEY_VERSION, kind), out.getvalue()


def build_control_batch(
    messages: Sequence[Any],
    timestamp: int,
    *,
    base_offset: int = 0,
    epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """One control batch holding ``messages`` in order (Kafka writes one per batch, except in snapshots)."""
    entries = [(*encode_control_record(m), (), timestamp) for m in messages]
    return build_batch(entries, base_offset=base_offset, is_control=True, partition_leader_epoch=epoch)


def decode_control_record(record: Record) -> ControlRecord:
    """A control record of a control batch; InvalidRecordError for anything not well formed."""
    if record.key is None or len(record.key) < _KEY.size:
        raise InvalidRecordError("a control record key is 4 bytes: version, type")
    version, kind = _KEY.unpack_from(record.key)
    if version < 0:
        raise InvalidRecordError(f"negative control record key version {version}")
    try:
        control_type = ControlRecordType(kind)
    except ValueError:
        raise InvalidRecordError(f"control record type {kind} is not a Raft control record") from None
    if record.value is None:
        raise InvalidRecordError(f"control record of type {control_type.name} has no value")
    try:
        message, _ = _reader(_SCHEMAS[control_type])(memoryview(bytes(record.value)).toreadonly(), 0)
    except Exception as e:  # kio raises several types for malformed input
        raise InvalidRecordError(f"cannot decode a {control_type.name} control record: {e}") from None
    return ControlRecord(control_type, message)


__all__ = [
    "ControlRecord",
    "ControlRecordType",
    "KRaftVersion",
    "build_control_batch",
    "decode_control_record",
    "encode_control_record",
    "kraft_version_record",
    "leader_change_message",
    "snapshot_footer",
    "snapshot_header",
]
