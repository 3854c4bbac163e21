"""The broker configs that may be set at run time (AlterConfigs on a broker resource): Kafka's
DynamicConfig.Broker, as far as kbroker has them.

Today these are the replication throttles kafka-reassign-partitions.sh sets and clears (Kafka's
QuotaConfig): bytes per second, a LONG of at least 0; and a listener's keystore and truststore
(broker/dynamic_listener_config.py). Anything else is refused with INVALID_CONFIG; static settings
stay in server.properties.
"""

from __future__ import annotations

from broker.dynamic_listener_config import listener_store_config
from storage.log_config import InvalidConfigError

LEADER_REPLICATION_THROTTLED_RATE = "leader.replication.throttled.rate"
FOLLOWER_REPLICATION_THROTTLED_RATE = "follower.replication.throttled.rate"
REPLICA_ALTER_LOG_DIRS_IO_MAX_BYTES_PER_SECOND = "replica.alter.log.dirs.io.max.bytes.per.second"
DYNAMIC_BROKER_CONFIGS = frozenset({LEADER_REPLICATION_THROTTLED_RATE, FOLLOWER_REPLICATION_THROTTLED_RATE, REPLICA_ALTER_LOG_DIRS_IO_MAX_BYTES_PER_SECOND})
LONG_MAX = 2**63 - 1


def validate_dynamic_broker_config(configs: dict[str, str]) -> None:
    """Raise InvalidConfigError, with Kafka's ConfigDef messages, unless every override is a dynamic broker config with a valid value."""
    for key, value in sorted(configs.items()):
        if listener_store_config(key) is not None:
            continue  # a listener's keystore or truststore: its broker checked the stores before forwarding
        if key not in DYNAMIC_BROKER_CONFIGS:
            raise InvalidConfigError(key, f"Dynamic broker config {key} is not supported by this node; set it in server.properties.")
        try:
            rate = int(value.strip())
        except ValueError:
            raise InvalidConfigError(key, f"Invalid value {value} for configuration {key}: Not a number of type LONG") from None
        if not 0 <= rate <= LONG_MAX:
            raise InvalidConfigError(key, f"Invalid value {value} for configuration {key}: Value must be at least 0")


__all__ = [
    "DYNAMIC_BROKER_CONFIGS",
    "FOLLOWER_REPLICATION_THROTTLED_RATE",
    "LEADER_REPLICATION_THROTTLED_RATE",
    "REPLICA_ALTER_LOG_DIRS_IO_MAX_BYTES_PER_SECOND",
    "validate_dynamic_broker_config",
]
