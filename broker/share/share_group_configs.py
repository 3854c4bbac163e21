"""What a share group runs with: the broker's ``group.share.*`` settings, each overridden by the
group's own ``share.*`` config (``kafka-configs --entity-type groups``) where it sets one. Kafka
4.4's ShareGroupConfigProvider and GroupConfigManager, sans-IO.

A group's value outside the broker's bounds (they may have changed since it was set) is capped
to them, as Kafka's GroupConfig.evaluate does: ``share.session.timeout.ms`` and
``share.heartbeat.interval.ms`` to ``group.share.min/max.session.timeout.ms`` and
``…heartbeat.interval.ms``, ``share.record.lock.duration.ms``, ``share.delivery.count.limit``
and ``share.partition.max.record.locks`` to their ``group.share.min/max.…``.
``share.auto.offset.reset`` and ``share.isolation.level`` have no broker setting: Kafka's
defaults (latest, read_uncommitted) apply where the group sets none.

The group configs are read from the metadata image each time they are asked for, so a change
takes effect at the next use, as in Kafka: the session timeout and heartbeat interval at the
member's next heartbeat, the record lock duration at the next acquisition, the delivery count
limit and record locks at the next check, the auto offset reset when a share partition is
initialised, the isolation level at the next ShareFetch. A SharePartition keeps the
SharePartitionConfig it was given: its owner asks ``share_partition_config`` again to follow
changes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from broker.group.group_config import (
    DLQ_TOPIC_NAME,
    GROUP_CONFIGS,
    SHARE_AUTO_OFFSET_RESET,
    SHARE_HEARTBEAT_INTERVAL_MS,
    SHARE_SESSION_TIMEOUT_MS,
    InvalidGroupConfigError,
    parse_value,
)
from broker.metadata.metadata_image import GROUP_RESOURCE
from broker.partition import READ_COMMITTED, READ_UNCOMMITTED
from broker.share.share_partition import ShareAutoOffsetReset, SharePartitionConfig

log = structlog.get_logger(__name__)

SHARE_RECORD_LOCK_DURATION_MS = "share.record.lock.duration.ms"
SHARE_DELIVERY_COUNT_LIMIT = "share.delivery.count.limit"
SHARE_PARTITION_MAX_RECORD_LOCKS = "share.partition.max.record.locks"
SHARE_ISOLATION_LEVEL = "share.isolation.level"
SHARE_RENEW_ACKNOWLEDGE_ENABLE = "share.renew.acknowledge.enable"
DLQ_COPY_RECORD_ENABLE = "errors.deadletterqueue.copy.record.enable"

# A group's configs by group id, as the metadata image holds them (empty: it sets none).
GroupProps = Callable[[str], Mapping[str, str]]


@dataclass(frozen=True, slots=True)
class ShareGroupBounds:
    """The broker's group.share.* settings a group config defaults to and is capped by:
    config -> (broker value, minimum, maximum)."""

    ints: Mapping[str, tuple[int, int, int]]

    @classmethod
    def of(cls, config: Any) -> ShareGroupBounds:
        """From a BrokerConfig."""
        c = config
        return cls(
            {
                SHARE_SESSION_TIMEOUT_MS: (c.group_share_session_timeout_ms, c.group_share_min_session_timeout_ms, c.group_share_max_session_timeout_ms),
                SHARE_HEARTBEAT_INTERVAL_MS: (
                    c.group_share_heartbeat_interval_ms,
                    c.group_share_min_heartbeat_interval_ms,
                    c.group_share_max_heartbeat_interval_ms,
                ),
                SHARE_RECORD_LOCK_DURATION_MS: (
                    c.group_share_record_lock_duration_ms,
                    c.group_share_min_record_lock_duration_ms,
                    c.group_share_max_record_lock_duration_ms,
                ),
                SHARE_DELIVERY_COUNT_LIMIT: (c.group_share_delivery_count_limit, c.group_share_min_delivery_count_limit, c.group_share_max_delivery_count_limit),
                SHARE_PARTITION_MAX_RECORD_LOCKS: (
                    c.group_share_partition_max_record_locks,
                    c.group_share_min_partition_max_record_locks,
                    c.group_share_max_partition_max_record_locks,
                ),
            }
        )


@dataclass(frozen=True, slots=True)
class _GroupOverrides:
    """One group's share.* configs, parsed and capped (absent: the group sets none)."""

    ints: Mapping[str, int]
    auto_offset_reset: str | None
    isolation_level: str | None
    renew_acknowledge_enable: bool = True


_NO_OVERRIDES = _GroupOverrides({}, None, None)


