"""Share sessions (KIP-932), sans-IO: Kafka's ``ShareSessionCache``, ``ShareSession`` and the share
fetch contexts (``org.apache.kafka.server.share.session`` and ``.context``), with the session
rules of ``SharePartitionManager.newContext`` and ``acknowledgeSessionUpdate``.

A share consumer keeps one session per (group, member) on each broker it fetches from. Epoch 0
opens it (replacing any session the member had) with the partitions the request names; each
following request carries the session's next epoch and only the partitions it adds or forgets;
epoch -1 closes it, after the acknowledgements the request carries (a final ShareFetch may not
fetch). A session belongs to the connection that opened it and goes when that connection closes,
as Kafka's ConnectionDisconnectListener removes it; ``group.share.max.share.sessions`` bounds the
sessions of the broker.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

# ShareRequestMetadata's epochs.
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_MAX_EPOCH = 2**31 - 1
# group.share.max.share.sessions' default.
DEFAULT_MAX_SHARE_SESSIONS = 2000


@dataclass(frozen=True, slots=True, order=True)
class TopicIdPartition:
    """A partition as share requests name it: by topic id. The name is looked up when it is read,
    so a session may hold partitions of a topic this broker does not know (UNKNOWN_TOPIC_ID)."""

    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True, slots=True)
class ShareSessionKey:
    group_id: str
    member_id: str


def next_epoch(epoch: int) -> int:
    """ShareRequestMetadata.nextEpoch: epochs wrap from Integer.MAX_VALUE to 1, never back to 0."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _MAX_EPOCH else epoch + 1


class ShareSessionError(Exception):
    """A request the session rules refuse: answered with ``error_code`` at the top level."""

    def __init__(self, error_code: ErrorCode) -> None:
        super().__init__(error_code.name)
        self.error_code = error_code


@dataclass(slots=True)
class ShareSession:
    key: ShareSessionKey
    connection_id: str
    # The epoch the next request must carry.
    epoch: int
    # In the order they were added: the order fetches read them.
    partitions: dict[TopicIdPartition, None] = field(default_factory=dict)

    def update(self, fetch: Iterable[TopicIdPartition], forgotten: Iterable[TopicIdPartition]) -> frozenset[TopicIdPartition]:
        """Add ``fetch`` and drop ``forgotten``; the partitions that were not in the session."""
        added = frozenset(tip for tip in fetch if tip not in self.partitions)
        for tip in fetch:
            self.partitions.setdefault(tip, None)
        for tip in forgotten:
            self.partitions.pop(tip, None)
        return added


@dataclass(frozen=True, slots=True)
class ShareFetchContext:
    """What a ShareFetch reads: Kafka's ShareSessionContext (``partitions`` to fetch; ``full`` for a
    session just opened) or FinalContext (``final``: acknowledgements only, nothing fetched).

    A full context answers for every partition; a following one (Kafka's incremental
    updateAndGenerateResponseData) only for those with records or an error, and those this
    request ``added``, answered once."""

    partitions: tuple[TopicIdPartition, ...] = ()
    full: bool = False
    final: bool = False
    added: frozenset[TopicIdPartition] = frozenset()

    def answers_for(self, tip: TopicIdPartition, has_records: bool, error: int) -> bool:
        return self.full or has_records or error != ErrorCode.none or tip in self.added


class ShareSessionCache:
    def __init__(self, max_entries: int) -> None:
        # group.share.max.share.sessions.
        self.max_entries = max_entries
        self._sessions: dict[ShareSessionKey, ShareSession] = {}
        # The sessions each connection opened (a connection may carry several members).
        self._by_connection: dict[str, set[ShareSessionKey]] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def __iter__(self) -> Iterator[ShareSession]:
        return iter(list(self._sessions.values()))

    def get(self, key: ShareSessionKey) -> ShareSession | None:
        return self._sessions.get(key)

    def total_partitions(self) -> int:
        return sum(len(s.partitions) for s in self._sessions.values())

    def remove(self, key: ShareSessionKey) -> ShareSession | None:
        session = self._sessions.pop(key, None)
        if session is not None:
            keys = self._by_connection.get(session.connection_id)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_connection[session.connection_id]
        return session

    def new_context(
        self,
        group_id: str,
        member_id: str,
        epoch: int,
        fetch: Iterable[TopicIdPartition],
        forgotten: Iterable[TopicIdPartition],
        acknowledgements_present: bool,
        connection_id: str,
    ) -> ShareFetchContext:
        """SharePartitionManager.newContext: the session a ShareFetch opens, continues or closes.

        Raises ShareSessionError: SHARE_SESSION_NOT_FOUND (no session to continue or close),
        INVALID_SHARE_SESSION_EPOCH (not the session's next epoch), INVALID_REQUEST (an opening
        request that acknowledges: it can hold no records yet), SHARE_SESSION_LIMIT_REACHED.
        A final request keeps its fetch partitions out: they are answered with nothing.
        """
        key = ShareSessionKey(group_id, member_id)
        if epoch == FINAL_EPOCH:
            if key not in self._sessions:
                raise ShareSessionError(ErrorCode.share_session_not_found)
            return ShareFetchContext(final=True)
        if epoch == INITIAL_EPOCH:
            if acknowledgements_present:
                raise ShareSessionError(ErrorCode.invalid_request)
            self.remove(key)
            if len(self._sessions) >= self.max_entries:
                raise ShareSessionError(ErrorCode.share_session_limit_reached)
            partitions = dict.fromkeys(fetch)
            session = ShareSession(key, connection_id, next_epoch(INITIAL_EPOCH), partitions)
            self._sessions[key] = session
            self._by_connection.setdefault(connection_id, set()).add(key)
            return ShareFetchContext(tuple(partitions), full=True)
        session = self._sessions.get(key)
        if session is None:
            raise ShareSessionError(ErrorCode.share_session_not_found)
        if session.epoch != epoch:
            raise ShareSessionError(ErrorCode.invalid_share_session_epoch)
        added = session.update(list(fetch), forgotten)
        session.epoch = next_epoch(epoch)
        return ShareFetchContext(tuple(session.partitions), added=added)

    def acknowledge_session_update(self, group_id: str, member_id: str, epoch: int) -> None:
        """SharePartitionManager.acknowledgeSessionUpdate, for ShareAcknowledge: an open session
        at its next epoch (which moves on), or -1 to close it once acknowledged."""
        if epoch == INITIAL_EPOCH:
            raise ShareSessionError(ErrorCode.invalid_share_session_epoch)
        session = self._sessions.get(ShareSessionKey(group_id, member_id))
        if session is None:
            raise ShareSessionError(ErrorCode.share_session_not_found)
        if epoch == FINAL_EPOCH:
            return
        if session.epoch != epoch:
            raise ShareSessionError(ErrorCode.invalid_share_session_epoch)
        session.epoch = next_epoch(epoch)

    def connection_closed(self, connection_id: str) -> list[ShareSession]:
        """The sessions the closed connection opened, removed (Kafka's ClientConnectionDisconnectListener)."""
        keys = self._by_connection.pop(connection_id, set())
        return [session for key in keys if (session := self._sessions.pop(key, None)) is not None]
