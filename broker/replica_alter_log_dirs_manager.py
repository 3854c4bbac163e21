"""Kafka's ReplicaAlterLogDirsManager and its thread: a replica moving to another log dir of this node.

AlterReplicaLogDirs gives the partition a future log in the destination dir (LogManager); this
task fills it from the current log, as a follower fills its log from a leader's: the batches from
the future's log end, appended as a follower appends them (offsets, leader epochs and producer
state kept), truncating where the current log was truncated and starting over past what
retention deleted. ``next_step`` is the sans-IO rule.

The swap waits for the controller, as Kafka's ReplicaAlterLogDirsThread.maybePromoteFutureReplica
does: once the future log has caught up, the AssignmentsManager is asked to assign the replica to
the new dir (QUEUED, copying goes on); once the controller has accepted (ACCEPTED), the next step
that finds the future log caught up swaps, with no await between the check and the swap (no
append can come in between on the event loop): the LogManager renames the logs and the partition
serves the new one. So the metadata names the new dir no later than the swap. A move given up
while QUEUED or ACCEPTED (a new AlterReplicaLogDirs to the old dir or a third one, the partition
or the future log gone) has the old dir asked for again, as Kafka reverts "for canceled future
replica". A future log found at start-up is picked up again and asks for its dir once caught up
(Kafka instead promotes it at once when the metadata already names its dir).

replica.alter.log.dirs.io.max.bytes.per.second bounds the copies as Kafka's alter-log-dirs
ReplicationQuotaManager does: a step copies up to replica.fetch.max.bytes (1 MiB) whenever the byte
rate over the last 11 one-second windows is within the bound, so a move starts with a burst of up
to 1 MiB and then waits until the rate has fallen back (Kafka's LocalLeaderEndPoint skips its fetch
while the quota is exceeded; its thread records what it appended).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

import structlog

from broker.replica_manager import ReplicaManager
from broker.replication_quota_manager import monotonic_ms
from replication.replication_quota import UNLIMITED, ReplicationQuota
from storage.errors import StorageError, UnexpectedAppendOffsetError
from storage.leader_epoch_cache import UNDEFINED_EPOCH
from storage.log_config import LONG_MAX
from storage.unified_log import UnifiedLog

log = structlog.get_logger(__name__)

TopicPartition = tuple[str, int]
# What one step copies at most (Kafka's replica.fetch.max.bytes default).
MAX_COPY_BYTES = 1 << 20
IDLE_WAIT_S = 0.1


@dataclass(frozen=True, slots=True)
class MoveStep:
    """What the future log needs next: ``action`` (COPY, TRUNCATE, START_AT, SWAP) at ``offset``."""

    action: str
    offset: int = -1


COPY, TRUNCATE, START_AT, SWAP = "copy", "truncate", "start_at", "swap"
# Kafka's ReassignmentState between None (no Promotion yet) and Effective (swapped, forgotten).
QUEUED, ACCEPTED = "queued", "accepted"


class DirectoryEventHandler(Protocol):
    """Kafka's DirectoryEventHandler.handleAssignment (the AssignmentsManager's on_assignment)."""

    def on_assignment(self, key: TopicPartition, directory: uuid.UUID, on_accepted: Callable[[], None] | None = None) -> None: ...


@dataclass(slots=True)
class Promotion:
    """A caught-up future log's assignment: ``future`` the future log's folder, ``target`` its dir's
    id, ``original`` the id of the dir to name again if the move is given up."""

    future: Path
    target: uuid.UUID
    original: uuid.UUID
    state: str = QUEUED


def next_step(current_start: int, current_end: int, future_end: int, diverged_at: int | None) -> MoveStep:
    """What the future log needs next. ``diverged_at`` is where the current log stops agreeing
    with the future's latest leader epoch (Kafka's OffsetsForLeaderEpoch against the source), None
    when it agrees through the future's end."""
    if diverged_at is not None and diverged_at < future_end:
        return MoveStep(TRUNCATE, diverged_at)
    if future_end < current_start:
        return MoveStep(START_AT, current_start)
    if future_end < current_end:
        return MoveStep(COPY, future_end)
    if future_end > current_end:
        return MoveStep(TRUNCATE, current_end)
    return MoveStep(SWAP)


def diverging_offset(current: UnifiedLog, future: UnifiedLog) -> int | None:
    """Where the current log's history leaves the future's: the end of the future's latest epoch in
    the current log, or of the epoch before it the current log has."""
    epoch = future.leader_epoch_cache.latest_epoch
    if epoch == UNDEFINED_EPOCH:
        return None
    source_epoch, source_end = current.end_offset_for_epoch(epoch)
    if source_epoch == UNDEFINED_EPOCH:
        return current.log_start_offset
    if source_epoch != epoch:
        return min(source_end, future.end_offset_for_epoch(source_epoch)[1])
    return source_end if source_end < future.log_end_offset else None


def throttle_rate(value: str | None) -> float | None:
    """replica.alter.log.dirs.io.max.bytes.per.second as a rate, None when unbounded (Kafka's default, Long.MAX_VALUE)."""
    try:
        rate = float(value) if value is not None else None
    except ValueError:
        return None
    return rate if rate is not None and 0 < rate < LONG_MAX else None


