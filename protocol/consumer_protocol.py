"""The consumer's embedded protocol: what a classic-group member's subscription and assignment bytes hold.

The coordinator treats these bytes as opaque except where Kafka looks inside them:
OffsetDelete refuses to delete offsets of a topic the group still subscribes to.
"""

from __future__ import annotations

import struct
from functools import cache
from typing import Any, Callable

from kio.schema.consumer_protocol_subscription import v0, v1, v2, v3
from kio.serial import entity_reader
from kio.serial.errors import DecodeError

_VERSION = struct.Struct(">h")
_SUBSCRIPTIONS: tuple[type[Any], ...] = (
    v0.ConsumerProtocolSubscription,
    v1.ConsumerProtocolSubscription,
    v2.ConsumerProtocolSubscription,
    v3.ConsumerProtocolSubscription,
)


class ConsumerProtocolError(ValueError):
    pass


@cache
def _subscription_reader(version: int) -> Callable[[Any, int], Any]:
    return entity_reader(_SUBSCRIPTIONS[version])  # type: ignore[no-any-return]


def subscribed_topics(subscription: bytes) -> tuple[str, ...]:
    """The topics of a ConsumerProtocolSubscription (any version; newer ones read as the newest we know,
    since versions only append fields)."""
    if len(subscription) < _VERSION.size:
        raise ConsumerProtocolError("subscription shorter than its version")
    (version,) = _VERSION.unpack_from(subscription)
    if version < 0:
        raise ConsumerProtocolError(f"bad subscription version {version}")
    try:
        entity, _ = _subscription_reader(min(version, len(_SUBSCRIPTIONS) - 1))(memoryview(subscription).toreadonly()[_VERSION.size :], 0)
    except (DecodeError, ValueError, IndexError) as e:
        raise ConsumerProtocolError(f"undecodable subscription: {e}") from None
    return tuple(entity.topics)
