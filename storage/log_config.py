"""Topic-level log configs with Kafka's names, defaults and validation rules.

Values arrive from the wire as strings; ``from_properties`` parses them the way Kafka's
ConfigDef does (trimmed, INT/LONG/DOUBLE/BOOLEAN/LIST/STRING) and names the offending key
in every error.
"""

from __future__ import annotations

import re
from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)

# Every broker property that supplies a topic config's default, in Kafka's order of precedence
# (ServerTopicConfigSynonyms). The hours/minutes variants need converting to milliseconds.
ALL_TOPIC_CONFIG_SYNONYMS: dict[str, tuple[str, ...]] = {
    "segment.bytes": ("log.segment.bytes",),
    "segment.ms": ("log.roll.ms", "log.roll.hours"),
    "segment.jitter.ms": ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    "segment.index.bytes": ("log.index.size.max.bytes",),
    "flush.messages": ("log.flush.interval.messages",),
    "flush.ms": ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    "retention.bytes": ("log.retention.bytes",),
    "retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "max.message.bytes": ("message.max.bytes",),
    "index.interval.bytes": ("log.index.interval.bytes",),
    "delete.retention.ms": ("log.cleaner.delete.retention.ms",),
    "min.compaction.lag.ms": ("log.cleaner.min.compaction.lag.ms",),
    "max.compaction.lag.ms": ("log.cleaner.max.compaction.lag.ms",),
    "file.delete.delay.ms": ("log.segment.delete.delay.ms",),
    "min.cleanable.dirty.ratio": ("log.cleaner.min.cleanable.ratio",),
    "cleanup.policy": ("log.cleanup.policy",),
    "unclean.leader.election.enable": ("unclean.leader.election.enable",),
    "min.insync.replicas": ("min.insync.replicas",),
    "compression.type": ("compression.type",),
    "compression.gzip.level": ("compression.gzip.level",),
    "compression.lz4.level": ("compression.lz4.level",),
    "compression.zstd.level": ("compression.zstd.level",),
    "preallocate": ("log.preallocate",),
    "message.timestamp.type": ("log.message.timestamp.type",),
    "message.timestamp.before.max.ms": ("log.message.timestamp.before.max.ms",),
    "message.timestamp.after.max.ms": ("log.message.timestamp.after.max.ms",),
    "local.retention.ms": ("log.local.retention.ms",),
    "local.retention.bytes": ("log.local.retention.bytes",),
    "max.decompressed.message.bytes": ("max.decompressed.message.bytes",),
    "remote.copy.lag.bytes": ("log.remote.copy.lag.bytes",),
    "remote.copy.lag.ms": ("log.remote.copy.lag.ms",),
}

# The broker property with the highest precedence for each topic config (Kafka's TOPIC_CONFIG_SYNONYMS).
TOPIC_CONFIG_SYNONYMS: dict[str, str] = {name: synonyms[0] for name, synonyms in ALL_TOPIC_CONFIG_SYNONYMS.items()}

CLEANUP_POLICIES = ("compact", "delete")
_INTEGER = re.compile(r"[+-]?\d+")
_THROTTLED_REPLICA = re.compile(r"\d+:\d+")


class InvalidConfigError(ValueError):
    """Kafka's INVALID_CONFIG (40), naming the config at fault."""

    error_code = 40

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


# Kafka's answer on a cluster without tiered storage, as kbroker is: refused when a topic is
# created or altered, never when a stored config is read.
TIERED_STORAGE_DISABLED = "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage."


