"""ReplicaManager: the partitions this broker hosts, and the produce and fetch paths into them.

A MetadataPublisher: each metadata delta's changes for this node make it create, re-role or
delete replicas. A replica stays while this node is among its replicas, whoever leads it. A
leader serves produce, consumers and its followers' fetches; a follower is handed to the
ReplicaFetcherManager. acks=all produce waits here (Kafka's DelayedProduce) until the high
watermark passes it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable

import structlog
from kio.schema.errors import ErrorCode

from broker.delayed_operations import Purgatory
from broker.metadata.metadata_delta import MetadataDelta
from broker.metadata.metadata_image import EMPTY_IMAGE, NO_LEADER, TOPIC_RESOURCE, MetadataImage
from broker.metadata.topics_delta import PartitionInfo
from broker.metrics.broker_topic_metrics import BrokerTopicStats
from broker.pending_replicas import PendingReplicas
from broker.partition import ACKS_ALL, NO_EPOCH, LogReadResult, NotLeaderOrFollowerError, Partition, ReplicationSettings, UnknownTopicOrPartitionError
from storage.errors import KafkaStorageError, StorageError
from broker.broker_log_dirs import assigned_directory
from storage.producer_state_manager import AppendOrigin
from storage.log_config import LogConfig
from storage.log_manager import LogManager
from storage.producer_state_manager import SENTINEL_VERIFICATION_GUARD, VerificationGuard

if TYPE_CHECKING:
    from broker.alter_partition_manager import AlterPartitionManager
    from broker.replica_fetcher_manager import ReplicaFetcherManager

log = structlog.get_logger(__name__)

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class ProduceResult:
    error_code: int = 0
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    record_errors: tuple[tuple[int, str | None], ...] = ()  # (index in the batch, message) of rejected records
    # The offset the high watermark must reach before an acks=all answer; -1 when nothing was appended.
    required_offset: int = -1
    # KIP-951: (leader id, leader epoch) as this node knows them, with NOT_LEADER_OR_FOLLOWER.
    current_leader: tuple[int, int] | None = None


@dataclass(slots=True)
class ReadResult:
    error_code: int = 0
    read: LogReadResult | None = None
    current_leader: tuple[int, int] | None = None  # KIP-951, as in ProduceResult

    @property
    def size(self) -> int:
        return self.read.size if self.read else 0


# New logs created in one go on the event loop: about 30 ms of file-system work on an idle
# machine, 100 ms on a busy one.
CREATE_SLICE = 100


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class ReplicaManager:
    def __init__(
        self,
        node_id: int,
        log_manager: LogManager,
        topic_defaults: Callable[[], dict[str, str]],
        *,
        replica_lag_time_max_ms: int = 30000,
        broker_epoch: Callable[[], int] = lambda: -1,
        create_slice: int = CREATE_SLICE,
    ) -> None:
        self.node_id = node_id
        self.log_manager = log_manager
        self._topic_defaults = topic_defaults
        self.partitions: dict[TopicPartition, Partition] = {}
        # New replicas past the first ``create_slice`` logs of a delta, created by ``_creating``.
        self.create_slice = create_slice
        self._pending = PendingReplicas()
        self._creating: asyncio.Task[None] | None = None
        # Consumers' and followers' DelayedFetch: woken by appends and high watermark moves.
        self.fetch_purgatory = Purgatory()
        # acks=all DelayedProduce: woken by high watermark moves and leadership changes.
        self.produce_purgatory = Purgatory()
        # BrokerTopicMetrics (broker/metrics/): counted here for produce, by FetchHandler for fetch.
        self.topic_stats = BrokerTopicStats()
        # ReplicaManager IsrShrinksPerSec / IsrExpandsPerSec: ISR changes this leader asked for.
        self.isr_shrinks = 0
        self.isr_expands = 0
        self._image = EMPTY_IMAGE
        self.settings = ReplicationSettings(node_id, replica_lag_time_max_ms, broker_epoch, self._is_eligible)
        # Whether the controller cannot have fenced this broker yet (BrokerSessionLease); the broker sets it.
        self.in_session: Callable[[], bool] = lambda: True
        self.alter_partition_manager: AlterPartitionManager | None = None
        # replica.selector.class is Kafka's RackAwareReplicaSelector (KIP-392).
        self.rack_aware_selection = False
        self.fetcher_manager: ReplicaFetcherManager | None = None

    def _is_eligible(self, broker_id: int) -> bool:
        registration = self._image.brokers.get(broker_id)
        return registration is not None and not registration.fenced and not registration.in_controlled_shutdown

    def log_config_for(self, image: MetadataImage, topic: str) -> LogConfig:
        props = dict(self._topic_defaults())
        props.update(image.topic_config(topic))
        return LogConfig.from_properties(props)

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        self.apply_delta(delta, image)

    @property
    def pending_replicas(self) -> int:
        """New replicas whose logs are still to be created: not hosted yet."""
        return len(self._pending)

    def apply_delta(self, delta: MetadataDelta, image: MetadataImage) -> None:
        """Act on this node's changes only (Kafka's applyDelta): delete the replicas it lost,
        become leader or follower of the others that changed, and give changed topic configs
        to the logs. Past ``create_slice`` new logs, the rest are created a slice at a time
        (PendingReplicas)."""
        self._image = image
        changed = False
        if delta.topics_delta is not None:
            changes = delta.topics_delta.local_changes(self.node_id)
            deleted = 0
            for key, topic_id in changes.deletes.items():
                partition = self.partitions.get(key)
                if partition is not None and partition.topic_id == topic_id:
                    self._remove(key)
                    deleted += 1
                elif self._pending.discard(key, topic_id):
                    deleted += 1
            changed = bool(deleted)
            roles = [(key, info, True) for key, info in changes.leaders.items()]
            roles += [(key, info, False) for key, info in changes.followers.items()]
            leaders, followers = self._make_replicas(roles, self.create_slice)
            if leaders or followers or deleted:
                # One line, not one per partition: a node with 10,000 partitions starts with 10,000.
                log.info(
                    "replica_manager.applied_delta",
                    became_leader=leaders,
                    became_follower=followers,
                    deleted=deleted,
                    hosted=len(self.partitions),
                    pending=self.pending_replicas,
                )
            changed = changed or bool(changes.leaders or changes.followers)
            if self._pending and self._creating is None:
                self._creating = asyncio.get_running_loop().create_task(self._create_pending(), name="create-pending-replicas")
        if delta.configs_delta is not None:
            for name in delta.configs_delta.changed_resources(TOPIC_RESOURCE):
                changed = self._update_topic_config(name, image) or changed
        if changed:
            self.fetch_purgatory.touch_all()
            self.produce_purgatory.touch_all()

    def _make_replicas(self, roles: Iterable[tuple[TopicPartition, PartitionInfo, bool]], new_logs: int) -> tuple[int, int]:
        """Create or update each replica in its role (leader: True); returns how many took a new
        role or leader, as leaders and as followers. Past ``new_logs`` logs to create, and for
        replicas pending already, the rest wait in PendingReplicas."""
        leaders = followers = 0
        now = now_ms()
        configs: dict[str, LogConfig] = {}
        for key, info, leader in roles:
            topic, index = key
            partition = self.partitions.get(key)
            if partition is not None and _in_offline_dir(partition):
                # HostedPartition.Offline: its log dir failed, and it takes no role until a restart.
                continue
            if partition is None or partition.topic_id != info.topic_id:
                if partition is not None:
                    self._remove(key)
                creates_log = self.log_manager.get_log(topic, index) is None
                if key in self._pending or (creates_log and new_logs <= 0):
                    self._pending.add(key, info, leader)
                    continue
                new_logs -= creates_log
                config = configs.get(topic)
                if config is None:
                    config = configs[topic] = self.log_config_for(self._image, topic)
                target_dir = assigned_directory(info.registration, self.node_id)
                if creates_log and self.log_manager.is_offline_directory(target_dir):
                    # Its data is in a dir of this node that is offline: no empty log elsewhere.
                    log.warning("partition.log_dir_offline", topic=topic, partition=index, directory_id=str(target_dir))
                    continue
                plog = self.log_manager.get_or_create_log(topic, index, config, info.topic_id, target_dir)
                partition = self.partitions[key] = Partition(topic, index, info.topic_id, plog, self.settings)
            if self._take_role(partition, info, leader, now):
                if leader:
                    leaders += 1
                else:
                    followers += 1
        return leaders, followers

    def _take_role(self, partition: Partition, info: PartitionInfo, leader: bool, now: int) -> bool:
        """Make the replica leader or follower as ``info`` says; whether its role or leader changed."""
        key, reg = partition.key, info.registration
        if leader:
            if self.fetcher_manager is not None:
                self.fetcher_manager.remove_fetcher_for(key)
            new_role = partition.make_leader(reg, now)
        else:
            new_role = partition.make_follower(reg)
            if self.fetcher_manager is not None:
                if new_role and reg.leader != NO_LEADER:
                    self.fetcher_manager.add_fetcher_for(partition)
                elif reg.leader == NO_LEADER:
                    self.fetcher_manager.remove_fetcher_for(key)
        if new_role:
            log.debug("partition.leader" if leader else "partition.follower", topic=key[0], partition=key[1], leader=reg.leader, epoch=reg.leader_epoch)
        return new_role

    async def _create_pending(self) -> None:
        """Create the pending replicas a slice at a time; after each slice, yield the loop for as
        long as the slice took, so that the node's clients get at least half of it."""
        started = time.monotonic()
        leaders = followers = 0
        try:
            while self._pending:
                slice_started = time.monotonic()
                taken = self._pending.take(self.create_slice)
                led, followed = self._make_replicas([(p.key, p.info, p.leader) for p in taken], len(taken))
                leaders, followers = leaders + led, followers + followed
                await asyncio.sleep(time.monotonic() - slice_started)
        except Exception:
            # As a failed delta is (the loader's publisher_failed): what is left waits for the next delta.
            log.exception("replica_manager.pending_replicas_failed", pending=self.pending_replicas)
            return
        finally:
            self._creating = None
        log.info(
            "replica_manager.pending_replicas_created",
            became_leader=leaders,
            became_follower=followers,
            hosted=len(self.partitions),
            seconds=round(time.monotonic() - started, 3),
        )

    async def shutdown(self) -> None:
        """Stop creating pending replicas (between two slices: every log is whole)."""
        if self._creating is not None:
            self._creating.cancel()
            await asyncio.gather(self._creating, return_exceptions=True)

    def reapply_topic_configs(self) -> None:
        """The broker's topic defaults changed (a dynamic broker config): every hosted log takes them."""
        for name in sorted({topic for topic, _ in self.partitions}):
            self._update_topic_config(name, self._image)

    def _update_topic_config(self, name: str, image: MetadataImage) -> bool:
        topic = image.topics.get(name)
        if topic is None:
            return False
        config: LogConfig | None = None
        updated = False
        for index in topic.partitions:
            partition = self.partitions.get((name, index))
            if partition is None:
                continue
            config = config or self.log_config_for(image, name)
            if partition.log.config != config:
                partition.log.update_config(config)
                partition.update_min_insync_replicas()
                updated = True
        return updated

    def delete_stray_logs(self) -> list[TopicPartition]:
        """Kafka's stray replicas: once this broker has caught up with the metadata log, a log on
        disk whose partition (by topic id) no longer lists this broker among its replicas was
        removed while the broker was down (a reassignment, a deleted topic) and is deleted now.
        So is a log that this broker does not host and whose topic id was never written (a
        process killed before the flush job wrote its partition.metadata), as Kafka's
        isStrayKraftReplica treats a missing topic id."""
        stray = [key for key, plog in self.log_manager.all_log_items() if key not in self.partitions and not self._assigned_here(key, plog.topic_id)]
        for key in stray:
            self.log_manager.delete_log(*key)
        if stray:
            log.info("replica_manager.stray_logs_deleted", partitions=[f"{t}-{p}" for t, p in stray])
        return stray

    def _assigned_here(self, key: TopicPartition, topic_id: uuid.UUID | None) -> bool:
        topic = self._image.topics_by_id.get(topic_id) if topic_id is not None else None
        registration = topic.partitions.get(key[1]) if topic is not None else None
        return registration is not None and self.node_id in registration.replicas

    def _remove(self, key: TopicPartition) -> None:
        if self.fetcher_manager is not None:
            self.fetcher_manager.remove_fetcher_for(key)
        self.partitions.pop(key)
        self.log_manager.delete_log(*key)
        log.debug("partition.deleted", topic=key[0], partition=key[1])

    def get_partition(self, topic: str, index: int) -> Partition | None:
        """The replica if this node leads it: what produce, consumer fetch, ListOffsets and the
        coordinators act on. Callers answer NOT_LEADER_OR_FOLLOWER for None on a known partition."""
        partition = self.partitions.get((topic, index))
        return partition if partition is not None and partition.is_leader else None

    def leader_partition(self, topic: str, index: int, image: MetadataImage) -> Partition:
        """Kafka's getPartitionOrException, the one leader check of the requests a leader answers:
        the partition this node leads, else KafkaStorageError for a replica whose log dir is
        offline, NotLeaderOrFollowerError for one ``image`` has and UnknownTopicOrPartitionError
        for one it does not."""
        replica = self.hosted_partition(topic, index, image)
        if replica.is_leader:
            return replica
        if image.has_partition(topic, index):
            raise NotLeaderOrFollowerError(f"this node does not lead {topic}-{index}")
        raise UnknownTopicOrPartitionError(f"{topic}-{index} is not in the metadata")

    def hosted_partition(self, topic: str, index: int, image: MetadataImage) -> Partition:
        """Kafka's getPartitionOrError: the replica hosted here, leader or follower (what
        DescribeProducers reads), with the errors of ``leader_partition`` when there is none."""
        replica = self.partitions.get((topic, index))
        if replica is not None:
            # HostedPartition.Offline: until the node restarts (or halts, with no dir left), its epochs,
            # producers and high watermark are still in memory, but no longer backed by a log that can be read.
            if _in_offline_dir(replica):
                raise KafkaStorageError(f"Partition {topic}-{index} is in an offline log directory")
            return replica
        if image.has_partition(topic, index):
            raise NotLeaderOrFollowerError(f"this node does not host {topic}-{index}")
        raise UnknownTopicOrPartitionError(f"{topic}-{index} is not in the metadata")

    def get_replica(self, topic: str, index: int) -> Partition | None:
        """The replica hosted here, leader or follower."""
        return self.partitions.get((topic, index))

    # -- high watermark moves ----------------------------------------------------------------------

    def high_watermark_moved(self, partition: Partition) -> None:
        """Wake what waits on the partition: consumers (more to read) and acks=all producers."""
        self.fetch_purgatory.touch(partition.key)
        self.produce_purgatory.touch(partition.key)

    def maybe_shrink_isr(self) -> None:
        """Kafka's isr-expiration job: every leader drops the followers that fell behind."""
        manager = self.alter_partition_manager
        if manager is None:
            return
        now = now_ms()
        for partition in self.partitions.values():
            if _in_offline_dir(partition):
                continue  # the controller moved its leadership away (OfflineLogDirs)
            intent = partition.maybe_shrink_isr(now)
            if intent is not None:
                log.info("partition.shrinking_isr", topic=partition.topic, partition=partition.index, isr=partition.isr, new_isr=intent.isr)
                self.isr_shrinks += 1
                manager.submit(partition, intent)

    # -- produce -------------------------------------------------------------------------------------

    def append_records(
        self,
        entries: Iterable[tuple[str, int, memoryview | None]],
        image: MetadataImage,
        required_acks: int = 1,
        verification_guards: dict[TopicPartition, VerificationGuard] | None = None,
    ) -> dict[TopicPartition, ProduceResult]:
        """``verification_guards`` (KIP-890): None when transactions are not verified; else the
        guard of each partition whose transaction verification started, the others' being the
        sentinel that only an open transaction lets through."""
        results: dict[TopicPartition, ProduceResult] = {}
        stats = self.topic_stats
        for topic, index, records in entries:
            key = (topic, index)
            metrics = stats.topic(topic)
            metrics.total_produce_requests += 1
            partition = self.get_partition(topic, index)
            if partition is None:
                results[key] = ProduceResult(error_code=_missing_leader_error(image, topic, index), current_leader=leader_hint(image, topic, index))
                continue
            if records is None:
                results[key] = ProduceResult(error_code=ErrorCode.corrupt_message, error_message="null records")
                continue
            try:
                hw_before = partition.high_watermark
                guard = None if verification_guards is None else verification_guards.get(key, SENTINEL_VERIFICATION_GUARD)
                info = partition.append_records_to_leader(records, AppendOrigin.CLIENT, required_acks, guard)
            except StorageError as e:
                log.debug("produce.rejected", topic=topic, partition=index, error=str(e))
                metrics.failed_produce_requests += 1
                metrics.bytes_rejected += len(records)
                results[key] = ProduceResult(
                    error_code=e.error_code,
                    error_message=str(e) or None,
                    log_start_offset=partition.log.log_start_offset,
                    record_errors=getattr(e, "record_errors", ()),
                )
                continue
            results[key] = ProduceResult(
                base_offset=info.first_offset, log_append_time=info.log_append_time, log_start_offset=info.log_start_offset, required_offset=info.last_offset + 1
            )
            metrics.messages_in += info.records_count
            metrics.bytes_in += len(records)
            self.fetch_purgatory.touch(key)
            if partition.high_watermark != hw_before:
                self.produce_purgatory.touch(key)
        return results

    def pending_replication(self, results: dict[TopicPartition, ProduceResult]) -> dict[TopicPartition, int]:
        """Settle what is replicated already; the partitions still waiting, with their required offsets."""
        waiting: dict[TopicPartition, int] = {}
        for key, result in results.items():
            if result.error_code or result.required_offset < 0:
                continue
            code = self.replicated(key, result.required_offset)
            if code is None:
                waiting[key] = result.required_offset
            elif code:
                results[key] = ProduceResult(error_code=code)
        return waiting

    def replicated(self, key: TopicPartition, required_offset: int) -> int | None:
        """None while the high watermark is below ``required_offset``, else the error code to answer (0: replicated)."""
        partition = self.partitions.get(key)
        if partition is None:
            return int(ErrorCode.not_leader_or_follower)
        return partition.replicated_through(required_offset)

    async def wait_for_replication(self, results: dict[TopicPartition, ProduceResult], waiting: dict[TopicPartition, int], timeout_ms: int) -> None:
        """Kafka's DelayedProduce: until the high watermark passes every partition's last
        appended offset, or REQUEST_TIMED_OUT for those it has not passed by the timeout."""
        deadline = time.monotonic() + timeout_ms / 1000
        while waiting:
            for key, offset in list(waiting.items()):
                code = self.replicated(key, offset)
                if code is not None:
                    if code:
                        results[key] = ProduceResult(error_code=code)
                    del waiting[key]
            remaining = deadline - time.monotonic()
            if not waiting:
                return
            if remaining <= 0:
                for key in waiting:
                    results[key] = ProduceResult(error_code=ErrorCode.request_timed_out)
                return
            await self.produce_purgatory.wait(list(waiting), remaining)

    async def wait_replicated(self, key: TopicPartition, required_offset: int, timeout_ms: int) -> int:
        """A coordinator's write: 0 once the high watermark passes ``required_offset``, else the error."""
        results = {key: ProduceResult(required_offset=required_offset)}
        waiting = self.pending_replication(results)
        if waiting:
            await self.wait_for_replication(results, waiting, timeout_ms)
        return results[key].error_code

    # -- fetch -----------------------------------------------------------------------------------------

    def read(
        self,
        topic: str,
        index: int,
        fetch_offset: int,
        max_bytes: int,
        isolation_level: int,
        min_one_message: bool,
        image: MetadataImage,
        current_leader_epoch: int = NO_EPOCH,
        client_rack: str | None = None,
    ) -> ReadResult:
        """A consumer's read. ``client_rack`` is given by consumers that may fetch from a follower
        (Fetch v11+, KIP-392): a follower then serves them, and with rack-aware selection the
        leader may send them to a replica in their rack."""
        partition = self.partitions.get((topic, index))
        if partition is None or not (partition.is_leader or client_rack is not None):
            return ReadResult(error_code=_missing_leader_error(image, topic, index), current_leader=leader_hint(image, topic, index))
        try:
            if partition.is_leader and client_rack and self.rack_aware_selection:
                preferred = partition.preferred_read_replica(client_rack, fetch_offset, lambda b: _rack(image, b))
                if preferred is not None:
                    return ReadResult(read=partition.redirect(preferred))
            return ReadResult(read=partition.read_records(fetch_offset, max_bytes, isolation_level, min_one_message, current_leader_epoch, not partition.is_leader))
        except StorageError as e:
            if e.error_code == ErrorCode.offset_out_of_range and fetch_offset > partition.log.log_end_offset and not self.in_session():
                # Past the log end of a leader the controller may have replaced: the successor
                # may hold that offset, and OFFSET_OUT_OF_RANGE would send the consumer to its
                # auto.offset.reset (soak seed 1484106251). Sent to refresh its metadata instead.
                return ReadResult(error_code=ErrorCode.not_leader_or_follower)
            hint = (partition.leader_id, partition.leader_epoch) if e.error_code == ErrorCode.fenced_leader_epoch else None
            return ReadResult(error_code=e.error_code, current_leader=hint)

    def read_for_follower(
        self,
        replica_id: int,
        broker_epoch: int,
        topic: str,
        index: int,
        fetch_offset: int,
        last_fetched_epoch: int,
        log_start_offset: int,
        current_leader_epoch: int,
        max_bytes: int,
        image: MetadataImage,
        update_fetch_state: bool = True,
    ) -> ReadResult:
        partition = self.get_partition(topic, index)
        if partition is None:
            return ReadResult(error_code=_missing_leader_error(image, topic, index))
        try:
            read, outcome = partition.read_for_follower(
                replica_id, broker_epoch, fetch_offset, last_fetched_epoch, log_start_offset, current_leader_epoch, max_bytes, now_ms(), update_fetch_state
            )
        except StorageError as e:
            return ReadResult(error_code=e.error_code)
        if outcome.high_watermark_moved:
            self.high_watermark_moved(partition)
        if outcome.alter_isr is not None and self.alter_partition_manager is not None:
            log.info("partition.expanding_isr", topic=topic, partition=index, isr=partition.isr, new_isr=outcome.alter_isr.isr)
            self.isr_expands += 1
            self.alter_partition_manager.submit(partition, outcome.alter_isr)
        return ReadResult(read=read)


def _in_offline_dir(partition: Partition) -> bool:
    return partition.log.failure_channel.has_offline_log_dir(partition.log.parent_dir)


def _rack(image: MetadataImage, broker_id: int) -> str | None:
    registration = image.brokers.get(broker_id)
    return registration.rack if registration is not None else None


def leader_hint(image: MetadataImage, topic: str, index: int) -> tuple[int, int] | None:
    """KIP-951: the partition's leader and epoch as the image has them, when it has a leader."""
    info = image.topics.get(topic)
    registration = info.partitions.get(index) if info is not None else None
    if registration is None or registration.leader == NO_LEADER:
        return None
    return registration.leader, registration.leader_epoch


def _missing_leader_error(image: MetadataImage, topic: str, index: int) -> int:
    """What a request for a partition this node does not lead is answered."""
    return int(ErrorCode.not_leader_or_follower if image.has_partition(topic, index) else ErrorCode.unknown_topic_or_partition)


__all__ = ["ACKS_ALL", "ProduceResult", "ReadResult", "ReplicaManager"]
