"""What a streams group runs with: the broker's ``group.streams.*`` settings, each overridden by
the group's own ``streams.*`` config (``kafka-configs --entity-type groups``) where it sets one,
capped to the broker's bounds as Kafka 4.4's GroupConfig.evaluate caps them:
``streams.session.timeout.ms`` and ``streams.heartbeat.interval.ms`` to
``group.streams.min/max.session.timeout.ms`` and ``…heartbeat.interval.ms``,
``streams.num.standby.replicas`` to ``group.streams.max.standby.replicas``.

Read from the metadata image each time they are asked for: a change takes effect at the
member's next heartbeat (a new standby count is a new assignment), as in Kafka.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from broker.group.group_config import (
    GROUP_CONFIGS,
    STREAMS_HEARTBEAT_INTERVAL_MS,
    STREAMS_SESSION_TIMEOUT_MS,
    InvalidGroupConfigError,
    parse_value,
)
from broker.metadata.metadata_image import GROUP_RESOURCE

log = structlog.get_logger(__name__)

STREAMS_NUM_STANDBY_REPLICAS = "streams.num.standby.replicas"

# A group's configs by group id, as the metadata image holds them (empty: it sets none).
GroupProps = Callable[[str], Mapping[str, str]]


@dataclass(frozen=True, slots=True)
class StreamsGroupBounds:
    """config -> (minimum, maximum) a group's value is capped to."""

    ints: Mapping[str, tuple[int, int]]

    @classmethod
    def of(cls, config: Any) -> StreamsGroupBounds:
        """From a BrokerConfig."""
        c = config
        return cls(
            {
                STREAMS_SESSION_TIMEOUT_MS: (c.group_streams_min_session_timeout_ms, c.group_streams_max_session_timeout_ms),
                STREAMS_HEARTBEAT_INTERVAL_MS: (c.group_streams_min_heartbeat_interval_ms, c.group_streams_max_heartbeat_interval_ms),
                STREAMS_NUM_STANDBY_REPLICAS: (0, c.group_streams_max_standby_replicas),
            }
        )


class StreamsGroupConfigs:
    """The StreamsGroupManager's group config lookup: each answer None where the group sets none."""

    def __init__(self, bounds: StreamsGroupBounds, group_props: GroupProps) -> None:
        self.bounds = bounds
        self._group_props = group_props
        # Per group: the props last parsed (the image's own mapping) and what they gave, so a
        # group's capping is logged once per change.
        self._parsed: dict[str, tuple[Mapping[str, str], Mapping[str, int]]] = {}

    @classmethod
    def of_metadata(cls, config: Any, metadata: Any) -> StreamsGroupConfigs:
        """From a BrokerConfig and a MetadataCache (its image as it is at each call)."""
        return cls(StreamsGroupBounds.of(config), lambda group_id: metadata.image.configs.get((GROUP_RESOURCE, group_id), {}))

    def streams_session_timeout_ms(self, group_id: str) -> int | None:
        return self._overrides(group_id).get(STREAMS_SESSION_TIMEOUT_MS)

    def streams_heartbeat_interval_ms(self, group_id: str) -> int | None:
        return self._overrides(group_id).get(STREAMS_HEARTBEAT_INTERVAL_MS)

    def streams_num_standby_replicas(self, group_id: str) -> int | None:
        return self._overrides(group_id).get(STREAMS_NUM_STANDBY_REPLICAS)

    def _overrides(self, group_id: str) -> Mapping[str, int]:
        props = self._group_props(group_id)
        if not props:
            self._parsed.pop(group_id, None)
            return {}
        cached = self._parsed.get(group_id)
        if cached is not None and cached[0] is props:
            return cached[1]
        ints: dict[str, int] = {}
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
            ints[name] = capped
        self._parsed[group_id] = (props, ints)
        return ints
