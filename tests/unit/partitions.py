"""A Partition led by this node alone, for tests of the read and produce paths."""

from __future__ import annotations

import uuid

from broker.metadata.metadata_image import PartitionRegistration
from broker.partition import Partition, ReplicationSettings
from storage.unified_log import UnifiedLog


def sole_leader(topic: str, index: int, log: UnifiedLog, node_id: int = 1, leader_epoch: int = 0) -> Partition:
    settings = ReplicationSettings(node_id, 30000, lambda: 0, lambda _broker: True)
    partition = Partition(topic, index, uuid.uuid4(), log, settings)
    partition.make_leader(PartitionRegistration(replicas=(node_id,), isr=(node_id,), leader=node_id, leader_epoch=leader_epoch, partition_epoch=0), 0)
    return partition
