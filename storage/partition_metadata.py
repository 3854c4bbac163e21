"""Kafka's `partition.metadata` file: which topic id a partition folder belongs to.

Format: "version: 0\ntopic_id: <id>\n", the id printed as Kafka prints a Uuid (URL-safe
base64 of its 16 bytes, no padding).
"""

from __future__ import annotations

import base64
import os
import uuid
from pathlib import Path

from storage.checkpoints import fsync_dir
from storage.errors import KafkaStorageError

PARTITION_METADATA_FILE = "partition.metadata"
_VERSION = 0


def uuid_to_kafka_string(value: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def uuid_from_kafka_string(text: str) -> uuid.UUID:
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != 16:
        raise ValueError(f"{text!r} is not a 16-byte Kafka Uuid")
    return uuid.UUID(bytes=raw)


def read_partition_metadata(path: Path) -> uuid.UUID | None:
    if not path.exists():
        return None
    fields: dict[str, str] = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    try:
        if int(fields.get("version", "-1")) != _VERSION:
            raise ValueError(f"unsupported version {fields.get('version')}")
        return uuid_from_kafka_string(fields["topic_id"])
    except (KeyError, ValueError) as e:
        raise KafkaStorageError(f"malformed {path}: {e}") from None


def write_partition_metadata(path: Path, topic_id: uuid.UUID) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(f"version: {_VERSION}\ntopic_id: {uuid_to_kafka_string(topic_id)}\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)
