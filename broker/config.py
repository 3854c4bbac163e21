"""Broker configuration: Kafka's property names, read from server.properties and overrides."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal, Mapping

import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from storage.log_cleaner import CleanerConfig

LONG_MAX = 9223372036854775807
log = structlog.get_logger()


class ConfigError(Exception):
    """A bad broker configuration; the message is one line naming the key."""


class Listener(BaseModel):
    name: str
    host: str
    port: int


def parse_listeners(value: str) -> list[Listener]:
    listeners = []
    for item in filter(None, (s.strip() for s in value.split(","))):
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)://(\[[^\]]*\]|[^:]*):(\d+)", item)
        if not m:
            raise ValueError(f"'{item}' is not NAME://HOST:PORT")
        host = m.group(2).strip("[]") or "0.0.0.0"
        listeners.append(Listener(name=m.group(1), host=host, port=int(m.group(3))))
    return listeners


class BrokerConfig(BaseModel):
    """The subset of Kafka's broker configs kbroker acts on, under Kafka's names."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid", frozen=True)

    node_id: int = Field(1, alias="node.id", ge=0)
    process_roles: str = Field("broker,controller", alias="process.roles")
    listeners: str = Field("PLAINTEXT://127.0.0.1:9092", alias="listeners")
    advertised_listeners: str | None = Field(None, alias="advertised.listeners")
    controller_listener_names: str = Field("CONTROLLER", alias="controller.listener.names")
    controller_quorum_voters: str = Field("", alias="controller.quorum.voters")
    inter_broker_listener_name: str = Field("PLAINTEXT", alias="inter.broker.listener.name")
    cluster_id: str | None = Field(None, alias="cluster.id")
    log_dirs: str = Field("./data", alias="log.dirs")
    num_partitions: int = Field(1, alias="num.partitions", ge=1)
    default_replication_factor: int = Field(1, alias="default.replication.factor", ge=1)
    auto_create_topics_enable: bool = Field(True, alias="auto.create.topics.enable")
    delete_topic_enable: bool = Field(True, alias="delete.topic.enable")
    socket_request_max_bytes: int = Field(104857600, alias="socket.request.max.bytes", ge=1)
    queued_max_requests: int = Field(500, alias="queued.max.requests", ge=1)
    message_max_bytes: int = Field(1048588, alias="message.max.bytes", ge=0)
    # Kafka's default is 55 MiB. librdkafka parses a whole fetch answer before it hands the
    # application a record, so 50 MB answers (64 partitions at 1 MB each) stall its pipeline:
    # 64 partitions were read at ~650k records/s with 55 MiB and ~1.1M with 4-8 MiB.
    fetch_max_bytes: int = Field(8388608, alias="fetch.max.bytes", ge=1024)
    log_segment_bytes: int = Field(1073741824, alias="log.segment.bytes", ge=14)
    log_roll_ms: int | None = Field(None, alias="log.roll.ms", ge=1)
    log_roll_hours: int = Field(168, alias="log.roll.hours", ge=1)
    log_retention_ms: int | None = Field(None, alias="log.retention.ms", ge=-1)
    log_retention_minutes: int | None = Field(None, alias="log.retention.minutes", ge=-1)
    log_retention_hours: int = Field(168, alias="log.retention.hours", ge=-1)
    log_retention_bytes: int = Field(-1, alias="log.retention.bytes", ge=-1)
    log_retention_check_interval_ms: int = Field(300000, alias="log.retention.check.interval.ms", ge=1)
    log_segment_delete_delay_ms: int = Field(60000, alias="log.segment.delete.delay.ms", ge=0)
    log_index_interval_bytes: int = Field(4096, alias="log.index.interval.bytes", ge=0)
    log_index_size_max_bytes: int = Field(10485760, alias="log.index.size.max.bytes", ge=4)
    log_flush_interval_messages: int = Field(LONG_MAX, alias="log.flush.interval.messages", ge=1)
    log_flush_interval_ms: int | None = Field(None, alias="log.flush.interval.ms", ge=0)
    log_flush_scheduler_interval_ms: int = Field(LONG_MAX, alias="log.flush.scheduler.interval.ms", ge=1)
    log_flush_offset_checkpoint_interval_ms: int = Field(60000, alias="log.flush.offset.checkpoint.interval.ms", ge=1)
    log_message_timestamp_type: Literal["CreateTime", "LogAppendTime"] = Field("CreateTime", alias="log.message.timestamp.type")
    log_cleanup_policy: str = Field("delete", alias="log.cleanup.policy")
    log_cleaner_enable: bool = Field(True, alias="log.cleaner.enable")
    log_cleaner_threads: int = Field(1, alias="log.cleaner.threads", ge=0)
    log_cleaner_backoff_ms: int = Field(15000, alias="log.cleaner.backoff.ms", ge=0)
    log_cleaner_dedupe_buffer_size: int = Field(134217728, alias="log.cleaner.dedupe.buffer.size", ge=1048576)
    log_cleaner_io_buffer_load_factor: float = Field(0.9, alias="log.cleaner.io.buffer.load.factor", gt=0, le=1)
    log_cleaner_io_max_bytes_per_second: float = Field(1.7976931348623157e308, alias="log.cleaner.io.max.bytes.per.second", gt=0)
    log_cleaner_delete_retention_ms: int = Field(86400000, alias="log.cleaner.delete.retention.ms", ge=0)
    log_cleaner_min_compaction_lag_ms: int = Field(0, alias="log.cleaner.min.compaction.lag.ms", ge=0)
    log_cleaner_max_compaction_lag_ms: int = Field(LONG_MAX, alias="log.cleaner.max.compaction.lag.ms", ge=1)
    log_cleaner_min_cleanable_ratio: float = Field(0.5, alias="log.cleaner.min.cleanable.ratio", ge=0, le=1)
    # kbroker's own: where the cleaner copies (measured in benchmarks/compaction_latency.py).
    log_cleaner_executor: Literal["thread", "process"] = Field("process", alias="log.cleaner.executor")
    # Test only: the cleaner sleeps on the event loop at this step of a segment swap.
    log_cleaner_test_swap_pause_ms: int = Field(0, alias="log.cleaner.test.swap.pause.ms", ge=0)
    log_cleaner_test_swap_pause_step: Literal["before_commit", "committed", "old_deleted"] = Field(
        "committed", alias="log.cleaner.test.swap.pause.step"
    )
    compression_type: Literal["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"] = Field("producer", alias="compression.type")
    min_insync_replicas: int = Field(1, alias="min.insync.replicas", ge=1)
    unclean_leader_election_enable: bool = Field(False, alias="unclean.leader.election.enable")
    fetch_purgatory_purge_interval_requests: int = Field(1000, alias="fetch.purgatory.purge.interval.requests")
    max_incremental_fetch_session_cache_slots: int = Field(1000, alias="max.incremental.fetch.session.cache.slots", ge=0)
    group_initial_rebalance_delay_ms: int = Field(3000, alias="group.initial.rebalance.delay.ms", ge=0)
    offsets_topic_num_partitions: int = Field(50, alias="offsets.topic.num.partitions", ge=1)
    # Kafka's default is 3; a default kbroker is one node, as Kafka's own quickstart
    # server.properties (which sets 1) assumes.
    offsets_topic_replication_factor: int = Field(1, alias="offsets.topic.replication.factor", ge=1)
    offsets_topic_segment_bytes: int = Field(104857600, alias="offsets.topic.segment.bytes", ge=14)
    offsets_retention_minutes: int = Field(10080, alias="offsets.retention.minutes", ge=1)
    offsets_retention_check_interval_ms: int = Field(600000, alias="offsets.retention.check.interval.ms", ge=1)
    offset_metadata_max_bytes: int = Field(4096, alias="offset.metadata.max.bytes", ge=0)
    group_min_session_timeout_ms: int = Field(6000, alias="group.min.session.timeout.ms", ge=0)
    group_max_session_timeout_ms: int = Field(1800000, alias="group.max.session.timeout.ms", ge=0)
    group_max_size: int = Field(2**31 - 1, alias="group.max.size", ge=1)
    group_consumer_session_timeout_ms: int = Field(45000, alias="group.consumer.session.timeout.ms", ge=1)
    group_consumer_min_session_timeout_ms: int = Field(45000, alias="group.consumer.min.session.timeout.ms", ge=1)
    group_consumer_max_session_timeout_ms: int = Field(60000, alias="group.consumer.max.session.timeout.ms", ge=1)
    group_consumer_heartbeat_interval_ms: int = Field(5000, alias="group.consumer.heartbeat.interval.ms", ge=1)
    group_consumer_min_heartbeat_interval_ms: int = Field(5000, alias="group.consumer.min.heartbeat.interval.ms", ge=1)
    group_consumer_max_heartbeat_interval_ms: int = Field(15000, alias="group.consumer.max.heartbeat.interval.ms", ge=1)
    group_consumer_max_size: int = Field(2**31 - 1, alias="group.consumer.max.size", ge=1)
    producer_id_expiration_ms: int = Field(86400000, alias="producer.id.expiration.ms", ge=1)
    producer_id_expiration_check_interval_ms: int = Field(600000, alias="producer.id.expiration.check.interval.ms", ge=1)
    transaction_state_log_num_partitions: int = Field(50, alias="transaction.state.log.num.partitions", ge=1)
    # Kafka's default is 3 (min ISR 2); a default kbroker is one node, as for offsets.topic.replication.factor.
    transaction_state_log_replication_factor: int = Field(1, alias="transaction.state.log.replication.factor", ge=1)
    transaction_state_log_min_isr: int = Field(1, alias="transaction.state.log.min.isr", ge=1)
    transaction_state_log_segment_bytes: int = Field(104857600, alias="transaction.state.log.segment.bytes", ge=14)
    transaction_max_timeout_ms: int = Field(900000, alias="transaction.max.timeout.ms", ge=1)
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = Field(
        10000, alias="transaction.abort.timed.out.transaction.cleanup.interval.ms", ge=1
    )
    transaction_remove_expired_transaction_cleanup_interval_ms: int = Field(
        3600000, alias="transaction.remove.expired.transaction.cleanup.interval.ms", ge=1
    )
    transactional_id_expiration_ms: int = Field(604800000, alias="transactional.id.expiration.ms", ge=1)

    @field_validator("listeners")
    @classmethod
    def _check_listeners(cls, v: str) -> str:
        if not parse_listeners(v):
            raise ValueError("at least one listener is required")
        return v

    @field_validator("advertised_listeners")
    @classmethod
    def _check_advertised(cls, v: str | None) -> str | None:
        if v is not None:
            parse_listeners(v)
        return v

    @field_validator("process_roles")
    @classmethod
    def _check_roles(cls, v: str) -> str:
        roles = {r.strip() for r in v.split(",") if r.strip()}
        if not roles or not roles <= {"broker", "controller"}:
            raise ValueError("must be broker, controller, or broker,controller")
        return v

    @field_validator("log_cleanup_policy")
    @classmethod
    def _check_cleanup(cls, v: str) -> str:
        policies = {p.strip() for p in v.split(",")}
        if not policies <= {"delete", "compact"}:
            raise ValueError("must be a list of delete and compact")
        return v

    @model_validator(mode="after")
    def _consumer_group_timeouts(self) -> "BrokerConfig":
        """Kafka's GroupCoordinatorConfig checks: each KIP-848 timeout within its bounds."""
        if not self.group_consumer_min_session_timeout_ms <= self.group_consumer_session_timeout_ms <= self.group_consumer_max_session_timeout_ms:
            raise ValueError("group.consumer.session.timeout.ms must be between group.consumer.min.session.timeout.ms and group.consumer.max.session.timeout.ms")
        if not self.group_consumer_min_heartbeat_interval_ms <= self.group_consumer_heartbeat_interval_ms <= self.group_consumer_max_heartbeat_interval_ms:
            raise ValueError(
                "group.consumer.heartbeat.interval.ms must be between group.consumer.min.heartbeat.interval.ms and group.consumer.max.heartbeat.interval.ms"
            )
        if self.group_consumer_heartbeat_interval_ms >= self.group_consumer_session_timeout_ms:
            raise ValueError("group.consumer.heartbeat.interval.ms must be less than group.consumer.session.timeout.ms")
        return self

    @model_validator(mode="after")
    def _single_node_only(self) -> "BrokerConfig":
        if {r.strip() for r in self.process_roles.split(",")} != {"broker", "controller"}:
            raise ValueError("process.roles: only combined broker,controller nodes are supported so far")
        return self

    @property
    def data_dir(self) -> Path:
        return Path(self.log_dirs.split(",")[0].strip())

    @property
    def listener(self) -> Listener:
        controller_names = {n.strip() for n in self.controller_listener_names.split(",")}
        for listener in parse_listeners(self.listeners):
            if listener.name not in controller_names:
                return listener
        raise ConfigError("listeners: no listener for clients")

    @property
    def advertised_listener(self) -> Listener:
        own = self.listener
        if self.advertised_listeners:
            for listener in parse_listeners(self.advertised_listeners):
                if listener.name == own.name:
                    return listener
        if own.host in ("0.0.0.0", "::", ""):
            return Listener(name=own.name, host="127.0.0.1", port=own.port)
        return own

    def topic_defaults(self) -> dict[str, str]:
        """Broker-level defaults for topic configs, keyed by the topic config name."""
        roll_ms = self.log_roll_ms if self.log_roll_ms is not None else self.log_roll_hours * 3600000
        if self.log_retention_ms is not None:
            retention_ms = self.log_retention_ms
        elif self.log_retention_minutes is not None:
            retention_ms = self.log_retention_minutes * 60000
        else:
            retention_ms = self.log_retention_hours * 3600000
        flush_ms = self.log_flush_interval_ms if self.log_flush_interval_ms is not None else self.log_flush_scheduler_interval_ms
        return {
            "segment.bytes": str(self.log_segment_bytes),
            "segment.ms": str(roll_ms),
            "retention.ms": str(retention_ms),
            "retention.bytes": str(self.log_retention_bytes),
            "file.delete.delay.ms": str(self.log_segment_delete_delay_ms),
            "index.interval.bytes": str(self.log_index_interval_bytes),
            "segment.index.bytes": str(self.log_index_size_max_bytes),
            "flush.messages": str(self.log_flush_interval_messages),
            "flush.ms": str(flush_ms),
            "message.timestamp.type": self.log_message_timestamp_type,
            "cleanup.policy": self.log_cleanup_policy,
            "delete.retention.ms": str(self.log_cleaner_delete_retention_ms),
            "min.compaction.lag.ms": str(self.log_cleaner_min_compaction_lag_ms),
            "max.compaction.lag.ms": str(self.log_cleaner_max_compaction_lag_ms),
            "min.cleanable.dirty.ratio": str(self.log_cleaner_min_cleanable_ratio),
            "max.message.bytes": str(self.message_max_bytes),
            "compression.type": self.compression_type,
            "min.insync.replicas": str(self.min_insync_replicas),
            "unclean.leader.election.enable": str(self.unclean_leader_election_enable).lower(),
        }

    def cleaner_config(self) -> CleanerConfig:
        """The log cleaner's settings; log.cleaner.threads=0 turns it off as log.cleaner.enable=false does."""
        return CleanerConfig(
            enable=self.log_cleaner_enable and self.log_cleaner_threads > 0,
            threads=max(self.log_cleaner_threads, 1),
            backoff_ms=self.log_cleaner_backoff_ms,
            dedupe_buffer_size=self.log_cleaner_dedupe_buffer_size,
            io_buffer_load_factor=self.log_cleaner_io_buffer_load_factor,
            io_max_bytes_per_second=self.log_cleaner_io_max_bytes_per_second,
            executor=self.log_cleaner_executor,
            test_swap_pause_ms=self.log_cleaner_test_swap_pause_ms,
            test_swap_pause_step=self.log_cleaner_test_swap_pause_step,
        )

    def as_properties(self) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for name, info in type(self).model_fields.items():
            value = getattr(self, name)
            key = info.alias or name
            out[key] = None if value is None else (str(value).lower() if isinstance(value, bool) else str(value))
        return out


