"""Group configs (ConfigResource type GROUP, 32): Kafka 4.4's per-group overrides of the group
coordinator's settings, ``kafka-configs --entity-type groups``.

Three parts, all sans-IO:

- ``validate_group_config``: the controller's check of a group's configs as they would be after
  an (Incremental)AlterConfigs, Kafka 4.4's GroupConfig.validate: every name known, the values
  parsed by their types, then checked against the broker's bounds (for consumer groups, its
  ``group.consumer.min/max.session.timeout.ms`` and ``min/max.heartbeat.interval.ms``), and a
  session timeout above the heartbeat interval. Refusals carry INVALID_CONFIG and Kafka's text.
- ``GroupConfigManager``: what a broker applies. It follows the ConfigRecords of type 32 in the
  metadata image; a value outside the broker's bounds (they may have changed since it was set)
  is capped to them, as Kafka's GroupConfigManager does. The group coordinator asks it for a
  consumer group's session timeout and heartbeat interval.
- ``describe_group_config``: DescribeConfigs of a group, as Kafka 4.4's broker answers it: every
  public config (and the internal ones the group sets), the group's value with source
  GROUP_CONFIG, otherwise the broker's value under its broker synonym (``group.consumer.…``),
  with that synonym's own layers (static, default) below it.

kbroker has no share or streams groups: their configs are checked (against Kafka's default
bounds, which no kbroker setting changes), stored and described, and change nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

import structlog
from kio.schema.errors import ErrorCode

from broker.metadata.metadata_image import GROUP_RESOURCE

log = structlog.get_logger(__name__)

# DescribeConfigs' ConfigSource values a group config is described with.
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
GROUP_CONFIG = 8

# DescribeConfigs' ConfigType values.
TYPE_BOOLEAN, TYPE_STRING, TYPE_INT, TYPE_LONG, TYPE_LIST = 1, 2, 3, 5, 7
_TYPE_IDS = {"boolean": TYPE_BOOLEAN, "string": TYPE_STRING, "int": TYPE_INT, "long": TYPE_LONG, "list": TYPE_LIST}

CONSUMER_SESSION_TIMEOUT_MS = "consumer.session.timeout.ms"
CONSUMER_HEARTBEAT_INTERVAL_MS = "consumer.heartbeat.interval.ms"
SHARE_SESSION_TIMEOUT_MS = "share.session.timeout.ms"
SHARE_HEARTBEAT_INTERVAL_MS = "share.heartbeat.interval.ms"
STREAMS_SESSION_TIMEOUT_MS = "streams.session.timeout.ms"
STREAMS_HEARTBEAT_INTERVAL_MS = "streams.heartbeat.interval.ms"
STREAMS_RACK_AWARE_ASSIGNMENT_TAGS = "streams.rack.aware.assignment.tags"
STREAMS_ASSIGNOR_NAME = "streams.assignor.name"
SHARE_AUTO_OFFSET_RESET = "share.auto.offset.reset"
DLQ_TOPIC_NAME = "errors.deadletterqueue.topic.name"


class InvalidGroupConfigError(ValueError):
    """A group config change refused; ``error_code`` is what the controller answers with."""

    def __init__(self, message: str, error_code: int = ErrorCode.invalid_config) -> None:
        super().__init__(message)
        self.error_code = error_code


@dataclass(frozen=True, slots=True)
class GroupConfigKey:
    """One of Kafka 4.4's group configs: its type, default, lower bound (ConfigDef's atLeast),
    the broker config whose value it overrides, and whether it is internal (accepted and
    described when set, otherwise not listed)."""

    name: str
    type: str  # int, long, boolean, string, list
    default: str
    at_least: int | None = None
    broker_synonym: str | None = None
    internal: bool = False
    one_of: tuple[str, ...] | None = None


# In Kafka's definition order: parse errors are reported for the first failing key in this order.
GROUP_CONFIG_KEYS: tuple[GroupConfigKey, ...] = (
    GroupConfigKey(CONSUMER_SESSION_TIMEOUT_MS, "int", "45000", 1, "group.consumer.session.timeout.ms"),
    GroupConfigKey(CONSUMER_HEARTBEAT_INTERVAL_MS, "int", "5000", 1, "group.consumer.heartbeat.interval.ms"),
    GroupConfigKey("consumer.assignment.interval.ms", "int", "1000", 0, "group.consumer.assignment.interval.ms"),
    GroupConfigKey("consumer.assignor.offload.enable", "boolean", "true", None, "group.consumer.assignor.offload.enable", internal=True),
    GroupConfigKey(SHARE_SESSION_TIMEOUT_MS, "int", "45000", 1, "group.share.session.timeout.ms"),
    GroupConfigKey(SHARE_HEARTBEAT_INTERVAL_MS, "int", "5000", 1, "group.share.heartbeat.interval.ms"),
    GroupConfigKey("share.record.lock.duration.ms", "int", "30000", 1000, "group.share.record.lock.duration.ms"),
    GroupConfigKey("share.delivery.count.limit", "int", "5", 2, "group.share.delivery.count.limit"),
    GroupConfigKey("share.partition.max.record.locks", "int", "2000", 100, "group.share.partition.max.record.locks"),
    GroupConfigKey(SHARE_AUTO_OFFSET_RESET, "string", "latest"),
    GroupConfigKey("share.isolation.level", "string", "read_uncommitted", one_of=("read_committed", "read_uncommitted")),
    GroupConfigKey("share.renew.acknowledge.enable", "boolean", "true"),
    GroupConfigKey("share.assignment.interval.ms", "int", "1000", 0, "group.share.assignment.interval.ms"),
    GroupConfigKey("share.assignor.offload.enable", "boolean", "true", None, "group.share.assignor.offload.enable", internal=True),
    GroupConfigKey(STREAMS_SESSION_TIMEOUT_MS, "int", "45000", 1, "group.streams.session.timeout.ms"),
    GroupConfigKey(STREAMS_HEARTBEAT_INTERVAL_MS, "int", "5000", 1, "group.streams.heartbeat.interval.ms"),
    GroupConfigKey("streams.num.standby.replicas", "int", "0", 0, "group.streams.num.standby.replicas"),
    GroupConfigKey("streams.initial.rebalance.delay.ms", "int", "3000", 0, "group.streams.initial.rebalance.delay.ms"),
    GroupConfigKey("streams.assignment.interval.ms", "int", "1000", 0, "group.streams.assignment.interval.ms"),
    GroupConfigKey("streams.assignor.offload.enable", "boolean", "true", None, "group.streams.assignor.offload.enable", internal=True),
    GroupConfigKey("streams.task.offset.interval.ms", "int", "60000", 1, "group.streams.task.offset.interval.ms", internal=True),
    GroupConfigKey("streams.num.warmup.replicas", "int", "2", 0, "group.streams.num.warmup.replicas", internal=True),
    GroupConfigKey(STREAMS_RACK_AWARE_ASSIGNMENT_TAGS, "list", "", None, "group.streams.rack.aware.assignment.tags"),
    GroupConfigKey("streams.acceptable.recovery.lag", "long", "10000", 0, "group.streams.acceptable.recovery.lag", internal=True),
    GroupConfigKey(STREAMS_ASSIGNOR_NAME, "string", "sticky", None, "group.streams.assignors"),
    GroupConfigKey(DLQ_TOPIC_NAME, "string", ""),
    GroupConfigKey("errors.deadletterqueue.copy.record.enable", "boolean", "false"),
)
GROUP_CONFIGS: dict[str, GroupConfigKey] = {key.name: key for key in GROUP_CONFIG_KEYS}
GROUP_CONFIG_NAMES = frozenset(GROUP_CONFIGS)
PUBLIC_GROUP_CONFIG_NAMES = frozenset(key.name for key in GROUP_CONFIG_KEYS if not key.internal)


@dataclass(frozen=True, slots=True)
class GroupConfigBounds:
    """The broker settings group configs are checked against and default to. Only the consumer
    group ones are kbroker settings; the share and streams ones are Kafka 4.4's defaults."""

    consumer_session_timeout_ms: int = 45000
    consumer_min_session_timeout_ms: int = 45000
    consumer_max_session_timeout_ms: int = 60000
    consumer_heartbeat_interval_ms: int = 5000
    consumer_min_heartbeat_interval_ms: int = 5000
    consumer_max_heartbeat_interval_ms: int = 15000

    @classmethod
    def of(cls, config: object) -> "GroupConfigBounds":
        """From a BrokerConfig (its group.consumer.* settings)."""
        return cls(
            consumer_session_timeout_ms=getattr(config, "group_consumer_session_timeout_ms"),
            consumer_min_session_timeout_ms=getattr(config, "group_consumer_min_session_timeout_ms"),
            consumer_max_session_timeout_ms=getattr(config, "group_consumer_max_session_timeout_ms"),
            consumer_heartbeat_interval_ms=getattr(config, "group_consumer_heartbeat_interval_ms"),
            consumer_min_heartbeat_interval_ms=getattr(config, "group_consumer_min_heartbeat_interval_ms"),
            consumer_max_heartbeat_interval_ms=getattr(config, "group_consumer_max_heartbeat_interval_ms"),
        )

    def ranges(self) -> tuple[tuple[str, int | None, int | None], ...]:
        """(name, minimum or None, maximum or None), in the order Kafka checks them."""
        return (
            (CONSUMER_HEARTBEAT_INTERVAL_MS, self.consumer_min_heartbeat_interval_ms, self.consumer_max_heartbeat_interval_ms),
            (CONSUMER_SESSION_TIMEOUT_MS, self.consumer_min_session_timeout_ms, self.consumer_max_session_timeout_ms),
            ("consumer.assignment.interval.ms", 0, 15000),
            (SHARE_HEARTBEAT_INTERVAL_MS, 5000, 15000),
            (SHARE_SESSION_TIMEOUT_MS, 45000, 60000),
            ("share.record.lock.duration.ms", 15000, 60000),
            ("share.delivery.count.limit", 2, 10),
            ("share.partition.max.record.locks", 100, 4000),
            ("share.assignment.interval.ms", 0, 15000),
            (STREAMS_HEARTBEAT_INTERVAL_MS, 5000, 15000),
            (STREAMS_SESSION_TIMEOUT_MS, 45000, 60000),
            ("streams.num.standby.replicas", None, 2),
            ("streams.assignment.interval.ms", 0, 15000),
            ("streams.task.offset.interval.ms", 15000, None),
            ("streams.num.warmup.replicas", None, 20),
        )

    def session_and_heartbeat(self) -> tuple[tuple[str, int, str, int], ...]:
        """(session timeout name, broker default, heartbeat interval name, broker default)."""
        return (
            (CONSUMER_SESSION_TIMEOUT_MS, self.consumer_session_timeout_ms, CONSUMER_HEARTBEAT_INTERVAL_MS, self.consumer_heartbeat_interval_ms),
            (SHARE_SESSION_TIMEOUT_MS, 45000, SHARE_HEARTBEAT_INTERVAL_MS, 5000),
            (STREAMS_SESSION_TIMEOUT_MS, 45000, STREAMS_HEARTBEAT_INTERVAL_MS, 5000),
        )

    def broker_value(self, broker_name: str) -> str | None:
        """The broker's value of a group config's broker synonym, where kbroker has the setting."""
        return {
            "group.consumer.session.timeout.ms": str(self.consumer_session_timeout_ms),
            "group.consumer.heartbeat.interval.ms": str(self.consumer_heartbeat_interval_ms),
        }.get(broker_name)


