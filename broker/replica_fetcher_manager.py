"""ReplicaFetcherManager: the follower side of replication, one fetch loop per source broker.

Kafka's ReplicaFetcherManager and ReplicaFetcherThread on asyncio. Each loop sends Fetch (with
this broker's id and epoch, in the version the finalized metadata.version gives, looked up for
every request as Kafka's fetcher does: broker/replica_fetcher_requests.py) for every partition it
follows from one leader (`num.replica.fetchers` loops per leader, partitions spread by hash),
appends what comes back as it is (offsets kept, CRCs checked by the log), and takes the leader's
high watermark and log start. Truncation follows the leader's DivergingEpoch answers (replication/follower_fetch_state.py).
A fetch answered OFFSET_OUT_OF_RANGE (a log start moved past this replica's end while it was
away) carries no offsets, as Kafka's answer does not: the loop asks the leader for its log start
and end with ListOffsets, as Kafka's fetcher does, and truncates or starts over there.
A partition whose answer is an error waits `replica.fetch.backoff.ms`, the others go on; the
metadata log says where a moved partition went.

Each loop keeps an incremental fetch session (KIP-227) with its leader
(replication/fetch_session_handler.py): once the session is open a fetch names only the
partitions whose position changed, and the leader answers only those with news. Partitions
listed in the topic's `follower.replication.throttled.replicas` are left out of the request
while this broker's `follower.replication.throttled.rate` is exceeded and they are out of the ISR.
"""

from __future__ import annotations

import asyncio
import time
import zlib
from dataclasses import dataclass, replace
from typing import Any, Callable

import structlog
from kio.schema.errors import ErrorCode

from broker.metadata.metadata_cache import MetadataCache
from broker.channel_builders import PLAINTEXT_CHANNEL, ClientChannel
from broker.network_client import NetworkClient, NetworkError
from broker.partition import Partition
from broker.replica_fetcher_requests import FetchSettings, FollowerVersions, fetch_request, list_offsets_request, versions_for_features
from broker.replication_quota_manager import ReplicationQuotaManager
from replication.fetch_session_handler import FetchRequestData, FetchSessionHandler, PartitionData
from replication.follower_fetch_state import EpochEndOffset
from storage.unified_log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP

log = structlog.get_logger(__name__)

TopicPartition = tuple[str, int]
NO_EPOCH = -1
# Answers of a leader whose metadata is behind this follower's (or the other way round).
LEADERSHIP_RACE = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.unknown_leader_epoch, ErrorCode.fenced_leader_epoch})
LEADERSHIP_RACE_BACKOFF_MS = 50
# The leader lost or refused the session: the next fetch, a full one, can go at once.
SESSION_ERRORS = frozenset({ErrorCode.fetch_session_id_not_found, ErrorCode.invalid_fetch_session_epoch})


@dataclass(frozen=True, slots=True)
class FetcherSettings:
    node_id: int
    listener_name: str
    num_fetchers: int
    fetch_max_bytes: int
    fetch_response_max_bytes: int
    fetch_wait_max_ms: int
    fetch_min_bytes: int
    fetch_backoff_ms: int
    request_timeout_ms: int
    # How the fetchers connect to the leaders' inter-broker listener (TLS, SASL).
    channel: ClientChannel = PLAINTEXT_CHANNEL


@dataclass(slots=True)
class _FetchState:
    partition: Partition
    leader_epoch: int
    delayed_until: float = 0.0
    # Answered OFFSET_OUT_OF_RANGE: left out of fetches until the leader's offsets are known.
    out_of_range: bool = False


class _ListOffsetsError(Exception):
    pass


