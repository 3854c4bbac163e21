"""Producer state snapshot files: `<20-digit offset>.snapshot` beside the segments.

A snapshot at offset N holds the producer state after every batch below N, in Apache Kafka's
format (ProducerSnapshot version 1, non-flexible, big-endian), so that Kafka's
`kafka-dump-log.sh` prints it and Kafka's log loading (the same reader) accepts it::

    Version int16 (1) | Crc uint32 | ProducerEntries: count int32, then per producer
    ProducerId int64 | Epoch int16 | LastSequence int32 | LastOffset int64 | OffsetDelta int32
    | Timestamp int64 | CoordinatorEpoch int32 | CurrentTxnFirstOffset int64

The CRC is CRC32C of every byte after it to the end of the file. An entry describes the
producer's last batch only; a producer with none has LastSequence -1, LastOffset -1 and
OffsetDelta 0; Timestamp is the producer's last timestamp (of its last batch or marker), and
CurrentTxnFirstOffset is -1 when no transaction is open.

kbroker keeps each producer's last five batches, so that a retry of any of five in-flight
batches is still recognised as a duplicate after a restart. Those go in a trailer after the
entries, covered by the CRC::

    "kbrk" | per producer, in the order of the entries: batch count uint8, then per batch
    (oldest first) lastSequence int32 | lastOffset int64 | offsetDelta int32 | timestamp int64

Kafka's reader checks the CRC up to the end of the file, decodes the entries and ignores the
bytes after them, so it loads the trailer-carrying file with the last batch of each producer
(verified with Kafka 4.4's DumpLogSegments and the generated ProducerSnapshot reader). A file
with no trailer (one Kafka wrote) is read the way Kafka reads it. (Kafka 4.4's reader refuses
more than 1,000,000 entries; a partition with more live producers would exceed it.)

Files in kbroker's earlier layout (same version number and CRC, but each producer's fields in
another order followed by a batch count and its batches) are refused as corrupt. Such a file is
longer than its producers' entries alone unless some producers had no batch left (31 bytes per
producer and 24 per batch against 46 per producer), the bytes after the entries would have to start with
"kbrk" and parse to the end, and every misread entry would have to keep the invariants checked
by the decoder (a real timestamp misread as OffsetDelta breaks them). The loader deletes a file
it cannot decode and uses an older snapshot or replays the log from its start: after an
upgrade the first restart of a partition only costs a longer replay.

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
TRAILER_MAGIC = b"kbrk"

_HEAD = struct.Struct(">hIi")  # Version, Crc, ProducerEntries count
_CRC_END = 6  # the CRC covers the file from here
_ENTRY = struct.Struct(">qhiqiqiq")
_BATCH = struct.Struct(">iqiq")
_BATCH_COUNT = struct.Struct(">B")
_NO_BATCH = (-1, -1, 0)  # LastSequence, LastOffset, OffsetDelta of a producer with no batch

# (producer id, epoch, coordinator epoch, current txn first offset, last timestamp, batches)
# with batches oldest first as (last sequence, last offset, offset delta, timestamp).
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
    body = bytearray(struct.pack(">i", len(entries)))
    trailer = bytearray(TRAILER_MAGIC)
    for producer_id, epoch, coordinator_epoch, txn_first_offset, last_timestamp, batches in entries:
        last_seq, last_offset, offset_delta = batches[-1][:3] if batches else _NO_BATCH
        body += _ENTRY.pack(producer_id, epoch, last_seq, last_offset, offset_delta, last_timestamp, coordinator_epoch, txn_first_offset)
        trailer += _BATCH_COUNT.pack(len(batches))
        for batch in batches:
            trailer += _BATCH.pack(*batch)
    body += trailer
    return struct.pack(">hI", VERSION, crc32c.crc32c(body)) + bytes(body)


def decode_snapshot(data: bytes) -> list[SnapshotEntry]:
    if len(data) < _HEAD.size:
        raise CorruptSnapshotError("snapshot shorter than its header")
    version, crc, count = _HEAD.unpack_from(data)
    if version != VERSION:
        raise CorruptSnapshotError(f"unknown snapshot version {version}")
    if crc32c.crc32c(data[_CRC_END:]) != crc:
        raise CorruptSnapshotError("snapshot CRC mismatch")
    end = _HEAD.size + count * _ENTRY.size
    if count < 0 or end > len(data):
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes cannot hold {count} producer entries")
    entries: list[SnapshotEntry] = []
    for producer_id, epoch, last_seq, last_offset, offset_delta, timestamp, coordinator_epoch, txn_first in _ENTRY.iter_unpack(data[_HEAD.size : end]):
        # What Kafka's writer (and kbroker's) can produce; an old-layout file read as entries breaks it.
        if last_offset < 0:
            valid = (last_seq, last_offset, offset_delta) == _NO_BATCH
        else:
            valid = 0 <= offset_delta <= last_offset
        if not valid or producer_id < 0 or txn_first < -1:
            raise CorruptSnapshotError(f"invalid entry for producer {producer_id}")
        batches = [(last_seq, last_offset, offset_delta, timestamp)] if last_offset >= 0 else []
        entries.append((producer_id, epoch, coordinator_epoch, txn_first, timestamp, batches))
    if end == len(data):
        return entries  # as Kafka writes it: each producer's last batch only
    retained = _read_trailer(data, end, entries)
    return [(*entry[:5], batches) for entry, batches in zip(entries, retained)]


def _read_trailer(data: bytes, position: int, entries: list[SnapshotEntry]) -> list[list[tuple[int, int, int, int]]]:
    """Every retained batch of each producer in ``entries``, from kbroker's trailer at ``position``."""
    if data[position : position + len(TRAILER_MAGIC)] != TRAILER_MAGIC:
        raise CorruptSnapshotError(f"{len(data) - position} unknown bytes after the producer entries")
    position += len(TRAILER_MAGIC)
    retained = []
    try:
        for entry in entries:
            (n,) = _BATCH_COUNT.unpack_from(data, position)
            position += _BATCH_COUNT.size
            batches = [_BATCH.unpack_from(data, position + i * _BATCH.size) for i in range(n)]
            position += n * _BATCH.size
            last = entry[5]
            if (batches[-1][:3] if batches else None) != (last[0][:3] if last else None):
                raise CorruptSnapshotError(f"trailer disagrees with the entry of producer {entry[0]}")
            retained.append(batches)
    except struct.error as e:
        raise CorruptSnapshotError(f"snapshot trailer cut short: {e}") from None
    if position != len(data):
        raise CorruptSnapshotError(f"{len(data) - position} bytes after the snapshot trailer")
    return retained


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
