"""One acknowledgement range of ShareAcknowledge/ShareFetch: Kafka's
``org.apache.kafka.server.share.acknowledge.ShareAcknowledgementBatch``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ShareAcknowledgementBatch:
    """Offsets ``first_offset..last_offset``; one type for all of them, or one per offset."""

    first_offset: int
    last_offset: int
    # Wire ids (see ``AcknowledgeType``); SharePartition.acknowledge rejects unknown ones.
    acknowledge_types: tuple[int, ...]

    def type_of(self, offset: int) -> int:
        if len(self.acknowledge_types) == 1:
            return self.acknowledge_types[0]
        return self.acknowledge_types[offset - self.first_offset]
