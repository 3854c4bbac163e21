"""Broker configs set at run time, as Kafka's DynamicBrokerConfig.

`kafka-configs.sh --entity-type brokers --entity-name <id>` (one broker) or `--entity-default`
(every broker) writes ConfigRecords for the broker resource to the metadata log. A broker's
effective configuration is then, highest precedence first: its own dynamic configs, the cluster's
dynamic defaults, server.properties, and Kafka's defaults. Each broker applies a change when its
metadata reaches it (``DynamicBrokerConfig.on_metadata_update``) and hands the old and new
configuration to the parts that depend on it: the topics' log configs, the log cleaner, the
replica fetchers, the connection limits, the producer state and the cordoned log dirs.

Which configs may change, and the checks a receiving broker makes before it forwards a change to
the controller (``validate_dynamic_broker_config``: the changed resource's whole set of dynamic
configs), are Kafka's, with Kafka's messages, answered INVALID_REQUEST as Kafka answers them. The
controller checks only the resource's name, as Kafka's does; a value that cannot be applied (set
through the controller's own listener) is left out by every broker, with an error in its log.

kbroker differs from Kafka in one respect: it serves from one event loop and has none of Kafka's
thread pools, so the thread counts (num.io.threads, num.network.threads, background.threads,
num.recovery.threads.per.data.dir) are checked, stored and described, and change nothing; and
listeners, advertised.listeners, listener.security.protocol.map and per-listener SASL settings
are refused (listeners are bound at start). A listener's keystore and truststore
(broker/dynamic_listener_config.py) and the replication throttles
(broker/replication_quota_manager.py) read their dynamic values themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import annotated_types
import structlog
from pydantic import ValidationError

from broker.config import LISTENER_PREFIX, BrokerConfig
from broker.dynamic_listener_config import STORE_CONFIGS, listener_store_config
from broker.kafka_config_defs import KAFKA_BROKER_CONFIGS
from broker.unimplemented_configs import PER_BROKER_ONLY, feature_problem, type_problem
from broker.metadata.metadata_delta import MetadataDelta
from broker.metadata.metadata_image import BROKER_RESOURCE, MetadataImage
from storage.log_config import TOPIC_CONFIG_SYNONYMS

log = structlog.get_logger(__name__)

LEADER_REPLICATION_THROTTLED_RATE = "leader.replication.throttled.rate"
FOLLOWER_REPLICATION_THROTTLED_RATE = "follower.replication.throttled.rate"
REPLICA_ALTER_LOG_DIRS_IO_MAX_BYTES_PER_SECOND = "replica.alter.log.dirs.io.max.bytes.per.second"
QUOTA_CONFIGS = frozenset({LEADER_REPLICATION_THROTTLED_RATE, FOLLOWER_REPLICATION_THROTTLED_RATE, REPLICA_ALTER_LOG_DIRS_IO_MAX_BYTES_PER_SECOND})

# Kafka's DynamicLogConfig: the broker name of each topic config, its first synonym only.
LOG_CONFIGS = frozenset(TOPIC_CONFIG_SYNONYMS.values())
CLEANER_CONFIGS = frozenset(
    {
        "log.cleaner.threads",
        "log.cleaner.dedupe.buffer.size",
        "log.cleaner.io.buffer.load.factor",
        "log.cleaner.io.buffer.size",
        "log.cleaner.io.max.bytes.per.second",
        "log.cleaner.backoff.ms",
        "message.max.bytes",
    }
)
THREAD_POOL_CONFIGS = ("num.io.threads", "num.replica.fetchers", "num.recovery.threads.per.data.dir", "background.threads", "num.network.threads")
CONNECTION_CONFIGS = frozenset({"max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides", "max.connection.creation.rate"})
PRODUCER_STATE_CONFIGS = frozenset({"producer.id.expiration.ms", "transaction.partition.verification.enable"})
# Kafka's dynamic listener configs that kbroker cannot apply while it runs (see above).
UNSUPPORTED_LISTENER_CONFIGS = frozenset({"listeners", "advertised.listeners", "listener.security.protocol.map"})

# Kafka's DynamicLogConfig also takes cordoned.log.dirs (KIP-1066), and only per broker: the
# entries are paths of that broker's log.dirs.
CORDONED_LOG_DIRS = "cordoned.log.dirs"
# Read by the share group DLQ manager at each use (broker/share/share_group_dlq_manager.py).
DLQ_CONFIGS = frozenset({"errors.deadletterqueue.topic.name.prefix", "errors.deadletterqueue.auto.create.topics.enable"})

DYNAMIC_CONFIGS = LOG_CONFIGS | CLEANER_CONFIGS | frozenset(THREAD_POOL_CONFIGS) | CONNECTION_CONFIGS | PRODUCER_STATE_CONFIGS | QUOTA_CONFIGS | DLQ_CONFIGS | {CORDONED_LOG_DIRS}
# Kafka's SslConfigs.RECONFIGURABLE_CONFIGS: settable per listener only, under its prefix.
SECURITY_CONFIGS = STORE_CONFIGS

# Kafka's ConfigDef types of the dynamic configs, for its parse errors ("Not a number of type INT").
_LONG_CONFIGS = frozenset(
    {
        "log.roll.ms",
        "log.flush.interval.messages",
        "log.flush.interval.ms",
        "log.retention.bytes",
        "log.retention.ms",
        "log.cleaner.delete.retention.ms",
        "log.cleaner.min.compaction.lag.ms",
        "log.cleaner.max.compaction.lag.ms",
        "log.segment.delete.delay.ms",
        "log.message.timestamp.before.max.ms",
        "log.message.timestamp.after.max.ms",
        "log.local.retention.ms",
        "log.local.retention.bytes",
        "log.cleaner.dedupe.buffer.size",
        "log.cleaner.backoff.ms",
        *QUOTA_CONFIGS,
    }
)
_DOUBLE_CONFIGS = frozenset({"log.cleaner.min.cleanable.ratio", "log.cleaner.io.buffer.load.factor", "log.cleaner.io.max.bytes.per.second"})
_BOOLEAN_CONFIGS = frozenset({"unclean.leader.election.enable", "log.preallocate", "transaction.partition.verification.enable"})
_STRING_CONFIGS = frozenset({"log.cleanup.policy", "compression.type", "log.message.timestamp.type", "max.connections.per.ip.overrides"})

# DescribeConfigs' sources.
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

_FIELD_BY_ALIAS = {info.alias: name for name, info in BrokerConfig.model_fields.items() if info.alias}

# Kafka 4.4's dynamic configs kbroker has no implementation for (broker/unimplemented_configs.py):
# checked as Kafka checks them, stored and described, of no effect.
NO_EFFECT_DYNAMIC_CONFIGS = frozenset(
    k for k, d in KAFKA_BROKER_CONFIGS.items() if d.dynamic and k not in _FIELD_BY_ALIAS and k not in DYNAMIC_CONFIGS and k not in SECURITY_CONFIGS
)


class InvalidDynamicConfigError(ValueError):
    """A dynamic broker config change a broker refuses (INVALID_REQUEST, as Kafka answers it)."""


def _names(keys: Sequence[str]) -> str:
    return "[" + ", ".join(keys) + "]"


def is_dynamic(key: str) -> bool:
    return key in DYNAMIC_CONFIGS or key in NO_EFFECT_DYNAMIC_CONFIGS or listener_store_config(key) is not None


def _kafka_type(key: str) -> str:
    if key in _LONG_CONFIGS:
        return "LONG"
    if key in _DOUBLE_CONFIGS:
        return "DOUBLE"
    if key in _BOOLEAN_CONFIGS:
        return "BOOLEAN"
    if key in _STRING_CONFIGS:
        return "STRING"
    definition = KAFKA_BROKER_CONFIGS.get(key)
    return "INT" if definition is None else definition.type


def _bounds(key: str) -> tuple[float | None, float | None, bool]:
    """The field's lower and upper bound and whether the lower one is exclusive (gt)."""
    if key in QUOTA_CONFIGS:
        return 0.0, None, False
    field = _FIELD_BY_ALIAS.get(key)
    low: float | None = None
    high: float | None = None
    exclusive = False
    if field is None:
        return low, high, exclusive
    for constraint in BrokerConfig.model_fields[field].metadata:
        if isinstance(constraint, annotated_types.Ge):
            low = float(constraint.ge)  # type: ignore[arg-type]
        elif isinstance(constraint, annotated_types.Gt):
            low, exclusive = float(constraint.gt), True  # type: ignore[arg-type]
        elif isinstance(constraint, annotated_types.Le):
            high = float(constraint.le)  # type: ignore[arg-type]
    return low, high, exclusive


