"""Kafka's ProducerIdControlManager: producer ids handed to brokers in blocks through the log.

The end of a block is committed before any id of it is used, so no restart or failover
hands an id out twice. The image's ``next_producer_id`` is the first id of the next block.
"""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.controller.controller_result import ControllerResult
from broker.metadata.metadata_image import MetadataImage
from broker.metadata.metadata_records import ProducerIdsRecord

PRODUCER_ID_BLOCK_SIZE = 1000
MAX_PRODUCER_ID = 2**63 - 1


class ProducerIdsExhaustedError(RuntimeError):
    pass


@dataclass(frozen=True, slots=True)
class ProducerIdsBlock:
    """AllocateProducerIds' answer: [first_producer_id, first_producer_id + size), or an error."""

    error_code: int
    first_producer_id: int = -1
    size: int = 0
    error_message: str | None = None


class ProducerIdControlManager:
    def __init__(self, *, block_size: int = PRODUCER_ID_BLOCK_SIZE) -> None:
        self._block_size = block_size

    def next_block_record(self, image: MetadataImage, broker_id: int, broker_epoch: int, block_size: int | None = None) -> ProducerIdsRecord:
        """The record that hands [image.next_producer_id, record.next_producer_id) to ``broker_id``."""
        size = self._block_size if block_size is None else block_size
        first = image.next_producer_id
        if first > MAX_PRODUCER_ID - size:
            raise ProducerIdsExhaustedError("Exhausted all producerIds as the next block's end producerId has exceeded the int64 type limit")
        return ProducerIdsRecord(broker_id=broker_id, broker_epoch=broker_epoch, next_producer_id=first + size)

    def generate_next_producer_id(self, image: MetadataImage, broker_id: int, broker_epoch: int) -> ControllerResult[ProducerIdsBlock]:
        """AllocateProducerIds: STALE_BROKER_EPOCH unless the broker is registered with that epoch."""
        registration = image.brokers.get(broker_id)
        if registration is None:
            return ControllerResult([], ProducerIdsBlock(ErrorCode.stale_broker_epoch, error_message=f"No broker registration found for broker id {broker_id}"))
        if registration.epoch != broker_epoch:
            message = f"Expected broker epoch {registration.epoch}, but got broker epoch {broker_epoch}"
            return ControllerResult([], ProducerIdsBlock(ErrorCode.stale_broker_epoch, error_message=message))
        try:
            record = self.next_block_record(image, broker_id, broker_epoch)
        except ProducerIdsExhaustedError as e:
            return ControllerResult([], ProducerIdsBlock(ErrorCode.unknown_server_error, error_message=str(e)))
        return ControllerResult([record], ProducerIdsBlock(ErrorCode.none, image.next_producer_id, self._block_size))


__all__ = ["MAX_PRODUCER_ID", "PRODUCER_ID_BLOCK_SIZE", "ProducerIdControlManager", "ProducerIdsBlock", "ProducerIdsExhaustedError"]
