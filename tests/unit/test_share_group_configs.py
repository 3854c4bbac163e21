"""Share groups' settings: the broker's group.share.* settings with Kafka 4.4's defaults, ConfigDef
ranges and start-up cross-checks (GroupCoordinatorConfig, ShareGroupConfig; their texts read
from the 4.4 jars with javap), and a group's own share.* configs over them, capped to the broker's
bounds as Kafka's GroupConfig.evaluate caps them, read again at each use."""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from broker.config import BrokerConfig, ConfigError, load_config
from broker.group.group_coordinator_shard import GroupCoordinatorShard
from broker.group.group_metadata_manager import GroupConfig, ScheduleTimer
from broker.group.share_group_manager import ShareGroupHeartbeat
from broker.kafka_config_defs import KAFKA_BROKER_CONFIGS
from broker.metadata.metadata_image import GROUP_RESOURCE
from broker.partition import READ_COMMITTED, READ_UNCOMMITTED
from broker.share.share_group_configs import ShareGroupConfigs
from broker.share.share_partition import ShareAutoOffsetReset, SharePartitionConfig

READ_SETTINGS = (
    "group.share.session.timeout.ms",
    "group.share.min.session.timeout.ms",
    "group.share.max.session.timeout.ms",
    "group.share.heartbeat.interval.ms",
    "group.share.min.heartbeat.interval.ms",
    "group.share.max.heartbeat.interval.ms",
    "group.share.max.size",
    "group.share.record.lock.duration.ms",
    "group.share.min.record.lock.duration.ms",
    "group.share.max.record.lock.duration.ms",
    "group.share.delivery.count.limit",
    "group.share.min.delivery.count.limit",
    "group.share.max.delivery.count.limit",
    "group.share.partition.max.record.locks",
    "group.share.min.partition.max.record.locks",
    "group.share.max.partition.max.record.locks",
    "group.share.max.share.sessions",
)


def config(**props: str) -> BrokerConfig:
    return load_config(None, {"log.dirs": "/tmp/kbroker-unit", **props})


