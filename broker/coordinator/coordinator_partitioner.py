"""Which partition of a coordinator's internal topic keeps a key: Kafka's ``Utils.abs(key.hashCode())
% partitions`` over Java's String.hashCode, as the group, transaction and share coordinators (and
the client quota callback) hash their keys. Free of the runtime's I/O, so sans-IO cores use it too."""

from __future__ import annotations


def java_string_hash(s: str) -> int:
    """Java's String.hashCode over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: str, partitions: int) -> int:
    """The coordinator partition of a group, transactional or share partition key, as Kafka hashes it."""
    h = java_string_hash(key)
    # Kafka's Utils.abs: Integer.MIN_VALUE maps to 0 rather than overflowing.
    return (0 if h == -(1 << 31) else abs(h)) % partitions
