"""What ``SharePartition.acquire`` takes and returns.

``AcquiredRecords`` is the AcquiredRecords entry of ShareFetchResponse and
``ShareAcquiredRecords`` Kafka's ``org.apache.kafka.server.share.fetch.ShareAcquiredRecords``.
``FetchedBatch`` describes one record batch the log returned (only what the share partition
needs: no record bytes) and ``AbortedTransaction`` one entry of the aborted-transactions list
a read_committed fetch returns (FetchResponse's AbortedTransaction).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AcquiredRecords:
    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareAcquiredRecords:
    """The acquired ranges in offset order and how many offsets the acquisition took."""

    records: tuple[AcquiredRecords, ...] = ()
    # Kafka counts every offset acquired, including ones a read_committed filter archived
    # afterwards: the count is what the fetch charges against its max records.
    count: int = 0


@dataclass(frozen=True, slots=True)
class FetchedBatch:
    """A record batch as the log returned it: its offsets and transactional markers."""

    base_offset: int
    last_offset: int
    producer_id: int = -1
    is_transactional: bool = False
    # A control batch of a transactional producer: its COMMIT or ABORT marker.
    is_control: bool = False


@dataclass(frozen=True, slots=True)
class AbortedTransaction:
    producer_id: int
    first_offset: int


@dataclass(frozen=True, slots=True)
class ReadCommitted:
    """The read_committed view of a fetch: the caller read only up to the last stable offset
    and passes the aborted transactions the log reported for the fetched range."""

    aborted_transactions: tuple[AbortedTransaction, ...] = ()
