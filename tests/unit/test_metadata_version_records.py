"""What each metadata.version writes: the record versions Kafka 4.4's MetadataVersion implies, and the
records 4.1-4.4 added (ClearElrRecord, UnregisterControllerRecord, cordoned log directories)."""

from __future__ import annotations

import dataclasses
import uuid

from broker.metadata import metadata_version as mv
from broker.metadata.image_writer import image_records
from broker.metadata.metadata_delta import apply_records
from broker.metadata.metadata_image import EMPTY_IMAGE, MetadataImage
from broker.metadata.metadata_records import (
    BrokerRegistrationChangeRecord,
    ClearElrRecord,
    FeatureLevelRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    UnregisterControllerRecord,
    decode_metadata_record,
)

TOPIC = uuid.UUID(int=7)


def written_version(record: object) -> int:
    return decode_metadata_record(record.encode()).record_version  # type: ignore[attr-defined, no-any-return]


def test_levels_match_kafka_44() -> None:
    assert [(v.level, v.name) for v in mv.METADATA_VERSIONS if v.level >= 25] == [
        (25, "4.0-IV3"), (26, "4.1-IV0"), (27, "4.1-IV1"), (28, "4.2-IV0"), (29, "4.2-IV1"),
        (30, "4.3-IV0"), (31, "4.4-IV0"), (32, "4.4-IV1"), (33, "4.4-IV2"), (34, "4.5-IV0"),
    ]
    assert mv.LATEST_PRODUCTION.level == 33 and not mv.LATEST_TESTING.production
    assert [v.level for v in mv.METADATA_VERSIONS if v.level > 25 and v.did_metadata_change] == [30, 32, 33]
    assert [mv.BY_LEVEL[level].register_broker_record_version for level in (7, 8, 17, 29, 30, 33)] == [1, 2, 3, 3, 4, 4]
    assert [mv.BY_LEVEL[level].partition_record_version for level in (7, 17, 22, 23, 33)] == [0, 1, 1, 2, 2]
    assert mv.from_version_string("4.4").level == 33
    assert mv.default_features(26)["eligible.leader.replicas.version"] == 1 and mv.default_features(25)["eligible.leader.replicas.version"] == 0


def test_a_record_is_written_at_its_levels_version() -> None:
    broker = RegisterBrokerRecord(broker_id=1, incarnation_id=uuid.UUID(int=1), broker_epoch=5, log_dirs=(uuid.UUID(int=9),))
    for level in (17, 25, 29, 30, 33):
        stamped = dataclasses.replace(broker, record_version=mv.BY_LEVEL[level].register_broker_record_version)
        assert written_version(stamped) == (4 if level >= 30 else 3)
    # Never a version too old for what the record holds.
    assert written_version(PartitionRecord(topic_id=TOPIC, replicas=(1,), isr=(1,), eligible_leader_replicas=(2,), record_version=1)) == 2
    assert written_version(PartitionChangeRecord(topic_id=TOPIC, partition_id=0, isr=(1,), record_version=1)) == 1


def test_broker_registration_changes_take_the_lowest_version_that_holds_them() -> None:
    assert written_version(BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=2, fenced=1)) == 0
    assert written_version(BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=2, in_controlled_shutdown=1)) == 1
    assert written_version(BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=2, log_dirs=(uuid.UUID(int=3),))) == 2
    cordoned = BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=2, cordoned_log_dirs=(uuid.UUID(int=3),))
    assert written_version(cordoned) == 3
    assert decode_metadata_record(cordoned.encode()) == cordoned


def image_at(level: int) -> MetadataImage:
    return apply_records(
        EMPTY_IMAGE,
        [
            FeatureLevelRecord(name="metadata.version", feature_level=level),
            RegisterBrokerRecord(broker_id=1, incarnation_id=uuid.UUID(int=1), broker_epoch=5, cordoned_log_dirs=(uuid.UUID(int=4),) if level >= 30 else None),
            TopicRecord(name="t", topic_id=TOPIC),
            PartitionRecord(topic_id=TOPIC, partition_id=0, replicas=(1, 2, 3), isr=(1,), leader=1, eligible_leader_replicas=(2,), last_known_elr=(3,)),
            PartitionRecord(topic_id=TOPIC, partition_id=1, replicas=(1, 2, 3), isr=(1,), leader=1, eligible_leader_replicas=(3,)),
        ],
    )


def test_snapshots_write_the_images_versions() -> None:
    for level, register, partition in ((25, 3, 2), (30, 4, 2), (33, 4, 2)):
        records = image_records(image_at(level))
        versions = {type(r).__name__: written_version(r) for r in records if isinstance(r, (RegisterBrokerRecord, PartitionRecord))}
        assert versions == {"RegisterBrokerRecord": register, "PartitionRecord": partition}
    assert image_at(33).brokers[1].cordoned_directories == (uuid.UUID(int=4),)


def test_clear_elr_record_empties_the_eligible_leader_replicas() -> None:
    image = apply_records(image_at(33), [ClearElrRecord(topic_name="t")])
    partitions = image.topics["t"].partitions
    assert all(p.elr == () and p.last_known_elr == () for p in partitions.values())
    assert decode_metadata_record(ClearElrRecord(topic_name="").encode()) == ClearElrRecord(topic_name="")
    cleared_all = apply_records(image_at(33), [ClearElrRecord(topic_name="")])
    assert cleared_all.topics["t"].partitions[0].elr == ()


def test_unregister_controller_record_is_read_and_replayed() -> None:
    record = UnregisterControllerRecord(controller_id=3000)
    assert decode_metadata_record(record.encode()) == record
    assert apply_records(image_at(33), [record]).topics["t"].partitions[0].elr == (2,)
