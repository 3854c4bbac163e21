"""FeaturesPublisher: the finalized feature levels a controller listener's ApiVersions shows, as
Kafka 4.4's publisher of that name (ControllerServer's SimpleApiVersionManager reads it).

Its epoch is the offset of the image in which the levels were last replayed (a FeatureLevelRecord,
or the first image this node loaded), not the latest offset: a broker's ApiVersions says the
broker's latest offset instead (KRaftMetadataCache.features), so the two epochs differ while the
levels agree. Before the first image it knows no levels and the epoch is -1 (FinalizedFeatures.unknown).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

import structlog

from broker.metadata.metadata_delta import MetadataDelta
from broker.metadata.metadata_image import MetadataImage

log = structlog.get_logger(__name__)


class FeaturesPublisher:
    def __init__(self) -> None:
        self.finalized: Mapping[str, int] = MappingProxyType({})
        self.epoch = -1

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        if delta.features_delta is None:
            return
        self.finalized = image.features
        self.epoch = image.provenance
        log.info("features_publisher.loaded", features=dict(image.features), epoch=image.provenance)


__all__ = ["FeaturesPublisher"]
