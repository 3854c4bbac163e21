"""Record states and acknowledge types of a share partition.

``RecordState`` is Kafka's ``org.apache.kafka.server.share.fetch.RecordState``;
``AcknowledgeType`` is ``org.apache.kafka.clients.consumer.AcknowledgeType`` plus the GAP
type the ShareAcknowledge/ShareFetch requests carry on the wire (0:Gap, 1:Accept, 2:Release,
3:Reject, and from v2 4:Renew, KIP-1222).
"""

from __future__ import annotations

import enum


class RecordState(enum.IntEnum):
    """The delivery state of an in-flight record; the values are the persisted ids."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    # KIP-1191: archived for the dead-letter queue, until the DLQ write lands (or is given up on).
    # Never delivered again, but not finished: the start offset stays before it.
    ARCHIVING = 3
    ARCHIVED = 4

    @property
    def is_terminal(self) -> bool:
        """ACKNOWLEDGED and ARCHIVED records are finished (Kafka's isStateTerminal)."""
        return self is RecordState.ACKNOWLEDGED or self is RecordState.ARCHIVED

    def can_transition_to(self, new_state: RecordState) -> bool:
        """Kafka's ``validateTransition``: AVAILABLE -> ACQUIRED, ACQUIRED -> anything else."""
        if self is new_state or self.is_terminal:
            return False
        if self is RecordState.AVAILABLE:
            return new_state is RecordState.ACQUIRED
        return True


class AcknowledgeType(enum.IntEnum):
    """The wire ids of ShareAcknowledge's ``AcknowledgeTypes``."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    # Keeps the record acquired and restarts its acquisition lock; no state change.
    RENEW = 4

    @property
    def record_state(self) -> RecordState:
        """The state an acquired record moves to (a gap is archived: there is no record);
        RENEW has none."""
        return _ACK_TARGET[self]


_ACK_TARGET: dict[AcknowledgeType, RecordState] = {
    AcknowledgeType.GAP: RecordState.ARCHIVED,
    AcknowledgeType.ACCEPT: RecordState.ACKNOWLEDGED,
    AcknowledgeType.RELEASE: RecordState.AVAILABLE,
    AcknowledgeType.REJECT: RecordState.ARCHIVED,
}
