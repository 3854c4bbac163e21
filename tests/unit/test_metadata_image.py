"""MetadataImage through MetadataDelta: replaying every record type, Kafka's PartitionChangeRecord semantics, immutability."""

from __future__ import annotations

import uuid

import pytest

from broker.metadata.metadata_delta import MetadataDelta, apply_records
from broker.metadata.metadata_image import (
    BROKER_RESOURCE,
    MIGRATING_DIR,
    TOPIC_RESOURCE,
    MetadataImage,
    MetadataImageError,
    PartitionRegistration,
)
from broker.metadata.metadata_records import (
    BrokerEndpoint,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    MetadataRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    decode_metadata_record,
)

TID = uuid.UUID(int=0xA1)
DIR = uuid.UUID(int=0xD1)


def partition(p: int, replicas: tuple[int, ...] = (1, 2), **kw: object) -> PartitionRecord:
    return PartitionRecord(
        partition_id=p, topic_id=TID, replicas=replicas, isr=replicas, leader=replicas[0], leader_epoch=0, partition_epoch=0, **kw  # type: ignore[arg-type]
    )


def replay(records: list[MetadataRecord]) -> MetadataImage:
    return apply_records(MetadataImage(), [decode_metadata_record(record.encode()) for record in records])


def apply(image: MetadataImage, *records: MetadataRecord) -> MetadataImage:
    return apply_records(image, records)


def topic_image() -> MetadataImage:
    return replay(
        [
            TopicRecord(name="orders", topic_id=TID),
            ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="orders", name="retention.ms", value="1000"),
            partition(0, directories=(DIR, DIR)),
            partition(1, (2, 1), directories=(DIR, DIR)),
        ]
    )


def test_topics_partitions_and_configs() -> None:
    image = topic_image()
    topic = image.topics["orders"]
    assert image.topics_by_id[TID] is topic and topic.name == "orders" and topic.topic_id == TID
    assert topic.partitions[1] == PartitionRegistration(replicas=(2, 1), isr=(2, 1), leader=2, leader_epoch=0, partition_epoch=0, directories=(DIR, DIR))
    assert image.has_partition("orders", 1) and not image.has_partition("orders", 2) and not image.has_partition("nope", 0)
    assert image.topic_config("orders") == {"retention.ms": "1000"}
    image.topic_config("orders")["retention.ms"] = "changed"
    assert image.topic_config("orders") == {"retention.ms": "1000"}
    assert image.topic_config("nope") == {}
    assert image.provenance == 3


def test_partition_record_without_directories_means_migrating() -> None:
    image = replay([TopicRecord(name="t", topic_id=TID)])
    old = PartitionRecord(partition_id=0, topic_id=TID, replicas=(1, 2, 3), isr=(1,), leader=1, leader_epoch=3, partition_epoch=4)
    image = apply(image, decode_metadata_record(old.encode(0)))
    assert image.topics["t"].partitions[0].directories == (MIGRATING_DIR,) * 3


def test_partition_change_with_kafka_sentinels() -> None:
    image = topic_image()

    def change(**kw: object) -> PartitionRegistration:
        nonlocal image
        image = apply(image, PartitionChangeRecord(partition_id=0, topic_id=TID, **kw))  # type: ignore[arg-type]
        return image.topics["orders"].partitions[0]

    reg = change(isr=(1,))  # leader -2: unchanged, leader epoch unchanged, partition epoch bumps
    assert (reg.leader, reg.leader_epoch, reg.partition_epoch, reg.isr, reg.replicas) == (1, 0, 1, (1,), (1, 2))
    reg = change(leader=-1, isr=())
    assert (reg.leader, reg.leader_epoch, reg.partition_epoch, reg.isr) == (-1, 1, 2, ())
    reg = change(leader=2, isr=(2,))
    assert (reg.leader, reg.leader_epoch, reg.partition_epoch) == (2, 2, 3)
    reg = change(leader=2)  # the same leader named again: Kafka's way to bump the leader epoch
    assert (reg.leader, reg.leader_epoch, reg.partition_epoch) == (2, 3, 4)
    reg = change(replicas=(2, 3), directories=(DIR, MIGRATING_DIR), adding_replicas=(3,), leader_recovery_state=1)
    assert (reg.replicas, reg.directories, reg.adding_replicas, reg.leader_recovery_state) == ((2, 3), (DIR, MIGRATING_DIR), (3,), 1)
    reg = change(eligible_leader_replicas=(3,), last_known_elr=(1,), adding_replicas=())
    assert (reg.elr, reg.last_known_elr, reg.adding_replicas, reg.leader_recovery_state, reg.isr) == ((3,), (1,), (), 1, (2,))
    assert image.topics["orders"].partitions[1].partition_epoch == 0