def _shown(bound: float, kafka_type: str) -> str:
    return str(bound) if kafka_type == "DOUBLE" else str(int(bound))


def check_config_type(key: str, value: str) -> None:
    """Kafka's ConfigDef parse and range check of one value, with its messages."""
    kafka_type = _kafka_type(key)
    text = value.strip()
    number: float
    if kafka_type in ("INT", "LONG"):
        try:
            number = int(text)
        except ValueError:
            raise InvalidDynamicConfigError(f"Invalid value {value} for configuration {key}: Not a number of type {kafka_type}") from None
        limit = 2**31 if kafka_type == "INT" else 2**63
        if not -limit <= number < limit:
            raise InvalidDynamicConfigError(f"Invalid value {value} for configuration {key}: Not a number of type {kafka_type}")
    elif kafka_type == "DOUBLE":
        try:
            number = float(text)
        except ValueError:
            raise InvalidDynamicConfigError(f"Invalid value {value} for configuration {key}: Not a number of type DOUBLE") from None
    elif kafka_type == "BOOLEAN":
        if text.lower() not in ("true", "false"):
            raise InvalidDynamicConfigError(f"Invalid value {value} for configuration {key}: Expected value to be either true or false")
        return
    else:
        return
    low, high, exclusive = _bounds(key)
    if low is not None and (number < low or (exclusive and number <= low)):
        raise InvalidDynamicConfigError(f"Invalid value {value} for configuration {key}: Value must be at least {_shown(low, kafka_type)}")
    if high is not None and number > high:
        raise InvalidDynamicConfigError(f"Invalid value {value} for configuration {key}: Value must be no more than {_shown(high, kafka_type)}")


