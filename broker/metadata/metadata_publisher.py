"""MetadataPublisher: what the loader calls with each new image, as Kafka's interface of that name."""

from __future__ import annotations

from typing import Protocol

from broker.metadata.metadata_delta import MetadataDelta
from broker.metadata.metadata_image import MetadataImage


class MetadataPublisher(Protocol):
    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        """``delta`` leads from ``delta.image`` (what this publisher saw last) to ``image``.

        Called on the event loop, once per published image, in the order publishers were
        installed. It must not block; work that takes long (loading a coordinator partition)
        is started here and runs on."""
        ...


__all__ = ["MetadataPublisher"]
