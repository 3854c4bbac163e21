"""LogConfig: Kafka's topic configs, defaults, string parsing and validation."""

from __future__ import annotations

import pytest

from storage.log_config import ALL_TOPIC_CONFIG_SYNONYMS, LONG_MAX, TOPIC_CONFIG_SYNONYMS, InvalidConfigError, LogConfig


def test_defaults_are_kafkas() -> None:
    props = LogConfig().to_properties()
    assert props["segment.bytes"] == "1073741824"
    assert props["segment.ms"] == "604800000"
    assert props["segment.index.bytes"] == "10485760"
    assert props["index.interval.bytes"] == "4096"
    assert props["retention.ms"] == "604800000"
    assert props["retention.bytes"] == "-1"
    assert props["max.message.bytes"] == "1048588"
    assert props["message.timestamp.type"] == "CreateTime"
    assert props["cleanup.policy"] == "delete"
    assert props["file.delete.delay.ms"] == "60000"
    assert props["flush.messages"] == str(LONG_MAX)
    assert props["flush.ms"] == str(LONG_MAX)
    assert props["min.insync.replicas"] == "1"
    assert props["compression.type"] == "producer"
    assert props["delete.retention.ms"] == "86400000"
    assert props["min.compaction.lag.ms"] == "0"
    assert props["max.compaction.lag.ms"] == str(LONG_MAX)
    assert props["min.cleanable.dirty.ratio"] == "0.5"
    assert props["unclean.leader.election.enable"] == "false"
    assert props["preallocate"] == "false"
    assert props["message.timestamp.before.max.ms"] == str(LONG_MAX)
    assert props["message.timestamp.after.max.ms"] == "3600000"


def test_from_properties_parses_wire_strings() -> None:
    config = LogConfig.from_properties(
        {
            "segment.bytes": " 1048576 ",
            "retention.ms": "-1",
            "unclean.leader.election.enable": "TRUE",
            "min.cleanable.dirty.ratio": "0.25",
            "cleanup.policy": "delete, compact",
            "message.timestamp.type": "LogAppendTime",
        }
    )
    assert config.segment_bytes == 1048576
    assert config.retention_ms == -1
    assert config.unclean_leader_election_enable is True
    assert config.min_cleanable_dirty_ratio == 0.25
    assert config.cleanup_policy == "delete,compact" and config.deletes and config.compacts
    assert config.message_timestamp_type == "LogAppendTime"


def test_properties_round_trip() -> None:
    config = LogConfig.from_properties({"cleanup.policy": "compact", "segment.ms": "1000", "preallocate": "true"})
    assert LogConfig.from_properties(config.to_properties()) == config
    assert all(isinstance(v, str) for v in config.to_properties().values())


def test_base_is_overridden_and_none_reverts_to_default() -> None:
    base = LogConfig.from_properties({"retention.ms": "1000", "segment.bytes": "100000"})
    derived = LogConfig.from_properties({"segment.bytes": "200000"}, base)
    assert derived.retention_ms == 1000 and derived.segment_bytes == 200000
    reverted = LogConfig.from_properties({"retention.ms": None}, base)
    assert reverted.retention_ms == 604800000 and reverted.segment_bytes == 100000


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("segment.bytes", "13"),
        ("segment.bytes", "abc"),
        ("segment.bytes", "1.5"),
        ("segment.bytes", str(2**31)),
        ("retention.ms", "-2"),
        ("flush.messages", "0"),
        ("min.insync.replicas", "0"),
        ("min.cleanable.dirty.ratio", "1.5"),
        ("unclean.leader.election.enable", "yes"),
        ("cleanup.policy", "remove"),
        ("cleanup.policy", ""),
        ("compression.type", "brotli"),
        ("message.timestamp.type", "createtime"),
        ("compression.gzip.level", "0"),
        ("leader.replication.throttled.replicas", "x:1"),
    ],
)
def test_bad_values_name_the_key(key: str, value: str) -> None:
    with pytest.raises(InvalidConfigError) as err:
        LogConfig.from_properties({key: value})
    assert err.value.name == key and err.value.error_code == 40
    assert key in str(err.value)


def test_unknown_key_is_invalid_config() -> None:
    with pytest.raises(InvalidConfigError) as err:
        LogConfig.from_properties({"segment.bites": "1"})
    assert err.value.name == "segment.bites" and "Unknown topic config name" in str(err.value)


def test_compaction_lag_conflict() -> None:
    with pytest.raises(InvalidConfigError) as err:
        LogConfig.from_properties({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})
    assert "max.compaction.lag.ms" in str(err.value)


def test_valid_compression_types_and_throttled_lists() -> None:
    for codec in ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"):
        assert LogConfig.from_properties({"compression.type": codec}).compression_type == codec
    assert LogConfig.from_properties({"follower.replication.throttled.replicas": "0:1, 1:2"}).follower_replication_throttled_replicas == "0:1,1:2"
    assert LogConfig.from_properties({"leader.replication.throttled.replicas": "*"}).leader_replication_throttled_replicas == "*"


def test_max_segment_ms_follows_compaction_lag_for_compacted_topics() -> None:
    assert LogConfig.from_properties({"segment.ms": "1000", "max.compaction.lag.ms": "500"}).max_segment_ms == 1000
    assert LogConfig.from_properties({"segment.ms": "1000", "max.compaction.lag.ms": "500", "cleanup.policy": "compact"}).max_segment_ms == 500


def test_synonyms_follow_kafka() -> None:
    assert TOPIC_CONFIG_SYNONYMS["segment.bytes"] == "log.segment.bytes"
    assert TOPIC_CONFIG_SYNONYMS["segment.ms"] == "log.roll.ms"
    assert TOPIC_CONFIG_SYNONYMS["retention.ms"] == "log.retention.ms"
    assert TOPIC_CONFIG_SYNONYMS["cleanup.policy"] == "log.cleanup.policy"
    assert TOPIC_CONFIG_SYNONYMS["max.message.bytes"] == "message.max.bytes"
    assert TOPIC_CONFIG_SYNONYMS["message.timestamp.type"] == "log.message.timestamp.type"
    assert TOPIC_CONFIG_SYNONYMS["flush.messages"] == "log.flush.interval.messages"
    assert TOPIC_CONFIG_SYNONYMS["flush.ms"] == "log.flush.interval.ms"
    assert TOPIC_CONFIG_SYNONYMS["index.interval.bytes"] == "log.index.interval.bytes"
    assert TOPIC_CONFIG_SYNONYMS["segment.index.bytes"] == "log.index.size.max.bytes"
    assert TOPIC_CONFIG_SYNONYMS["file.delete.delay.ms"] == "log.segment.delete.delay.ms"
    assert TOPIC_CONFIG_SYNONYMS["compression.type"] == "compression.type"
    assert TOPIC_CONFIG_SYNONYMS["min.insync.replicas"] == "min.insync.replicas"
    assert TOPIC_CONFIG_SYNONYMS["min.cleanable.dirty.ratio"] == "log.cleaner.min.cleanable.ratio"
    assert ALL_TOPIC_CONFIG_SYNONYMS["retention.ms"] == ("log.retention.ms", "log.retention.minutes", "log.retention.hours")
    assert set(TOPIC_CONFIG_SYNONYMS) <= set(LogConfig.config_names())


def test_config_names_are_the_kafka_names() -> None:
    names = LogConfig.config_names()
    assert names == sorted(names)
    assert {"segment.bytes", "retention.ms", "cleanup.policy", "max.message.bytes", "segment.jitter.ms"} <= set(names)
    assert set(names) == set(LogConfig().to_properties())