def kafka_default(key: str) -> str | None:
    """A broker config's default, as a string (what APPEND to an unset list config starts from):
    kbroker's for its settings, Kafka 4.4's for the configs it has no implementation for."""
    field = _FIELD_BY_ALIAS.get(key)
    if field is None:
        definition = KAFKA_BROKER_CONFIGS.get(key)
        return None if definition is None else definition.default
    return _as_text(BrokerConfig.model_fields[field].get_default(call_default_factory=True))


def _as_text(value: object) -> str | None:
    """A config value as Kafka shows it (booleans in lower case, doubles as Java prints them)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        text = repr(value)
        if "e" in text:  # Java: 1.7976931348623157E308
            mantissa, exponent = text.split("e")
            return f"{mantissa if '.' in mantissa else mantissa + '.0'}E{int(exponent)}"
        return text
    return str(value)


def _reconfiguration_error(message: str) -> InvalidDynamicConfigError:
    # Kafka wraps a reconfigurable's ConfigException in another, and answers with its message.
    return InvalidDynamicConfigError(f"Invalid value org.apache.kafka.common.config.ConfigException: {message} for configuration Invalid dynamic configuration")


def _check_reconfiguration(current: BrokerConfig, updated: BrokerConfig) -> None:
    """Kafka's reconfigurables' validateReconfiguration: thread pools grow or shrink by at most half."""
    for key in THREAD_POOL_CONFIGS:
        field = _FIELD_BY_ALIAS[key]
        old, new = getattr(current, field), getattr(updated, field)
        if new == old:
            continue
        message = f"Dynamic thread count update validation failed for {key}={new}"
        if new <= 0:
            raise _reconfiguration_error(f"{message}, value should be at least 1")
        if new < old // 2:
            raise _reconfiguration_error(f"{message}, value should be at least half the current value {old}")
        if new > old * 2:
            raise _reconfiguration_error(f"{message}, value should not be greater than double the current value {old}")
    old_threads, new_threads = current.log_cleaner_threads, updated.log_cleaner_threads
    if new_threads != old_threads:
        if new_threads < 1:
            raise _reconfiguration_error("Log cleaner threads should be at least 1")
        if new_threads < old_threads // 2:
            raise _reconfiguration_error(f"Log cleaner threads cannot be reduced to less than half the current value {old_threads}")
        if new_threads > old_threads * 2:
            raise _reconfiguration_error(f"Log cleaner threads cannot be increased to more than double the current value {old_threads}")


def validate_dynamic_broker_config(props: Mapping[str, str], per_broker: bool, current: "CurrentConfig", layers: "DynamicLayers") -> None:
    """Kafka's DynamicBrokerConfig.validate, made by the broker that receives the change: ``props``
    is the resource's whole set of dynamic configs after it (one broker's, or with ``per_broker``
    False the cluster default), ``current`` the receiving broker's configuration and ``layers`` its
    dynamic configs as they are. Raises InvalidDynamicConfigError with Kafka's message."""
    known = set(_FIELD_BY_ALIAS) | set(KAFKA_BROKER_CONFIGS)
    fixed = sorted(k for k in props if (k in known and not is_dynamic(k) and k not in SECURITY_CONFIGS) or k in UNSUPPORTED_LISTENER_CONFIGS)
    fixed += sorted(k for k in props if k.startswith(LISTENER_PREFIX) and listener_store_config(k) is None)
    if fixed:
        raise InvalidDynamicConfigError(f"Cannot update these configs dynamically: {_names(fixed)}")
    unprefixed = sorted(k for k in props if k in SECURITY_CONFIGS)
    if unprefixed:
        raise InvalidDynamicConfigError(f"These security configs can be dynamically updated only per-listener using the listener prefix: {_names(unprefixed)}")
    for key in sorted(props):
        if key in DYNAMIC_CONFIGS:
            check_config_type(key, props[key])
        elif key in NO_EFFECT_DYNAMIC_CONFIGS:
            problem = type_problem(key, props[key])
            if problem:
                raise InvalidDynamicConfigError(problem)
    if not per_broker:
        per_broker_only = sorted(k for k in props if listener_store_config(k) is not None or k in PER_BROKER_ONLY or k == CORDONED_LOG_DIRS)
        if per_broker_only:
            raise InvalidDynamicConfigError(f"Cannot update these configs at default cluster level, broker id must be specified: {_names(per_broker_only)}")
    trial = layers.with_layer(per_broker, props)
    try:
        updated = trial.effective(current.static)
    except (ValidationError, ValueError) as e:
        raise InvalidDynamicConfigError(_first_error(e)) from None
    _check_reconfiguration(current.config, updated)
    for key in sorted(k for k in props if k in NO_EFFECT_DYNAMIC_CONFIGS):
        problem = feature_problem(key, props[key])
        if problem:  # a feature kbroker lacks, refused as at start
            raise InvalidDynamicConfigError(problem)


