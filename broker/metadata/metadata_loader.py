"""MetadataLoader: committed metadata batches in, immutable images out to the publishers.

Kafka's MetadataLoader with its batch loader folded in. Each committed batch is replayed into
a MetadataDelta over the current image; at the end of the batch the next image is built and
every publisher gets (delta, image), in the order they were installed. Records between
BeginTransactionRecord and EndTransactionRecord are held back, across batches if need be,
and published together; AbortTransactionRecord drops them. What came before a
BeginTransactionRecord in the same batch is published first, so an abort never takes it
along.

A snapshot replaces the image: it is built from the empty image, and publishers get a delta
from their previous image to the new one (MetadataDelta.diff), so they still act on
differences only.

Until it first reaches the Raft high watermark, the loader publishes nothing (Kafka's
"catching up"): a restarted broker replaying its metadata log would otherwise become, one
batch at a time, leader of partitions it lost long ago. Once caught up, publishers get one
delta from the image they last saw to the current one. A record that contradicts the image raises MetadataImageError and nothing
of its batch is published past the last complete point. A publisher that raises is logged
and the others still run: the image is already the new one (Kafka's fault handler).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

import structlog

from broker.metadata.metadata_delta import MetadataDelta
from broker.metadata.metadata_image import EMPTY_IMAGE, MetadataImage, MetadataImageError
from broker.metadata.metadata_publisher import MetadataPublisher
from broker.metadata.metadata_records import AbortTransactionRecord, BeginTransactionRecord, EndTransactionRecord, MetadataRecord

log = structlog.get_logger(__name__)


class CommittedBatch(Protocol):
    """Raft's committed batch: records at offsets base_offset, base_offset + 1, ..."""

    base_offset: int
    last_offset: int
    records: Sequence[MetadataRecord]


@dataclass(frozen=True, slots=True)
class Batch:
    base_offset: int
    last_offset: int
    records: Sequence[MetadataRecord]
    epoch: int = -1


