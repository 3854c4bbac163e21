"""One share partition's state as the coordinator holds it: Kafka's ``ShareGroupOffset``, and
its conversions from and to the records."""

from __future__ import annotations

from dataclasses import dataclass

from broker.group.coordinator_records import CoordinatorRecordError
from broker.share.persister import PersisterStateBatch
from broker.share.record_state import RecordState
from broker.share_coordinator.records import ShareSnapshotValue, ShareStateBatch, ShareUpdateValue


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareGroupOffset:
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int
    state_batches: tuple[PersisterStateBatch, ...]
    create_timestamp: int
    write_timestamp: int

    @classmethod
    def from_snapshot(cls, value: ShareSnapshotValue) -> ShareGroupOffset:
        return cls(
            snapshot_epoch=value.snapshot_epoch,
            state_epoch=value.state_epoch,
            leader_epoch=value.leader_epoch,
            start_offset=value.start_offset,
            delivery_complete_count=value.delivery_complete_count,
            state_batches=tuple(to_persister_batch(b) for b in value.state_batches),
            create_timestamp=value.create_timestamp,
            write_timestamp=value.write_timestamp,
        )

    @classmethod
    def from_update(cls, value: ShareUpdateValue) -> ShareGroupOffset:
        """An update with no snapshot before it (Kafka keeps it): no state epoch, no timestamps."""
        return cls(
            snapshot_epoch=value.snapshot_epoch,
            state_epoch=0,
            leader_epoch=value.leader_epoch,
            start_offset=value.start_offset,
            delivery_complete_count=value.delivery_complete_count,
            state_batches=tuple(to_persister_batch(b) for b in value.state_batches),
            create_timestamp=0,
            write_timestamp=0,
        )

    def to_snapshot(self) -> ShareSnapshotValue:
        return ShareSnapshotValue(
            snapshot_epoch=self.snapshot_epoch,
            state_epoch=self.state_epoch,
            leader_epoch=self.leader_epoch,
            start_offset=self.start_offset,
            delivery_complete_count=self.delivery_complete_count,
            create_timestamp=self.create_timestamp,
            write_timestamp=self.write_timestamp,
            state_batches=tuple(to_record_batch(b) for b in self.state_batches),
        )


def to_persister_batch(batch: ShareStateBatch) -> PersisterStateBatch:
    try:
        state = RecordState(batch.delivery_state)
    except ValueError:
        raise CoordinatorRecordError(f"unknown delivery state {batch.delivery_state}") from None
    return PersisterStateBatch(batch.first_offset, batch.last_offset, state, batch.delivery_count)


def to_record_batch(batch: PersisterStateBatch) -> ShareStateBatch:
    return ShareStateBatch(
        first_offset=batch.first_offset,
        last_offset=batch.last_offset,
        delivery_state=int(batch.delivery_state),
        delivery_count=batch.delivery_count,
    )