class ShareGroupConfigs:
    """Each share group's effective settings. Also the ShareGroupManager's group config lookup
    (``share_session_timeout_ms``, ``share_heartbeat_interval_ms``: None where the group sets none)."""

    def __init__(self, bounds: ShareGroupBounds, group_props: GroupProps) -> None:
        self.bounds = bounds
        self._group_props = group_props
        # Per group: the props last parsed (the image's own mapping) and what they gave; a
        # group's props are parsed, and their capping logged, once per change.
        self._parsed: dict[str, tuple[Mapping[str, str], _GroupOverrides]] = {}

    @classmethod
    def of_metadata(cls, config: Any, metadata: Any) -> ShareGroupConfigs:
        """From a BrokerConfig and a MetadataCache (its image as it is at each call)."""
        return cls(ShareGroupBounds.of(config), lambda group_id: metadata.image.configs.get((GROUP_RESOURCE, group_id), {}))

    # -- ShareGroupManager's lookup ------------------------------------------------------------

    def share_session_timeout_ms(self, group_id: str) -> int | None:
        return self._overrides(group_id).ints.get(SHARE_SESSION_TIMEOUT_MS)

    def share_heartbeat_interval_ms(self, group_id: str) -> int | None:
        return self._overrides(group_id).ints.get(SHARE_HEARTBEAT_INTERVAL_MS)

    # -- ShareFetch ---------------------------------------------------------------------------

    def share_partition_config(self, group_id: str) -> SharePartitionConfig:
        own = self._overrides(group_id)
        reset = ShareAutoOffsetReset.LATEST
        if own.auto_offset_reset is not None and own.auto_offset_reset.lower() == "earliest":
            reset = ShareAutoOffsetReset.EARLIEST
        return SharePartitionConfig(
            delivery_count_limit=self._int(own, SHARE_DELIVERY_COUNT_LIMIT),
            max_record_locks=self._int(own, SHARE_PARTITION_MAX_RECORD_LOCKS),
            record_lock_duration_ms=self._int(own, SHARE_RECORD_LOCK_DURATION_MS),
            auto_offset_reset=reset,
            renew_acknowledge_enable=own.renew_acknowledge_enable,
        )

    def share_isolation_level(self, group_id: str) -> int:
        """0 (read_uncommitted, Kafka's default) or 1 (read_committed), as a Fetch names them."""
        return READ_COMMITTED if self._overrides(group_id).isolation_level == "read_committed" else READ_UNCOMMITTED

    # -- the dead-letter queue (KIP-1191) -----------------------------------------------------

    def dlq_topic_name(self, group_id: str) -> str | None:
        """ShareGroupConfigProvider.errorsDLQTopicName: None where the group names no DLQ topic."""
        name = _parsed(group_id, self._group_props(group_id), DLQ_TOPIC_NAME)
        return name if isinstance(name, str) and name else None

    def dlq_copy_record_enable(self, group_id: str) -> bool:
        """errors.deadletterqueue.copy.record.enable: the original key and value go to the DLQ too."""
        return _parsed(group_id, self._group_props(group_id), DLQ_COPY_RECORD_ENABLE) is True

    # -- parsing -------------------------------------------------------------------------------

    def _int(self, own: _GroupOverrides, name: str) -> int:
        value = own.ints.get(name)
        return self.bounds.ints[name][0] if value is None else value

    def _overrides(self, group_id: str) -> _GroupOverrides:
        props = self._group_props(group_id)
        if not props:
            self._parsed.pop(group_id, None)
            return _NO_OVERRIDES
        cached = self._parsed.get(group_id)
        if cached is not None and cached[0] is props:
            return cached[1]
        overrides = self._evaluate(group_id, props)
        self._parsed[group_id] = (props, overrides)
        return overrides

    def _evaluate(self, group_id: str, props: Mapping[str, str]) -> _GroupOverrides:
        ints: dict[str, int] = {}
        for name, (_, low, high) in self.bounds.ints.items():
            value = _parsed(group_id, props, name)
            if value is None:
                continue
            assert isinstance(value, int)
            capped = min(max(value, low), high)
            if capped != value:
                log.warning("share_group_config.capped", group=group_id, config=name, value=value, minimum=low, maximum=high, effective=capped)
            ints[name] = capped
        session = ints.get(SHARE_SESSION_TIMEOUT_MS, self.bounds.ints[SHARE_SESSION_TIMEOUT_MS][0])
        heartbeat = ints.get(SHARE_HEARTBEAT_INTERVAL_MS, self.bounds.ints[SHARE_HEARTBEAT_INTERVAL_MS][0])
        if (SHARE_SESSION_TIMEOUT_MS in ints or SHARE_HEARTBEAT_INTERVAL_MS in ints) and session <= heartbeat:
            log.warning("share_group_config.session_not_above_heartbeat", group=group_id, session_timeout_ms=session, heartbeat_interval_ms=heartbeat)
        reset = _parsed(group_id, props, SHARE_AUTO_OFFSET_RESET)
        if isinstance(reset, str) and reset.lower().startswith("by_duration:"):
            # SharePartition starts at the earliest or the latest offset only: Kafka's default.
            log.warning("share_group_config.by_duration_unsupported", group=group_id, config=SHARE_AUTO_OFFSET_RESET, value=reset, effective="latest")
        isolation = _parsed(group_id, props, SHARE_ISOLATION_LEVEL)
        renew = _parsed(group_id, props, SHARE_RENEW_ACKNOWLEDGE_ENABLE)
        return _GroupOverrides(
            ints, reset if isinstance(reset, str) else None, isolation if isinstance(isolation, str) else None, renew is not False
        )


def _parsed(group_id: str, props: Mapping[str, str], name: str) -> object | None:
    raw = props.get(name)
    if raw is None:
        return None
    try:
        return parse_value(GROUP_CONFIGS[name], raw)
    except InvalidGroupConfigError as e:
        # The controller checked it; a record that still fails (written by a newer or buggy
        # writer) is left out, as the group coordinator's GroupConfigManager leaves it out.
        log.error("share_group_config.invalid", group=group_id, config=name, error=str(e))
        return None


__all__ = ["GroupProps", "ShareGroupBounds", "ShareGroupConfigs"]
