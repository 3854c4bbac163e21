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


class PartitionMetadataFile:
    """Kafka's PartitionMetadataFile: recorded at once, fsynced later.

    Creating a partition must not wait on the disk: ``__consumer_offsets`` alone is 50 of them,
    created while a consumer's first FindCoordinator waits, and two fsyncs each (file and
    folder) took about 200 ms of that wait. Kafka likewise writes the file and flushes it from
    its scheduler. Until the flush a crash can leave the file missing or empty; both read as
    "no topic id yet" and the log writes it again from the metadata image it is opened with.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._dirty = False

    @property
    def dirty(self) -> bool:
        return self._dirty

    def read(self) -> uuid.UUID | None:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return None
        if not text:
            return None
        fields: dict[str, str] = {}
        for line in text.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields[key.strip()] = value.strip()
        try:
            if int(fields.get("version", "-1")) != _VERSION:
                raise ValueError(f"unsupported version {fields.get('version')}")
            return uuid_from_kafka_string(fields["topic_id"])
        except (KeyError, ValueError) as e:
            raise KafkaStorageError(f"malformed {self.path}: {e}") from None

    def record(self, topic_id: uuid.UUID) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w") as f:
            f.write(f"version: {_VERSION}\ntopic_id: {uuid_to_kafka_string(topic_id)}\n")
        os.replace(tmp, self.path)
        self._dirty = True

    def maybe_flush(self) -> None:
        """fsync the file and its folder if recorded since the last flush (safe from any thread)."""
        if not self._dirty:
            return
        self._dirty = False
        try:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            fsync_dir(self.path.parent)
        except FileNotFoundError:
            pass  # the partition was deleted meanwhile
        except BaseException:
            self._dirty = True
            raise


def flush_partition_metadata(files: list[PartitionMetadataFile]) -> None:
    for f in files:
        f.maybe_flush()
