"""One partition replica on this broker: its log, its leadership, its high watermark."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from storage.log import AppendOrigin, FetchDataInfo, Log, LogAppendInfo

READ_UNCOMMITTED = 0
READ_COMMITTED = 1


@dataclass(slots=True)
class LogReadResult:
    info: FetchDataInfo
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    log_end_offset: int
    # (producer id, first offset) of the aborted transactions in the range read; None unless read_committed.
    aborted_transactions: list[tuple[int, int]] | None = None

    @property
    def size(self) -> int:
        return sum(r.length for r in self.info.regions)


class Partition:
    """Leader-side state. With one replica the ISR is just us, so the high watermark is the log end."""

    def __init__(self, topic: str, index: int, topic_id: uuid.UUID, log: Log, leader_epoch: int) -> None:
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.log = log
        self.leader_epoch = leader_epoch
        self.high_watermark = log.log_end_offset

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.index)

    @property
    def last_stable_offset(self) -> int:
        """Below it every transaction is complete: min(first unstable offset, high watermark)."""
        first_unstable = self.log.first_unstable_offset
        return self.high_watermark if first_unstable is None else min(first_unstable, self.high_watermark)

    def append_records_to_leader(self, records: memoryview, origin: AppendOrigin = AppendOrigin.CLIENT) -> LogAppendInfo:
        info = self.log.append_as_leader(records, self.leader_epoch, origin)
        self.high_watermark = self.log.log_end_offset
        return info

    def read_records(self, fetch_offset: int, max_bytes: int, isolation_level: int, min_one_message: bool) -> LogReadResult:
        last_stable = self.last_stable_offset
        upper = last_stable if isolation_level == READ_COMMITTED else self.high_watermark
        info = self.log.read(fetch_offset, max_bytes, upper, min_one_message)
        aborted = None
        if isolation_level == READ_COMMITTED:
            # Kafka's bound: the end of the segment the read started in; the client only uses
            # the entries whose records it got.
            aborted = self.log.collect_aborted_transactions(fetch_offset, self.log.fetch_upper_bound(fetch_offset)) if info.regions else []
        return LogReadResult(info, self.high_watermark, last_stable, self.log.log_start_offset, self.log.log_end_offset, aborted)
