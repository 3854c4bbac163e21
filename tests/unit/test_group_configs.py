"""Group configs (resource type 32, broker/group/group_config.py): the controller's checks with
Apache Kafka 4.4's answers, the ConfigRecords an alteration writes, DescribeConfigs as Kafka 4.4
describes a group, and a consumer group's session timeout and heartbeat interval taken from them.

The expected answers were recorded from a one-node Kafka 4.4.0 (benchmarks/apache_kafka.py) with
its default group.consumer.* settings, for the same IncrementalAlterConfigs (validate_only)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest

from broker.config import BrokerConfig
from broker.controller.configuration_control_manager import ConfigurationControlManager
from broker.controller.quorum_controller import QuorumController
from broker.group.consumer_group import ConsumerGroupManager, session_timeout_key
from broker.group.group_config import (
    DEFAULT_CONFIG,
    GROUP_CONFIG,
    GroupConfigBounds,
    GroupConfigManager,
    InvalidGroupConfigError,
    describe_group_config,
    validate_group_config,
)
from broker.group.group_metadata_manager import ScheduleTimer
from broker.metadata.metadata_delta import MetadataDelta
from broker.metadata.metadata_image import GROUP_RESOURCE, MetadataImage
from broker.metadata.metadata_records import ConfigRecord
from tests.unit.control_manager_images import Log
from tests.unit.quorum_controller_fakes import controller_config

INVALID_CONFIG, INVALID_REQUEST = 40, 42
SET, DELETE, APPEND = 0, 1, 2

# (configs set, Kafka 4.4's error message or None when it accepts them), all INVALID_CONFIG.
KAFKA_ANSWERS: list[tuple[dict[str, str], str | None]] = [
    ({"foo.bar": "1"}, "Unknown group config name: foo.bar"),
    ({"consumer.session.timeout.ms": "50000", "group.consumer.session.timeout.ms": "1"}, "Unknown group config name: group.consumer.session.timeout.ms"),
    ({"consumer.session.timeout.ms": "1000"}, "consumer.session.timeout.ms must be in the range 45000 to 60000 inclusive."),
    ({"consumer.session.timeout.ms": "70000"}, "consumer.session.timeout.ms must be in the range 45000 to 60000 inclusive."),
    ({"consumer.session.timeout.ms": "0"}, "Invalid value 0 for configuration consumer.session.timeout.ms: Value must be at least 1"),
    ({"consumer.session.timeout.ms": "abc"}, "Invalid value abc for configuration consumer.session.timeout.ms: Not a number of type INT"),
    ({"consumer.session.timeout.ms": ""}, "Invalid value  for configuration consumer.session.timeout.ms: Not a number of type INT"),
    ({"consumer.session.timeout.ms": " 50000 "}, None),
    ({"consumer.heartbeat.interval.ms": "1000"}, "consumer.heartbeat.interval.ms must be in the range 5000 to 15000 inclusive."),
    ({"consumer.heartbeat.interval.ms": "20000"}, "consumer.heartbeat.interval.ms must be in the range 5000 to 15000 inclusive."),
    ({"consumer.heartbeat.interval.ms": "20000", "consumer.session.timeout.ms": "1000"}, "consumer.heartbeat.interval.ms must be in the range 5000 to 15000 inclusive."),
    ({"consumer.assignment.interval.ms": "999999999"}, "consumer.assignment.interval.ms must be in the range 0 to 15000 inclusive."),
    ({"consumer.assignment.interval.ms": "2000"}, None),
    ({"consumer.assignor.offload.enable": "true"}, None),
    ({"consumer.assignor.offload.enable": "maybe"}, "Invalid value maybe for configuration consumer.assignor.offload.enable: Expected value to be either true or false"),
    ({"share.session.timeout.ms": "1000"}, "share.session.timeout.ms must be in the range 45000 to 60000 inclusive."),
    ({"share.heartbeat.interval.ms": "20000"}, "share.heartbeat.interval.ms must be in the range 5000 to 15000 inclusive."),
    ({"share.record.lock.duration.ms": "500"}, "Invalid value 500 for configuration share.record.lock.duration.ms: Value must be at least 1000"),
    ({"share.record.lock.duration.ms": "99999999"}, "share.record.lock.duration.ms must be in the range 15000 to 60000 inclusive."),
    ({"share.record.lock.duration.ms": "40000"}, None),
    ({"share.delivery.count.limit": "1"}, "Invalid value 1 for configuration share.delivery.count.limit: Value must be at least 2"),
    ({"share.delivery.count.limit": "100"}, "share.delivery.count.limit must be in the range 2 to 10 inclusive."),
    ({"share.partition.max.record.locks": "10"}, "Invalid value 10 for configuration share.partition.max.record.locks: Value must be at least 100"),
    ({"share.partition.max.record.locks": "99999999"}, "share.partition.max.record.locks must be in the range 100 to 4000 inclusive."),
    (
        {"share.auto.offset.reset": "foo"},
        "Invalid value foo for configuration share.auto.offset.reset: Invalid value `foo` for configuration share.auto.offset.reset. "
        "The value must be either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.",
    ),
    ({"share.auto.offset.reset": "by_duration:PT1H"}, None),
    (
        {"share.auto.offset.reset": "by_duration:xx"},
        "Invalid value by_duration:xx for configuration share.auto.offset.reset: Invalid value `by_duration:xx` for configuration share.auto.offset.reset. "
        "The value must be either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.",
    ),
    ({"share.isolation.level": "foo"}, "Invalid value foo for configuration share.isolation.level: String must be one of: read_committed, read_uncommitted"),
    ({"share.isolation.level": "read_committed"}, None),
    ({"share.renew.acknowledge.enable": "false"}, None),
    ({"share.assignment.interval.ms": "0"}, None),
    ({"streams.session.timeout.ms": "1000"}, "streams.session.timeout.ms must be in the range 45000 to 60000 inclusive."),
    ({"streams.heartbeat.interval.ms": "20000"}, "streams.heartbeat.interval.ms must be in the range 5000 to 15000 inclusive."),
    ({"streams.num.standby.replicas": "5"}, "streams.num.standby.replicas must be less than or equal to 2"),
    ({"streams.num.standby.replicas": "-1"}, "Invalid value -1 for configuration streams.num.standby.replicas: Value must be at least 0"),
    ({"streams.initial.rebalance.delay.ms": "-1"}, "Invalid value -1 for configuration streams.initial.rebalance.delay.ms: Value must be at least 0"),
    ({"streams.initial.rebalance.delay.ms": "100"}, None),
    ({"streams.assignment.interval.ms": "999999999"}, "streams.assignment.interval.ms must be in the range 0 to 15000 inclusive."),
    ({"streams.rack.aware.assignment.tags": "a, a"}, "streams.rack.aware.assignment.tags must not contain duplicate tag keys."),
    ({"streams.rack.aware.assignment.tags": "a,b"}, None),
    ({"streams.assignor.name": "foo"}, "streams.assignor.name 'foo' is not a registered task assignor. Registered assignors are: [sticky]."),
    ({"streams.assignor.name": "sticky"}, None),
    ({"streams.task.offset.interval.ms": "1"}, "streams.task.offset.interval.ms must be greater than or equal to 15000"),
    ({"streams.num.warmup.replicas": "1000"}, "streams.num.warmup.replicas must be less than or equal to 20"),
    ({"streams.acceptable.recovery.lag": "-5"}, "Invalid value -5 for configuration streams.acceptable.recovery.lag: Value must be at least 0"),
    ({"errors.deadletterqueue.topic.name": "__x"}, "errors.deadletterqueue.topic.name: DLQ topic name must not start with '__'"),
    ({"errors.deadletterqueue.topic.name": "dlq"}, None),
    ({"errors.deadletterqueue.copy.record.enable": "true"}, None),
    # The first failure in Kafka's order: names, duplicate tags, then parsing by definition order.
    ({"streams.rack.aware.assignment.tags": "a,a", "consumer.session.timeout.ms": "x"}, "streams.rack.aware.assignment.tags must not contain duplicate tag keys."),
    ({"share.isolation.level": "x", "consumer.session.timeout.ms": "x"}, "Invalid value x for configuration consumer.session.timeout.ms: Not a number of type INT"),
    ({"streams.session.timeout.ms": "x", "consumer.heartbeat.interval.ms": "x"}, "Invalid value x for configuration consumer.heartbeat.interval.ms: Not a number of type INT"),
    ({"consumer.session.timeout.ms": "x", "zzz": "1"}, "Unknown group config name: zzz"),
]

# A broker whose heartbeat interval may reach its session timeout (group.consumer.max.heartbeat.interval.ms=60000,
# group.consumer.session.timeout.ms=50000), as Kafka 4.4 answered with the same settings.
WIDE = GroupConfigBounds(consumer_session_timeout_ms=50000, consumer_max_heartbeat_interval_ms=60000)
KAFKA_ANSWERS_WIDE: list[tuple[dict[str, str], str | None]] = [
    ({"consumer.heartbeat.interval.ms": "50000"}, "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms"),
    ({"consumer.heartbeat.interval.ms": "40000", "consumer.session.timeout.ms": "40000"}, "consumer.session.timeout.ms must be in the range 45000 to 60000 inclusive."),
    ({"consumer.heartbeat.interval.ms": "40000"}, None),
    ({"share.heartbeat.interval.ms": "50000"}, "share.heartbeat.interval.ms must be in the range 5000 to 15000 inclusive."),
]


def check(configs: dict[str, str], bounds: GroupConfigBounds = GroupConfigBounds()) -> str | None:
    try:
        validate_group_config("g", configs, bounds)
    except InvalidGroupConfigError as e:
        assert e.error_code == INVALID_CONFIG
        return str(e)
    return None


@pytest.mark.parametrize(("configs", "message"), KAFKA_ANSWERS)
def test_values_are_checked_as_kafka_checks_them(configs: dict[str, str], message: str | None) -> None:
    assert check(configs) == message


@pytest.mark.parametrize(("configs", "message"), KAFKA_ANSWERS_WIDE)
def test_the_brokers_own_bounds_and_defaults_apply(configs: dict[str, str], message: str | None) -> None:
    assert check(configs, WIDE) == message


def test_bounds_come_from_the_brokers_group_consumer_settings() -> None:
    config = BrokerConfig(
        log_dirs="/nonexistent",
        group_consumer_min_session_timeout_ms=10000,
        group_consumer_session_timeout_ms=20000,
        group_consumer_max_heartbeat_interval_ms=30000,
    )
    bounds = GroupConfigBounds.of(config)
    assert check({"consumer.session.timeout.ms": "10000"}, bounds) is None
    assert check({"consumer.heartbeat.interval.ms": "20000"}, bounds) == "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms"
    assert check({"consumer.session.timeout.ms": "9999"}, bounds) == "consumer.session.timeout.ms must be in the range 10000 to 60000 inclusive."


# --- through the controller -------------------------------------------------------------------


class Controller:
    """The configuration manager with the QuorumController's validate callback, over a committed log."""

    def __init__(self, **config: Any) -> None:
        self.quorum = QuorumController(controller_config(1, **config), raft=None, image=MetadataImage)  # type: ignore[arg-type]
        self.manager = ConfigurationControlManager(config_default=self.quorum._config_default)
        self.log = Log()

    def alter(self, name: str, ops: list[tuple[str, int, str | None]], *, incremental: bool = True, validate_only: bool = False) -> tuple[int, str | None]:
        result = self.manager.alter_configs(
            self.log.image,
            [(GROUP_RESOURCE, name, ops)],
            incremental=incremental,
            validate_only=validate_only,
            validate_config=self.quorum._validate_resource_config,
            node_id=None,
        )
        records, results = result.records, result.response
        self.log.commit(records)
        self.records = records
        return results[0].error_code, results[0].error_message

    def configs(self, name: str) -> dict[str, str]:
        return dict(self.log.image.configs.get((GROUP_RESOURCE, name), {}))


