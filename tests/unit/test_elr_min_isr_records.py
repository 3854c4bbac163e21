"""What the controller writes for eligible leader replicas (KIP-966) beside partition changes, as
Kafka 4.4 does (records pinned from a Kafka 4.4 node's metadata log, dumped with DumpLogSegments):
ClearElrRecords after min.insync.replicas changes, the min.insync.replicas safety records ahead of
turning the feature on, the per-broker and removal changes refused while it is on, and turning it
off writing the FeatureLevelRecord alone (a snapshot then leaves the stale ELR out)."""

from __future__ import annotations

import dataclasses
import uuid

from kio.schema.errors import ErrorCode

from broker.controller.configuration_control_manager import OP_DELETE, OP_SET, AlterConfigsResult, ConfigOp
from broker.controller.controller_logic import QuorumControllerLogic, cluster_bootstrap_records
from broker.controller.elr_config_records import BROKER_MIN_ISR_ERROR, CLUSTER_MIN_ISR_REMOVAL_ERROR
from broker.controller.feature_control_manager import BROKER_SUPPORTED_FEATURES, ELIGIBLE_LEADER_REPLICAS_FEATURE, NEW_CLUSTER_FEATURES, UpgradeType
from broker.metadata.image_writer import image_records
from broker.metadata.metadata_image import BROKER_RESOURCE, TOPIC_RESOURCE, MetadataImage
from broker.metadata.metadata_records import BrokerFeature, ClearElrRecord, ConfigRecord, FeatureLevelRecord, MetadataRecord, PartitionRecord, TopicRecord
from tests.unit.control_manager_images import Log, registration

ELR = ELIGIBLE_LEADER_REPLICAS_FEATURE
MIN_ISR = "min.insync.replicas"
T1, T2 = uuid.UUID(int=0x71), uuid.UUID(int=0x72)


def elr_cluster() -> Log:
    """A new cluster (ELR on), brokers 1-3 supporting this build's features, t1 and t2 each with an ELR."""
    log = Log()
    log.commit(cluster_bootstrap_records(features=NEW_CLUSTER_FEATURES))
    features = tuple(BrokerFeature(name=n, min_supported_version=lo, max_supported_version=hi) for n, (lo, hi) in BROKER_SUPPORTED_FEATURES.items())
    log.commit([dataclasses.replace(registration(b), features=features) for b in (1, 2, 3)])
    for name, topic_id in (("t1", T1), ("t2", T2)):
        log.commit(
            [
                TopicRecord(name=name, topic_id=topic_id),
                PartitionRecord(
                    partition_id=0,
                    topic_id=topic_id,
                    replicas=(1, 2, 3),
                    isr=(1,),
                    leader=1,
                    leader_epoch=3,
                    partition_epoch=5,
                    eligible_leader_replicas=(2,),
                    last_known_elr=(3,),
                ),
            ]
        )
    return log


def alter(
    logic: QuorumControllerLogic, image: MetadataImage, *resources: tuple[int, str, list[ConfigOp]], incremental: bool = True
) -> tuple[list[MetadataRecord], list[AlterConfigsResult]]:
    return logic.alter_configs(image, list(resources), incremental=incremental, validate_only=False, validate_config=lambda *_: None, node_id=None)


def elrs(image: MetadataImage) -> dict[str, tuple[tuple[int, ...], tuple[int, ...]]]:
    return {name: (t.partitions[0].elr, t.partitions[0].last_known_elr) for name, t in image.topics.items()}


def test_a_topic_min_isr_change_clears_that_topics_elr_after_the_config_record() -> None:
    log, logic = elr_cluster(), QuorumControllerLogic()
    records, results = alter(logic, log.image, (TOPIC_RESOURCE, "t1", [(MIN_ISR, OP_SET, "1")]))
    assert [r.error_code for r in results] == [ErrorCode.none]
    # Kafka 4.4: CONFIG_RECORD {2, t1, min.insync.replicas, 1} then CLEAR_ELR_RECORD {t1}, one batch.
    assert records == [ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="t1", name=MIN_ISR, value="1"), ClearElrRecord(topic_name="t1")]
    assert elrs(log.commit(records)) == {"t1": ((), ()), "t2": ((2,), (3,))}
    # Removing it clears it too; another config does not.
    records, _ = alter(logic, log.image, (TOPIC_RESOURCE, "t1", [(MIN_ISR, OP_DELETE, None)]))
    assert records == [ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="t1", name=MIN_ISR, value=None), ClearElrRecord(topic_name="t1")]
    records, _ = alter(logic, log.image, (TOPIC_RESOURCE, "t1", [("retention.ms", OP_SET, "100000")]))
    assert records == [ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="t1", name="retention.ms", value="100000")]


def test_clear_elr_records_follow_all_the_config_records_one_per_min_isr_change() -> None:
    log, logic = elr_cluster(), QuorumControllerLogic()
    records, _ = alter(
        logic,
        log.image,
        (TOPIC_RESOURCE, "t1", [(MIN_ISR, OP_SET, "2"), ("retention.ms", OP_SET, "1")]),
        (TOPIC_RESOURCE, "t2", [(MIN_ISR, OP_SET, "2")]),
    )
    assert [type(r).__name__ for r in records] == ["ConfigRecord"] * 3 + ["ClearElrRecord"] * 2
    assert records[3:] == [ClearElrRecord(topic_name="t1"), ClearElrRecord(topic_name="t2")]
    # The legacy AlterConfigs the same way.
    records, _ = alter(logic, log.image, (TOPIC_RESOURCE, "t2", [(MIN_ISR, OP_SET, "3")]), incremental=False)
    assert records[-1] == ClearElrRecord(topic_name="t2")


