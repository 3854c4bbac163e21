"""Which node coordinates a group, and the errors a client gets when it asks the wrong one."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from broker.config import load_config
from broker.group_coordinator import GROUP_METADATA_TOPIC, GroupCoordinator, partition_for
from broker.metadata.metadata_cache import BrokerEndpoint, MetadataCache
from broker.metadata.metadata_delta import apply_records
from broker.metadata.metadata_image import MetadataImage
from broker.metadata.metadata_records import MetadataRecord, PartitionRecord, TopicRecord

PARTITIONS = 4


def coordinator(leaders: dict[int, int] | None) -> GroupCoordinator:
    """This node is 1; ``leaders`` maps each offsets partition to its leader (None: no offsets topic)."""
    records: list[MetadataRecord] = []
    if leaders is not None:
        topic_id = uuid.uuid4()
        records.append(TopicRecord(name=GROUP_METADATA_TOPIC, topic_id=topic_id))
        for index, leader in leaders.items():
            records.append(PartitionRecord(partition_id=index, topic_id=topic_id, replicas=(1, 2), isr=(1, 2), leader=leader, leader_epoch=0, partition_epoch=0))
    image = apply_records(MetadataImage(), records)
    config = load_config(None, {"offsets.topic.num.partitions": str(PARTITIONS)})
    metadata = MetadataCache(1, "cluster", BrokerEndpoint(1, "127.0.0.1", 9092), image)
    # The routing answers need neither the controller nor the replica manager.
    return GroupCoordinator(config, None, metadata, None)  # type: ignore[arg-type]


def group_on(partition: int) -> str:
    return next(g for g in (f"group-{i}" for i in range(1000)) if partition_for(g, PARTITIONS) == partition)


def test_no_offsets_topic_yet_is_coordinator_not_available() -> None:
    assert coordinator(None).coordinator_error("g") == ErrorCode.coordinator_not_available


def test_a_partition_led_elsewhere_is_not_coordinator() -> None:
    c = coordinator({0: 1, 1: 2, 2: 1, 3: 2})
    assert c.coordinator_error(group_on(1)) == ErrorCode.not_coordinator
    assert c.coordinator_error(group_on(3)) == ErrorCode.not_coordinator


def test_a_partition_being_loaded_is_load_in_progress() -> None:
    c = coordinator({0: 1, 1: 2, 2: 1, 3: 2})
    c._loading[0] = None  # type: ignore[assignment]  # stands for the replay task
    assert c.coordinator_error(group_on(0)) == ErrorCode.coordinator_load_in_progress
