"""Cordoned log directories (KIP-1066, Kafka 4.3+): the config's checks, the heartbeat that carries the
cordoned dir ids to the controller, the records it writes, and placement that leaves out a broker
whose every dir is cordoned. Messages and errors are Kafka 4.4's (KafkaConfig.validateCordonedLogDirs,
ReplicationControlManager.handleDirectoriesCordoned and validateManualPartitionAssignment,
StripedReplicaPlacer, ConfigurationControlManager.isCordonedLogDirsDisabled)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from pydantic import ValidationError

from broker.config import BrokerConfig
from broker.controller.configuration_control_manager import ConfigurationControlManager
from broker.controller.controller_apis import DirectControllerChannel, is_forwarded
from broker.controller.controller_result import ApiError
from broker.controller.replication_control_manager import BrokerView, CreatableTopic, _check_manual_assignment
from broker.dynamic_broker_config import CurrentConfig, DynamicLayers, InvalidDynamicConfigError, validate_dynamic_broker_config
from broker.kafka_apis import RequestContext
from broker.metadata.metadata_image import MetadataImage
from broker.metadata.metadata_records import BrokerRegistrationChangeRecord, ConfigRecord, FeatureLevelRecord
from broker.metrics.log_metrics import LogManagerMetricsCollector
from broker.network import ClientInfo
from protocol.api_keys import ApiKey, request_schema
from protocol.entities import build, nested
from protocol.headers import RequestHeader
from tests.unit.quorum_controller_fakes import run
from tests.unit.test_cluster_control_manager import Controller
from tests.unit.test_controller_apis import broker_registration, setup

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


# -- a change sent straight to a controller (Kafka 4.4's ConfigurationControlManager.isCordonedLogDirsInvalid) --

NOT_A_SUBSET = "When updating cordoned.log.dirs via controllers,  the new value must be a subset of the current configuration value."


def alter_directly(manager: ConfigurationControlManager, image: MetadataImage, op: int, value: str | None, *, forwarded: bool = False, incremental: bool = True) -> tuple[int, str | None]:
    result = manager.alter_configs(
        image, [(BROKER_RESOURCE, "1", [("cordoned.log.dirs", op, value)])], incremental=incremental, validate_only=False, validate_config=lambda *_: None, node_id=None, forwarded=forwarded
    )
    (answer,) = result.response
    return answer.error_code, answer.error_message


def test_straight_to_a_controller_a_change_may_only_keep_entries_of_the_current_value() -> None:
    c = Controller()
    c.join(1)
    manager = ConfigurationControlManager()
    image = c.log.image
    # Nothing set yet: only an empty value (or none) goes through; a forwarded one was checked by the broker.
    assert alter_directly(manager, image, 0, "/d/a") == (ErrorCode.invalid_config, NOT_A_SUBSET)
    assert alter_directly(manager, image, 0, "  ") == (ErrorCode.none, None)
    assert alter_directly(manager, image, 1, None) == (ErrorCode.none, None)
    assert alter_directly(manager, image, 0, "/d/a", forwarded=True) == (ErrorCode.none, None)
    c.log.commit([ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="1", name="cordoned.log.dirs", value="/d/a,/d/b")])
    image = c.log.image
    assert alter_directly(manager, image, 0, "/d/b") == (ErrorCode.none, None)
    assert alter_directly(manager, image, 0, " /d/b , /d/a ") == (ErrorCode.none, None)  # split on commas and the blanks around them
    assert alter_directly(manager, image, 0, "/d/a,/d/c") == (ErrorCode.invalid_config, NOT_A_SUBSET)
    assert alter_directly(manager, image, 0, "*") == (ErrorCode.invalid_config, NOT_A_SUBSET)  # "*" is an entry like any other
    assert alter_directly(manager, image, 0, "/d/a", incremental=False) == (ErrorCode.none, None)
    assert alter_directly(manager, image, 0, "/d/c", incremental=False) == (ErrorCode.invalid_config, NOT_A_SUBSET)
    c.log.commit([ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="1", name="cordoned.log.dirs", value="*")])
    assert alter_directly(manager, c.log.image, 0, "/d/a") == (ErrorCode.invalid_config, NOT_A_SUBSET)  # compared as spelt, not expanded
    # Below metadata.version 4.3-IV0 the version's refusal comes first, as in Kafka.
    c.log.commit([FeatureLevelRecord(name="metadata.version", feature_level=29)])
    assert alter_directly(manager, c.log.image, 0, "/d/c")[1] == "The cordoned.log.dirs configuration value cannot be set because it requires metadata.version >= 4.3-IV0"


def cordon_request(value: str) -> Any:
    schema = request_schema(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1)
    config = build(nested(schema, "AlterableConfig"), name="cordoned.log.dirs", config_operation=0, value=value)
    return build(schema, resources=(build(nested(schema, "AlterConfigsResource"), resource_type=BROKER_RESOURCE, resource_name="1", configs=(config,)),), validate_only=False)


def listener_context(client_id: str) -> RequestContext:
    return RequestContext(RequestHeader(int(ApiKey.INCREMENTAL_ALTER_CONFIGS), 1, 7, client_id, 0), ClientInfo("c1", client_id, "127.0.0.1:5000", "CONTROLLER"))


def test_the_controller_tells_a_forwarded_change_from_one_sent_straight_to_it() -> None:
    async def scenario() -> None:
        quorum, _, apis = setup(1)
        quorum.elect(1)
        await apis[1].handle(broker_registration(4, 1))

        async def code(response: Any) -> tuple[int, str | None]:
            (answer,) = (await response).responses
            return answer.error_code, answer.error_message

        # In process: this node's own broker, or an Envelope's inner request, is forwarded.
        assert await code(apis[1].handle(cordon_request("/d/a,/d/b"))) == (ErrorCode.none, None)
        # A client's request the listener authorized and handed over, not.
        assert await code(apis[1].handle(cordon_request("/d/c"), forwarded=False)) == (ErrorCode.invalid_config, NOT_A_SUBSET)
        assert await code(DirectControllerChannel(apis[1]).send(cordon_request("/d/b"))) == (ErrorCode.none, None)
        # On the listener, a kbroker broker's network client forwards (client id kbroker-<node.id>).
        handler = apis[1].handlers()[ApiKey.INCREMENTAL_ALTER_CONFIGS]
        assert await code(handler(listener_context("adminclient-1"), cordon_request("/d/a"))) == (ErrorCode.invalid_config, NOT_A_SUBSET)
        assert await code(handler(listener_context("kbroker-2"), cordon_request("/d/a"))) == (ErrorCode.none, None)
        assert not is_forwarded(listener_context("kbroker-2-raft")) and not is_forwarded(listener_context("kbroker"))

    run(scenario())


# -- Kafka 4.4's LogManager gauges: kafka.log:type=LogManager,name=CordonedLogDirectoryCount and LogDirectoryCordoned --


def gauges(collector: LogManagerMetricsCollector) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for family in collector.collect() for s in family.samples}


def test_the_log_manager_gauges_follow_the_config_in_effect() -> None:
    static = config()
    layers = DynamicLayers({}, {})
    current = [static]
    collector = LogManagerMetricsCollector(lambda: current[0], static.log_dir_paths)
    a = ("kafka_log_logmanager_logdirectorycordoned", (("logDirectory", "/d/a"),))
    b = ("kafka_log_logmanager_logdirectorycordoned", (("logDirectory", "/d/b"),))
    count = ("kafka_log_logmanager_cordonedlogdirectorycount", ())
    assert gauges(collector) == {count: 0, a: 0, b: 0}
    current[0] = layers.with_layer(True, {"cordoned.log.dirs": "/d/b"}).effective(static)
    assert gauges(collector) == {count: 1, a: 0, b: 1}
    current[0] = layers.with_layer(True, {"cordoned.log.dirs": "/d/b,/d/a"}).effective(static)
    assert gauges(collector) == {count: 2, a: 1, b: 1}
    current[0] = layers.with_layer(True, {"cordoned.log.dirs": "*"}).effective(static)
    assert gauges(collector) == {count: 2, a: 1, b: 1}
    current[0] = config(**{"cordoned.log.dirs": "/d/a"})  # server.properties alone counts too
    assert gauges(collector) == {count: 1, a: 1, b: 0}
