"""The broker's view of cluster metadata: the latest published MetadataImage plus its own endpoint."""

from __future__ import annotations

from dataclasses import dataclass

from broker.metadata.metadata_delta import MetadataDelta
from broker.metadata.metadata_image import EMPTY_IMAGE, MetadataImage


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    node_id: int
    host: str
    port: int
    rack: str | None = None


class MetadataCache:
    """A MetadataPublisher: it swaps in each new image, so readers always see a whole one."""

    def __init__(self, node_id: int, cluster_id: str, endpoint: BrokerEndpoint, image: MetadataImage = EMPTY_IMAGE) -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.endpoint = endpoint
        self.image = image

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        self.image = image

    @property
    def controller_id(self) -> int:
        return self.node_id

    def alive_brokers(self) -> list[BrokerEndpoint]:
        # One combined node for now: the cluster is this broker. Registrations from the
        # metadata log take over here once there are several nodes.
        return [self.endpoint]
