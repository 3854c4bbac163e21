"""The broker's view of cluster metadata: the latest published MetadataImage, read for one listener.

Clients see the brokers the image holds as registered and unfenced, each at its endpoint on
the listener this broker serves them on (Kafka answers per listener name). The list is worked
out once per image, not per request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

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

    def __init__(self, node_id: int, cluster_id: str, endpoint: BrokerEndpoint, image: MetadataImage = EMPTY_IMAGE, *, listener_name: str = "PLAINTEXT") -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.endpoint = endpoint
        self.listener_name = listener_name
        self.image = image
        # Per listener: a client is shown every broker at its endpoint on the listener it came in on.
        self._alive: dict[str, list[BrokerEndpoint]] = {}
        self._by_id: dict[str, dict[int, BrokerEndpoint]] = {}
        self._refresh_brokers()

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        self.image = image
        if image.brokers is not delta.image.brokers or not self._by_id:
            self._refresh_brokers()

    def _refresh_brokers(self) -> None:
        alive: dict[str, list[BrokerEndpoint]] = {self.listener_name: []}
        for broker_id, registration in sorted(self.image.brokers.items()):
            if registration.fenced:
                continue
            for endpoint in registration.endpoints:
                alive.setdefault(endpoint.name, []).append(BrokerEndpoint(broker_id, endpoint.host, endpoint.port, registration.rack))
        self._alive = alive
        self._by_id = {name: {b.node_id: b for b in brokers} for name, brokers in alive.items()}

    @property
    def controller_id(self) -> int:
        # Clients cannot reach KRaft controllers: as Kafka, they are told a live broker, which forwards.
        return self.node_id

    def alive_brokers(self, listener: str | None = None) -> list[BrokerEndpoint]:
        """Registered, unfenced brokers at their endpoint on ``listener`` (this node's first client listener), by id."""
        return self._alive.get(listener or self.listener_name, [])

    def alive_broker(self, broker_id: int, listener: str | None = None) -> BrokerEndpoint | None:
        return self._by_id.get(listener or self.listener_name, {}).get(broker_id)

    def leader_endpoints(self, hints: Iterable[tuple[int, int] | None], listener: str | None = None) -> list[tuple[int, str, int, str | None]]:
        """KIP-951's NodeEndpoints: (id, host, port, rack) of each live leader named in ``hints``."""
        ids = sorted({hint[0] for hint in hints if hint is not None})
        by_id = self._by_id.get(listener or self.listener_name, {})
        return [(b.node_id, b.host, b.port, b.rack) for b in map(by_id.get, ids) if b is not None]

    def broker_endpoint(self, broker_id: int, listener_name: str) -> BrokerEndpoint | None:
        """A registered broker's endpoint on any listener (the inter-broker one, for node-to-node
        calls), fenced or not: as Kafka's partition-leader lookup, whoever the image names as a
        leader is tried, and the call's answer decides."""
        registration = self.image.brokers.get(broker_id)
        if registration is None:
            return None
        for endpoint in registration.endpoints:
            if endpoint.name == listener_name:
                return BrokerEndpoint(broker_id, endpoint.host, endpoint.port, registration.rack)
        return None
