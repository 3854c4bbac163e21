"""Images for the control manager tests: records go through their encoding, then a MetadataDelta."""

from __future__ import annotations

import uuid
from typing import Iterable, Sequence

from broker.metadata.metadata_delta import apply_records
from broker.metadata.metadata_image import MetadataImage
from broker.metadata.metadata_records import BrokerEndpoint, BrokerFeature, MetadataRecord, RegisterBrokerRecord, decode_metadata_record
from broker.controller.feature_control_manager import FeatureControlManager


def replay(image: MetadataImage, records: Iterable[MetadataRecord]) -> MetadataImage:
    """The image after ``records``, each encoded and decoded first as the log would."""
    return apply_records(image, [decode_metadata_record(r.encode()) for r in records])


class Log:
    """A committed metadata log seen through its latest image: commit() moves it on."""

    def __init__(self, image: MetadataImage | None = None) -> None:
        self.image = image or MetadataImage()

    @property
    def end_offset(self) -> int:
        """The offset the next record will take."""
        return self.image.provenance + 1

    def commit(self, records: Sequence[MetadataRecord]) -> MetadataImage:
        self.image = replay(self.image, records)
        return self.image


def registration(broker_id: int, *, epoch: int = 0, rack: str | None = None, fenced: bool = False, dirs: tuple[uuid.UUID, ...] = ()) -> RegisterBrokerRecord:
    return RegisterBrokerRecord(
        broker_id=broker_id,
        incarnation_id=uuid.UUID(int=broker_id),
        broker_epoch=epoch,
        end_points=(BrokerEndpoint(name="PLAINTEXT", host="localhost", port=9000 + broker_id),),
        features=(BrokerFeature(name="metadata.version", min_supported_version=7, max_supported_version=33),),
        rack=rack,
        fenced=fenced,
        log_dirs=dirs,
    )


def cluster_log(*brokers: int, racks: dict[int, str] | None = None, fenced: Iterable[int] = ()) -> Log:
    """A formatted cluster with these brokers registered (unfenced unless named in ``fenced``)."""
    log = Log()
    log.commit(FeatureControlManager.bootstrap_records())
    down = set(fenced)
    log.commit([registration(b, rack=(racks or {}).get(b), fenced=b in down, dirs=(uuid.UUID(int=0x1000 + b),)) for b in brokers])
    return log