STREAMS_ASSIGNORS = ("sticky",)

# -- parsing, as Kafka's ConfigDef parses each type ----------------------------------------------

_INT = re.compile(r"[+-]?[0-9]+")
_INT_RANGE = {"int": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}
# java.time.Duration.parse's format: PnDTnHnMn.nS, case-insensitive, each part signed.
_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?[0-9]+)D)?(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?",
    re.IGNORECASE,
)


def _invalid(name: str, value: str, why: str) -> InvalidGroupConfigError:
    return InvalidGroupConfigError(f"Invalid value {value} for configuration {name}: {why}")


def _valid_duration(text: str) -> bool:
    m = _DURATION.fullmatch(text)
    if m is None or (m.group(3) is not None and m.group(3).upper() == "T"):
        return False
    if m.group(2) is None and m.group(3) is None:
        return False
    seconds = 0.0
    for index, scale in ((2, 86400), (4, 3600), (5, 60), (6, 1)):
        if m.group(index) is not None:
            seconds += int(m.group(index)) * scale
    if m.group(7):
        fraction = float("0." + m.group(7))
        seconds += -fraction if (m.group(6) or "").startswith("-") else fraction
    if m.group(1) == "-":
        seconds = -seconds
    return seconds >= 0  # a negative duration is not allowed


