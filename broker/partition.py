"""One partition replica on this broker: its log, its role (leader or follower), its high watermark."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.metadata.metadata_image import PartitionRegistration
from storage.errors import StorageError
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


class NotLeaderOrFollowerError(StorageError):
    """A leader's operation on a replica this node only follows."""

    error_code = ErrorCode.not_leader_or_follower


class Partition:
    """A replica hosted here, as the metadata image assigns it: leader or follower, with the
    leader's id and epoch. Only a leader takes produce and consumer fetches. Until followers
    replicate, the ISR of a led partition is taken as just this node, so its high watermark
    is the log end."""

    def __init__(self, topic: str, index: int, topic_id: uuid.UUID, log: Log, leader_epoch: int, leader_id: int = -1, is_leader: bool = True) -> None:
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.log = log
        self.leader_epoch = leader_epoch
        self.leader_id = leader_id
        self.is_leader = is_leader
        self.partition_epoch = -1
        self.high_watermark = log.log_end_offset

    def make_leader(self, registration: PartitionRegistration) -> bool:
        """Take the registration this node leads; True if it was not leading in that epoch before."""
        changed = not self.is_leader or self.leader_epoch != registration.leader_epoch
        self._update(registration, is_leader=True)
        if changed:
            self.high_watermark = self.log.log_end_offset
        return changed

    def make_follower(self, registration: PartitionRegistration) -> bool:
        """Follow ``registration.leader``; True if the leader or its epoch changed."""
        changed = self.is_leader or self.leader_id != registration.leader or self.leader_epoch != registration.leader_epoch
        self._update(registration, is_leader=False)
        return changed

    def _update(self, registration: PartitionRegistration, is_leader: bool) -> None:
        self.is_leader = is_leader
        self.leader_id = registration.leader
        self.leader_epoch = registration.leader_epoch
        self.partition_epoch = registration.partition_epoch

    def _check_leader(self) -> None:
        if not self.is_leader:
            raise NotLeaderOrFollowerError(f"{self.topic}-{self.index} is led by {self.leader_id}, not this node")

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.index)

    @property
    def last_stable_offset(self) -> int:
        """Below it every transaction is complete: min(first unstable offset, high watermark)."""
        first_unstable = self.log.first_unstable_offset
        return self.high_watermark if first_unstable is None else min(first_unstable, self.high_watermark)

    def append_records_to_leader(self, records: memoryview, origin: AppendOrigin = AppendOrigin.CLIENT) -> LogAppendInfo:
        self._check_leader()
        info = self.log.append_as_leader(records, self.leader_epoch, origin)
        self.high_watermark = self.log.log_end_offset
        return info

    def read_records(self, fetch_offset: int, max_bytes: int, isolation_level: int, min_one_message: bool) -> LogReadResult:
        self._check_leader()
        last_stable = self.last_stable_offset
        upper = last_stable if isolation_level == READ_COMMITTED else self.high_watermark
        info = self.log.read(fetch_offset, max_bytes, upper, min_one_message)
        aborted = None
        if isolation_level == READ_COMMITTED:
            # Kafka's bound: the end of the segment the read started in; the client only uses
            # the entries whose records it got.
            aborted = self.log.collect_aborted_transactions(fetch_offset, self.log.fetch_upper_bound(fetch_offset)) if info.regions else []
        return LogReadResult(info, self.high_watermark, last_stable, self.log.log_start_offset, self.log.log_end_offset, aborted)