class LogConfig(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid", frozen=True)

    segment_bytes: int = Field(1073741824, alias="segment.bytes", ge=14, le=INT_MAX)
    segment_ms: int = Field(604800000, alias="segment.ms", ge=1, le=LONG_MAX)
    segment_jitter_ms: int = Field(0, alias="segment.jitter.ms", ge=0, le=LONG_MAX)
    segment_index_bytes: int = Field(10485760, alias="segment.index.bytes", ge=4, le=INT_MAX)
    index_interval_bytes: int = Field(4096, alias="index.interval.bytes", ge=0, le=INT_MAX)
    retention_ms: int = Field(604800000, alias="retention.ms", ge=-1, le=LONG_MAX)
    retention_bytes: int = Field(-1, alias="retention.bytes", ge=LONG_MIN, le=LONG_MAX)
    max_message_bytes: int = Field(1048588, alias="max.message.bytes", ge=0, le=INT_MAX)
    message_timestamp_type: Literal["CreateTime", "LogAppendTime"] = Field("CreateTime", alias="message.timestamp.type")
    message_timestamp_before_max_ms: int = Field(LONG_MAX, alias="message.timestamp.before.max.ms", ge=0, le=LONG_MAX)
    message_timestamp_after_max_ms: int = Field(3600000, alias="message.timestamp.after.max.ms", ge=0, le=LONG_MAX)
    cleanup_policy: str = Field("delete", alias="cleanup.policy")
    file_delete_delay_ms: int = Field(60000, alias="file.delete.delay.ms", ge=0, le=LONG_MAX)
    flush_messages: int = Field(LONG_MAX, alias="flush.messages", ge=1, le=LONG_MAX)
    flush_ms: int = Field(LONG_MAX, alias="flush.ms", ge=0, le=LONG_MAX)
    min_insync_replicas: int = Field(1, alias="min.insync.replicas", ge=1, le=INT_MAX)
    compression_type: Literal["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"] = Field("producer", alias="compression.type")
    compression_gzip_level: int = Field(-1, alias="compression.gzip.level", ge=-1, le=9)
    compression_lz4_level: int = Field(9, alias="compression.lz4.level", ge=1, le=17)
    compression_zstd_level: int = Field(3, alias="compression.zstd.level", ge=-131072, le=22)
    delete_retention_ms: int = Field(86400000, alias="delete.retention.ms", ge=0, le=LONG_MAX)
    min_compaction_lag_ms: int = Field(0, alias="min.compaction.lag.ms", ge=0, le=LONG_MAX)
    max_compaction_lag_ms: int = Field(LONG_MAX, alias="max.compaction.lag.ms", ge=1, le=LONG_MAX)
    min_cleanable_dirty_ratio: float = Field(0.5, alias="min.cleanable.dirty.ratio", ge=0, le=1)
    unclean_leader_election_enable: bool = Field(False, alias="unclean.leader.election.enable")
    preallocate: bool = Field(False, alias="preallocate")
    leader_replication_throttled_replicas: str = Field("", alias="leader.replication.throttled.replicas")
    follower_replication_throttled_replicas: str = Field("", alias="follower.replication.throttled.replicas")
    remote_storage_enable: bool = Field(False, alias="remote.storage.enable")
    local_retention_ms: int = Field(-2, alias="local.retention.ms", ge=-2, le=LONG_MAX)
    local_retention_bytes: int = Field(-2, alias="local.retention.bytes", ge=-2, le=LONG_MAX)
    remote_log_copy_disable: bool = Field(False, alias="remote.log.copy.disable")
    remote_log_delete_on_disable: bool = Field(False, alias="remote.log.delete.on.disable")
    # Kafka 4.4's, accepted and described with no effect: kbroker has no tiered storage (so no
    # copy lag) and no dead letter queue, and it bounds decompression by max.message.bytes.
    remote_copy_lag_ms: int = Field(0, alias="remote.copy.lag.ms", ge=LONG_MIN, le=LONG_MAX)
    remote_copy_lag_bytes: int = Field(-1, alias="remote.copy.lag.bytes", ge=LONG_MIN, le=LONG_MAX)
    max_decompressed_message_bytes: int = Field(2147483639, alias="max.decompressed.message.bytes", ge=0, le=INT_MAX)
    errors_deadletterqueue_group_enable: bool = Field(False, alias="errors.deadletterqueue.group.enable")

    @field_validator("cleanup_policy")
    @classmethod
    def _cleanup_policy(cls, value: str) -> str:
        parts = [p.strip() for p in value.split(",")]
        if not value.strip() or any(p not in CLEANUP_POLICIES for p in parts):
            raise ValueError("String must be one of: compact, delete")
        return ",".join(parts)

    @field_validator("compression_gzip_level")
    @classmethod
    def _gzip_level(cls, value: int) -> int:
        if value == 0:
            raise ValueError("Value must be -1 or in the range [1, 9]")
        return value

    @field_validator("leader_replication_throttled_replicas", "follower_replication_throttled_replicas")
    @classmethod
    def _throttled_replicas(cls, value: str) -> str:
        parts = [p.strip() for p in value.split(",") if p.strip()]
        if parts != ["*"] and not all(_THROTTLED_REPLICA.fullmatch(p) for p in parts):
            raise ValueError("Value must be '*' or a list of [partitionId]:[brokerId]")
        return ",".join(parts)

    @model_validator(mode="after")
    def _compaction_lags(self) -> "LogConfig":
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise ValueError(
                f"conflict topic config setting min.compaction.lag.ms ({self.min_compaction_lag_ms}) > "
                f"max.compaction.lag.ms ({self.max_compaction_lag_ms})"
            )
        return self

    # -- derived values (Kafka's LogConfig accessors) ---------------------------------------------

    @property
    def cleanup_policies(self) -> tuple[str, ...]:
        return tuple(self.cleanup_policy.split(","))

    @property
    def deletes(self) -> bool:
        return "delete" in self.cleanup_policies

    @property
    def compacts(self) -> bool:
        # A substring test (the policy is validated to be compact, delete or both): the produce
        # path asks this for every batch.
        return "compact" in self.cleanup_policy

    @property
    def max_segment_ms(self) -> int:
        """Compacted topics roll at least every max.compaction.lag.ms so the cleaner can reach the data."""
        if self.compacts and self.max_compaction_lag_ms > 0:
            return min(self.max_compaction_lag_ms, self.segment_ms)
        return self.segment_ms

    @property
    def initial_file_size(self) -> int:
        return self.segment_bytes if self.preallocate else 0

    # -- properties as strings -------------------------------------------------------------------

    @classmethod
    def config_names(cls) -> list[str]:
        return sorted(info.alias for info in cls.model_fields.values() if info.alias)

    @classmethod
    def from_properties(cls, props: Mapping[str, Any], base: "LogConfig | None" = None) -> "LogConfig":
        """Parse Kafka-style string properties over ``base`` (or the defaults).

        A value of None removes the override, so the config falls back to its default.
        """
        fields = {info.alias: name for name, info in cls.model_fields.items() if info.alias}
        values: dict[str, Any] = {}
        if base is not None:
            values = {info.alias: getattr(base, name) for name, info in cls.model_fields.items()}
        for key, raw in props.items():
            if key not in fields:
                raise InvalidConfigError(key, f"Unknown topic config name: {key}")
            if raw is None:
                values.pop(key, None)
            else:
                values[key] = _parse(key, cls.model_fields[fields[key]].annotation, raw)
        try:
            return cls.model_validate(values)
        except ValidationError as e:
            err = e.errors()[0]
            name = str(err["loc"][0]) if err["loc"] else ""
            if name in fields.values():
                name = cls.model_fields[name].alias or name
            detail = str(err["msg"]).removeprefix("Value error, ")
            if not name:
                raise InvalidConfigError("min.compaction.lag.ms", detail) from None
            raise InvalidConfigError(name, f"Invalid value {values.get(name)} for configuration {name}: {detail}") from None

    def to_properties(self) -> dict[str, str]:
        return {info.alias or name: _format(getattr(self, name)) for name, info in type(self).model_fields.items()}


def _parse(name: str, annotation: Any, raw: Any) -> Any:
    """Kafka's ConfigDef.parseType: trimmed strings turned into the config's type."""
    if not isinstance(raw, str):
        raw = _format(raw)
    text = raw.strip()
    if annotation is bool:
        if text.lower() not in ("true", "false"):
            raise InvalidConfigError(name, f"Invalid value {raw} for configuration {name}: Expected value to be either true or false")
        return text.lower() == "true"
    if annotation is int:
        if not _INTEGER.fullmatch(text):
            raise InvalidConfigError(name, f"Invalid value {raw} for configuration {name}: Not a number of type INT or LONG")
        return int(text)
    if annotation is float:
        try:
            return float(text)
        except ValueError:
            raise InvalidConfigError(name, f"Invalid value {raw} for configuration {name}: Not a number of type DOUBLE") from None
    return text


def _format(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
