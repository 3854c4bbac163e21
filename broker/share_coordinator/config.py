"""The share coordinator's settings: Kafka 4.4's ``ShareCoordinatorConfig``, names and defaults.

A plain dataclass: the broker's pydantic config maps onto it when the coordinator is wired in.
"""

from __future__ import annotations

from dataclasses import dataclass

STATE_TOPIC = "__share_group_state"

STATE_TOPIC_NUM_PARTITIONS_CONFIG = "share.coordinator.state.topic.num.partitions"
STATE_TOPIC_REPLICATION_FACTOR_CONFIG = "share.coordinator.state.topic.replication.factor"
STATE_TOPIC_MIN_ISR_CONFIG = "share.coordinator.state.topic.min.isr"
STATE_TOPIC_SEGMENT_BYTES_CONFIG = "share.coordinator.state.topic.segment.bytes"
NUM_THREADS_CONFIG = "share.coordinator.threads"
SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT_CONFIG = "share.coordinator.snapshot.update.records.per.snapshot"
WRITE_TIMEOUT_MS_CONFIG = "share.coordinator.write.timeout.ms"
LOAD_BUFFER_SIZE_CONFIG = "share.coordinator.load.buffer.size"
STATE_TOPIC_COMPRESSION_CODEC_CONFIG = "share.coordinator.state.topic.compression.codec"
APPEND_LINGER_MS_CONFIG = "share.coordinator.append.linger.ms"
STATE_TOPIC_PRUNE_INTERVAL_MS_CONFIG = "share.coordinator.state.topic.prune.interval.ms"
COLD_PARTITION_SNAPSHOT_INTERVAL_MS_CONFIG = "share.coordinator.cold.partition.snapshot.interval.ms"
CACHED_BUFFER_MAX_BYTES_CONFIG = "share.coordinator.cached.buffer.max.bytes"

# Kafka bounds this one to [0, 500]; every other numeric setting has a lower bound only.
SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT_MAX = 500


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareCoordinatorConfig:
    state_topic_num_partitions: int = 50
    state_topic_replication_factor: int = 3
    state_topic_min_isr: int = 2
    state_topic_segment_bytes: int = 100 * 1024 * 1024
    num_threads: int = 1
    snapshot_update_records_per_snapshot: int = 500
    write_timeout_ms: int = 5000
    load_buffer_size: int = 5 * 1024 * 1024
    state_topic_compression_codec: int = 0  # CompressionType.NONE's id
    append_linger_ms: int = -1  # -1: adaptive linger
    state_topic_prune_interval_ms: int = 300_000
    cold_partition_snapshot_interval_ms: int = 300_000
    cached_buffer_max_bytes: int = 1024 * 1024 + 12  # Kafka's default: one max.message.bytes batch

    def __post_init__(self) -> None:
        # Kafka's ConfigDef validators, so a bad value fails at start-up as it does there.
        lower_bounds = {
            STATE_TOPIC_NUM_PARTITIONS_CONFIG: (self.state_topic_num_partitions, 1),
            STATE_TOPIC_REPLICATION_FACTOR_CONFIG: (self.state_topic_replication_factor, 1),
            STATE_TOPIC_MIN_ISR_CONFIG: (self.state_topic_min_isr, 1),
            STATE_TOPIC_SEGMENT_BYTES_CONFIG: (self.state_topic_segment_bytes, 1),
            NUM_THREADS_CONFIG: (self.num_threads, 1),
            SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT_CONFIG: (self.snapshot_update_records_per_snapshot, 0),
            WRITE_TIMEOUT_MS_CONFIG: (self.write_timeout_ms, 1),
            LOAD_BUFFER_SIZE_CONFIG: (self.load_buffer_size, 1),
            APPEND_LINGER_MS_CONFIG: (self.append_linger_ms, -1),
            STATE_TOPIC_PRUNE_INTERVAL_MS_CONFIG: (self.state_topic_prune_interval_ms, 1),
            COLD_PARTITION_SNAPSHOT_INTERVAL_MS_CONFIG: (self.cold_partition_snapshot_interval_ms, 1),
            CACHED_BUFFER_MAX_BYTES_CONFIG: (self.cached_buffer_max_bytes, 512 * 1024),
        }
        for name, (value, lowest) in lower_bounds.items():
            if value < lowest:
                raise ValueError(f"{name}={value} must be at least {lowest}")
        if self.snapshot_update_records_per_snapshot > SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT_MAX:
            raise ValueError(
                f"{SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT_CONFIG}={self.snapshot_update_records_per_snapshot} "
                f"must be at most {SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT_MAX}"
            )
