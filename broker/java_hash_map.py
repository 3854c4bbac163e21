"""The order a java.util.HashMap of strings iterates in: Kafka builds several of its answers and
messages from such maps (quota keys, internal topics to create, creation errors), and kbroker
prints them in the same order."""

from __future__ import annotations

from collections.abc import Iterable

from broker.coordinator.coordinator_partitioner import java_string_hash


def java_hash_map_order(keys: Iterable[str]) -> list[str]:
    """The order a java.util.HashMap iterates these keys in, put in this order: by bucket of the
    table that holds them all (16, doubled each time it is more than three quarters full), then
    as put."""
    distinct = list(dict.fromkeys(keys))
    capacity = 16
    while len(distinct) > capacity * 3 // 4:
        capacity *= 2

    def bucket(key: str) -> int:
        h = java_string_hash(key) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(distinct, key=bucket)
