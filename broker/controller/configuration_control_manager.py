"""Kafka's ConfigurationControlManager: AlterConfigs and IncrementalAlterConfigs as ConfigRecords.

The checks, their order and their messages follow Kafka 4.0's controller and the
broker-side request checks of ConfigAdminManager.preprocess. The manager also answers the
config questions other managers ask, such as whether a topic allows unclean leader
election, from the image: topic override, then this controller's dynamic broker config,
then the cluster-wide dynamic default, then the static default passed in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Collection, Iterable, Sequence

from kio.schema.errors import ErrorCode

from broker.controller.controller_result import ApiError, ControllerResult, duplicates
from broker.controller.elr_config_records import MIN_INSYNC_REPLICAS, check_min_isr_change, clear_elr_records
from broker.controller.feature_control_manager import eligible_leader_replicas_enabled, metadata_version_of
from broker.client_metrics_config import validate as validate_client_metrics
from broker.metadata.metadata_image import BROKER_RESOURCE, CLIENT_METRICS_RESOURCE, GROUP_RESOURCE, TOPIC_RESOURCE, MetadataImage
from broker.metadata.metadata_records import ConfigRecord

MAX_CONFIG_VALUE_LENGTH = 32_767  # Short.MAX_VALUE
UNCLEAN_LEADER_ELECTION_ENABLE = "unclean.leader.election.enable"

OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3
_OP_NAMES = {OP_SET: "SET", OP_DELETE: "DELETE", OP_APPEND: "APPEND", OP_SUBTRACT: "SUBTRACT"}

# Configs of type LIST, the only ones APPEND and SUBTRACT accept (topic configs, and the
# broker-level ones that can be set dynamically).
LIST_CONFIGS = frozenset(
    {
        "cleanup.policy",
        "leader.replication.throttled.replicas",
        "follower.replication.throttled.replicas",
        "log.cleanup.policy",
        "metric.reporters",
        "sasl.enabled.mechanisms",
        "ssl.cipher.suites",
        "ssl.enabled.protocols",
    }
)

# validate_config implementations raise ValueError to reject a config set; an
# ``error_code`` attribute on the exception picks the error (INVALID_CONFIG otherwise).
ValidateTopicConfig = Callable[[dict[str, str]], None]
ValidateResourceConfig = Callable[[int, str, dict[str, str]], None]  # resource type, name, all overrides
ConfigDefault = Callable[[int, str], str | None]  # resource type, key -> the default value

ConfigOp = tuple[str, int, str | None]  # name, operation (ignored unless incremental), value


@dataclass(frozen=True, slots=True)
class AlterConfigsResult:
    resource_type: int
    resource_name: str
    error_code: int
    error_message: str | None = None


def config_error(exc: ValueError) -> ApiError:
    return ApiError(int(getattr(exc, "error_code", ErrorCode.invalid_config)), str(exc))


def check_config_values(values: Iterable[str]) -> None:
    if any(len(v) > MAX_CONFIG_VALUE_LENGTH for v in values):
        raise ApiError(
            ErrorCode.invalid_config,
            f"The configuration value cannot be added because it exceeds the maximum value size of {MAX_CONFIG_VALUE_LENGTH} bytes.",
        )


class ConfigurationControlManager:
    def __init__(
        self,
        *,
        list_configs: Collection[str] = LIST_CONFIGS,
        config_default: ConfigDefault | None = None,
        node_id: int | None = None,
        unclean_leader_election_enable: bool = False,
    ) -> None:
        self._list_configs = list_configs
        self._config_default = config_default
        self._node_id = node_id
        self._unclean_default = unclean_leader_election_enable

    def unclean_leader_election_enabled(self, image: MetadataImage, topic: str) -> bool:
        value = self._topic_value(image, topic, UNCLEAN_LEADER_ELECTION_ENABLE)
        if value is None:
            return self._unclean_default
        return value.strip().lower() == "true"  # Java's Boolean.parseBoolean

    def min_insync_replicas(self, image: MetadataImage, topic: str) -> int:
        """The topic's min.insync.replicas: its override, then the broker's, then the default (1)."""
        value = self._topic_value(image, topic, MIN_INSYNC_REPLICAS)
        if value is None and self._config_default is not None:
            value = self._config_default(TOPIC_RESOURCE, MIN_INSYNC_REPLICAS)
        return int(value) if value is not None else 1

    def static_min_insync_replicas(self) -> int:
        """Kafka's getStaticallyConfiguredMinInsyncReplicas: this controller's configured value, not the image's."""
        value = self._config_default(TOPIC_RESOURCE, MIN_INSYNC_REPLICAS) if self._config_default is not None else None
        return int(value) if value is not None else 1

    def _topic_value(self, image: MetadataImage, topic: str, key: str) -> str | None:
        """A topic config as the controller sees it: the topic's, this node's, then the cluster's dynamic value."""
        layers = [image.topic_config(topic)]
        if self._node_id is not None:
            layers.append(image.configs.get((BROKER_RESOURCE, str(self._node_id)), {}))
        layers.append(image.configs.get((BROKER_RESOURCE, ""), {}))
        for layer in layers:
            value = layer.get(key)
            if value is not None:
                return value
        return None

    def alter_configs(
        self,
        image: MetadataImage,
        resources: Sequence[tuple[int, str, Sequence[ConfigOp]]],
        *,
        incremental: bool,
        validate_only: bool,
        validate_config: ValidateResourceConfig,
        node_id: int | None,
        forwarded: bool = True,
    ) -> ControllerResult[list[AlterConfigsResult]]:
        """AlterConfigs (incremental=False: the given set replaces the resource's overrides)
        and IncrementalAlterConfigs (SET, DELETE, APPEND, SUBTRACT), for topics (2) and
        brokers (4). A broker resource names the receiving node (``node_id``; None: any node,
        as the controller takes requests brokers checked), or "" for the
        cluster-wide default (incremental only, as in Kafka). ``forwarded`` is Kafka's isForwarded:
        False for a request a client sent straight to the controller. Each resource succeeds or
        fails as a whole; broker resources get a record per given key even when
        unchanged, as Kafka writes them, so brokers reload them. With eligible leader replicas
        on, ClearElrRecords for changed min.insync.replicas values follow all the ConfigRecords.
        """
        elr_enabled = eligible_leader_replicas_enabled(image)
        dups = duplicates((t, n) for t, n, _ in resources)
        records: list[ConfigRecord] = []
        results: list[AlterConfigsResult] = []
        for resource_type, resource_name, ops in resources:
            try:
                if (resource_type, resource_name) in dups:
                    raise ApiError(ErrorCode.invalid_request, "Each resource must appear at most once.")
                _check_alter_request(resource_type, resource_name, ops, incremental, node_id)
                new = self._alter_resource(image, resource_type, resource_name, ops, incremental, validate_config, elr_enabled, forwarded)
            except ApiError as refused:
                results.append(AlterConfigsResult(resource_type, resource_name, refused.error_code, refused.message))
                continue
            results.append(AlterConfigsResult(resource_type, resource_name, ErrorCode.none))
            if not validate_only:
                records.extend(new)
        return ControllerResult([*records, *clear_elr_records(records, elr_enabled)], results)

    def _alter_resource(
        self,
        image: MetadataImage,
        resource_type: int,
        resource_name: str,
        ops: Sequence[ConfigOp],
        incremental: bool,
        validate_config: ValidateResourceConfig,
        elr_enabled: bool,
        forwarded: bool,
    ) -> list[ConfigRecord]:
        current = image.configs.get((resource_type, resource_name), {})
        always = resource_type == BROKER_RESOURCE
        changed: dict[str, str | None] = {}
        if incremental:
            for key, op, value in ops:
                new_value = self._incremental_value(resource_type, key, op, value, current.get(key))
                if new_value != current.get(key) or always:
                    changed[key] = new_value
        else:
            for key, _, value in ops:
                if value != current.get(key) or always:
                    changed[key] = value
            given = {key for key, _, _ in ops}
            changed.update((key, None) for key in current if key not in given)
        new_records = [
            ConfigRecord(resource_type=resource_type, resource_name=resource_name, name=key, value=value) for key, value in changed.items()
        ]
        check_min_isr_change(new_records, elr_enabled)
        _check_cordoned_log_dirs(new_records, image, current.get(CORDONED_LOG_DIRS), forwarded)
        check_config_values(v for v in changed.values() if v is not None)
        after = dict(current)
        for key, value in changed.items():
            if value is None:
                after.pop(key, None)
            else:
                after[key] = value
        try:
            validate_config(resource_type, resource_name, after)
            if resource_type == CLIENT_METRICS_RESOURCE:  # Kafka's ClientMetricsConfigs.validate
                validate_client_metrics(resource_name, after)
        except ValueError as e:
            raise config_error(e) from e
        if resource_type == TOPIC_RESOURCE and resource_name not in image.topics:
            raise ApiError(ErrorCode.unknown_topic_or_partition, f"The topic '{resource_name}' does not exist.")
        if resource_type == BROKER_RESOURCE and resource_name and int(resource_name) not in image.brokers:
            raise ApiError(ErrorCode.broker_id_not_registered, f"No node with id {int(resource_name)} found.")
        return new_records

    def _incremental_value(self, resource_type: int, key: str, op: int, value: str | None, current: str | None) -> str | None:
        default = self._config_default(resource_type, key) if self._config_default is not None and current is None else None
        return incremental_value(key, op, value, current, default, self._list_configs)


