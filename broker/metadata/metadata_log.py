"""The `__cluster_metadata-0` log of a single-voter KRaft quorum.

With one voter a record is committed as soon as it is durable on this node, so an append
is one batch, one write, one fsync, and the committed batch it returns goes to the metadata
loader. At start-up the whole log is replayed into the loader as one batch, so publishers
get one delta from the empty image. The Raft log replaces this one (a majority of voters
commits) and keeps the format.
"""

from __future__ import annotations

import time
import uuid
from typing import Iterator, Sequence

import structlog

from protocol.records import build_batch, iter_records
from broker.metadata.metadata_loader import Batch, MetadataLoader
from broker.metadata.metadata_records import MetadataRecord, decode_metadata_record
from storage.log import Log
from storage.log_config import LogConfig
from storage.log_manager import LogManager

log = structlog.get_logger()

METADATA_TOPIC = "__cluster_metadata"
METADATA_TOPIC_ID = uuid.UUID(int=1)  # Kafka's fixed Uuid.METADATA_TOPIC_ID
LEADER_EPOCH = 1

# The metadata log is never trimmed by retention: until snapshots exist it is the only
# copy of the cluster's state.
METADATA_LOG_CONFIG = {"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "delete", "segment.bytes": str(64 << 20)}


class MetadataLog:
    def __init__(self, metadata_log: Log) -> None:
        self._log = metadata_log

    @classmethod
    def open(cls, log_manager: LogManager) -> "MetadataLog":
        config = LogConfig.from_properties(METADATA_LOG_CONFIG)
        metadata_log = log_manager.get_or_create_log(METADATA_TOPIC, 0, config, METADATA_TOPIC_ID)
        metadata_log.update_config(config)
        return cls(metadata_log)

    def replay(self, loader: MetadataLoader) -> None:
        """Hand every committed record to the loader, as one batch."""
        started = time.monotonic()
        entries = list(self._replay(self._log))
        if entries and entries[-1][0] - entries[0][0] + 1 == len(entries):
            image = loader.handle_commit(Batch(entries[0][0], entries[-1][0], [record for _, record in entries], LEADER_EPOCH))
        else:
            image = loader.handle_commit(entries) if entries else loader.image
        log.info("metadata.replayed", records=len(entries), topics=len(image.topics), seconds=round(time.monotonic() - started, 3))

    @staticmethod
    def _replay(metadata_log: Log) -> Iterator[tuple[int, MetadataRecord]]:
        start = metadata_log.log_start_offset
        for header, batch in metadata_log.batches(start):
            for record in iter_records(batch, header):
                if record.offset >= start and record.value is not None:
                    yield record.offset, decode_metadata_record(record.value)

    @property
    def is_empty(self) -> bool:
        return self._log.log_end_offset == self._log.log_start_offset

    @property
    def end_offset(self) -> int:
        return self._log.log_end_offset

    def append(self, records: Sequence[MetadataRecord]) -> Batch:
        """Append and make durable: the batch is committed when this returns."""
        now = time.time_ns() // 1_000_000
        batch = build_batch([(None, r.encode(), (), now) for r in records], partition_leader_epoch=LEADER_EPOCH)
        info = self._log.append_as_leader(memoryview(bytearray(batch)), LEADER_EPOCH)
        self._log.flush()
        return Batch(info.first_offset, info.last_offset, tuple(records), LEADER_EPOCH)