class MetadataLoader:
    def __init__(self, high_watermark: Callable[[], int | None] | None = None) -> None:
        """``high_watermark`` gives the Raft log's; without it every batch is published at once."""
        self.image: MetadataImage = EMPTY_IMAGE
        # What the publishers last saw: behind ``image`` only while catching up.
        self._published: MetadataImage = EMPTY_IMAGE
        self._publishers: list[MetadataPublisher] = []
        # An open metadata transaction: its records, replayed over ``image`` and not yet published.
        self._transaction: MetadataDelta | None = None
        self._high_watermark = high_watermark
        self._catching_up = high_watermark is not None

    @property
    def in_transaction(self) -> bool:
        return self._transaction is not None

    def install_publisher(self, publisher: MetadataPublisher) -> None:
        """Add a publisher; one installed after images were published first catches up with a
        delta from the empty image."""
        self._publishers.append(publisher)
        if self._published is not EMPTY_IMAGE:
            self._call(publisher, MetadataDelta.diff(EMPTY_IMAGE, self._published), self._published)

    def remove_publisher(self, publisher: MetadataPublisher) -> None:
        """Publish nothing more to ``publisher`` (Kafka's removeAndClosePublisher)."""
        self._publishers.remove(publisher)

    def handle_commit(self, batch: CommittedBatch | Sequence[tuple[int, MetadataRecord]]) -> MetadataImage:
        """Replay one committed batch; returns the image published last (the current one)."""
        entries, last_offset, epoch = _entries(batch, self.image)
        delta = self._transaction
        in_transaction = delta is not None
        if delta is None:
            delta = MetadataDelta(self.image)
        previous_offset = self.image.provenance
        for offset, record in entries:
            kind = type(record)
            if kind is BeginTransactionRecord:
                if in_transaction:
                    raise MetadataImageError("BeginTransactionRecord inside a metadata transaction")
                if delta.record_count:
                    self._publish(delta, delta.apply(previous_offset, epoch))
                delta = MetadataDelta(self.image)
                in_transaction = True
            elif kind is EndTransactionRecord or kind is AbortTransactionRecord:
                if not in_transaction:
                    raise MetadataImageError(f"{kind.__name__} without a BeginTransactionRecord")
                in_transaction = False
                if kind is AbortTransactionRecord:
                    delta = MetadataDelta(self.image)
            else:
                delta.replay(record)
            previous_offset = offset
        if in_transaction:
            self._transaction = delta
            return self.image
        self._transaction = None
        self._publish(delta, delta.apply(last_offset, epoch))
        return self.image

    def handle_load_snapshot(self, snapshot_id: Any, records: Sequence[MetadataRecord]) -> MetadataImage:
        """Replace the image with a snapshot's. ``snapshot_id`` is Raft's OffsetAndEpoch (its
        offset is the end offset, exclusive) or that end offset alone."""
        end_offset = snapshot_id if isinstance(snapshot_id, int) else snapshot_id.offset
        epoch = -1 if isinstance(snapshot_id, int) else snapshot_id.epoch
        fresh = MetadataDelta(EMPTY_IMAGE)
        for record in records:
            fresh.replay(record)
        image = fresh.apply(end_offset - 1, epoch)
        self._transaction = None
        self._publish(MetadataDelta.diff(self.image, image), image)
        log.info("metadata_loader.snapshot_loaded", end_offset=end_offset, epoch=epoch, records=len(records), topics=len(image.topics))
        return image

    def handle_leader_change(self, leader_id: int | None, epoch: int) -> None:
        """Raft's listener call; the image does not record the quorum's leader."""

    def maybe_finish_catching_up(self) -> None:
        """Publish what was held back once the high watermark is known and reached: after a
        restart whose snapshot covers the whole log, no batch may follow to do it."""
        if self._catching_up and self._still_catching_up():
            return
        if self._published is not self.image and self._transaction is None:
            self._publish_now(MetadataDelta.diff(self._published, self.image), self.image)

    def _still_catching_up(self) -> bool:
        if not self._catching_up:
            return False
        high_watermark = self._high_watermark() if self._high_watermark is not None else None
        # Kafka's loader too waits while it does not know the high watermark yet.
        if high_watermark is None or self.image.provenance + 1 < high_watermark:
            return True
        self._catching_up = False
        log.info("metadata_loader.caught_up", offset=self.image.provenance, high_watermark=high_watermark)
        return False

    def _publish(self, delta: MetadataDelta, image: MetadataImage) -> None:
        previous = self.image
        self.image = image
        if self._still_catching_up():
            return
        if self._published is not previous:
            delta = MetadataDelta.diff(self._published, image)
        self._publish_now(delta, image)

    def _publish_now(self, delta: MetadataDelta, image: MetadataImage) -> None:
        self._published = image
        for publisher in self._publishers:
            self._call(publisher, delta, image)

    @staticmethod
    def _call(publisher: MetadataPublisher, delta: MetadataDelta, image: MetadataImage) -> None:
        try:
            publisher.on_metadata_update(delta, image)
        except Exception:
            log.exception("metadata_loader.publisher_failed", publisher=type(publisher).__name__, offset=image.provenance)


def _entries(batch: CommittedBatch | Sequence[tuple[int, MetadataRecord]], image: MetadataImage) -> tuple[Sequence[tuple[int, MetadataRecord]], int, int]:
    """(offset, record) pairs, the offset the batch ends at, and its epoch."""
    if isinstance(batch, (list, tuple)):
        last = batch[-1][0] if batch else image.provenance
        return batch, last, image.provenance_epoch
    base = batch.base_offset
    return [(base + i, r) for i, r in enumerate(batch.records)], batch.last_offset, getattr(batch, "epoch", -1)


__all__ = ["Batch", "CommittedBatch", "MetadataLoader"]