def incremental_value(key: str, op: int, value: str | None, current: str | None, default: str | None, list_configs: Collection[str] = LIST_CONFIGS) -> str | None:
    """A config's value after one IncrementalAlterConfigs operation; APPEND and SUBTRACT start
    from ``current``, else from the config's ``default``."""
    if op == OP_SET:
        return value
    if op == OP_DELETE:
        return None
    if key not in list_configs:
        raise ApiError(ErrorCode.invalid_config, f"Can't {_OP_NAMES[op]} to key {key} because its type is not LIST.")
    base = current if current is not None else default
    parts = [p for p in (base or "").split(",") if p]
    assert value is not None
    for item in filter(None, value.split(",")):
        if op == OP_APPEND:
            if item not in parts:
                parts.append(item)
        elif item in parts:
            parts.remove(item)
    return ",".join(parts)


CORDONED_LOG_DIRS = "cordoned.log.dirs"


# Kafka's COMMA_WITH_WHITESPACE, how ConfigurationControlManager splits a cordoned.log.dirs value.
_COMMA_WITH_WHITESPACE = re.compile(r"\s*,\s*")


def _check_cordoned_log_dirs(records: Iterable[ConfigRecord], image: MetadataImage, current: str | None, forwarded: bool) -> None:
    """Kafka's isCordonedLogDirsDisabled, then isCordonedLogDirsInvalid. Below metadata.version
    4.3-IV0 the brokers could not tell the controller their cordoned dirs, so the config is neither
    set nor deleted. A value sent straight to a controller was checked by no broker against its
    log.dirs, so it may only keep entries of the resource's ``current`` dynamic value (compared
    as spelt; "*" is one more entry); emptying or deleting it is always allowed."""
    for record in records:
        if record.name != CORDONED_LOG_DIRS or record.resource_type != BROKER_RESOURCE:
            continue
        if not metadata_version_of(image).is_cordoned_log_dirs_supported:
            raise ApiError(ErrorCode.invalid_config, "The cordoned.log.dirs configuration value cannot be set because it requires metadata.version >= 4.3-IV0")
        if forwarded or record.value is None or not record.value.strip():
            continue
        kept = [] if current is None else _COMMA_WITH_WHITESPACE.split(current.strip())
        if not set(_COMMA_WITH_WHITESPACE.split(record.value.strip())) <= set(kept):
            raise ApiError(
                ErrorCode.invalid_config,
                "When updating cordoned.log.dirs via controllers,  the new value must be a subset of the current configuration value.",
            )


