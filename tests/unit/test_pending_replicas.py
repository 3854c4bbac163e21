"""PendingReplicas: new replicas waiting for their logs, as later deltas change or drop them."""

from __future__ import annotations

import uuid

from broker.metadata.metadata_image import PartitionRegistration
from broker.metadata.topics_delta import PartitionInfo
from broker.pending_replicas import PendingReplicas

A, B = uuid.UUID(int=0xA), uuid.UUID(int=0xB)


def info(topic_id: uuid.UUID = A, leader: int = 1) -> PartitionInfo:
    return PartitionInfo(topic_id, PartitionRegistration(replicas=(1, 2), isr=(1, 2), leader=leader, leader_epoch=0, partition_epoch=0))


def test_taken_oldest_first_and_once() -> None:
    pending = PendingReplicas()
    for index in range(5):
        pending.add(("a", index), info(), leader=True)
    assert [p.key for p in pending.take(2)] == [("a", 0), ("a", 1)]
    assert len(pending) == 3 and ("a", 0) not in pending and ("a", 2) in pending
    assert [p.key for p in pending.take(10)] == [("a", 2), ("a", 3), ("a", 4)]
    assert len(pending) == 0 and pending.take(1) == []


def test_a_later_delta_changes_the_role_and_keeps_the_place() -> None:
    pending = PendingReplicas()
    pending.add(("a", 0), info(), leader=True)
    pending.add(("a", 1), info(), leader=True)
    pending.add(("a", 0), info(leader=2), leader=False)
    first, second = pending.take(2)
    assert first.key == ("a", 0) and not first.leader and first.info.registration.leader == 2
    assert second.key == ("a", 1) and second.leader


def test_dropped_only_for_the_topic_it_belongs_to() -> None:
    pending = PendingReplicas()
    pending.add(("a", 0), info(A), leader=True)
    assert not pending.discard(("a", 0), B)  # another topic of that name, deleted since
    assert not pending.discard(("a", 1), A)
    assert pending.discard(("a", 0), A) and len(pending) == 0
    # Deleted and created again under the same name: the successor stays.
    pending.add(("a", 0), info(B), leader=True)
    assert not pending.discard(("a", 0), A)
    assert [p.info.topic_id for p in pending.take(1)] == [B]
