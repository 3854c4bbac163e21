"""Producer state snapshot files: `<20-digit offset>.snapshot` beside the segments.

A snapshot at offset N holds the producer state after every batch below N. Layout
(big-endian), close to Kafka's but keeping every retained batch of a producer, not only its
last, so that duplicate detection covers five in-flight batches across a restart::

    version int16 (1) | crc uint32 (CRC32C of all that follows) | producer count int32
    per producer: producerId int64 | epoch int16 | coordinatorEpoch int32
                  | currentTxnFirstOffset int64 | lastTimestamp int64 | batch count int8
    per batch:    lastSequence int32 | lastOffset int64 | offsetDelta int32 | timestamp int64

Written to a temporary file and renamed, so a crash leaves the old file or the new one; a
file whose CRC does not match is ignored (and deleted) by the loader, which then starts from
an older snapshot and replays more of the log. So only the snapshot of a clean shutdown is
fsynced; those taken on roll are not (no fsync on the produce path), nor is the folder.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import crc32c

from storage.log_segment import filename_prefix

SNAPSHOT_SUFFIX = ".snapshot"
VERSION = 1

_HEAD = struct.Struct(">hIi")
_PRODUCER = struct.Struct(">qhiqqb")
_BATCH = struct.Struct(">iqiq")

# (producer id, epoch, coordinator epoch, current txn first offset, last timestamp, batches)
# with batches as (last sequence, last offset, offset delta, timestamp).
SnapshotEntry = tuple[int, int, int, int, int, list[tuple[int, int, int, int]]]


class CorruptSnapshotError(ValueError):
    pass


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / (filename_prefix(offset) + SNAPSHOT_SUFFIX)


def list_snapshots(directory: Path) -> list[int]:
    """Offsets of the snapshot files in ``directory``, ascending."""
    offsets = []
    for name in os.listdir(directory):
        if name.endswith(SNAPSHOT_SUFFIX):
            prefix = name[: -len(SNAPSHOT_SUFFIX)]
            if len(prefix) == 20 and prefix.isdigit():
                offsets.append(int(prefix))
    return sorted(offsets)


def encode_snapshot(entries: list[SnapshotEntry]) -> bytes:
    body = bytearray()
    for producer_id, epoch, coordinator_epoch, txn_first_offset, last_timestamp, batches in entries:
        body += _PRODUCER.pack(producer_id, epoch, coordinator_epoch, txn_first_offset, last_timestamp, len(batches))
        for batch in batches:
            body += _BATCH.pack(*batch)
    count = struct.pack(">i", len(entries))
    crc = crc32c.crc32c(count + body)
    return struct.pack(">hI", VERSION, crc) + count + bytes(body)


def decode_snapshot(data: bytes) -> list[SnapshotEntry]:
    if len(data) < _HEAD.size:
        raise CorruptSnapshotError("snapshot shorter than its header")
    version, crc, count = _HEAD.unpack_from(data)
    if version != VERSION:
        raise CorruptSnapshotError(f"unknown snapshot version {version}")
    if crc32c.crc32c(data[6:]) != crc:
        raise CorruptSnapshotError("snapshot CRC mismatch")
    entries: list[SnapshotEntry] = []
    position = _HEAD.size
    try:
        for _ in range(count):
            producer_id, epoch, coordinator_epoch, txn_first, last_ts, n = _PRODUCER.unpack_from(data, position)
            position += _PRODUCER.size
            batches = []
            for _ in range(n):
                batches.append(_BATCH.unpack_from(data, position))
                position += _BATCH.size
            entries.append((producer_id, epoch, coordinator_epoch, txn_first, last_ts, batches))
    except struct.error as e:
        raise CorruptSnapshotError(f"snapshot cut short: {e}") from None
    if position != len(data):
        raise CorruptSnapshotError(f"{len(data) - position} bytes after the last producer")
    return entries


def write_snapshot(directory: Path, offset: int, entries: list[SnapshotEntry], sync: bool) -> Path:
    path = snapshot_path(directory, offset)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(encode_snapshot(entries))
        if sync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def read_snapshot(directory: Path, offset: int) -> list[SnapshotEntry]:
    return decode_snapshot(snapshot_path(directory, offset).read_bytes())