def _check_alter_request(resource_type: int, resource_name: str, ops: Sequence[ConfigOp], incremental: bool, node_id: int | None) -> None:
    """The broker-side checks of Kafka's ConfigAdminManager.preprocess, in its order."""

    def check_types() -> None:
        if resource_type == CLIENT_METRICS_RESOURCE:  # a client metrics subscription (KIP-714), any name
            return
        if resource_type == GROUP_RESOURCE:  # group configs (Kafka 4.4); the name is checked with the values
            return
        if resource_type not in (TOPIC_RESOURCE, BROKER_RESOURCE):
            raise ApiError(ErrorCode.invalid_request, f"Unknown resource type {resource_type}")
        if resource_type == BROKER_RESOURCE and (resource_name or not incremental):
            try:
                broker = int(resource_name)
            except ValueError:
                raise ApiError(ErrorCode.invalid_request, f"Node id must be an integer, but it is: {resource_name}") from None
            if node_id is not None and broker != node_id:
                raise ApiError(ErrorCode.invalid_request, f"Unexpected broker id, expected {node_id}, but received {resource_name}")

    nulls = [name for name, op, value in ops if value is None and (not incremental or op != OP_DELETE)]
    if incremental:
        if nulls:
            raise ApiError(ErrorCode.invalid_request, "Null value not supported for : " + ", ".join(nulls))
        check_types()
        unknown = [op for _, op, _ in ops if op not in _OP_NAMES]
        if unknown:
            raise ApiError(ErrorCode.invalid_request, f"Unknown operations type {unknown[0]}")
    else:
        check_types()
        if nulls:
            raise ApiError(ErrorCode.invalid_request, "Null value not supported for : " + ", ".join(nulls))
    if duplicates(name for name, _, _ in ops):
        raise ApiError(ErrorCode.invalid_request, "Error due to duplicate config keys")


__all__ = [
    "AlterConfigsResult",
    "ConfigDefault",
    "ConfigOp",
    "ConfigurationControlManager",
    "LIST_CONFIGS",
    "incremental_value",
    "OP_APPEND",
    "OP_DELETE",
    "OP_SET",
    "OP_SUBTRACT",
    "UNCLEAN_LEADER_ELECTION_ENABLE",
    "ValidateResourceConfig",
    "ValidateTopicConfig",
    "check_config_values",
    "config_error",
]