def refusal(props: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as e:
        config(**props)
    return str(e.value)


class Image:
    """The metadata image's group configs, as a MetadataCache would hold them."""

    def __init__(self) -> None:
        self.image = SimpleNamespace(configs={})

    def set(self, group_id: str, **props: str) -> None:
        # Each image is a new mapping, as a metadata delta makes one.
        configs = dict(self.image.configs)
        configs[(GROUP_RESOURCE, group_id)] = dict(props)
        self.image = SimpleNamespace(configs=configs)


def share_configs(image: Image | None = None, **props: str) -> ShareGroupConfigs:
    return ShareGroupConfigs.of_metadata(config(**props), image or Image())


# -- broker settings --------------------------------------------------------------------------


@pytest.mark.parametrize("name", READ_SETTINGS)
def test_each_setting_is_read_with_kafkas_default(name: str) -> None:
    cfg = config()
    field = name.replace(".", "_")
    assert str(getattr(cfg, field)) == KAFKA_BROKER_CONFIGS[name].default
    assert BrokerConfig.model_fields[field].alias == name


def test_settings_given_are_read() -> None:
    cfg = config(
        **{
            "group.share.session.timeout.ms": "50000",
            "group.share.heartbeat.interval.ms": "6000",
            "group.share.max.size": "20",
            "group.share.max.share.sessions": "500",
        }
    )
    assert (cfg.group_share_session_timeout_ms, cfg.group_share_heartbeat_interval_ms) == (50000, 6000)
    assert (cfg.group_share_max_size, cfg.group_share_max_share_sessions) == (20, 500)


@pytest.mark.parametrize(
    ("name", "value", "why"),
    [
        ("group.share.session.timeout.ms", "0", "Value must be at least 1"),
        ("group.share.max.size", "0", "Value must be at least 1"),
        ("group.share.max.size", "1001", "Value must be no more than 1000"),
        ("group.share.record.lock.duration.ms", "999", "Value must be at least 1000"),
        ("group.share.record.lock.duration.ms", "3600001", "Value must be no more than 3600000"),
        ("group.share.min.record.lock.duration.ms", "30001", "Value must be no more than 30000"),
        ("group.share.max.record.lock.duration.ms", "29999", "Value must be at least 30000"),
        ("group.share.delivery.count.limit", "1", "Value must be at least 2"),
        ("group.share.delivery.count.limit", "11", "Value must be no more than 10"),
        ("group.share.min.delivery.count.limit", "6", "Value must be no more than 5"),
        ("group.share.max.delivery.count.limit", "26", "Value must be no more than 25"),
        ("group.share.partition.max.record.locks", "99", "Value must be at least 100"),
        ("group.share.partition.max.record.locks", "10001", "Value must be no more than 10000"),
        ("group.share.min.partition.max.record.locks", "2001", "Value must be no more than 2000"),
        ("group.share.max.partition.max.record.locks", "1999", "Value must be at least 2000"),
        ("group.share.max.share.sessions", "0", "Value must be at least 1"),
    ],
)
def test_a_value_out_of_kafkas_range_is_refused_in_its_words(name: str, value: str, why: str) -> None:
    assert refusal({name: value}) == f"Invalid value '{value}' for configuration {name}: {why}"


@pytest.mark.parametrize(
    ("props", "message"),
    [
        (
            {"group.share.min.heartbeat.interval.ms": "6000", "group.share.max.heartbeat.interval.ms": "5500", "group.share.heartbeat.interval.ms": "5800"},
            "group.share.max.heartbeat.interval.ms must be greater than or equal to group.share.min.heartbeat.interval.ms",
        ),
        ({"group.share.heartbeat.interval.ms": "4000"}, "group.share.heartbeat.interval.ms must be greater than or equal to group.share.min.heartbeat.interval.ms"),
        ({"group.share.heartbeat.interval.ms": "16000"}, "group.share.heartbeat.interval.ms must be less than or equal to group.share.max.heartbeat.interval.ms"),
        (
            {"group.share.min.session.timeout.ms": "50000", "group.share.max.session.timeout.ms": "48000", "group.share.session.timeout.ms": "49000"},
            "group.share.max.session.timeout.ms must be greater than or equal to group.share.min.session.timeout.ms",
        ),
        ({"group.share.session.timeout.ms": "44000"}, "group.share.session.timeout.ms must be greater than or equal to group.share.min.session.timeout.ms"),
        ({"group.share.session.timeout.ms": "61000"}, "group.share.session.timeout.ms must be less than or equal to group.share.max.session.timeout.ms"),
        (
            {
                "group.share.min.session.timeout.ms": "10000",
                "group.share.session.timeout.ms": "10000",
                "group.share.max.heartbeat.interval.ms": "20000",
                "group.share.heartbeat.interval.ms": "10000",
            },
            "group.share.heartbeat.interval.ms must be less than group.share.session.timeout.ms",
        ),
        ({"group.share.delivery.count.limit": "10", "group.share.max.delivery.count.limit": "9"}, "group.share.max.delivery.count.limit must be greater than or equal to group.share.delivery.count.limit"),
        ({"group.share.delivery.count.limit": "3", "group.share.min.delivery.count.limit": "4"}, "group.share.delivery.count.limit must be greater than or equal to group.share.min.delivery.count.limit"),
        ({"group.share.partition.max.record.locks": "5000"}, "group.share.max.partition.max.record.locks must be greater than or equal to group.share.partition.max.record.locks"),
        (
            {"group.share.partition.max.record.locks": "150", "group.share.min.partition.max.record.locks": "200"},
            "group.share.partition.max.record.locks must be greater than or equal to group.share.min.partition.max.record.locks",
        ),
        ({"group.share.record.lock.duration.ms": "10000"}, "group.share.record.lock.duration.ms must be greater than or equal to group.share.min.record.lock.duration.ms"),
        ({"group.share.record.lock.duration.ms": "70000"}, "group.share.max.record.lock.duration.ms must be greater than or equal to group.share.record.lock.duration.ms"),
        ({"group.share.max.size": "1000", "group.share.max.share.sessions": "999"}, "group.share.max.share.sessions must be greater than or equal to group.share.max.size"),
    ],
)
def test_kafkas_start_up_cross_checks_refuse_in_its_words(props: dict[str, str], message: str) -> None:
    assert refusal(props) == f"Invalid configuration: {message}"


def test_bounds_moved_together_are_accepted() -> None:
    cfg = config(
        **{
            "group.share.max.record.lock.duration.ms": "120000",
            "group.share.record.lock.duration.ms": "90000",
            "group.share.max.delivery.count.limit": "20",
            "group.share.min.delivery.count.limit": "5",
            "group.share.delivery.count.limit": "8",
        }
    )
    assert (cfg.group_share_record_lock_duration_ms, cfg.group_share_delivery_count_limit) == (90000, 8)


# -- a group's effective settings --------------------------------------------------------------


def test_a_group_with_no_configs_runs_with_the_brokers_settings() -> None:
    configs = share_configs(**{"group.share.record.lock.duration.ms": "20000", "group.share.delivery.count.limit": "3", "group.share.partition.max.record.locks": "500"})
    assert configs.share_partition_config("g") == SharePartitionConfig(
        delivery_count_limit=3, max_record_locks=500, record_lock_duration_ms=20000, auto_offset_reset=ShareAutoOffsetReset.LATEST
    )
    assert configs.share_isolation_level("g") == READ_UNCOMMITTED
    assert (configs.share_session_timeout_ms("g"), configs.share_heartbeat_interval_ms("g")) == (None, None)


def test_kafkas_defaults_with_no_settings() -> None:
    assert share_configs().share_partition_config("g") == SharePartitionConfig()


def test_the_groups_own_configs_override_the_brokers() -> None:
    image = Image()
    image.set(
        "g",
        **{
            "share.record.lock.duration.ms": "45000",
            "share.delivery.count.limit": "7",
            "share.partition.max.record.locks": "3000",
            "share.auto.offset.reset": "earliest",
            "share.isolation.level": "read_committed",
            "share.session.timeout.ms": "50000",
            "share.heartbeat.interval.ms": "8000",
        },
    )
    configs = share_configs(image)
    assert configs.share_partition_config("g") == SharePartitionConfig(
        delivery_count_limit=7, max_record_locks=3000, record_lock_duration_ms=45000, auto_offset_reset=ShareAutoOffsetReset.EARLIEST
    )
    assert configs.share_isolation_level("g") == READ_COMMITTED
    assert (configs.share_session_timeout_ms("g"), configs.share_heartbeat_interval_ms("g")) == (50000, 8000)
    # Another group keeps the broker's.
    assert configs.share_partition_config("other") == SharePartitionConfig()


def test_a_group_may_turn_renew_acknowledgements_off() -> None:
    """share.renew.acknowledge.enable (KIP-1222, default true): false refuses RENEW for the group."""
    image = Image()
    image.set("g", **{"share.renew.acknowledge.enable": "false"})
    configs = share_configs(image)
    assert configs.share_partition_config("g").renew_acknowledge_enable is False
    assert configs.share_partition_config("other").renew_acknowledge_enable is True
    image.set("g", **{"share.renew.acknowledge.enable": "TRUE"})
    assert configs.share_partition_config("g").renew_acknowledge_enable is True


def test_a_group_sets_some_configs_and_takes_the_brokers_for_the_rest() -> None:
    image = Image()
    image.set("g", **{"share.delivery.count.limit": "4"})
    configs = share_configs(image, **{"group.share.record.lock.duration.ms": "20000"})
    assert configs.share_partition_config("g") == SharePartitionConfig(delivery_count_limit=4, record_lock_duration_ms=20000)


@pytest.mark.parametrize(
    ("props", "expected"),
    [
        # Bounds lowered since the group set its value: capped, as GroupConfig.evaluate does.
        ({"share.record.lock.duration.ms": "60000"}, SharePartitionConfig(record_lock_duration_ms=40000)),
        ({"share.record.lock.duration.ms": "16000"}, SharePartitionConfig(record_lock_duration_ms=20000)),
        ({"share.delivery.count.limit": "9"}, SharePartitionConfig(delivery_count_limit=6)),
        ({"share.delivery.count.limit": "2"}, SharePartitionConfig(delivery_count_limit=3)),
        ({"share.partition.max.record.locks": "4000"}, SharePartitionConfig(max_record_locks=2500)),
        ({"share.partition.max.record.locks": "100"}, SharePartitionConfig(max_record_locks=200)),
    ],
)
def test_a_group_value_outside_the_brokers_bounds_is_capped(props: dict[str, str], expected: SharePartitionConfig) -> None:
    image = Image()
    image.set("g", **props)
    configs = share_configs(
        image,
        **{
            "group.share.min.record.lock.duration.ms": "20000",
            "group.share.max.record.lock.duration.ms": "40000",
            "group.share.min.delivery.count.limit": "3",
            "group.share.max.delivery.count.limit": "6",
            "group.share.delivery.count.limit": "5",
            "group.share.min.partition.max.record.locks": "200",
            "group.share.max.partition.max.record.locks": "2500",
        },
    )
    assert configs.share_partition_config("g") == expected


def test_session_timeout_and_heartbeat_interval_are_capped_to_the_brokers_bounds() -> None:
    image = Image()
    image.set("g", **{"share.session.timeout.ms": "60000", "share.heartbeat.interval.ms": "5000"})
    configs = share_configs(
        image, **{"group.share.max.session.timeout.ms": "50000", "group.share.min.heartbeat.interval.ms": "6000", "group.share.heartbeat.interval.ms": "6000"}
    )
    assert (configs.share_session_timeout_ms("g"), configs.share_heartbeat_interval_ms("g")) == (50000, 6000)


def test_a_value_no_parse_accepts_is_left_out() -> None:
    image = Image()
    image.set("g", **{"share.delivery.count.limit": "many", "share.isolation.level": "serializable", "share.record.lock.duration.ms": "20000"})
    configs = share_configs(image)
    assert configs.share_partition_config("g") == SharePartitionConfig(record_lock_duration_ms=20000)
    assert configs.share_isolation_level("g") == READ_UNCOMMITTED


@pytest.mark.parametrize(
    ("value", "reset"),
    [
        ("earliest", ShareAutoOffsetReset.EARLIEST),
        ("EARLIEST", ShareAutoOffsetReset.EARLIEST),
        ("latest", ShareAutoOffsetReset.LATEST),
        # A SharePartition starts at the earliest or the latest offset only: Kafka's default applies.
        ("by_duration:PT1H", ShareAutoOffsetReset.LATEST),
    ],
)
def test_auto_offset_reset(value: str, reset: ShareAutoOffsetReset) -> None:
    image = Image()
    image.set("g", **{"share.auto.offset.reset": value})
    assert share_configs(image).share_partition_config("g").auto_offset_reset is reset


def test_a_change_takes_effect_at_the_next_use() -> None:
    image = Image()
    configs = share_configs(image)
    assert configs.share_partition_config("g").record_lock_duration_ms == 30000
    image.set("g", **{"share.record.lock.duration.ms": "20000", "share.isolation.level": "read_committed"})
    assert configs.share_partition_config("g").record_lock_duration_ms == 20000
    assert configs.share_isolation_level("g") == READ_COMMITTED
    image.set("g", **{"share.record.lock.duration.ms": "25000"})
    assert configs.share_partition_config("g").record_lock_duration_ms == 25000
    assert configs.share_isolation_level("g") == READ_UNCOMMITTED
    # All deleted: the broker's again.
    image.image = SimpleNamespace(configs={})
    assert configs.share_partition_config("g") == SharePartitionConfig()


# -- the share group manager -------------------------------------------------------------------


def join(shard: GroupCoordinatorShard, member_id: str, group_id: str = "g") -> Any:
    return shard.share_groups.heartbeat(ShareGroupHeartbeat(group_id, member_id, 0, None, ("t",)), {"t": (uuid.UUID(int=7), 1)}, 0)


def shard_of(cfg: BrokerConfig, image: Image) -> GroupCoordinatorShard:
    """As GroupCoordinator.new_shard builds one."""
    return GroupCoordinatorShard(
        GroupConfig(initial_rebalance_delay_ms=0),
        offset_metadata_max_bytes=4096,
        offsets_retention_ms=7 * 86_400_000,
        share_session_timeout_ms=cfg.group_share_session_timeout_ms,
        share_heartbeat_interval_ms=cfg.group_share_heartbeat_interval_ms,
        share_max_size=cfg.group_share_max_size,
        share_group_configs=ShareGroupConfigs.of_metadata(cfg, image),
    )


def test_members_heartbeat_with_the_brokers_settings_and_the_groups_own() -> None:
    image = Image()
    cfg = config(**{"group.share.session.timeout.ms": "50000", "group.share.heartbeat.interval.ms": "7000"})
    shard = shard_of(cfg, image)
    joined = join(shard, "m1")
    assert joined.response.heartbeat_interval_ms == 7000
    assert [t.deadline_ms for t in joined.timers if isinstance(t, ScheduleTimer)] == [50000]
    image.set("h", **{"share.session.timeout.ms": "55000", "share.heartbeat.interval.ms": "9000"})
    joined = join(shard, "m2", "h")
    assert joined.response.heartbeat_interval_ms == 9000
    assert [t.deadline_ms for t in joined.timers if isinstance(t, ScheduleTimer)] == [55000]


def test_group_share_max_size_bounds_the_members() -> None:
    shard = shard_of(config(**{"group.share.max.size": "1"}), Image())
    assert join(shard, "m1").response.error_code == 0
    refused = join(shard, "m2")
    assert refused.response.error_code == 81  # GROUP_MAX_SIZE_REACHED
    assert refused.response.error_message == "The share group has reached its maximum capacity of 1 members."
