"""What a streams group runs with: the broker's ``group.streams.*`` settings, each overridden by
the group's own ``streams.*`` config (``kafka-configs --entity-type groups``) where it sets one,
capped to the broker's bounds as Kafka 4.4's GroupConfig.evaluate caps them:
``streams.session.timeout.ms`` and ``streams.heartbeat.interval.ms`` to
``group.streams.min/max.session.timeout.ms`` and ``…heartbeat.interval.ms``,
``streams.assignment.interval.ms`` to ``group.streams.min/max.assignment.interval.ms``,
``streams.num.standby.replicas`` to ``group.streams.max.standby.replicas`` and
``streams.task.offset.interval.ms`` to at least ``group.streams.min.task.offset.interval.ms``
(``streams.initial.rebalance.delay.ms`` and ``streams.acceptable.recovery.lag`` are not capped).

Read from the metadata image each time they are asked for: a change takes effect at the
member's next heartbeat (a new standby count or rack-aware tag list is a new assignment), as in
Kafka. ``group.streams.assignment.interval.ms`` is one of Kafka's dynamic broker configs: its
broker value is read with its dynamic layers too (this broker's, then the cluster default's).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from broker.config import streams_rack_aware_assignment_tags
from broker.group.group_config import (
    GROUP_CONFIGS,
    STREAMS_HEARTBEAT_INTERVAL_MS,
    STREAMS_RACK_AWARE_ASSIGNMENT_TAGS,
    STREAMS_SESSION_TIMEOUT_MS,
    InvalidGroupConfigError,
    parse_value,
)
from broker.metadata.metadata_image import BROKER_RESOURCE, GROUP_RESOURCE

log = structlog.get_logger(__name__)

STREAMS_NUM_STANDBY_REPLICAS = "streams.num.standby.replicas"
STREAMS_INITIAL_REBALANCE_DELAY_MS = "streams.initial.rebalance.delay.ms"
STREAMS_ASSIGNMENT_INTERVAL_MS = "streams.assignment.interval.ms"
STREAMS_TASK_OFFSET_INTERVAL_MS = "streams.task.offset.interval.ms"
STREAMS_ACCEPTABLE_RECOVERY_LAG = "streams.acceptable.recovery.lag"
GROUP_STREAMS_ASSIGNMENT_INTERVAL_MS = "group.streams.assignment.interval.ms"
_NO_MAXIMUM = 2**63 - 1

# A group's configs by group id, as the metadata image holds them (empty: it sets none).
GroupProps = Callable[[str], Mapping[str, str]]
# The broker's dynamic configs, highest precedence first: its own (its node id), the cluster default's.
BrokerLayers = Callable[[], Iterable[Mapping[str, str]]]


@dataclass(frozen=True, slots=True)
class StreamsGroupBounds:
    """config -> (minimum, maximum) a group's value is capped to, and the broker settings the
    StreamsGroupManager is not handed itself (its shard passes it only the others)."""

    ints: Mapping[str, tuple[int, int]]
    initial_rebalance_delay_ms: int = 3000
    assignment_interval_ms: int = 1000
    rack_aware_assignment_tags: tuple[str, ...] = ()

    @classmethod
    def of(cls, config: Any) -> StreamsGroupBounds:
        """From a BrokerConfig."""
        c = config
        return cls(
            {
                STREAMS_SESSION_TIMEOUT_MS: (c.group_streams_min_session_timeout_ms, c.group_streams_max_session_timeout_ms),
                STREAMS_HEARTBEAT_INTERVAL_MS: (c.group_streams_min_heartbeat_interval_ms, c.group_streams_max_heartbeat_interval_ms),
                STREAMS_NUM_STANDBY_REPLICAS: (0, c.group_streams_max_standby_replicas),
                STREAMS_INITIAL_REBALANCE_DELAY_MS: (0, _NO_MAXIMUM),
                STREAMS_ASSIGNMENT_INTERVAL_MS: (c.group_streams_min_assignment_interval_ms, c.group_streams_max_assignment_interval_ms),
                STREAMS_TASK_OFFSET_INTERVAL_MS: (c.group_streams_min_task_offset_interval_ms, _NO_MAXIMUM),
                STREAMS_ACCEPTABLE_RECOVERY_LAG: (0, _NO_MAXIMUM),
            },
            initial_rebalance_delay_ms=c.group_streams_initial_rebalance_delay_ms,
            assignment_interval_ms=int(c.no_effect.get(GROUP_STREAMS_ASSIGNMENT_INTERVAL_MS, "1000")),
            rack_aware_assignment_tags=streams_rack_aware_assignment_tags(c.group_streams_rack_aware_assignment_tags),
        )


class StreamsGroupConfigs:
    """The StreamsGroupManager's group config lookup: each answer None where the group sets none,
    except ``streams_initial_rebalance_delay_ms``, ``streams_assignment_interval_ms`` and
    ``streams_rack_aware_assignment_tags``, which fall back to the broker's setting themselves."""

    def __init__(self, bounds: StreamsGroupBounds, group_props: GroupProps, broker_layers: BrokerLayers = lambda: ()) -> None:
        self.bounds = bounds
        self._group_props = group_props
        self._broker_layers = broker_layers
        # Per group: the props last parsed (the image's own mapping) and what they gave, so a
        # group's capping is logged once per change.
        self._parsed: dict[str, tuple[Mapping[str, str], Mapping[str, object]]] = {}

    @classmethod
    def of_metadata(cls, config: Any, metadata: Any) -> StreamsGroupConfigs:
        """From a BrokerConfig and a MetadataCache (its image as it is at each call)."""
        node = str(config.node_id)
        return cls(
            StreamsGroupBounds.of(config),
            lambda group_id: metadata.image.configs.get((GROUP_RESOURCE, group_id), {}),
            lambda: (metadata.image.configs.get((BROKER_RESOURCE, node), {}), metadata.image.configs.get((BROKER_RESOURCE, ""), {})),
        )

    def streams_session_timeout_ms(self, group_id: str) -> int | None:
        return self._int(group_id, STREAMS_SESSION_TIMEOUT_MS)

    def streams_heartbeat_interval_ms(self, group_id: str) -> int | None:
        return self._int(group_id, STREAMS_HEARTBEAT_INTERVAL_MS)

    def streams_num_standby_replicas(self, group_id: str) -> int | None:
        return self._int(group_id, STREAMS_NUM_STANDBY_REPLICAS)

    def streams_task_offset_interval_ms(self, group_id: str) -> int | None:
        return self._int(group_id, STREAMS_TASK_OFFSET_INTERVAL_MS)

    def streams_acceptable_recovery_lag(self, group_id: str) -> int | None:
        return self._int(group_id, STREAMS_ACCEPTABLE_RECOVERY_LAG)

    def streams_initial_rebalance_delay_ms(self, group_id: str) -> int:
        own = self._int(group_id, STREAMS_INITIAL_REBALANCE_DELAY_MS)
        return self.bounds.initial_rebalance_delay_ms if own is None else own

    def streams_assignment_interval_ms(self, group_id: str) -> int:
        own = self._int(group_id, STREAMS_ASSIGNMENT_INTERVAL_MS)
        return self._broker_assignment_interval_ms() if own is None else own

    def streams_rack_aware_assignment_tags(self, group_id: str) -> tuple[str, ...]:
        own = self._overrides(group_id).get(STREAMS_RACK_AWARE_ASSIGNMENT_TAGS)
        if own is None:
            return self.bounds.rack_aware_assignment_tags
        assert isinstance(own, tuple)
        return own

    def _broker_assignment_interval_ms(self) -> int:
        for layer in self._broker_layers():
            raw = layer.get(GROUP_STREAMS_ASSIGNMENT_INTERVAL_MS)
            if raw is not None and raw.strip().isdigit():
                return int(raw)
        return self.bounds.assignment_interval_ms

    def _int(self, group_id: str, name: str) -> int | None:
        value = self._overrides(group_id).get(name)
        assert value is None or isinstance(value, int)
        return value

    def _overrides(self, group_id: str) -> Mapping[str, object]:
        props = self._group_props(group_id)
        if not props:
            self._parsed.pop(group_id, None)
            return {}
        cached = self._parsed.get(group_id)
        if cached is not None and cached[0] is props:
            return cached[1]
        values: dict[str, object] = {}
        raw_tags = props.get(STREAMS_RACK_AWARE_ASSIGNMENT_TAGS)
        if raw_tags is not None:
            tags = parse_value(GROUP_CONFIGS[STREAMS_RACK_AWARE_ASSIGNMENT_TAGS], raw_tags)
            assert isinstance(tags, list)
            values[STREAMS_RACK_AWARE_ASSIGNMENT_TAGS] = tuple(tags)
        for name, (low, high) in self.bounds.ints.items():
            raw = props.get(name)
            if raw is None:
                continue
            try:
                value = parse_value(GROUP_CONFIGS[name], raw)
            except InvalidGroupConfigError as e:
                # The controller checked it; a record that still fails is left out, as Kafka's
                # GroupConfigManager leaves it out.
                log.error("streams_group_config.invalid", group=group_id, config=name, error=str(e))
                continue
            assert isinstance(value, int)
            capped = min(max(value, low), high)
            if capped != value:
                log.warning("streams_group_config.capped", group=group_id, config=name, value=value, minimum=low, maximum=high, effective=capped)
            values[name] = capped
        self._parsed[group_id] = (props, values)
        return values