def test_incremental_alter_writes_config_records_for_a_group_that_does_not_exist() -> None:
    c = Controller()
    assert c.alter("g", [("consumer.session.timeout.ms", SET, "50000"), ("consumer.heartbeat.interval.ms", SET, "6000")]) == (0, None)
    assert c.records == [
        ConfigRecord(resource_type=GROUP_RESOURCE, resource_name="g", name="consumer.session.timeout.ms", value="50000"),
        ConfigRecord(resource_type=GROUP_RESOURCE, resource_name="g", name="consumer.heartbeat.interval.ms", value="6000"),
    ]
    assert c.configs("g") == {"consumer.session.timeout.ms": "50000", "consumer.heartbeat.interval.ms": "6000"}
    # Deleting a config removes it; deleting one never set is accepted and writes nothing.
    assert c.alter("g", [("consumer.session.timeout.ms", DELETE, None)]) == (0, None)
    assert c.configs("g") == {"consumer.heartbeat.interval.ms": "6000"}
    assert c.alter("g", [("consumer.assignment.interval.ms", DELETE, None)]) == (0, None)
    assert c.records == []
    assert c.alter("g", [("consumer.heartbeat.interval.ms", DELETE, None)]) == (0, None)
    assert (GROUP_RESOURCE, "g") not in c.log.image.configs


