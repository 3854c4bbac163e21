"""Topic-level log configs with Kafka's names and defaults, validated by pydantic."""

from __future__ import annotations

from typing import Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

LONG_MAX = 9223372036854775807

# The broker property that supplies each topic config's default (Kafka's synonyms).
TOPIC_CONFIG_SYNONYMS: dict[str, str] = {
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "segment.index.bytes": "log.index.size.max.bytes",
    "index.interval.bytes": "log.index.interval.bytes",
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "max.message.bytes": "message.max.bytes",
    "message.timestamp.type": "log.message.timestamp.type",
    "cleanup.policy": "log.cleanup.policy",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "min.insync.replicas": "min.insync.replicas",
    "compression.type": "compression.type",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "preallocate": "log.preallocate",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
}


class InvalidConfigError(ValueError):
    error_code = 40

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


class LogConfig(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid", frozen=True)

    segment_bytes: int = Field(1073741824, alias="segment.bytes", ge=14)
    segment_ms: int = Field(604800000, alias="segment.ms", ge=1)
    segment_index_bytes: int = Field(10485760, alias="segment.index.bytes", ge=4)
    index_interval_bytes: int = Field(4096, alias="index.interval.bytes", ge=0)
    retention_ms: int = Field(604800000, alias="retention.ms", ge=-1)
    retention_bytes: int = Field(-1, alias="retention.bytes", ge=-1)
    max_message_bytes: int = Field(1048588, alias="max.message.bytes", ge=0)
    message_timestamp_type: Literal["CreateTime", "LogAppendTime"] = Field("CreateTime", alias="message.timestamp.type")
    cleanup_policy: str = Field("delete", alias="cleanup.policy")
    file_delete_delay_ms: int = Field(60000, alias="file.delete.delay.ms", ge=0)
    flush_messages: int = Field(LONG_MAX, alias="flush.messages", ge=1)
    flush_ms: int = Field(LONG_MAX, alias="flush.ms", ge=0)
    min_insync_replicas: int = Field(1, alias="min.insync.replicas", ge=1)
    compression_type: Literal["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"] = Field("producer", alias="compression.type")
    delete_retention_ms: int = Field(86400000, alias="delete.retention.ms", ge=0)
    min_compaction_lag_ms: int = Field(0, alias="min.compaction.lag.ms", ge=0)
    max_compaction_lag_ms: int = Field(LONG_MAX, alias="max.compaction.lag.ms", ge=1)
    min_cleanable_dirty_ratio: float = Field(0.5, alias="min.cleanable.dirty.ratio", ge=0, le=1)
    unclean_leader_election_enable: bool = Field(False, alias="unclean.leader.election.enable")
    preallocate: bool = Field(False, alias="preallocate")
    message_timestamp_before_max_ms: int = Field(LONG_MAX, alias="message.timestamp.before.max.ms", ge=0)
    message_timestamp_after_max_ms: int = Field(3600000, alias="message.timestamp.after.max.ms", ge=0)

    @field_validator("cleanup_policy")
    @classmethod
    def _policy(cls, v: str) -> str:
        parts = [p.strip() for p in v.split(",") if p.strip()]
        if not parts or not set(parts) <= {"delete", "compact"}:
            raise ValueError("must be a list of 'delete' and 'compact'")
        return ",".join(parts)

    @property
    def deletes(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")

    @property
    def compacts(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    @property
    def max_index_entries(self) -> int:
        return self.segment_index_bytes // 8

    @classmethod
    def config_names(cls) -> list[str]:
        return sorted(info.alias for info in cls.model_fields.values() if info.alias)

    @classmethod
    def from_properties(cls, props: Mapping[str, str | None], base: "LogConfig | None" = None) -> "LogConfig":
        known = {info.alias: name for name, info in cls.model_fields.items()}
        values: dict[str, object] = dict(base.to_properties()) if base is not None else {}
        for key, value in props.items():
            if key not in known:
                raise InvalidConfigError(key, f"Unknown topic config name: {key}")
            if value is None:
                values.pop(key, None)
            else:
                values[key] = value
        try:
            return cls.model_validate(values)
        except ValidationError as e:
            err = e.errors()[0]
            name = str(err["loc"][0]) if err["loc"] else ""
            raise InvalidConfigError(name, f"Invalid value {values.get(name)} for configuration {name}: {err['msg']}") from None

    def to_properties(self) -> dict[str, str]:
        out = {}
        for name, info in type(self).model_fields.items():
            value = getattr(self, name)
            out[info.alias or name] = str(value).lower() if isinstance(value, bool) else str(value)
        return out
