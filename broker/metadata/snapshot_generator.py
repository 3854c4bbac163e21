"""SnapshotGenerator: writes a snapshot of the metadata image now and then, so the log can be trimmed.

Kafka's SnapshotGenerator. Every node runs one. It snapshots the image the loader publishes
once metadata.log.max.record.bytes.between.snapshots bytes of committed batches have been
published since the last snapshot, or once metadata.log.max.snapshot.interval.ms has passed
since then with something new published (0 turns the timer off). The snapshot holds the records
that rebuild the image (image_writer) and is named after the offset just past the image's last
record and that record's epoch, as Raft expects.

The publisher interface carries no sizes, so the generator also listens to Raft for the bytes of
each committed batch: registered with the raft manager before the loader, it has counted a batch
by the time the loader publishes its image. Loading a snapshot starts the count over.
"""

from __future__ import annotations

import time
from typing import Callable, Protocol, Sequence

import structlog

from broker.metadata.image_writer import image_records
from broker.metadata.metadata_delta import MetadataDelta
from broker.metadata.metadata_image import MetadataImage
from broker.metadata.metadata_records import MetadataRecord
from raft.replicated_log import OffsetAndEpoch
from storage.errors import KafkaStorageError

log = structlog.get_logger(__name__)

DEFAULT_MAX_BYTES_BETWEEN_SNAPSHOTS = 20 * 1024 * 1024  # metadata.log.max.record.bytes.between.snapshots
DEFAULT_MAX_SNAPSHOT_INTERVAL_MS = 3_600_000  # metadata.log.max.snapshot.interval.ms


class SnapshotWriter(Protocol):
    def append(self, records: Sequence[MetadataRecord]) -> None: ...

    def freeze(self) -> None: ...

    def close(self) -> None: ...


class SnapshotSource(Protocol):
    """What the generator needs of the raft manager."""

    def create_snapshot(self, snapshot_id: OffsetAndEpoch, last_contained_log_time_ms: int) -> SnapshotWriter | None:
        """A writer, or None when that snapshot exists already."""
        ...


Offload = Callable[[Callable[[], None], Callable[[BaseException | None], None]], None]
"""Runs its first argument (building and encoding the records: seconds for a large image) and then
calls the second with the error or None, on the caller's thread. The server runs the work on a
worker thread, as Kafka's SnapshotGenerator does, so the event loop that answers the quorum is
not held up past a fetch timeout; the image is immutable, so the worker reads it safely."""