class ReplicaFetcher:
    """One loop fetching every partition this node follows from one leader."""

    def __init__(
        self,
        leader_id: int,
        fetcher_id: int,
        settings: FetcherSettings,
        metadata: MetadataCache,
        broker_epoch: Callable[[], int],
        quota: ReplicationQuotaManager | None = None,
    ) -> None:
        self.leader_id = leader_id
        self._settings = settings
        self._fetch_settings = FetchSettings(settings.node_id, settings.fetch_wait_max_ms, settings.fetch_min_bytes, settings.fetch_response_max_bytes)
        # A connection of its own, as Kafka's fetcher threads have: a fetch held for
        # replica.fetch.wait.max.ms would otherwise hold up every other request to that broker.
        self._network = NetworkClient(
            f"kbroker-{settings.node_id}-replica-fetcher-{leader_id}-{fetcher_id}", request_timeout_ms=settings.request_timeout_ms, channel=settings.channel
        )
        self._metadata = metadata
        self._broker_epoch = broker_epoch
        self._quota = quota
        self.session = FetchSessionHandler()
        self.partitions: dict[TopicPartition, _FetchState] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._log = log.bind(leader=leader_id)

    def add(self, partition: Partition) -> None:
        self.partitions[partition.key] = _FetchState(partition, partition.leader_epoch)
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name=f"replica-fetcher-{self.leader_id}")

    def remove(self, key: TopicPartition) -> None:
        self.partitions.pop(key, None)

    async def shutdown(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self._network.close()
        await self._network.wait_closed()

    async def _run(self) -> None:
        backoff_s = self._settings.fetch_backoff_ms / 1000
        while self.partitions:
            now = time.monotonic()
            endpoint = self._metadata.broker_endpoint(self.leader_id, self._settings.listener_name)
            if endpoint is not None:
                for state in [s for s in self.partitions.values() if s.out_of_range and s.delayed_until <= now]:
                    await self._restart_out_of_range(endpoint, state)
            ready = {k: s for k, s in self.partitions.items() if s.delayed_until <= now and not s.out_of_range and not self._throttled(s.partition)}
            # Built even when nothing is ready, as Kafka's fetcher does: partitions waiting out a
            # backoff or a throttle leave the session, and are sent in full when they come back.
            data = self.session.build({k: self._partition_data(s) for k, s in ready.items()}) if endpoint is not None else None
            if data is None or not (data.session_partitions or data.to_forget):
                self._wake.clear()
                wait = min((s.delayed_until - now for s in self.partitions.values() if s.delayed_until > now), default=backoff_s)
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallowed a shutdown's
                # cancel that arrived as a partition was added, and this loop ran on for ever.
                try:
                    async with asyncio.timeout(max(min(wait, backoff_s), 0.001)):
                        await self._wake.wait()
                except TimeoutError:
                    pass
                continue
            try:
                response = await self._network.send(
                    (endpoint.host, endpoint.port), self._request(data), timeout_ms=self._settings.request_timeout_ms + self._settings.fetch_wait_max_ms
                )
            except NetworkError as e:
                self._log.info("replica_fetcher.fetch_failed", error=str(e))
                self.session.handle_error()
                await asyncio.sleep(backoff_s)
                continue
            self._process(ready, response)
            # Appends are synchronous: give the loop's other work a turn between rounds.
            await asyncio.sleep(0)

    def _throttled(self, partition: Partition) -> bool:
        quota = self._quota
        return quota is not None and quota.should_throttle(partition.topic, partition.index, self._settings.node_id in partition.isr)

    def _partition_data(self, state: _FetchState) -> PartitionData:
        plog = state.partition.log
        return PartitionData(
            topic_id=state.partition.topic_id,
            fetch_offset=plog.log_end_offset,
            log_start_offset=plog.log_start_offset,
            max_bytes=self._settings.fetch_max_bytes,
            current_leader_epoch=state.leader_epoch,
            last_fetched_epoch=plog.leader_epoch_cache.latest_epoch,
        )

    def _versions(self) -> FollowerVersions:
        """The request versions for the finalized metadata.version of the image now published."""
        return versions_for_features(self._metadata.image.features)

    def _request(self, data: FetchRequestData) -> Any:
        return fetch_request(self._versions().fetch, self._fetch_settings, self._broker_epoch(), data)

    def _process(self, ready: dict[TopicPartition, _FetchState], response: Any) -> None:
        by_id = {s.partition.topic_id: s.partition.topic for s in ready.values()}
        answered = [(by_id.get(topic.topic_id), part) for topic in response.responses for part in topic.partitions]
        session_id = self.session.session_id
        if not self.session.handle_response(response.error_code, response.session_id, [(name, int(part.partition_index)) for name, part in answered]):
            # An answer that does not fit the session is dropped, and the next fetch is a full one.
            if response.error_code != ErrorCode.none:
                self._log.info("replica_fetcher.fetch_error", error=ErrorCode(response.error_code).name, session_id=session_id)
                if response.error_code not in SESSION_ERRORS:
                    self._delay(ready.values())
            return
        for name, part in answered:
            state = ready.get((name, int(part.partition_index))) if name is not None else None
            # Removed or re-added for a new leader while the fetch was out: the answer is stale.
            if state is None or self.partitions.get(state.partition.key) is not state:
                continue
            try:
                self._process_partition(state, part)
            except Exception as e:
                self._partition_failed(state, e)

    def _partition_failed(self, state: _FetchState, error: Exception) -> None:
        """A storage error or a bug: as Kafka's fetcher, back off this partition alone (leaving the
        loop would stop, silently, every partition fetched from this leader)."""
        partition = state.partition
        self._log.warning("replica_fetcher.partition_failed", topic=partition.topic, partition=partition.index, error=f"{type(error).__name__}: {error}")
        self._delay((state,))

    def _process_partition(self, state: _FetchState, part: Any) -> None:
        partition = state.partition
        code = part.error_code
        if code == ErrorCode.none:
            diverging = part.diverging_epoch
            if diverging.epoch != NO_EPOCH or diverging.end_offset != -1:
                self._truncate_on_divergence(partition, EpochEndOffset(int(diverging.epoch), int(diverging.end_offset)))
                return
            records = part.records
            if records:
                partition.append_records_as_follower(records, int(part.high_watermark), int(part.log_start_offset))
                if self._quota is not None and self._quota.is_throttled(partition.topic, partition.index):
                    self._quota.record(len(records))
            else:
                partition.take_leader_offsets(int(part.high_watermark), int(part.log_start_offset))
            return
        if code == ErrorCode.offset_out_of_range:
            state.out_of_range = True
            self._log.info("replica_fetcher.out_of_range", topic=partition.topic, partition=partition.index, fetch_offset=partition.log.log_end_offset)
            return
        # Not the leader any more, or an epoch one side has not caught up with: wait for the metadata.
        self._log.debug("replica_fetcher.partition_error", topic=partition.topic, partition=partition.index, error=ErrorCode(code).name)
        if code in LEADERSHIP_RACE:
            # Usually the new leader has not applied the record that made it leader yet: it will
            # within milliseconds, and waiting a whole replica.fetch.backoff.ms here would hold an
            # acks=all producer for that long after every leadership move.
            self._delay((state,), LEADERSHIP_RACE_BACKOFF_MS)
        else:
            self._delay((state,))

    async def _restart_out_of_range(self, endpoint: Any, state: _FetchState) -> None:
        """Kafka's fetchOffsetAndTruncate: the leader's log start and end, by ListOffsets, say
        whether to empty the log and start at the leader's start or cut back to its end."""
        partition = state.partition
        try:
            start = await self._list_offset(endpoint, state, EARLIEST_TIMESTAMP)
            end = await self._list_offset(endpoint, state, LATEST_TIMESTAMP)
        except (NetworkError, _ListOffsetsError) as e:
            self._log.info("replica_fetcher.list_offsets_failed", topic=partition.topic, partition=partition.index, error=str(e))
            self._delay((state,))
            return
        if self.partitions.get(partition.key) is not state:
            return  # removed or re-added for a new leader meanwhile
        try:
            offset = partition.restart_out_of_range(start, end)
        except Exception as e:
            self._partition_failed(state, e)
            return
        state.out_of_range = False
        self._log.info("replica_fetcher.restarted_out_of_range", topic=partition.topic, partition=partition.index, leader_log_start=start, leader_end=end, restart_at=offset)

    async def _list_offset(self, endpoint: Any, state: _FetchState, timestamp: int) -> int:
        partition = state.partition
        version = self._versions().list_offsets
        request = list_offsets_request(version, self._settings.node_id, partition.topic, partition.index, state.leader_epoch, timestamp)
        response = await self._network.send((endpoint.host, endpoint.port), request, timeout_ms=self._settings.request_timeout_ms)
        answers = [p for t in response.topics if t.name == partition.topic for p in t.partitions if p.partition_index == partition.index]
        if len(answers) != 1 or answers[0].error_code != ErrorCode.none:
            raise _ListOffsetsError(f"ListOffsets({timestamp}) answered {ErrorCode(answers[0].error_code).name if answers else 'nothing'}")
        return int(answers[0].offset)

    def _truncate_on_divergence(self, partition: Partition, diverging: EpochEndOffset) -> None:
        log_end_offset = partition.log.log_end_offset
        truncated_to = partition.truncate_on_divergence(diverging)
        self._log.info(
            "replica_fetcher.truncating",
            topic=partition.topic,
            partition=partition.index,
            diverging_epoch=diverging.epoch,
            diverging_end_offset=diverging.end_offset,
            truncate_to=truncated_to,
            log_end_offset=log_end_offset,
        )

    def _delay(self, states: Any, backoff_ms: int | None = None) -> None:
        until = time.monotonic() + min(self._settings.fetch_backoff_ms if backoff_ms is None else backoff_ms, self._settings.fetch_backoff_ms) / 1000
        for state in states:
            state.delayed_until = until


class ReplicaFetcherManager:
    def __init__(
        self, settings: FetcherSettings, metadata: MetadataCache, broker_epoch: Callable[[], int], quota: ReplicationQuotaManager | None = None
    ) -> None:
        self._settings = settings
        self._metadata = metadata
        self._broker_epoch = broker_epoch
        self._quota = quota
        self._fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._assigned: dict[TopicPartition, tuple[int, int]] = {}
        self._partitions: dict[TopicPartition, Partition] = {}
        self._shut_down = False

    def _fetcher_id(self, key: TopicPartition) -> int:
        # Kafka spreads partitions over num.replica.fetchers by hash; a stable hash keeps a
        # partition on one loop across restarts, which makes logs easier to follow.
        return zlib.crc32(f"{key[0]}-{key[1]}".encode()) % self._settings.num_fetchers

    def add_fetcher_for(self, partition: Partition) -> None:
        """Fetch ``partition`` from its current leader (moving it from any other fetcher); nothing once shut down."""
        self.remove_fetcher_for(partition.key)
        if self._shut_down:
            return
        slot = (partition.leader_id, self._fetcher_id(partition.key))
        fetcher = self._fetchers.get(slot)
        if fetcher is None:
            fetcher = self._fetchers[slot] = ReplicaFetcher(slot[0], slot[1], self._settings, self._metadata, self._broker_epoch, self._quota)
        fetcher.add(partition)
        self._assigned[partition.key] = slot
        self._partitions[partition.key] = partition

    def remove_fetcher_for(self, key: TopicPartition) -> None:
        slot = self._assigned.pop(key, None)
        self._partitions.pop(key, None)
        if slot is not None:
            self._fetchers[slot].remove(key)

    @property
    def num_fetchers(self) -> int:
        return self._settings.num_fetchers

    async def resize(self, num_fetchers: int) -> None:
        """num.replica.fetchers changed (a dynamic broker config): as Kafka's resizeThreadPool, every
        partition moves to the fetcher its hash now picks, and fetchers left without one stop."""
        if num_fetchers == self._settings.num_fetchers or self._shut_down:
            return
        self._settings = replace(self._settings, num_fetchers=num_fetchers)
        for partition in list(self._partitions.values()):
            self.add_fetcher_for(partition)
        used = set(self._assigned.values())
        idle = [slot for slot in self._fetchers if slot not in used]
        await asyncio.gather(*(self._fetchers.pop(slot).shutdown() for slot in idle))
        log.info("replica_fetcher_manager.resized", node_id=self._settings.node_id, num_fetchers=num_fetchers, fetchers=len(self._fetchers))

    async def shutdown(self) -> None:
        self._shut_down = True
        await asyncio.gather(*(f.shutdown() for f in self._fetchers.values()))
        self._fetchers.clear()
        self._assigned.clear()
        self._partitions.clear()