def test_refusals_through_the_controller_carry_kafkas_codes() -> None:
    c = Controller()
    assert c.alter("g", [("foo.bar", SET, "1")]) == (INVALID_CONFIG, "Unknown group config name: foo.bar")
    assert c.alter("g", [("consumer.session.timeout.ms", SET, "1000")]) == (INVALID_CONFIG, "consumer.session.timeout.ms must be in the range 45000 to 60000 inclusive.")
    assert c.alter("", [("consumer.session.timeout.ms", SET, "50000")]) == (INVALID_REQUEST, "Default group resources are not allowed.")
    assert c.alter("", [("consumer.session.timeout.ms", SET, "50000")], validate_only=True) == (INVALID_REQUEST, "Default group resources are not allowed.")
    assert c.alter("g", [("consumer.session.timeout.ms", SET, None)]) == (INVALID_REQUEST, "Null value not supported for : consumer.session.timeout.ms")
    # Kafka's broker knows no group config as a LIST, not even the one whose type is LIST.
    assert c.alter("g", [("consumer.session.timeout.ms", APPEND, "50000")]) == (INVALID_CONFIG, "Can't APPEND to key consumer.session.timeout.ms because its type is not LIST.")
    assert c.alter("g", [("streams.rack.aware.assignment.tags", APPEND, "c")]) == (
        INVALID_CONFIG,
        "Can't APPEND to key streams.rack.aware.assignment.tags because its type is not LIST.",
    )
    assert c.alter("g", [("consumer.session.timeout.ms", SET, "50000")], validate_only=True) == (0, None)
    assert c.log.image.configs == {}