def _valid_auto_offset_reset(value: str) -> bool:
    lowered = value.lower()
    if lowered in ("earliest", "latest"):
        return True
    prefix = "by_duration:"
    return lowered.startswith(prefix) and _valid_duration(value[len(prefix) :].strip())


def parse_value(key: GroupConfigKey, raw: str) -> object:
    """The value Kafka's ConfigDef would parse ``raw`` into, or InvalidGroupConfigError with its message."""
    text = raw.strip()
    if key.type in ("int", "long"):
        low, high = _INT_RANGE[key.type]
        if _INT.fullmatch(text) is None or not low <= int(text) <= high:
            raise _invalid(key.name, raw, f"Not a number of type {key.type.upper()}")
        number = int(text)
        if key.at_least is not None and number < key.at_least:
            raise _invalid(key.name, raw, f"Value must be at least {key.at_least}")
        return number
    if key.type == "boolean":
        if text.lower() not in ("true", "false"):
            raise _invalid(key.name, raw, "Expected value to be either true or false")
        return text.lower() == "true"
    if key.type == "list":
        return [] if not text else [item.strip() for item in text.split(",")]
    if key.one_of is not None and text not in key.one_of:
        raise _invalid(key.name, raw, "String must be one of: " + ", ".join(key.one_of))
    if key.name == SHARE_AUTO_OFFSET_RESET and not _valid_auto_offset_reset(text):
        raise _invalid(
            key.name,
            raw,
            f"Invalid value `{text}` for configuration {key.name}. "
            "The value must be either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.",
        )
    return text


