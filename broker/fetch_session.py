"""Incremental fetch sessions (KIP-227).

A client that opens a session sends the full partition list once; later fetches carry
only the partitions whose fetch position changed, and the broker answers only the
partitions that have something new. The session remembers the rest.
"""

from __future__ import annotations

import itertools
import random
from collections import OrderedDict
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
INVALID_SESSION_ID = 0

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class CachedPartition:
    fetch_offset: int
    max_bytes: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1

    def needs_response(self, high_watermark: int, last_stable_offset: int, log_start_offset: int, has_records: bool, error: int) -> bool:
        """Kafka's rule: send a partition when it has data, an error, or moved offsets."""
        changed = (
            high_watermark != self.high_watermark
            or last_stable_offset != self.last_stable_offset
            or log_start_offset != self.log_start_offset
        )
        self.high_watermark = high_watermark
        self.last_stable_offset = last_stable_offset
        self.log_start_offset = log_start_offset
        return has_records or error != 0 or changed


@dataclass(slots=True)
class FetchSession:
    id: int
    epoch: int
    partitions: OrderedDict[TopicPartition, CachedPartition] = field(default_factory=OrderedDict)


@dataclass(slots=True)
class SessionContext:
    """What one fetch request resolves to: the partitions to read and how to answer."""

    error: int
    session_id: int
    partitions: OrderedDict[TopicPartition, CachedPartition]
    incremental: bool
    session: FetchSession | None = None


class FetchSessionCache:
    def __init__(self, max_slots: int) -> None:
        self._max = max_slots
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()
        self._ids = (random.randint(1, 2**31 - 1) for _ in itertools.count())

    def __len__(self) -> int:
        return len(self._sessions)

    def new_context(
        self,
        session_id: int,
        epoch: int,
        requested: OrderedDict[TopicPartition, CachedPartition],
        forgotten: list[TopicPartition],
        is_follower: bool = False,
    ) -> SessionContext:
        if epoch == FINAL_EPOCH:
            if session_id != INVALID_SESSION_ID:
                self._sessions.pop(session_id, None)
            return SessionContext(0, INVALID_SESSION_ID, requested, incremental=False)
        if epoch == INITIAL_EPOCH:
            if session_id != INVALID_SESSION_ID:
                self._sessions.pop(session_id, None)
            session = self._create(requested) if self._max > 0 and not is_follower else None
            if session is None:
                return SessionContext(0, INVALID_SESSION_ID, requested, incremental=False)
            return SessionContext(0, session.id, session.partitions, incremental=False, session=session)
        session = self._sessions.get(session_id)
        if session is None:
            return SessionContext(ErrorCode.fetch_session_id_not_found, INVALID_SESSION_ID, OrderedDict(), incremental=False)
        if session.epoch != epoch:
            return SessionContext(ErrorCode.invalid_fetch_session_epoch, INVALID_SESSION_ID, OrderedDict(), incremental=False)
        for tp in forgotten:
            session.partitions.pop(tp, None)
        for tp, cached in requested.items():
            known = session.partitions.get(tp)
            if known is None:
                session.partitions[tp] = cached
            else:
                known.fetch_offset = cached.fetch_offset
                known.max_bytes = cached.max_bytes
        session.epoch = _next_epoch(epoch)
        self._sessions.move_to_end(session_id)
        return SessionContext(0, session.id, session.partitions, incremental=True, session=session)

    def _create(self, partitions: OrderedDict[TopicPartition, CachedPartition]) -> FetchSession | None:
        if len(self._sessions) >= self._max:
            # Evict the least recently used session, as Kafka does for sessions of equal priority.
            self._sessions.popitem(last=False)
        session_id = next(self._ids)
        while session_id in self._sessions:
            session_id = next(self._ids)
        session = FetchSession(session_id, _next_epoch(INITIAL_EPOCH), partitions)
        self._sessions[session_id] = session
        return session


def _next_epoch(epoch: int) -> int:
    return 1 if epoch >= 2**31 - 1 else epoch + 1