def read_properties(path: Path) -> dict[str, str]:
    """Java .properties, the subset Kafka's files use: key=value or key:value, # and ! comments."""
    props: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        m = re.match(r"([^=:\s]+)\s*[=:]\s*(.*)$", line)
        if not m:
            raise ConfigError(f"{path}: cannot parse line '{line}'")
        props[m.group(1)] = m.group(2).strip()
    return props


def load_config(path: Path | None, overrides: Mapping[str, str]) -> BrokerConfig:
    props: dict[str, str] = read_properties(path) if path else {}
    props.update(overrides)
    if "log.dir" in props and "log.dirs" not in props:
        props["log.dirs"] = props.pop("log.dir")
    known = {info.alias for info in BrokerConfig.model_fields.values()}
    for key in sorted(set(props) - known):
        # Kafka only warns about configs it does not use, so existing files keep working.
        log.warning("config.unknown", key=key, message=f"The configuration '{key}' was supplied but isn't a known config.")
        props.pop(key)
    try:
        return BrokerConfig.model_validate(props)
    except ValidationError as e:
        err = e.errors()[0]
        if not err["loc"]:
            # A rule across several keys: its message names them.
            raise ConfigError(f"Invalid configuration: {err['msg'].removeprefix('Value error, ')}") from None
        loc = err["loc"][0]
        value = props.get(str(loc))
        shown = f" '{value}'" if value is not None else ""
        raise ConfigError(f"Invalid value{shown} for configuration {loc}: {err['msg']}") from None