def as_text(key: GroupConfigKey, value: object) -> str:
    """A parsed value as DescribeConfigs shows it (Kafka's ConfigDef.convertToString)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(value)
    return str(value)


def normalized(name: str, raw: str) -> str:
    """A stored value as described: parsed and written back (``" 50000 "`` is ``50000``)."""
    key = GROUP_CONFIGS.get(name)
    if key is None:
        return raw
    try:
        return as_text(key, parse_value(key, raw))
    except InvalidGroupConfigError:
        return raw


# -- the controller's check ---------------------------------------------------------------------


def validate_group_config(group_id: str, configs: Mapping[str, str], bounds: GroupConfigBounds) -> None:
    """Kafka 4.4's checks of a group's configs as they would be after the change (the controller's
    ControllerConfigurationValidator and GroupConfig.validate), in their order."""
    if not group_id:
        raise InvalidGroupConfigError("Default group resources are not allowed.", ErrorCode.invalid_request)
    for name in configs:
        if name not in GROUP_CONFIG_NAMES:
            raise InvalidGroupConfigError(f"Unknown group config name: {name}")
    tags = configs.get(STREAMS_RACK_AWARE_ASSIGNMENT_TAGS)
    if tags is not None and tags.strip():
        items = re.split(r"\s*,\s*", tags)
        if len(set(items)) != len(items):
            raise InvalidGroupConfigError(f"{STREAMS_RACK_AWARE_ASSIGNMENT_TAGS} must not contain duplicate tag keys.")
    parsed = {key.name: parse_value(key, configs[key.name]) for key in GROUP_CONFIG_KEYS if key.name in configs}
    for name, low, high in bounds.ranges():
        value = parsed.get(name)
        if value is None:
            continue
        assert isinstance(value, int)
        if low is not None and high is not None:
            if not low <= value <= high:
                raise InvalidGroupConfigError(f"{name} must be in the range {low} to {high} inclusive.")
        elif high is not None and value > high:
            raise InvalidGroupConfigError(f"{name} must be less than or equal to {high}")
        elif low is not None and value < low:
            raise InvalidGroupConfigError(f"{name} must be greater than or equal to {low}")
    assignor = parsed.get(STREAMS_ASSIGNOR_NAME)
    if assignor is not None and assignor not in STREAMS_ASSIGNORS:
        raise InvalidGroupConfigError(
            f"{STREAMS_ASSIGNOR_NAME} '{assignor}' is not a registered task assignor. Registered assignors are: [{', '.join(STREAMS_ASSIGNORS)}]."
        )
    for session_name, session_default, heartbeat_name, heartbeat_default in bounds.session_and_heartbeat():
        if session_name not in parsed and heartbeat_name not in parsed:
            continue
        session = parsed.get(session_name, session_default)
        heartbeat = parsed.get(heartbeat_name, heartbeat_default)
        assert isinstance(session, int) and isinstance(heartbeat, int)
        if session <= heartbeat:
            raise InvalidGroupConfigError(f"{session_name} must be greater than {heartbeat_name}")
    dlq = parsed.get(DLQ_TOPIC_NAME)
    if isinstance(dlq, str) and dlq.startswith("__"):
        raise InvalidGroupConfigError(f"{DLQ_TOPIC_NAME}: DLQ topic name must not start with '__'")


# -- what a broker applies ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EffectiveGroupConfig:
    """A group's overrides as the coordinator uses them (None: the broker's setting applies)."""

    consumer_session_timeout_ms: int | None = None
    consumer_heartbeat_interval_ms: int | None = None


class GroupConfigManager:
    """Each group's configs, from the metadata image's ConfigRecords of type 32 (Kafka's
    GroupConfigManager, fed by its DynamicConfigPublisher)."""

    def __init__(self, bounds: GroupConfigBounds) -> None:
        self.bounds = bounds
        self._configs: dict[str, EffectiveGroupConfig] = {}

    def group_ids(self) -> list[str]:
        return sorted(self._configs)

    def group_config(self, group_id: str) -> EffectiveGroupConfig | None:
        return self._configs.get(group_id)

    def consumer_session_timeout_ms(self, group_id: str) -> int | None:
        config = self._configs.get(group_id)
        return None if config is None else config.consumer_session_timeout_ms

    def consumer_heartbeat_interval_ms(self, group_id: str) -> int | None:
        config = self._configs.get(group_id)
        return None if config is None else config.consumer_heartbeat_interval_ms

    def update(self, group_id: str, props: Mapping[str, str]) -> None:
        """A group's configs as they now are in the image; none left forgets the group."""
        if not props:
            self._configs.pop(group_id, None)
            return
        b = self.bounds
        self._configs[group_id] = EffectiveGroupConfig(
            consumer_session_timeout_ms=self._capped(
                group_id, props, CONSUMER_SESSION_TIMEOUT_MS, b.consumer_min_session_timeout_ms, b.consumer_max_session_timeout_ms
            ),
            consumer_heartbeat_interval_ms=self._capped(
                group_id, props, CONSUMER_HEARTBEAT_INTERVAL_MS, b.consumer_min_heartbeat_interval_ms, b.consumer_max_heartbeat_interval_ms
            ),
        )
        config = self._configs[group_id]
        session = config.consumer_session_timeout_ms or b.consumer_session_timeout_ms
        heartbeat = config.consumer_heartbeat_interval_ms or b.consumer_heartbeat_interval_ms
        if session <= heartbeat:
            log.warning("group_config.session_not_above_heartbeat", group=group_id, session_timeout_ms=session, heartbeat_interval_ms=heartbeat)

    @staticmethod
    def _capped(group_id: str, props: Mapping[str, str], name: str, low: int, high: int) -> int | None:
        raw = props.get(name)
        if raw is None:
            return None
        try:
            value = parse_value(GROUP_CONFIGS[name], raw)
        except InvalidGroupConfigError as e:
            # The controller checked it; a record that still fails (written by a newer or buggy
            # writer) is left out rather than failing the publisher.
            log.error("group_config.invalid", group=group_id, config=name, error=str(e))
            return None
        assert isinstance(value, int)
        capped = min(max(value, low), high)
        if capped != value:
            log.warning("group_config.capped", group=group_id, config=name, value=value, minimum=low, maximum=high, effective=capped)
        return capped

    def on_metadata_update(self, delta: Any, image: Any) -> None:
        """A MetadataPublisher: the groups whose configs the delta touched, read back from the new image."""
        configs_delta = delta.configs_delta
        if configs_delta is None:
            return
        for group_id in configs_delta.changed_resources(GROUP_RESOURCE):
            if group_id:
                self.update(group_id, image.configs.get((GROUP_RESOURCE, group_id), {}))


