"""The share-partition state the share coordinator keeps in ``__share_group_state``.

``PersisterStateBatch`` is Kafka's ``org.apache.kafka.server.share.persister.PersisterStateBatch``
(the StateBatches entries of ReadShareGroupState/WriteShareGroupState);
``SharePartitionStateData`` is one partition's data of those requests (start offset, state
epoch, leader epoch, state batches and, in a write, the delivery-complete count: Kafka's
PartitionStateBatchData).
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.share.record_state import RecordState


@dataclass(frozen=True, slots=True)
class PersisterStateBatch:
    first_offset: int
    last_offset: int
    delivery_state: RecordState
    delivery_count: int


@dataclass(frozen=True, slots=True)
class SharePartitionStateData:
    """A start offset of -1 means the group has no state for the partition yet.
    ``delivery_complete_count`` (WriteShareGroupState v1, KIP-1226) is the number of ACKNOWLEDGED or
    ARCHIVED records from the start offset on; -1 (a read, which does not carry it) is unknown."""

    start_offset: int
    state_epoch: int
    leader_epoch: int
    state_batches: tuple[PersisterStateBatch, ...] = ()
    delivery_complete_count: int = -1