def test_the_cluster_wide_min_isr_clears_every_partitions_elr() -> None:
    log, logic = elr_cluster(), QuorumControllerLogic()
    records, _ = alter(logic, log.image, (BROKER_RESOURCE, "", [(MIN_ISR, OP_SET, "1")]))
    assert records == [ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="", name=MIN_ISR, value="1"), ClearElrRecord(topic_name="")]
    assert elrs(log.commit(records)) == {"t1": ((), ()), "t2": ((), ())}


def test_a_brokers_own_min_isr_and_removing_the_cluster_wide_one_are_refused_while_elr_is_on() -> None:
    log, logic = elr_cluster(), QuorumControllerLogic()
    records, results = alter(logic, log.image, (BROKER_RESOURCE, "1", [(MIN_ISR, OP_SET, "1")]), (BROKER_RESOURCE, "", [(MIN_ISR, OP_DELETE, None)]))
    assert records == []
    assert [(r.error_code, r.error_message) for r in results] == [
        (ErrorCode.invalid_config, BROKER_MIN_ISR_ERROR),
        (ErrorCode.invalid_config, CLUSTER_MIN_ISR_REMOVAL_ERROR),
    ]


def test_disabling_elr_writes_the_feature_level_record_alone_and_a_snapshot_drops_the_stale_elr() -> None:
    log, logic = elr_cluster(), QuorumControllerLogic()
    records, result = logic.update_features(log.image, {ELR: 0}, {ELR: UpgradeType.SAFE_DOWNGRADE}, validate_only=False)
    # Kafka 4.4 writes FEATURE_LEVEL_RECORD {eligible.leader.replicas.version, 0} and no ClearElrRecord.
    assert result.error_code == ErrorCode.none and records == [FeatureLevelRecord(name=ELR, feature_level=0)]
    image = log.commit(records)
    assert elrs(image) == {"t1": ((2,), (3,)), "t2": ((2,), (3,))}  # left until each partition next changes
    snapshot = [r for r in image_records(image) if isinstance(r, PartitionRecord)]
    assert [(r.eligible_leader_replicas, r.last_known_elr) for r in snapshot] == [(None, None), (None, None)]
    # Off, min.insync.replicas changes clear nothing and a broker's own value is allowed.
    records, results = alter(logic, image, (TOPIC_RESOURCE, "t2", [(MIN_ISR, OP_SET, "1")]), (BROKER_RESOURCE, "1", [(MIN_ISR, OP_SET, "1")]))
    assert [r.error_code for r in results] == [ErrorCode.none, ErrorCode.none]
    assert not any(isinstance(r, ClearElrRecord) for r in records)


def test_turning_elr_on_pins_min_isr_cluster_wide_and_drops_broker_values_first() -> None:
    log, logic = elr_cluster(), QuorumControllerLogic(config_default=lambda _type, key: "2" if key == MIN_ISR else None)
    log.commit(logic.update_features(log.image, {ELR: 0}, {ELR: UpgradeType.SAFE_DOWNGRADE}, validate_only=False)[0])
    # With the feature off the bootstrap's cluster-wide value may go, and a broker may have its own.
    log.commit(alter(logic, log.image, (BROKER_RESOURCE, "", [(MIN_ISR, OP_DELETE, None)]), (BROKER_RESOURCE, "2", [(MIN_ISR, OP_SET, "1")]))[0])
    records, result = logic.update_features(log.image, {ELR: 1}, {}, validate_only=False)
    # Kafka 4.4: CONFIG_RECORD {4, "", min.insync.replicas, <static value>} then FEATURE_LEVEL_RECORD {.., 1}, one batch.
    assert result.error_code == ErrorCode.none and records == [
        ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="", name=MIN_ISR, value="2"),
        ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="2", name=MIN_ISR, value=None),
        FeatureLevelRecord(name=ELR, feature_level=1),
    ]
    log.commit(records)
    # Already pinned: only the feature record; validate_only writes nothing.
    assert logic.update_features(log.image, {ELR: 1}, {}, validate_only=False)[0] == [FeatureLevelRecord(name=ELR, feature_level=1)]
    assert logic.update_features(log.image, {ELR: 1}, {}, validate_only=True)[0] == []


def test_a_new_cluster_with_elr_bootstraps_the_cluster_wide_min_isr_after_its_features() -> None:
    """Kafka 4.4's bootstrap records (DumpLogSegments of a fresh node): the FeatureLevelRecords,
    then CONFIG_RECORD {4, "", min.insync.replicas, "1"}; with the feature off, no such record."""
    records = cluster_bootstrap_records(features=NEW_CLUSTER_FEATURES, min_insync_replicas=2)
    assert all(isinstance(r, FeatureLevelRecord) for r in records[:-1])
    assert records[-1] == ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="", name=MIN_ISR, value="2")
    off = cluster_bootstrap_records(features={**NEW_CLUSTER_FEATURES, ELR: 0})
    assert all(isinstance(r, FeatureLevelRecord) for r in off)
