"""Committed offsets of the groups of one ``__consumer_offsets`` partition, sans-IO.

OffsetCommit validates the committer against its group (a member of the current
generation, or an "admin" commit with no generation into an empty group; in a consumer
group also a member's older epoch, for the partitions it held then), then writes an
OffsetCommit record per partition; retention expires offsets of groups that nobody consumes
with. Rules follow Kafka 4.0's OffsetMetadataManager.

OffsetFetch reads the offsets as of the partition's last committed offset (its high watermark),
as Kafka's reads its timeline snapshot there: an offsets record enters memory only once the
followers have it. The shell replays a write's records when the high watermark passes them; a
load holds back what it reads above the high watermark (``replay_loaded``) until the high
watermark passes the log end it read to (``update_last_committed_offset``). A record that a
leader failover truncates was therefore never answered.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Callable, Iterable, Protocol

from broker.group.classic_group import ClassicGroupState
from broker.group.consumer_group import STALE_MEMBER_EPOCH, CommitPartitionValidator, GroupError
from broker.group.coordinator_records import OffsetCommitKey, OffsetCommitValue
from broker.group.group_metadata_manager import (
    COORDINATOR_NOT_AVAILABLE,
    GROUP_ID_NOT_FOUND,
    ILLEGAL_GENERATION,
    NONE,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
    GroupMetadataManager,
    Record,
    validate_member,
)
from protocol.consumer_protocol import ConsumerProtocolError, subscribed_topics

OFFSET_METADATA_TOO_LARGE = 12
GROUP_SUBSCRIBED_TO_TOPIC = 86

NO_EXPIRATION = -1


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int = NO_EXPIRATION
    # The log offset of the OffsetCommit record (Kafka's recordOffset): with regular and
    # transactional commits of one partition mixed, the later record wins, as compaction keeps it.
    record_offset: int = -1


@dataclass(frozen=True, slots=True)
class PartitionCommit:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None
    # The topic's id in the metadata (Kafka's KafkaApis fills it in for requests that name topics):
    # what a consumer group checks the member's assignment with.
    topic_id: uuid.UUID | None = None


class ConsumerGroupOffsets(Protocol):
    """What the offsets need from the KIP-848 groups: is there such a group, and may this member
    commit (``GroupError`` when it may commit nothing, else the check of each partition)."""

    def validate_offset_commit(
        self, group_id: str, member_id: str, member_epoch: int, *, transactional: bool, version: int, instance_id: str | None = None
    ) -> CommitPartitionValidator | None: ...

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> None: ...

    def validate_offset_delete(self, group_id: str) -> None: ...

    def subscribed_topics(self, group_id: str) -> set[str] | None: ...


# TxnOffsetCommit's first version with GROUP_ID_NOT_FOUND and STALE_MEMBER_EPOCH (KIP-1319).
FIRST_TXN_GROUP_ERRORS_VERSION = 6


class OffsetMetadataManager:
    def __init__(
        self,
        classic: GroupMetadataManager,
        *,
        metadata_max_bytes: int,
        retention_ms: int,
        consumer_groups: ConsumerGroupOffsets | None = None,
    ) -> None:
        self._classic = classic
        self._consumer_groups = consumer_groups
        self._metadata_max_bytes = metadata_max_bytes
        self._retention_ms = retention_ms
        self.offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
        # TxnOffsetCommit: offsets written in a producer's open transaction, per producer id and
        # group; they become committed offsets when its COMMIT marker is written here, and go on ABORT.
        self.pending_txn_offsets: dict[int, dict[str, dict[tuple[str, int], OffsetAndMetadata]]] = {}
        # The partition's high watermark when the load started: replays of batches at or above it wait
        # in ``_uncommitted``, in log order, for the high watermark to pass the loaded log end.
        self.loaded_high_watermark = 0
        self._uncommitted: list[Callable[[], object]] = []

    # -- the committed view ------------------------------------------------------------------------

    def replay_loaded(self, batch_last_offset: int, replay: Callable[[], object]) -> None:
        """A load's replay of an offsets record (or transaction marker) of the batch ending at
        ``batch_last_offset``: done now if the batch is committed, else once it is."""
        if batch_last_offset < self.loaded_high_watermark:
            replay()
        else:
            self._uncommitted.append(replay)

    @property
    def has_uncommitted(self) -> bool:
        return bool(self._uncommitted)

    def update_last_committed_offset(self) -> None:
        """The high watermark passed the loaded log end: what the load held back becomes visible."""
        held, self._uncommitted = self._uncommitted, []
        for replay in held:
            replay()

    def has_offsets(self, group_id: str) -> bool:
        return bool(self.offsets.get(group_id))

    # -- OffsetCommit ------------------------------------------------------------------------------

    def _validate_commit(
        self,
        group_id: str,
        generation_or_epoch: int,
        member_id: str,
        instance_id: str | None,
        partitions: list[PartitionCommit],
        unknown_group: int,
        now_ms: int,
        *,
        transactional: bool,
        version: int,
    ) -> int:
        """The error of the whole commit. ``unknown_group``: the answer to a member of a group this
        coordinator does not know."""
        if self._consumer_groups is not None:
            try:
                validator = self._consumer_groups.validate_offset_commit(
                    group_id, member_id, generation_or_epoch, transactional=transactional, version=version, instance_id=instance_id
                )
                if validator is not None:
                    # Kafka checks each partition as it commits it; the first refusal fails the whole
                    # request (every partition gets its error, nothing is written). Partitions whose
                    # metadata is too large are answered on their own before any check.
                    for p in partitions:
                        if not self._metadata_too_large(p):
                            validator(p.topic, p.topic_id, p.partition)
                    return NONE
            except GroupError as e:
                return e.error_code
        group = self._classic.group(group_id)
        if group is None:
            if generation_or_epoch < 0:
                # A simple (admin or manually assigned) consumer commits into a group of its own.
                self._classic.get_or_create_group(group_id, now_ms)
                return NONE
            return unknown_group
        if group.is_in(ClassicGroupState.DEAD):
            return COORDINATOR_NOT_AVAILABLE
        if generation_or_epoch < 0 and group.is_in(ClassicGroupState.EMPTY):
            return NONE
        if transactional and generation_or_epoch < 0 and not member_id and instance_id is None:
            # A producer's TxnOffsetCommit v0-v2 names no member: Kafka's ClassicGroup takes it, with
            # any negative generation, into a group with members (a consumer group only with -1).
            return NONE
        error = validate_member(group, member_id, instance_id)
        if error:
            return error
        if group.is_in(ClassicGroupState.EMPTY):
            return UNKNOWN_MEMBER_ID
        if generation_or_epoch != group.generation_id:
            return ILLEGAL_GENERATION
        if not transactional and group.is_in(ClassicGroupState.COMPLETING_REBALANCE):
            # Commits are fenced until the member has learnt its new assignment; Kafka's
            # ClassicGroup.validateOffsetCommit fences OffsetCommit only, not TxnOffsetCommit.
            return REBALANCE_IN_PROGRESS
        return NONE

    def commit(
        self,
        group_id: str,
        generation_or_epoch: int,
        member_id: str,
        instance_id: str | None,
        retention_time_ms: int,
        partitions: Iterable[PartitionCommit],
        version: int,
        now_ms: int,
    ) -> tuple[list[tuple[PartitionCommit, int]], list[Record]]:
        """Per-partition errors, and the records to append; memory changes when they are replayed once written."""
        partitions = list(partitions)
        unknown_group = GROUP_ID_NOT_FOUND if version >= 9 else ILLEGAL_GENERATION
        error = self._validate_commit(group_id, generation_or_epoch, member_id, instance_id, partitions, unknown_group, now_ms, transactional=False, version=version)
        if error:
            return [(p, error) for p in partitions], []
        # OffsetCommit v2-v4's retention time sets an explicit expiry; later versions have none.
        expire = now_ms + retention_time_ms if retention_time_ms >= 0 else NO_EXPIRATION
        return self._commit_records(group_id, partitions, expire, now_ms)

    def _commit_records(
        self, group_id: str, partitions: list[PartitionCommit], expire: int, now_ms: int
    ) -> tuple[list[tuple[PartitionCommit, int]], list[Record]]:
        answers: list[tuple[PartitionCommit, int]] = []
        records: list[Record] = []
        for p in partitions:
            if self._metadata_too_large(p):
                answers.append((p, OFFSET_METADATA_TOO_LARGE))
                continue
            answers.append((p, NONE))
            records.append(
                (
                    OffsetCommitKey(group=group_id, topic=p.topic, partition=p.partition),
                    OffsetCommitValue(
                        offset=p.offset, leader_epoch=p.leader_epoch, metadata=p.metadata or "", commit_timestamp=now_ms, expire_timestamp=expire
                    ),
                )
            )
        return answers, records

    def _metadata_too_large(self, p: PartitionCommit) -> bool:
        return len((p.metadata or "").encode()) > self._metadata_max_bytes

    # -- TxnOffsetCommit ---------------------------------------------------------------------------

    def txn_commit(
        self, group_id: str, generation_id: int, member_id: str, instance_id: str | None, partitions: Iterable[PartitionCommit], now_ms: int, version: int = 0
    ) -> tuple[list[tuple[PartitionCommit, int]], list[Record]]:
        """Like ``commit``, for offsets written in a transaction; the caller writes the records in
        the producer's transactional batch and replays them with ``replay_transactional``.
        ``version``: the TxnOffsetCommit's; from v6 (KIP-1319) a member of an unknown group is told
        GROUP_ID_NOT_FOUND and a stale consumer-group member STALE_MEMBER_EPOCH, which older
        versions hear as ILLEGAL_GENERATION (Kafka 4.4's validateTransactionalOffsetCommit). One
        that names no member is taken into a group nobody knows (with any negative generation, as a
        new simple group) or into a live classic group; into a consumer group with members only with
        Kafka's defaults (generation -1, member "", no instance), else UNKNOWN_MEMBER_ID."""
        new_errors = version >= FIRST_TXN_GROUP_ERRORS_VERSION
        partitions = list(partitions)
        unknown_group = GROUP_ID_NOT_FOUND if new_errors else ILLEGAL_GENERATION
        error = self._validate_commit(group_id, generation_id, member_id, instance_id, partitions, unknown_group, now_ms, transactional=True, version=version)
        if error == STALE_MEMBER_EPOCH and not new_errors:
            error = ILLEGAL_GENERATION
        if error:
            return [(p, error) for p in partitions], []
        return self._commit_records(group_id, partitions, NO_EXPIRATION, now_ms)

    def replay_transactional(self, producer_id: int, key: OffsetCommitKey, value: OffsetCommitValue | None, record_offset: int) -> None:
        if value is None:
            return
        self._replay_group_of(key.group, value)
        pending = self.pending_txn_offsets.setdefault(producer_id, {}).setdefault(key.group, {})
        pending[(key.topic, key.partition)] = _offset_and_metadata(value, record_offset)

    def complete_transaction(self, producer_id: int, commit: bool) -> int:
        """A COMMIT or ABORT marker of ``producer_id`` was written: its pending offsets become
        committed or are dropped. A pending offset whose record is older than the partition's
        committed one (a regular OffsetCommit written during the transaction) is dropped too:
        compaction would keep the later record, so a reload must find what memory holds.
        Returns how many offsets it had pending."""
        pending = self.pending_txn_offsets.pop(producer_id, {})
        if commit:
            for group_id, offsets in pending.items():
                committed = self.offsets.setdefault(group_id, {})
                for tp, offset in offsets.items():
                    existing = committed.get(tp)
                    if existing is None or offset.record_offset > existing.record_offset:
                        committed[tp] = offset
        return sum(len(offsets) for offsets in pending.values())

    def has_pending_offset(self, group_id: str, topic: str, partition: int) -> bool:
        """KIP-447: OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT for these."""
        return any((topic, partition) in groups.get(group_id, {}) for groups in self.pending_txn_offsets.values())

    # -- OffsetFetch -------------------------------------------------------------------------------

    def validate_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> int:
        """OffsetFetch v9+'s check of the member it names (Kafka 4.4's validateOffsetFetch): the
        error of the whole group, or NONE. Only a consumer group checks; a classic group's members
        fetch with no member id, and a group nobody knows has no offsets to protect. A share
        group's GROUP_ID_NOT_FOUND is no error: Kafka's fetchOffsets answers such a group as one
        with no offsets, which a share group's id has (its commits are refused)."""
        if self._consumer_groups is not None:
            try:
                self._consumer_groups.validate_offset_fetch(group_id, member_id, member_epoch)
            except GroupError as e:
                return NONE if e.error_code == GROUP_ID_NOT_FOUND else e.error_code
        return NONE

    def fetch(self, group_id: str, partitions: Iterable[tuple[str, int]] | None) -> list[tuple[str, int, OffsetAndMetadata | None]]:
        """The committed offsets asked for (None: every partition the group has an offset for)."""
        committed = self.offsets.get(group_id, {})
        if partitions is None:
            return [(topic, partition, offset) for (topic, partition), offset in sorted(committed.items())]
        return [(topic, partition, committed.get((topic, partition))) for topic, partition in partitions]

    # -- OffsetDelete ------------------------------------------------------------------------------

    def group_exists(self, group_id: str) -> bool:
        if self._consumer_groups is not None and self._consumer_groups.subscribed_topics(group_id) is not None:
            return True
        return self._classic.group(group_id) is not None or group_id in self.offsets

    def delete_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]]) -> tuple[int, list[tuple[str, int, int]], list[Record]]:
        if self._consumer_groups is not None:
            try:
                self._consumer_groups.validate_offset_delete(group_id)
            except GroupError as e:
                return e.error_code, [], []
        if not self.group_exists(group_id):
            return GROUP_ID_NOT_FOUND, [], []
        subscribed = self._subscribed_topics(group_id)
        answers: list[tuple[str, int, int]] = []
        records: list[Record] = []
        committed = self.offsets.get(group_id, {})
        for topic, partition in partitions:
            if topic in subscribed:
                answers.append((topic, partition, GROUP_SUBSCRIBED_TO_TOPIC))
                continue
            answers.append((topic, partition, NONE))
            if (topic, partition) in committed:
                records.append((OffsetCommitKey(group=group_id, topic=topic, partition=partition), None))
        return NONE, answers, records

    def _subscribed_topics(self, group_id: str) -> set[str]:
        if self._consumer_groups is not None:
            consumer_topics = self._consumer_groups.subscribed_topics(group_id)
            if consumer_topics is not None:
                return consumer_topics
        group = self._classic.group(group_id)
        if group is None or group.is_in(ClassicGroupState.EMPTY) or group.protocol_type != "consumer" or group.protocol_name is None:
            return set()
        topics: set[str] = set()
        for member in group.members.values():
            try:
                topics.update(subscribed_topics(member.metadata(group.protocol_name)))
            except (ConsumerProtocolError, KeyError):
                continue
        return topics

    def delete_all_offsets(self, group_id: str) -> list[Record]:
        """Tombstones for every offset of a group being deleted."""
        return [(OffsetCommitKey(group=group_id, topic=t, partition=p), None) for t, p in sorted(self.offsets.get(group_id, {}))]

    # -- retention ---------------------------------------------------------------------------------

    def expire_offsets(self, now_ms: int) -> list[Record]:
        """Kafka's rule: offsets expire only while nobody consumes with the group; a classic group
        counts from when it became empty, a group with no members from each commit."""
        records: list[Record] = []
        for group_id, committed in self.offsets.items():
            if self._consumer_groups is not None and self._consumer_groups.subscribed_topics(group_id):
                continue
            group = self._classic.group(group_id)
            if group is not None and not group.is_in(ClassicGroupState.EMPTY):
                continue
            empty_since = group.state_timestamp_ms if group is not None and group.state_timestamp_ms >= 0 else None
            for (topic, partition), offset in sorted(committed.items()):
                if offset.expire_timestamp_ms != NO_EXPIRATION:
                    expired = now_ms >= offset.expire_timestamp_ms
                else:
                    base = offset.commit_timestamp_ms if empty_since is None else max(empty_since, offset.commit_timestamp_ms)
                    expired = now_ms - base >= self._retention_ms
                if expired:
                    records.append((OffsetCommitKey(group=group_id, topic=topic, partition=partition), None))
        return records

    # -- replay ------------------------------------------------------------------------------------

    def replay(self, key: OffsetCommitKey, value: OffsetCommitValue | None, record_offset: int) -> None:
        """A regular OffsetCommit record (or its tombstone) at ``record_offset`` of the log."""
        tp = (key.topic, key.partition)
        committed = self.offsets.setdefault(key.group, {})
        if value is None:
            committed.pop(tp, None)
            if not committed:
                del self.offsets[key.group]
            # A tombstone deletes the partition's offset, the ones still pending in open transactions included.
            for groups in self.pending_txn_offsets.values():
                groups.get(key.group, {}).pop(tp, None)
            return
        self._replay_group_of(key.group, value)
        committed[tp] = _offset_and_metadata(value, record_offset)

    def _replay_group_of(self, group_id: str, value: OffsetCommitValue) -> None:
        """Offsets committed outside any membership (a simple consumer, an admin) have no group
        record: as Kafka does on replay, they form an empty classic group, so that the group is
        listed and described after a reload as it was before. Its state dates from the commit."""
        if self._consumer_groups is not None and self._consumer_groups.subscribed_topics(group_id) is not None:
            return
        self._classic.get_or_create_group(group_id, value.commit_timestamp)


def _offset_and_metadata(value: OffsetCommitValue, record_offset: int) -> OffsetAndMetadata:
    return OffsetAndMetadata(
        offset=value.offset,
        leader_epoch=value.leader_epoch,
        metadata=value.metadata,
        commit_timestamp_ms=value.commit_timestamp,
        expire_timestamp_ms=value.expire_timestamp,
        record_offset=record_offset,
    )