def test_a_config_that_no_longer_fits_with_the_rest_is_refused() -> None:
    c = Controller(group_consumer_max_heartbeat_interval_ms=60000)
    assert c.alter("g", [("consumer.heartbeat.interval.ms", SET, "40000")]) == (0, None)
    # The whole set is checked as it would be: the group's heartbeat is already 40000.
    assert c.alter("g", [("consumer.session.timeout.ms", SET, "45000")]) == (0, None)
    assert c.alter("g", [("consumer.heartbeat.interval.ms", SET, "45000")]) == (INVALID_CONFIG, "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms")


def test_legacy_alter_configs_replaces_the_groups_whole_set() -> None:
    c = Controller()
    assert c.alter("l", [("consumer.session.timeout.ms", 0, "55000"), ("share.isolation.level", 0, "read_committed")], incremental=False) == (0, None)
    assert c.configs("l") == {"consumer.session.timeout.ms": "55000", "share.isolation.level": "read_committed"}
    assert c.alter("l", [("consumer.heartbeat.interval.ms", 0, "7000")], incremental=False) == (0, None)
    assert c.configs("l") == {"consumer.heartbeat.interval.ms": "7000"}
    assert c.alter("l", [("foo", 0, "1")], incremental=False) == (INVALID_CONFIG, "Unknown group config name: foo")
    assert c.alter("l", [("consumer.session.timeout.ms", 0, "1")], incremental=False) == (
        INVALID_CONFIG,
        "consumer.session.timeout.ms must be in the range 45000 to 60000 inclusive.",
    )


# --- DescribeConfigs --------------------------------------------------------------------------