def test_records_for_unknown_topics_partitions_or_brokers_raise_and_change_nothing() -> None:
    image = topic_image()
    before = (dict(image.topics["orders"].partitions), dict(image.configs), image.provenance)
    for bad in (
        PartitionRecord(partition_id=0, topic_id=uuid.UUID(int=9), replicas=(1,), isr=(1,)),
        PartitionChangeRecord(partition_id=7, topic_id=TID, leader=1),
        PartitionChangeRecord(partition_id=0, topic_id=uuid.UUID(int=9)),
        RemoveTopicRecord(topic_id=uuid.UUID(int=9)),
        FenceBrokerRecord(id=5, epoch=0),
        UnregisterBrokerRecord(broker_id=5, broker_epoch=0),
    ):
        delta = MetadataDelta(image)
        delta.replay(ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="orders", name="segment.ms", value="1"))
        with pytest.raises(MetadataImageError):
            delta.replay(bad)
        # The delta is as it was before the bad record: still applicable.
        assert delta.apply().topic_config("orders") == {"retention.ms": "1000", "segment.ms": "1"}
    assert (dict(image.topics["orders"].partitions), dict(image.configs), image.provenance) == before


def test_config_records_set_and_delete_and_remove_topic_drops_everything() -> None:
    image = topic_image()
    image = apply(image, ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="orders", name="cleanup.policy", value="compact"))
    image = apply(image, ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="", name="log.retention.ms", value="5"))
    image = apply(image, ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="orders", name="retention.ms", value=None))
    assert image.topic_config("orders") == {"cleanup.policy": "compact"}
    image = apply(image, ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="orders", name="cleanup.policy", value=None))
    assert (TOPIC_RESOURCE, "orders") not in image.configs
    image = apply(image, ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="ghost", name="x", value=None))
    image = apply(image, ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="orders", name="segment.ms", value="9"))
    image = apply(image, RemoveTopicRecord(topic_id=TID))
    assert image.topics == {} and image.topics_by_id == {}
    assert image.configs == {(BROKER_RESOURCE, ""): {"log.retention.ms": "5"}}


def test_recreating_a_name_replaces_the_old_topic_id() -> None:
    image = topic_image()
    other = uuid.UUID(int=0xB2)
    image = apply(image, TopicRecord(name="orders", topic_id=other))
    assert image.topics["orders"].topic_id == other and set(image.topics_by_id) == {other}


def test_features_producer_ids_and_noop() -> None:
    image = MetadataImage()
    image = apply(image, FeatureLevelRecord(name="metadata.version", feature_level=25), FeatureLevelRecord(name="group.version", feature_level=1))
    image = apply(image, FeatureLevelRecord(name="group.version", feature_level=0))
    assert image.features == {"metadata.version": 25}
    assert image.next_producer_id == 0
    image = apply(image, ProducerIdsRecord(broker_id=1, broker_epoch=0, next_producer_id=1000))
    assert image.next_producer_id == 1000
    image = apply(image, NoOpRecord(), NoOpRecord())
    assert image.provenance == 5


def test_broker_registration_fencing_and_changes() -> None:
    image = MetadataImage()
    endpoint = BrokerEndpoint(name="PLAINTEXT", host="h", port=9092)
    image = apply(image, RegisterBrokerRecord(broker_id=1, incarnation_id=TID, broker_epoch=10, end_points=(endpoint,), rack="r1", log_dirs=(DIR,)))
    broker = image.brokers[1]
    assert (broker.fenced, broker.epoch, broker.endpoints, broker.rack, broker.directories) == (True, 10, (endpoint,), "r1", (DIR,))
    image = apply(image, UnfenceBrokerRecord(id=1, epoch=10))
    assert not image.brokers[1].fenced
    image = apply(image, FenceBrokerRecord(id=1, epoch=10))
    assert image.brokers[1].fenced
    image = apply(image, BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=10, fenced=-1))
    assert not image.brokers[1].fenced and not image.brokers[1].in_controlled_shutdown
    image = apply(image, BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=10, in_controlled_shutdown=1, log_dirs=(MIGRATING_DIR, DIR)))
    assert image.brokers[1].in_controlled_shutdown and image.brokers[1].directories == (MIGRATING_DIR, DIR)
    image = apply(image, BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=10))
    assert not image.brokers[1].fenced and image.brokers[1].directories == (MIGRATING_DIR, DIR)
    for bad in (
        BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=9, fenced=1),
        BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=10, fenced=2),
        UnfenceBrokerRecord(id=1, epoch=11),
        UnregisterBrokerRecord(broker_id=1, broker_epoch=9),
    ):
        with pytest.raises(MetadataImageError):
            apply(image, bad)
    image = apply(image, UnregisterBrokerRecord(broker_id=1, broker_epoch=10))
    assert image.brokers == {}


def test_images_are_read_only() -> None:
    image = topic_image()
    with pytest.raises(TypeError):
        image.topics["x"] = image.topics["orders"]  # type: ignore[index]
    with pytest.raises(TypeError):
        image.topics["orders"].partitions[5] = image.topics["orders"].partitions[0]  # type: ignore[index]
    with pytest.raises(TypeError):
        image.configs[(TOPIC_RESOURCE, "orders")]["retention.ms"] = "1"  # type: ignore[index]
    with pytest.raises(AttributeError):
        image.provenance = 7  # type: ignore[misc]
