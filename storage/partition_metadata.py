"""Kafka's `partition.metadata` file: which topic id a partition folder belongs to.

Format: "version: 0\ntopic_id: <id>\n", the id printed as Kafka prints a Uuid (URL-safe
base64 of its 16 bytes, no padding).
"""

from __future__ import annotations

import base64
import os
import threading
import uuid
from pathlib import Path

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
    """Kafka's PartitionMetadataFile: recorded in memory, written and fsynced later.

    Creating a partition must not wait on the disk: ``__consumer_offsets`` alone is 50 of them,
    created while a consumer's first FindCoordinator waits and every other request on the node
    waits behind it. As Kafka does, ``record`` only remembers the id and ``maybe_flush`` (the
    log-flush job's worker thread, a log flush, a clean shutdown) writes a temporary file, fsyncs
    it, renames it into place and fsyncs the folder. Until then a crash leaves the file missing
    (or, from an older kbroker, empty); both read as "no topic id yet" and the log records it
    again from the metadata image it is opened with.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._unflushed: uuid.UUID | None = None

    @property
    def dirty(self) -> bool:
        return self._unflushed is not None

    def read(self) -> uuid.UUID | None:
        pending = self._unflushed
        if pending is not None:
            return pending
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
        with self._lock:
            self._unflushed = topic_id

    def discard(self) -> None:
        """The partition is being deleted: never write this id, not even into a folder of the same name created later.

        The lock is never held across I/O: the event loop discards thousands of these when a topic
        is deleted, and must not wait for the flush thread's fsyncs.
        """
        with self._lock:
            self._unflushed = None

    def maybe_flush(self) -> None:
        """Write and fsync the file and its folder if recorded since the last flush (safe from any thread)."""
        topic_id = self._unflushed
        if topic_id is None:
            return
        try:
            # Everything below goes through this fd: once open, it is the folder the id was
            # recorded for, even if the partition is deleted (its folder renamed) and one of the
            # same name created while the file is written.
            dir_fd = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY)
        except FileNotFoundError:
            self._written(topic_id)  # the partition was deleted meanwhile
            return
        try:
            with self._lock:
                topic_id = self._unflushed
            if topic_id is None:
                return
            tmp = self.path.name + ".tmp"
            try:
                with open(tmp, "w", opener=lambda name, flags: os.open(name, flags, 0o644, dir_fd=dir_fd)) as f:
                    f.write(f"version: {_VERSION}\ntopic_id: {uuid_to_kafka_string(topic_id)}\n")
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
                os.fsync(dir_fd)
            except FileNotFoundError:
                pass  # the partition was deleted and its folder removed meanwhile
            self._written(topic_id)
        finally:
            os.close(dir_fd)

    def _written(self, topic_id: uuid.UUID) -> None:
        with self._lock:
            # A record() or discard() while the file was written wins: it is flushed next time, or never.
            if self._unflushed == topic_id:
                self._unflushed = None


def flush_partition_metadata(files: list[PartitionMetadataFile]) -> None:
    for f in files:
        f.maybe_flush()
