"""Incremental fetch sessions (KIP-227), the serving side.

A client that opens a session sends the full partition list once; later fetches carry
only the partitions whose fetch position changed, and the broker answers only the
partitions that have something new. The session remembers the rest, fetch positions and
epochs included, so an incremental fetch reads its unnamed partitions as last asked.

The cache holds `max.incremental.fetch.session.cache.slots` sessions. As in Kafka's
FetchSessionCache, a full cache gives a new session the slot of one unused for two minutes,
else of the least valuable evictable one (those older than two minutes, and for a follower any
consumer's): followers' sessions are privileged, so a consumer never displaces one in use,
then larger sessions are worth more than smaller ones.
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
NO_EPOCH = -1
# Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS.
EVICTION_MS = 120_000

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class CachedPartition:
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = NO_EPOCH
    # A follower's KIP-320 last fetched epoch and its own log start.
    last_fetched_epoch: int = NO_EPOCH
    fetcher_log_start_offset: int = -1
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1

    def update_request(self, requested: CachedPartition) -> None:
        self.fetch_offset = requested.fetch_offset
        self.max_bytes = requested.max_bytes
        self.current_leader_epoch = requested.current_leader_epoch
        self.last_fetched_epoch = requested.last_fetched_epoch
        self.fetcher_log_start_offset = requested.fetcher_log_start_offset

    def needs_response(
        self, high_watermark: int, last_stable_offset: int, log_start_offset: int, has_records: bool, error: int, diverging: bool = False
    ) -> bool:
        """Kafka's rule: send a partition when it has data, an error, a divergence or moved offsets."""
        changed = (
            high_watermark != self.high_watermark
            or last_stable_offset != self.last_stable_offset
            or log_start_offset != self.log_start_offset
        )
        # After an error the cached high watermark is unknown, so the partition is sent again
        # once the error is gone even if nothing else moved.
        self.high_watermark = high_watermark if error == 0 else -1
        self.last_stable_offset = last_stable_offset
        self.log_start_offset = log_start_offset
        return has_records or error != 0 or diverging or changed


@dataclass(slots=True)
class FetchSession:
    id: int
    epoch: int
    privileged: bool
    created_ms: int
    last_used_ms: int
    partitions: OrderedDict[TopicPartition, CachedPartition] = field(default_factory=OrderedDict)

    def eviction_key(self) -> tuple[bool, int, int]:
        """Kafka's EvictableKey: the smallest is evicted first."""
        return self.privileged, len(self.partitions), self.id


@dataclass(slots=True)
class SessionContext:
    """What one fetch request resolves to: the partitions to read and how to answer."""

    error: int
    session_id: int
    partitions: OrderedDict[TopicPartition, CachedPartition]
    incremental: bool
    session: FetchSession | None = None


class FetchSessionCache:
    def __init__(self, max_slots: int, eviction_ms: int = EVICTION_MS) -> None:
        self._max = max_slots
        self._eviction_ms = eviction_ms
        # In order of last use, the least recently used first.
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()
        self._ids = (random.randint(1, 2**31 - 1) for _ in itertools.count())
        # Kafka's IncrementalFetchSessionEvictionsPerSec: sessions dropped to make room for a new one.
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    @property
    def partitions_cached(self) -> int:
        """Kafka's NumIncrementalFetchPartitionsCached: the partitions of every session."""
        return sum(len(s.partitions) for s in self._sessions.values())

    def new_context(
        self,
        session_id: int,
        epoch: int,
        requested: OrderedDict[TopicPartition, CachedPartition],
        forgotten: list[TopicPartition],
        privileged: bool,
        now_ms: int,
    ) -> SessionContext:
        """``privileged``: the fetch comes from a follower."""
        if epoch == FINAL_EPOCH:
            if session_id != INVALID_SESSION_ID:
                self._sessions.pop(session_id, None)
            return SessionContext(0, INVALID_SESSION_ID, requested, incremental=False)
        if epoch == INITIAL_EPOCH:
            if session_id != INVALID_SESSION_ID:
                self._sessions.pop(session_id, None)
            session = self._create(requested, privileged, now_ms)
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
                known.update_request(cached)
        session.epoch = _next_epoch(epoch)
        session.last_used_ms = now_ms
        self._sessions.move_to_end(session_id)
        return SessionContext(0, session.id, session.partitions, incremental=True, session=session)

    def _create(self, partitions: OrderedDict[TopicPartition, CachedPartition], privileged: bool, now_ms: int) -> FetchSession | None:
        if self._max <= 0 or (len(self._sessions) >= self._max and not self._try_evict(privileged, len(partitions), now_ms)):
            return None
        session_id = next(self._ids)
        while session_id in self._sessions:
            session_id = next(self._ids)
        session = FetchSession(session_id, _next_epoch(INITIAL_EPOCH), privileged, now_ms, now_ms, partitions)
        self._sessions[session_id] = session
        return session

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        oldest = next(iter(self._sessions.values()))
        if now_ms - oldest.last_used_ms > self._eviction_ms:
            del self._sessions[oldest.id]
            self.evictions += 1
            return True
        # A session young enough is safe from everyone, except a consumer's from a follower.
        evictable = [
            s for s in self._sessions.values() if now_ms - s.created_ms > self._eviction_ms or (privileged and not s.privileged)
        ]
        if not evictable:
            return False
        victim = min(evictable, key=FetchSession.eviction_key)
        if (privileged, size, 0) < victim.eviction_key():
            return False
        del self._sessions[victim.id]
        self.evictions += 1
        return True


def _next_epoch(epoch: int) -> int:
    return 1 if epoch >= 2**31 - 1 else epoch + 1
