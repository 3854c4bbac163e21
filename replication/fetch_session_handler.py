"""The fetching side of an incremental fetch session (KIP-227), as Kafka's FetchSessionHandler.

A follower opens a session toward a leader with a full fetch naming every partition it wants;
the leader answers with a session id. Later fetches carry the session id and the next epoch,
and name only partitions that were added or whose fetch position changed; partitions no longer
wanted are listed as forgotten. The leader answers only partitions with something new. After a
session error the next fetch is full again: FETCH_SESSION_ID_NOT_FOUND opens a new session
from scratch; any other failure closes the old session in the same request that opens a new one.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Collection

from kio.schema.errors import ErrorCode

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_EPOCH = 2**31 - 1

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class PartitionData:
    """What a fetch request says about one partition; a change in any field resends it."""

    topic_id: uuid.UUID
    fetch_offset: int
    log_start_offset: int
    max_bytes: int
    current_leader_epoch: int
    last_fetched_epoch: int


@dataclass(frozen=True, slots=True)
class FetchMetadata:
    session_id: int
    epoch: int

    @property
    def is_full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)


INITIAL = FetchMetadata(INVALID_SESSION_ID, INITIAL_EPOCH)


@dataclass(frozen=True, slots=True)
class FetchRequestData:
    """One request to build: the partitions to name, those to forget, and the session fields."""

    to_send: dict[TopicPartition, PartitionData]
    to_forget: list[tuple[uuid.UUID, TopicPartition]]
    # Every partition the answer may cover (those not sent are implied by the session).
    session_partitions: dict[TopicPartition, PartitionData]
    metadata: FetchMetadata


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= MAX_EPOCH else epoch + 1


class FetchSessionHandler:
    """The session state toward one leader; the fetcher calls build, then one of handle_response or handle_error."""

    def __init__(self) -> None:
        self.metadata = INITIAL
        self._session: dict[TopicPartition, PartitionData] = {}

    @property
    def session_id(self) -> int:
        return self.metadata.session_id

    def build(self, wanted: dict[TopicPartition, PartitionData]) -> FetchRequestData:
        """The request for fetching ``wanted`` (in that order) in this session."""
        if self.metadata.is_full:
            self._session = dict(wanted)
            return FetchRequestData(dict(wanted), [], dict(wanted), self.metadata)
        to_send: dict[TopicPartition, PartitionData] = {}
        to_forget: list[tuple[uuid.UUID, TopicPartition]] = []
        for tp, previous in list(self._session.items()):
            current = wanted.get(tp)
            if current is None:
                del self._session[tp]
                to_forget.append((previous.topic_id, tp))
            elif current != previous:
                if current.topic_id != previous.topic_id:
                    # The topic was deleted and created again under the same name: the leader
                    # must drop the old one, which it knows by its id.
                    to_forget.append((previous.topic_id, tp))
                self._session[tp] = current
                to_send[tp] = current
        for tp, current in wanted.items():
            if tp not in self._session:
                self._session[tp] = current
                to_send[tp] = current
        return FetchRequestData(to_send, to_forget, dict(self._session), self.metadata)

    def handle_response(self, error_code: int, session_id: int, partitions: Collection[TopicPartition]) -> bool:
        """Take the answer to the last built request; False when its partitions must not be used."""
        if error_code != ErrorCode.none:
            self.metadata = INITIAL if error_code == ErrorCode.fetch_session_id_not_found else self._close_existing_attempt_new()
            return False
        if self.metadata.is_full:
            if set(partitions) != set(self._session):
                # A full answer names every partition asked for, no more and no fewer.
                self.metadata = INITIAL
                return False
            self.metadata = INITIAL if session_id == INVALID_SESSION_ID else FetchMetadata(session_id, next_epoch(INITIAL_EPOCH))
            return True
        if any(tp not in self._session for tp in partitions):
            self.metadata = self._close_existing_attempt_new()
            return False
        self.metadata = INITIAL if session_id == INVALID_SESSION_ID else FetchMetadata(session_id, next_epoch(self.metadata.epoch))
        return True

    def handle_error(self) -> None:
        """The request failed on the way (no answer): its epoch may or may not have been used."""
        self.metadata = self._close_existing_attempt_new()

    def _close_existing_attempt_new(self) -> FetchMetadata:
        return FetchMetadata(self.metadata.session_id, INITIAL_EPOCH)