def run_inline(work: Callable[[], None], done: Callable[[BaseException | None], None]) -> None:
    try:
        work()
    except Exception as e:
        done(e)
        raise
    done(None)


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class SnapshotGenerator:
    def __init__(
        self,
        raft: SnapshotSource,
        *,
        max_bytes_since_last_snapshot: int = DEFAULT_MAX_BYTES_BETWEEN_SNAPSHOTS,
        max_time_since_last_snapshot_ms: int = DEFAULT_MAX_SNAPSHOT_INTERVAL_MS,
        now_ms: Callable[[], int] = _wall_clock_ms,
        node_id: int | None = None,
        offload: Offload | None = None,
    ) -> None:
        self._raft = raft
        self._max_bytes = max_bytes_since_last_snapshot
        self._max_time_ms = max_time_since_last_snapshot_ms
        self._now_ms = now_ms
        self._bytes_since_last_snapshot = 0
        self._last_snapshot_ms = now_ms()
        self._last_contained_log_time_ms: int | None = None
        self._last_snapshot_offset = -1  # end offset (exclusive) of the last snapshot written or loaded
        self.snapshots_written = 0
        self._offload = offload or run_inline
        self._writing: OffsetAndEpoch | None = None  # the snapshot being written: one at a time
        self._log = log.bind(node=node_id)

    # -- Raft listener: the sizes and times of committed batches -----------------------------------

    def handle_commit(self, batch: object) -> None:
        self._bytes_since_last_snapshot += int(getattr(batch, "size_in_bytes", 0))
        timestamp = getattr(batch, "append_timestamp", None)
        if timestamp is not None and timestamp >= 0:
            self._last_contained_log_time_ms = int(timestamp)

    def handle_load_snapshot(self, snapshot_id: OffsetAndEpoch, records: Sequence[MetadataRecord]) -> None:
        self._reset(snapshot_id.offset)

    def handle_leader_change(self, leader_id: int | None, epoch: int) -> None:
        """Leadership does not matter here: every node snapshots its own copy of the log."""

    # -- MetadataPublisher --------------------------------------------------------------------------

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        end_offset = image.provenance + 1
        if end_offset <= self._last_snapshot_offset or image.provenance < 0:
            return
        reason = self._reason()
        if reason is not None:
            self.write_snapshot(image, reason)

    def _reason(self) -> str | None:
        if self._bytes_since_last_snapshot >= self._max_bytes:
            return f"{self._bytes_since_last_snapshot} bytes of records since the last snapshot"
        if self._max_time_ms > 0 and self._now_ms() - self._last_snapshot_ms >= self._max_time_ms:
            return f"more than {self._max_time_ms} ms since the last snapshot"
        return None

    def write_snapshot(self, image: MetadataImage, reason: str = "asked for") -> OffsetAndEpoch | None:
        """Start writing a snapshot of ``image`` (a committed image); its id, or None if none is
        started. With the default inline offload the snapshot is complete on return."""
        if self._writing is not None:
            return None
        snapshot_id = OffsetAndEpoch(image.provenance + 1, image.provenance_epoch)
        log_time_ms = self._last_contained_log_time_ms if self._last_contained_log_time_ms is not None else self._now_ms()
        try:
            writer = self._raft.create_snapshot(snapshot_id, log_time_ms)
        except ValueError as e:
            # Past the high watermark this node knows: the image is ahead of what Raft will snapshot yet.
            self._log.info("metadata.snapshot_deferred", snapshot_id=str(snapshot_id), reason=str(e))
            return None
        except KafkaStorageError:
            # The metadata log dir is offline: logged once by the LogDirFailureChannel, whose handler halts the node.
            return None
        if writer is None:
            self._reset(snapshot_id.offset)
            return None
        self._writing = snapshot_id
        # Counted from the start, so the records committed while this one is written count towards the next.
        self._reset(snapshot_id.offset)
        started = time.perf_counter()
        count = 0

        def build_and_write() -> None:
            nonlocal count
            records = image_records(image)
            count = len(records)
            writer.append(records)

        def finish(error: BaseException | None) -> None:
            self._writing = None
            try:
                if error is None:
                    writer.freeze()
            except KafkaStorageError as e:
                # Reported to the LogDirFailureChannel already; this runs on the loop, where it must not raise.
                error = e
            finally:
                writer.close()
            if error is not None:
                self._log.error("metadata.snapshot_failed", offset=snapshot_id.offset, epoch=snapshot_id.epoch, error=repr(error))
                return
            self.snapshots_written += 1
            duration_ms = round((time.perf_counter() - started) * 1000, 1)
            self._log.info(
                "metadata.snapshot_written", offset=snapshot_id.offset, epoch=snapshot_id.epoch, records=count, reason=reason, duration_ms=duration_ms
            )

        self._offload(build_and_write, finish)
        return snapshot_id

    def _reset(self, end_offset: int) -> None:
        self._bytes_since_last_snapshot = 0
        self._last_snapshot_ms = self._now_ms()
        self._last_snapshot_offset = max(self._last_snapshot_offset, end_offset)


__all__ = ["DEFAULT_MAX_BYTES_BETWEEN_SNAPSHOTS", "DEFAULT_MAX_SNAPSHOT_INTERVAL_MS", "Offload", "SnapshotGenerator", "SnapshotSource", "SnapshotWriter", "run_inline"]