# -- DescribeConfigs ----------------------------------------------------------------------------

Synonym = tuple[str, str | None, int]  # name, value, source


@dataclass(frozen=True, slots=True)
class DescribedGroupConfig:
    name: str
    value: str | None
    source: int
    config_type: int
    synonyms: tuple[Synonym, ...]  # every layer, the one in effect first


def _java_hash_bucket(name: str, buckets: int) -> int:
    h = 0
    for char in name:  # String.hashCode over UTF-16 units; config names are ASCII
        h = (31 * h + ord(char)) & 0xFFFFFFFF
    h ^= h >> 16
    return h & (buckets - 1)


def _kafka_order(names: Iterable[str]) -> list[str]:
    """Kafka's broker lists a group's configs in the order of a java.util.HashMap holding them
    (the broker's group defaults, then the group's internal configs); matched here so that a
    raw DescribeConfigs answer reads as Kafka's (kafka-configs sorts them anyway)."""
    names = list(names)
    base = [n for n in names if n in PUBLIC_GROUP_CONFIG_NAMES]
    extra = [n for n in names if n not in PUBLIC_GROUP_CONFIG_NAMES]
    return sorted(extra, key=lambda n: _java_hash_bucket(n, 32)) + sorted(base, key=lambda n: _java_hash_bucket(n, 32))