# Kafka 4.4's answer (name, value, source, type, synonyms) for a group with
# consumer.session.timeout.ms=50000 and consumer.heartbeat.interval.ms=6000, in its order.
KAFKA_DESCRIBED = [
    ("consumer.session.timeout.ms", "50000", 8, 3, [("consumer.session.timeout.ms", "50000", 8), ("group.consumer.session.timeout.ms", "45000", 5)]),
    ("streams.assignor.name", "sticky", 5, 2, [("group.streams.assignors", "sticky", 5)]),
    ("consumer.assignment.interval.ms", "1000", 5, 3, [("group.consumer.assignment.interval.ms", "1000", 5)]),
    ("errors.deadletterqueue.copy.record.enable", "false", 5, 1, [("errors.deadletterqueue.copy.record.enable", "false", 5)]),
    ("share.auto.offset.reset", "latest", 5, 2, [("share.auto.offset.reset", "latest", 5)]),
    ("streams.rack.aware.assignment.tags", "", 5, 7, [("group.streams.rack.aware.assignment.tags", "", 5)]),
    ("share.renew.acknowledge.enable", "true", 5, 1, [("share.renew.acknowledge.enable", "true", 5)]),
    ("streams.initial.rebalance.delay.ms", "3000", 5, 3, [("group.streams.initial.rebalance.delay.ms", "3000", 5)]),
    ("share.session.timeout.ms", "45000", 5, 3, [("group.share.session.timeout.ms", "45000", 5)]),
    ("streams.assignment.interval.ms", "1000", 5, 3, [("group.streams.assignment.interval.ms", "1000", 5)]),
    ("share.heartbeat.interval.ms", "5000", 5, 3, [("group.share.heartbeat.interval.ms", "5000", 5)]),
    ("streams.heartbeat.interval.ms", "5000", 5, 3, [("group.streams.heartbeat.interval.ms", "5000", 5)]),
    ("share.delivery.count.limit", "5", 5, 3, [("group.share.delivery.count.limit", "5", 5)]),
    ("errors.deadletterqueue.topic.name", "", 5, 2, [("errors.deadletterqueue.topic.name", "", 5)]),
    ("consumer.heartbeat.interval.ms", "6000", 8, 3, [("consumer.heartbeat.interval.ms", "6000", 8), ("group.consumer.heartbeat.interval.ms", "5000", 5)]),
    ("share.record.lock.duration.ms", "30000", 5, 3, [("group.share.record.lock.duration.ms", "30000", 5)]),
    ("share.assignment.interval.ms", "1000", 5, 3, [("group.share.assignment.interval.ms", "1000", 5)]),
    ("share.isolation.level", "read_uncommitted", 5, 2, [("share.isolation.level", "read_uncommitted", 5)]),
    ("streams.session.timeout.ms", "45000", 5, 3, [("group.streams.session.timeout.ms", "45000", 5)]),
    ("share.partition.max.record.locks", "2000", 5, 3, [("group.share.partition.max.record.locks", "2000", 5)]),
    ("streams.num.standby.replicas", "0", 5, 3, [("group.streams.num.standby.replicas", "0", 5)]),
]


def described(overrides: dict[str, str], broker: dict[str, list[tuple[str, str | None, int]]] | None = None) -> list[tuple[Any, ...]]:
    return [(d.name, d.value, d.source, d.config_type, list(d.synonyms)) for d in describe_group_config(overrides, (broker or {}).get)]


def test_described_as_kafka_describes_a_group() -> None:
    overrides = {"consumer.session.timeout.ms": "50000", "consumer.heartbeat.interval.ms": "6000"}
    broker = {
        "group.consumer.session.timeout.ms": [("group.consumer.session.timeout.ms", "45000", DEFAULT_CONFIG)],
        "group.consumer.heartbeat.interval.ms": [("group.consumer.heartbeat.interval.ms", "5000", DEFAULT_CONFIG)],
    }
    assert described(overrides, broker) == KAFKA_DESCRIBED


