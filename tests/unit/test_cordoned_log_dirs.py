"""Cordoned log directories (KIP-1066, Kafka 4.3+): the config's checks, the heartbeat that carries the
cordoned dir ids to the controller, the records it writes, and placement that leaves out a broker
whose every dir is cordoned. Messages and errors are Kafka 4.4's (KafkaConfig.validateCordonedLogDirs,
ReplicationControlManager.handleDirectoriesCordoned and validateManualPartitionAssignment,
StripedReplicaPlacer, ConfigurationControlManager.isCordonedLogDirsDisabled)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode
from pydantic import ValidationError

from broker.config import BrokerConfig
from broker.controller.configuration_control_manager import ConfigurationControlManager
from broker.controller.controller_result import ApiError
from broker.controller.replication_control_manager import BrokerView, CreatableTopic, _check_manual_assignment
from broker.dynamic_broker_config import CurrentConfig, DynamicLayers, InvalidDynamicConfigError, validate_dynamic_broker_config
from broker.metadata.metadata_records import BrokerRegistrationChangeRecord, ConfigRecord, FeatureLevelRecord
from tests.unit.test_cluster_control_manager import Controller

BROKER_RESOURCE = 4


def config(**props: str) -> BrokerConfig:
    return BrokerConfig.model_validate({"node.id": "1", "log.dirs": "/d/a,/d/b", **props})


def test_cordoned_log_dirs_must_be_log_dirs_or_star_alone() -> None:
    assert config(**{"cordoned.log.dirs": "/d/b"}).cordoned_log_dir_paths == [Path("/d/b")]
    assert config(**{"cordoned.log.dirs": "*"}).cordoned_log_dir_paths == [Path("/d/a"), Path("/d/b")]
    assert config().cordoned_log_dir_paths == []
    with pytest.raises(ValidationError, match="All entries in cordoned.log.dirs must be present in log.dirs or log.dir. Missing entries : /x,/y"):
        config(**{"cordoned.log.dirs": "/d/a,/x,/y"})
    with pytest.raises(ValidationError, match=r"When cordoned.log.dirs is set to \*, it must not contain other values"):
        config(**{"cordoned.log.dirs": "*,/d/a"})


def test_cordoned_log_dirs_change_per_broker_only_and_within_log_dirs() -> None:
    static = config()
    current = CurrentConfig(static, static)
    layers = DynamicLayers({}, {})
    validate_dynamic_broker_config({"cordoned.log.dirs": "/d/a"}, True, current, layers)
    assert layers.with_layer(True, {"cordoned.log.dirs": "*"}).effective(static).cordoned_log_dir_paths == [Path("/d/a"), Path("/d/b")]
    with pytest.raises(InvalidDynamicConfigError, match=r"^Cannot update these configs at default cluster level, broker id must be specified: \[cordoned.log.dirs\]$"):
        validate_dynamic_broker_config({"cordoned.log.dirs": "/d/a"}, False, current, layers)
    with pytest.raises(InvalidDynamicConfigError, match="Missing entries : /elsewhere"):
        validate_dynamic_broker_config({"cordoned.log.dirs": "/elsewhere"}, True, current, layers)


def dir_of(broker: int) -> uuid.UUID:
    return uuid.UUID(int=0x1000 + broker)  # the one log dir Controller registers per broker


def heartbeat(c: Controller, broker: int, cordoned: tuple[uuid.UUID, ...] | None) -> list[object]:
    image = c.log.image
    result = c.cluster.heartbeat(
        broker, image.brokers[broker].epoch, image.provenance, False, False, now_ms=c.now, image=image, committed_offset=image.provenance, cordoned_log_dirs=cordoned
    )
    c.log.commit(result.records)
    return list(result.records)


def test_a_heartbeat_records_the_cordoned_dirs_when_they_change() -> None:
    c = Controller()
    c.join(1)
    assert c.log.image.brokers[1].cordoned_directories is None  # the registration carries none
    # Null (not caught up yet, or v0-1) changes nothing.
    assert heartbeat(c, 1, None) == []
    # The first set is recorded even when empty: the registration had none.
    epoch = c.log.image.brokers[1].epoch
    assert heartbeat(c, 1, ()) == [BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=epoch, cordoned_log_dirs=())]
    assert heartbeat(c, 1, ()) == []
    assert heartbeat(c, 1, (dir_of(1),)) == [BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=epoch, cordoned_log_dirs=(dir_of(1),))]
    assert c.log.image.brokers[1].cordoned_directories == (dir_of(1),)
    assert heartbeat(c, 1, (dir_of(1),)) == []
    assert heartbeat(c, 1, ()) == [BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=epoch, cordoned_log_dirs=())]


def test_below_metadata_version_4_3_the_controller_ignores_cordoned_dirs() -> None:
    c = Controller()
    c.log.commit([FeatureLevelRecord(name="metadata.version", feature_level=29)])  # 4.2-IV1
    c.join(1)
    assert heartbeat(c, 1, (dir_of(1),)) == []
    assert c.log.image.brokers[1].cordoned_directories is None


def test_placement_leaves_out_a_broker_whose_dirs_are_all_cordoned() -> None:
    c = Controller()
    c.join(1, 2, 3)
    heartbeat(c, 2, (dir_of(2),))
    view = BrokerView.from_image(c.log.image)
    assert [b.id for b in view.usable] == [1, 3] and view.cordoned == {2}
    assert BrokerView.from_ids(c.log.image, [1, 2, 3]).cordoned == {2}
    result = c.replication.create_topics(
        c.log.image, [CreatableTopic("t", 6, 2, None, {})], validate_only=False, default_partitions=1, default_replication_factor=1, validate_config=lambda *_: None
    )
    assert result.response[0].error_code == 0
    assert all(2 not in r.replicas for r in result.records if hasattr(r, "replicas"))
    too_many = c.replication.create_topics(
        c.log.image, [CreatableTopic("u", 1, 3, None, {})], validate_only=False, default_partitions=1, default_replication_factor=1, validate_config=lambda *_: None
    )
    assert (too_many.response[0].error_code, too_many.response[0].error_message) == (
        ErrorCode.invalid_replication_factor,
        "Unable to replicate the partition 3 time(s): The target replication factor of 3 cannot be reached because only 2 broker(s) "
        "are registered or some brokers have all their log directories cordoned.",
    )
    # A manual assignment (CreateTopics, CreatePartitions, a reassignment) naming it is refused.
    with pytest.raises(ApiError) as refused:
        _check_manual_assignment([1, 2], None, view)
    assert (refused.value.error_code, refused.value.message) == (
        ErrorCode.invalid_replica_assignment,
        "The manual partition assignment includes broker 2, but all its log directories are cordoned.",
    )
    # Uncordoned again, it takes replicas.
    heartbeat(c, 2, ())
    assert [b.id for b in BrokerView.from_image(c.log.image).usable] == [1, 2, 3]


def test_every_broker_cordoned_leaves_no_placement() -> None:
    c = Controller()
    c.join(1)
    heartbeat(c, 1, (dir_of(1),))
    result = c.replication.create_topics(
        c.log.image, [CreatableTopic("t", 1, 1, None, {})], validate_only=False, default_partitions=1, default_replication_factor=1, validate_config=lambda *_: None
    )
    assert (result.response[0].error_code, result.response[0].error_message) == (
        ErrorCode.invalid_replication_factor,
        "Unable to replicate the partition 1 time(s): All brokers are currently fenced, or have all their log directories cordoned.",
    )


def test_the_config_needs_metadata_version_4_3() -> None:
    c = Controller()
    c.join(1)
    manager = ConfigurationControlManager()
    ops = [("cordoned.log.dirs", 0, "/d/a")]
    ok = manager.alter_configs(c.log.image, [(BROKER_RESOURCE, "1", ops)], incremental=True, validate_only=False, validate_config=lambda *_: None, node_id=None)
    assert ok.response[0].error_code == 0 and ok.records == [ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="1", name="cordoned.log.dirs", value="/d/a")]
    c.log.commit([FeatureLevelRecord(name="metadata.version", feature_level=29)])
    refused = manager.alter_configs(c.log.image, [(BROKER_RESOURCE, "1", ops)], incremental=True, validate_only=False, validate_config=lambda *_: None, node_id=None)
    assert (refused.response[0].error_code, refused.response[0].error_message, refused.records) == (
        ErrorCode.invalid_config,
        "The cordoned.log.dirs configuration value cannot be set because it requires metadata.version >= 4.3-IV0",
        [],
    )