def _first_error(e: Exception) -> str:
    if isinstance(e, ValidationError):
        err = e.errors()[0]
        return str(err["msg"]).removeprefix("Value error, ")
    return str(e)


@dataclass(frozen=True)
class DynamicLayers:
    """The broker's two dynamic layers as the metadata log holds them: the cluster default ("")
    and its own (its node id)."""

    default: Mapping[str, str]
    own: Mapping[str, str]

    @classmethod
    def of(cls, image: MetadataImage, node_id: int) -> "DynamicLayers":
        return cls(image.configs.get((BROKER_RESOURCE, ""), {}), image.configs.get((BROKER_RESOURCE, str(node_id)), {}))

    def with_layer(self, per_broker: bool, props: Mapping[str, str]) -> "DynamicLayers":
        return DynamicLayers(self.default, props) if per_broker else DynamicLayers(props, self.own)

    def applicable(self) -> dict[str, str]:
        """The dynamic values a BrokerConfig takes, the broker's own over the default. The
        listener stores and the throttles are read by their own publishers; a dynamic config
        kbroker has no setting for (log.preallocate, the compression levels, ...) is kept and
        described only."""
        out: dict[str, str] = {}
        for layer in (self.default, self.own):
            out.update((k, v) for k, v in layer.items() if k in DYNAMIC_CONFIGS and k in _FIELD_BY_ALIAS)
        return out

    def effective(self, static: BrokerConfig) -> BrokerConfig:
        """``static`` with these layers on top; raises ValidationError if they do not fit."""
        applicable = self.applicable()
        if not applicable:
            return static
        return BrokerConfig.model_validate({**static_properties(static), **applicable})


def static_properties(config: BrokerConfig) -> dict[str, object]:
    """What server.properties (and the command line) set, by Kafka name, as BrokerConfig takes them back."""
    explicit = config.model_fields_set - {"listener_prefixed", "no_effect"}
    props: dict[str, object] = config.model_dump(by_alias=True, include=explicit)
    props.update(config.listener_prefixed)
    props.update(config.no_effect)
    return props


@dataclass(frozen=True)
class CurrentConfig:
    """A broker's configuration now, and the one it started with."""

    static: BrokerConfig
    config: BrokerConfig


Reconfigure = Callable[[BrokerConfig, BrokerConfig], None]