def test_an_unset_config_shows_the_brokers_value_and_its_layers() -> None:
    # Kafka 4.4 with group.consumer.session.timeout.ms=50000 in server.properties, the group setting
    # nothing, then the group setting it and two internal configs (listed first, as Kafka does).
    broker = {"group.consumer.session.timeout.ms": [("group.consumer.session.timeout.ms", "50000", 4), ("group.consumer.session.timeout.ms", "45000", 5)]}
    assert described({}, broker)[0] == (
        "consumer.session.timeout.ms",
        "50000",
        4,
        3,
        [("group.consumer.session.timeout.ms", "50000", 4), ("group.consumer.session.timeout.ms", "45000", 5)],
    )
    internal = {"consumer.assignor.offload.enable": "true", "streams.num.warmup.replicas": "3", "consumer.session.timeout.ms": "50000"}
    got = described(internal, broker)
    assert got[:3] == [
        ("streams.num.warmup.replicas", "3", GROUP_CONFIG, 3, [("streams.num.warmup.replicas", "3", 8), ("group.streams.num.warmup.replicas", "2", 5)]),
        (
            "consumer.assignor.offload.enable",
            "true",
            GROUP_CONFIG,
            1,
            [("consumer.assignor.offload.enable", "true", 8), ("group.consumer.assignor.offload.enable", "true", 5)],
        ),
        (
            "consumer.session.timeout.ms",
            "50000",
            GROUP_CONFIG,
            3,
            [("consumer.session.timeout.ms", "50000", 8), ("group.consumer.session.timeout.ms", "50000", 4), ("group.consumer.session.timeout.ms", "45000", 5)],
        ),
    ]
    assert len(got) == 23
    # A stored value is described as Kafka parses it.
    assert described({"consumer.session.timeout.ms": " 50000 "})[0][1] == "50000"


# --- applied by the coordinator ---------------------------------------------------------------


def test_the_manager_follows_the_image_and_caps_to_the_brokers_bounds() -> None:
    manager = GroupConfigManager(GroupConfigBounds())
    log = Log()

    def commit(*records: ConfigRecord) -> None:
        delta = MetadataDelta(log.image)
        for record in records:
            delta.replay(record)
        log.image = delta.apply()
        manager.on_metadata_update(delta, log.image)

    def record(group: str, name: str, value: str | None) -> ConfigRecord:
        return ConfigRecord(resource_type=GROUP_RESOURCE, resource_name=group, name=name, value=value)

    commit(record("g", "consumer.session.timeout.ms", "50000"), record("g", "consumer.heartbeat.interval.ms", "6000"), record("h", "share.isolation.level", "read_committed"))
    assert (manager.consumer_session_timeout_ms("g"), manager.consumer_heartbeat_interval_ms("g")) == (50000, 6000)
    assert (manager.consumer_session_timeout_ms("h"), manager.consumer_heartbeat_interval_ms("h")) == (None, None)
    assert manager.group_ids() == ["g", "h"]
    # Set when the bounds were wider: capped to this broker's.
    manager.update("g", {"consumer.session.timeout.ms": "90000", "consumer.heartbeat.interval.ms": "1000"})
    assert (manager.consumer_session_timeout_ms("g"), manager.consumer_heartbeat_interval_ms("g")) == (60000, 5000)
    commit(record("g", "consumer.session.timeout.ms", None))
    assert (manager.consumer_session_timeout_ms("g"), manager.consumer_heartbeat_interval_ms("g")) == (None, 6000)
    commit(record("g", "consumer.heartbeat.interval.ms", None))
    assert manager.group_config("g") is None


def heartbeat(group_id: str) -> Any:
    return ConsumerGroupHeartbeatRequest(
        group_id=group_id,
        member_id="m1",
        member_epoch=0,
        instance_id=None,
        rack_id=None,
        rebalance_timeout=datetime.timedelta(milliseconds=30000),
        subscribed_topic_names=(),
        subscribed_topic_regex=None,
        server_assignor=None,
        topic_partitions=(),
    )


def test_a_consumer_group_takes_its_session_timeout_and_heartbeat_interval_from_its_configs() -> None:
    configs = GroupConfigManager(GroupConfigBounds())
    configs.update("g", {"consumer.session.timeout.ms": "50000", "consumer.heartbeat.interval.ms": "7000"})
    manager = ConsumerGroupManager(session_timeout_ms=45000, heartbeat_interval_ms=5000, group_configs=configs)
    now = 1_000
    for group_id, session, interval in (("g", 50000, 7000), ("other", 45000, 5000)):
        result = manager.heartbeat(heartbeat(group_id), {}, now)
        assert result.response.error_code == 0
        assert result.response.heartbeat_interval_ms == interval
        assert ScheduleTimer(session_timeout_key(group_id, "m1"), now + session) in result.timers
    # A change reaches the group at its next heartbeat.
    configs.update("g", {"consumer.heartbeat.interval.ms": "9000"})
    assert manager.heartbeat_interval_ms_of("g") == 9000
    assert manager.session_timeout_ms_of("g") == 45000