class ReplicaAlterLogDirsManager:
    def __init__(
        self, replica_manager: ReplicaManager, throttle_bytes_per_s: Callable[[], float | None] = lambda: None, clock_ms: Callable[[], int] = monotonic_ms
    ) -> None:
        self._rm = replica_manager
        self._log_manager = replica_manager.log_manager
        # replica.alter.log.dirs.io.max.bytes.per.second: what the copies may read and write.
        self._throttle = throttle_bytes_per_s
        self._quota = ReplicationQuota()
        self._clock_ms = clock_ms
        # Who asks the controller for a moving replica's new dir; None swaps at once (Kafka's NOOP handler).
        self.assignments: DirectoryEventHandler | None = None
        self._promotions: dict[TopicPartition, Promotion] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="replica-alter-log-dirs")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def alter(self, topic: str, partition: int, log_dir: Path) -> None:
        """Move the hosted replica to ``log_dir`` (its current dir: give up a move under way)."""
        future = self._log_manager.get_or_create_future_log(topic, partition, log_dir)
        self._forget_abandoned_promotions()
        if future is not None:
            self._wake.set()

    async def _run(self) -> None:
        while True:
            if self.step_all():
                await asyncio.sleep(0)
            else:
                # Nothing to copy, or over the quota: a new move wakes this, the quota is looked at again soon.
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallowed a close's
                # cancel that arrived with a new move, and this loop ran on for ever.
                try:
                    async with asyncio.timeout(IDLE_WAIT_S):
                        await self._wake.wait()
                except TimeoutError:
                    pass
                self._wake.clear()

    def step_all(self) -> int:
        """One step of every move under way; the bytes copied."""
        self._forget_abandoned_promotions()
        copied = 0
        for key in list(self._log_manager.future_logs):
            try:
                copied += self._step(key)
            except StorageError as e:
                # The dir's failure is the LogDirFailureChannel's to handle; this move waits.
                log.warning("replica_alter_log_dirs.step_failed", topic=key[0], partition=key[1], error=str(e))
        return copied

    def _step(self, key: TopicPartition) -> int:
        """One step of ``key``'s move, with no await inside; the bytes copied."""
        lm = self._log_manager
        current, future = lm.get_log(*key), lm.future_logs.get(key)
        if current is None or future is None or key not in self._rm.partitions:
            return 0  # not hosted (yet): Kafka moves online replicas only
        step = next_step(current.log_start_offset, current.log_end_offset, future.log_end_offset, diverging_offset(current, future))
        if step.action == TRUNCATE:
            future.truncate_to(step.offset)
        elif step.action == START_AT:
            future.truncate_fully_and_start_at(step.offset)
        elif step.action == COPY:
            return self._copy(current, future, step.offset)
        else:
            self._promote(key, current, future)
        return 0

    def _promote(self, key: TopicPartition, current: UnifiedLog, future: UnifiedLog) -> None:
        """Kafka's maybePromoteFutureReplica, the future log caught up: ask for its dir, or swap once the controller has accepted it."""
        promotion = self._promotions.get(key)
        if promotion is None:
            target, original = self._log_manager.directory_id(future.parent_dir), self._log_manager.directory_id(current.parent_dir)
            if self.assignments is None or target is None or original is None:
                self._swap(key)
                return
            self._promotions[key] = Promotion(future.dir, target, original)
            self.assignments.on_assignment(key, target, lambda: self._accepted(key, future.dir))
            log.info("replica_alter_log_dirs.assignment_queued", topic=key[0], partition=key[1], log_dir=str(future.parent_dir))
        elif promotion.state == ACCEPTED:
            del self._promotions[key]
            self._swap(key)

    def _accepted(self, key: TopicPartition, future: Path) -> None:
        promotion = self._promotions.get(key)
        if promotion is not None and promotion.future == future:
            promotion.state = ACCEPTED
            self._wake.set()
            log.info("replica_alter_log_dirs.assignment_accepted", topic=key[0], partition=key[1], log_dir=str(future.parent))

    def _forget_abandoned_promotions(self) -> None:
        """The moves given up since their dir was asked for: the controller is to name the old dir again."""
        for key, promotion in list(self._promotions.items()):
            future = self._log_manager.future_logs.get(key)
            if future is not None and future.dir == promotion.future:
                continue
            del self._promotions[key]
            if self.assignments is not None:
                self.assignments.on_assignment(key, promotion.original)
            log.info("replica_alter_log_dirs.assignment_reverted", topic=key[0], partition=key[1], state=promotion.state)

    def _copy(self, current: UnifiedLog, future: UnifiedLog, offset: int) -> int:
        rate = self._throttle()
        self._quota.bound = int(rate) if rate else UNLIMITED
        if self._quota.is_exceeded(self._clock_ms()):
            return 0
        info = current.read(offset, MAX_COPY_BYTES, current.log_end_offset, True)
        data = b"".join(os.pread(r.fd, r.length, r.position) for r in info.regions)
        if not data:
            return 0
        try:
            future.append_as_follower(data)
        except UnexpectedAppendOffsetError as e:
            # The current log starts inside its first batch (a DeleteRecords): so does the copy.
            if future.log_end_offset != future.log_start_offset:
                raise
            start = future.log_start_offset
            future.truncate_fully_and_start_at(e.first_offset)
            future.append_as_follower(data)
            future.update_high_watermark(start)
            future.maybe_increment_log_start_offset(start)
        future.update_high_watermark(current.high_watermark)
        if current.log_start_offset > future.log_start_offset:
            future.maybe_increment_log_start_offset(min(current.log_start_offset, future.high_watermark))
        self._quota.record(len(data), self._clock_ms())
        return len(data)

    def _swap(self, key: TopicPartition) -> None:
        plog = self._log_manager.replace_current_with_future(*key)
        partition = self._rm.partitions.get(key)
        if partition is not None:
            partition.log = plog
        log.info("replica_alter_log_dirs.moved", topic=key[0], partition=key[1], log_dir=str(plog.parent_dir), log_end_offset=plog.log_end_offset)


__all__ = ["ACCEPTED", "QUEUED", "DirectoryEventHandler", "MoveStep", "Promotion", "ReplicaAlterLogDirsManager", "diverging_offset", "next_step", "throttle_rate"]