class DynamicBrokerConfig:
    """A metadata publisher: keeps this broker's effective configuration (``config``) and, each time
    its dynamic configs change, hands the old and the new one to every reconfigurable."""

    def __init__(self, node_id: int, static: BrokerConfig) -> None:
        self._node_id = node_id
        self.static = static
        # server.properties and Kafka's defaults by name, as DescribeConfigs shows them: fixed for the process.
        self.static_properties = static.as_properties()
        self.config = static
        self.layers = DynamicLayers({}, {})
        self._reconfigurables: list[tuple[str, Reconfigure]] = []

    @property
    def current(self) -> CurrentConfig:
        return CurrentConfig(self.static, self.config)

    def add_reconfigurable(self, name: str, reconfigure: Reconfigure) -> None:
        self._reconfigurables.append((name, reconfigure))

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        layers = DynamicLayers.of(image, self._node_id)
        if layers == self.layers:
            return
        self.layers = layers
        self._reconfigure(self._usable(layers))

    def _usable(self, layers: DynamicLayers) -> BrokerConfig:
        """The effective configuration, leaving out the values that cannot be applied (Kafka's
        removeInvalidConfigs): set through a controller, which checks no more than the name."""
        default = {k: v for k, v in layers.default.items() if self._applies(k, v, False)}
        own = {k: v for k, v in layers.own.items() if self._applies(k, v, True)}
        try:
            return DynamicLayers(default, own).effective(self.static)
        except (ValidationError, ValueError) as e:
            log.error("dynamic_config.invalid", node_id=self._node_id, error=_first_error(e), message="Dynamic broker configs together are invalid; the previous ones are kept")
            return self.config

    def _applies(self, key: str, value: str, per_broker: bool) -> bool:
        if key not in DYNAMIC_CONFIGS:
            return True
        try:
            check_config_type(key, value)
            DynamicLayers({}, {key: value}).effective(self.static)
        except (InvalidDynamicConfigError, ValidationError, ValueError) as e:
            source = "broker" if per_broker else "default cluster"
            log.error("dynamic_config.ignored", node_id=self._node_id, key=key, error=_first_error(e), message=f"Dynamic {source} config contains an invalid value; it is ignored")
            return False
        return True

    def _reconfigure(self, updated: BrokerConfig) -> None:
        old = self.config
        if updated == old:
            return
        self.config = updated
        changed = sorted(
            key
            for key in DYNAMIC_CONFIGS
            if key in _FIELD_BY_ALIAS and getattr(old, _FIELD_BY_ALIAS[key]) != getattr(updated, _FIELD_BY_ALIAS[key])
        )
        log.info("dynamic_config.updated", node_id=self._node_id, changed=changed)
        for name, reconfigure in self._reconfigurables:
            try:
                reconfigure(old, updated)
            except Exception:
                # One part failing to take a change must not keep the others from it.
                log.exception("dynamic_config.reconfigure_failed", node_id=self._node_id, reconfigurable=name)

    def source_of(self, key: str) -> int:
        """Where this broker's value of ``key`` comes from (DescribeConfigs' source)."""
        if key in self.layers.own:
            return DYNAMIC_BROKER_CONFIG
        if key in self.layers.default:
            return DYNAMIC_DEFAULT_BROKER_CONFIG
        return self.static_source_of(key)

    def static_source_of(self, key: str) -> int:
        """Whether server.properties set ``key`` or it has Kafka's default."""
        field = _FIELD_BY_ALIAS.get(key)
        if key in self.static.listener_prefixed or key in self.static.no_effect or (field is not None and field in self.static.model_fields_set):
            return STATIC_BROKER_CONFIG
        if key == "broker.id":  # Kafka describes the node id it takes as set
            return STATIC_BROKER_CONFIG
        return DEFAULT_CONFIG

    def value_of(self, key: str) -> str | None:
        """This broker's value of ``key`` as DescribeConfigs shows it."""
        field = _FIELD_BY_ALIAS.get(key)
        if field is None:
            for layer in (self.layers.own, self.layers.default, self.static.listener_prefixed, self.static.no_effect):
                if key in layer:
                    return layer[key]
            if key == "broker.id":
                return str(self.config.node_id)
            return kafka_default(key)
        return _as_text(getattr(self.config, field))


__all__ = [
    "CORDONED_LOG_DIRS",
    "DYNAMIC_CONFIGS",
    "DynamicBrokerConfig",
    "DynamicLayers",
    "FOLLOWER_REPLICATION_THROTTLED_RATE",
    "InvalidDynamicConfigError",
    "LEADER_REPLICATION_THROTTLED_RATE",
    "REPLICA_ALTER_LOG_DIRS_IO_MAX_BYTES_PER_SECOND",
    "check_config_type",
    "is_dynamic",
    "kafka_default",
    "validate_dynamic_broker_config",
]
