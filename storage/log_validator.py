"""LogValidator: the checks a batch passes before it is appended.

Everything is read from the 61-byte batch headers (structure, magic, CRC32C, sizes, counts,
timestamps); records are decoded only to find keyless records on a compacted topic. The leader
then writes offsets, its epoch and LogAppendTime into the same buffer (UnifiedLog), so the
validated bytes are the bytes appended.
"""

from __future__ import annotations

import struct

from protocol.record_batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    BatchHeader,
    InvalidBatch,
    UnsupportedMagic,
    is_crc_valid,
    read_header,
)
from storage.batch_records import keyless_record_indexes
from storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    OffsetsOutOfOrderError,
    RecordTooLargeError,
    UnsupportedForMessageFormatError,
)
from storage.log_config import LogConfig
from storage.producer_state_manager import AppendOrigin

_I32 = struct.Struct(">i")
_MIN_BATCH_LENGTH = 49  # HEADER_SIZE - LOG_OVERHEAD
_LEGACY_RECORD_OVERHEAD = 14  # Kafka's LegacyRecord.RECORD_OVERHEAD_V0
_MIN_RECORD_SIZE = 7  # length, attributes, timestamp delta, offset delta, key, value, header count: one byte each


class LogValidator:
    def __init__(self, topic_partition: str) -> None:
        self._tp = topic_partition

    def validate_as_leader(self, records: memoryview, config: LogConfig, leader_epoch: int, origin: AppendOrigin, now: int) -> list[BatchHeader]:
        """Kafka's analyzeAndValidateRecords + the LogValidator checks that need only batch headers."""
        end = len(records)
        headers: list[BatchHeader] = []
        position = 0
        while position < end:
            header = _parse_header(records, position)
            if position + header.size > end:
                raise CorruptRecordError(f"{end - position} trailing bytes do not form a whole batch (its length says {header.size})")
            if origin is AppendOrigin.CLIENT and header.base_offset != 0:
                raise InvalidRecordError(f"the baseOffset of the record batch in the append to {self._tp} should be 0, but it is {header.base_offset}")
            if origin is AppendOrigin.RAFT_LEADER and header.partition_leader_epoch != leader_epoch:
                raise InvalidRecordError(f"batch epoch {header.partition_leader_epoch} does not match the raft leader epoch {leader_epoch}")
            if header.size > config.max_message_bytes:
                raise RecordTooLargeError(
                    f"the record batch size in the append to {self._tp} is {header.size} bytes which exceeds the maximum configured value of {config.max_message_bytes}"
                )
            if not is_crc_valid(records, header):
                raise CorruptRecordError(f"record is corrupt (stored crc = {header.crc}) in topic partition {self._tp}")
            if header.records_count <= 0:
                raise InvalidRecordError(f"invalid reported count for record batch: {header.records_count} in topic partition {self._tp}")
            if header.records_count != header.last_offset_delta + 1:
                raise InvalidRecordError(
                    f"inconsistent batch offset range [0, {header.last_offset_delta}] and count of records {header.records_count} in topic partition {self._tp}"
                )
            if not header.compression and header.records_count > (header.size - HEADER_SIZE) // _MIN_RECORD_SIZE:
                # Records are not decoded, but an uncompressed batch cannot hold more records than
                # fit in its bytes; a count beyond that would claim offsets for records that are not there.
                raise InvalidRecordError(f"batch of {header.size} bytes cannot hold the {header.records_count} records it claims")
            if origin is AppendOrigin.CLIENT:
                if header.is_control:
                    raise InvalidRecordError(f"clients are not allowed to write control records in topic partition {self._tp}")
                if header.has_producer_id and header.base_sequence < 0:
                    raise InvalidRecordError(f"invalid sequence number {header.base_sequence} in record batch with producerId {header.producer_id}")
            if config.message_timestamp_type == "CreateTime" and not header.is_control:
                self._validate_timestamps(header, config, now)
            if config.compacts and not header.is_control:
                self._validate_keys(records[position : position + header.size].toreadonly(), header)
            headers.append(header)
            position += header.size
        return headers

    def validate_as_follower(self, view: memoryview) -> tuple[list[BatchHeader], int]:
        """The whole batches a leader sent and the bytes they take.

        A trailing partial batch (a fetch cut by max bytes) is left out, as Kafka does; every
        whole batch must have a valid CRC and start past the previous one (gaps are allowed:
        compacted logs replicate with them).
        """
        end = view.nbytes
        headers: list[BatchHeader] = []
        position = 0
        while end - position >= LOG_OVERHEAD:
            (length,) = _I32.unpack_from(view, position + 8)
            if length < _MIN_BATCH_LENGTH:
                raise CorruptRecordError(f"batch length {length} at byte {position} is below the v2 header size")
            if position + LOG_OVERHEAD + length > end:
                break
            header = _parse_header(view, position)
            if not is_crc_valid(view, header):
                raise CorruptRecordError(f"record is corrupt (stored crc = {header.crc}) in topic partition {self._tp}")
            if headers and header.base_offset < headers[-1].next_offset:
                raise OffsetsOutOfOrderError(f"out of order offsets: batch at {header.base_offset} follows one ending at {headers[-1].last_offset}")
            headers.append(header)
            position += header.size
        return headers, position

    def _validate_keys(self, batch: memoryview, header: BatchHeader) -> None:
        """Kafka's LogValidator.validateKey: a compacted topic refuses records without a key (the only
        place an append looks inside a batch, and only for compacted topics)."""
        keyless = keyless_record_indexes(header, batch)
        if keyless:
            message = f"Compacted topic cannot accept message without key in topic partition {self._tp}."
            errors = tuple((index, message) for index in keyless)
            shown = ", ".join(f"RecordError(batchIndex={index}, message='{message}')" for index, _ in errors[:3])
            raise InvalidRecordError(
                f"One or more records have been rejected due to {len(errors)} record errors in total, and only showing the first three errors at most: [{shown}]",
                record_errors=errors,
            )

    def _validate_timestamps(self, header: BatchHeader, config: LogConfig, now: int) -> None:
        """message.timestamp.before/after.max.ms, checked on the batch bounds (records are not decoded).

        The max timestamp bounds every record from above; the base timestamp (the first
        record's) stands in for the oldest one.
        """
        if header.max_timestamp != NO_TIMESTAMP and header.max_timestamp > now + config.message_timestamp_after_max_ms:
            raise InvalidTimestampError(
                f"timestamp {header.max_timestamp} of a record in {self._tp} is more than message.timestamp.after.max.ms "
                f"({config.message_timestamp_after_max_ms}) ahead of the broker's time {now}"
            )
        if header.base_timestamp != NO_TIMESTAMP and header.base_timestamp < now - config.message_timestamp_before_max_ms:
            raise InvalidTimestampError(
                f"timestamp {header.base_timestamp} of a record in {self._tp} is more than message.timestamp.before.max.ms "
                f"({config.message_timestamp_before_max_ms}) behind the broker's time {now}"
            )


def _parse_header(buf: memoryview, position: int) -> BatchHeader:
    # Like Kafka, a size below the smallest legacy message is corruption whatever the magic byte says.
    if len(buf) - position >= LOG_OVERHEAD and _I32.unpack_from(buf, position + 8)[0] < _LEGACY_RECORD_OVERHEAD:
        raise CorruptRecordError(f"record size {_I32.unpack_from(buf, position + 8)[0]} is less than the minimum record overhead")
    try:
        return read_header(buf, position)
    except UnsupportedMagic as e:
        raise UnsupportedForMessageFormatError(str(e)) from None
    except InvalidBatch as e:
        raise CorruptRecordError(str(e)) from None