def describe_group_config(
    overrides: Mapping[str, str],
    broker_synonyms: Callable[[str], list[Synonym] | None],
) -> list[DescribedGroupConfig]:
    """Every public group config, and the internal ones the group sets: its value and source
    (GROUP_CONFIG when the group sets it, else the broker synonym's), Kafka's type, and the
    synonyms below. ``broker_synonyms(name)`` gives a broker setting's layers (its value in
    effect first), or None where kbroker has no such setting (Kafka's default is shown)."""
    out: list[DescribedGroupConfig] = []
    for name in _kafka_order(n for n in GROUP_CONFIGS if n in PUBLIC_GROUP_CONFIG_NAMES or n in overrides):
        key = GROUP_CONFIGS[name]
        if key.broker_synonym is not None:
            below = broker_synonyms(key.broker_synonym) or [(key.broker_synonym, key.default, DEFAULT_CONFIG)]
        else:
            below = [(name, key.default, DEFAULT_CONFIG)]
        synonyms = list(below)
        if name in overrides:
            synonyms.insert(0, (name, normalized(name, overrides[name]), GROUP_CONFIG))
        value, source = synonyms[0][1], synonyms[0][2]
        out.append(DescribedGroupConfig(name, value, source, _TYPE_IDS[key.type], tuple(synonyms)))
    return out


__all__ = [
    "DEFAULT_CONFIG",
    "DescribedGroupConfig",
    "EffectiveGroupConfig",
    "GROUP_CONFIG",
    "GROUP_CONFIGS",
    "GROUP_CONFIG_KEYS",
    "GROUP_CONFIG_NAMES",
    "GroupConfigBounds",
    "GroupConfigKey",
    "GroupConfigManager",
    "InvalidGroupConfigError",
    "describe_group_config",
    "normalized",
    "parse_value",
    "validate_group_config",
]
