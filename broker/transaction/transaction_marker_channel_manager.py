"""TransactionMarkerChannelManager: a transaction's markers written wherever its partitions are led.

Kafka's TransactionMarkerChannelManager. Once a transaction is in PrepareCommit or PrepareAbort,
every partition in it needs a marker appended by its leader. The partitions are grouped by the
leader the metadata image names: those this node leads are appended at once (so a transaction
on one node completes within its EndTxn), and every other leader gets one WriteTxnMarkers
request on its inter-broker listener. A partition not written yet is retried with a growing
backoff, its leader resolved again each time (leadership moves, and a new leader may not know
the topic yet), until it is written or its topic is gone from the image: a deleted partition
needs no marker, and Kafka stops waiting for it. Only when no partition is left is the
coordinator told, and it writes CompleteCommit or CompleteAbort. A fenced producer or
coordinator epoch ends the attempt, since someone newer owns the transaction; so does the
coordinator withdrawing the markers of a ``__transaction_state`` partition it stopped leading.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Iterable, Protocol

import structlog
from kio.schema.errors import ErrorCode
from kio.schema.types import ProducerId, TopicName
from kio.schema.write_txn_markers.v1.request import WritableTxnMarker, WritableTxnMarkerTopic, WriteTxnMarkersRequest
from kio.static.primitive import i16, i32

from broker.metadata.metadata_cache import BrokerEndpoint, MetadataCache
from broker.metadata.metadata_image import NO_LEADER, MetadataImage
from broker.network_client import NetworkError, exponential_backoff_ms

log = structlog.get_logger(__name__)

TopicPartition = tuple[str, int]

# Kafka's retry.backoff.ms and retry.backoff.max.ms defaults.
RETRY_BACKOFF_MS = 100
RETRY_BACKOFF_MAX_MS = 1000
# The producer could not have written to such a partition: it needs no marker (as Kafka).
NO_MARKER_NEEDED = frozenset({ErrorCode.unsupported_for_message_format, ErrorCode.unsupported_version})
# A newer producer epoch or coordinator owns the transaction: its markers are not ours to write.
FENCED = frozenset({ErrorCode.invalid_producer_epoch, ErrorCode.transaction_coordinator_fenced})


@dataclass(frozen=True, slots=True)
class TxnMarkerEntry:
    """The markers of one transaction, as its coordinator asks for them."""

    transactional_id: str
    txn_partition: int  # the ``__transaction_state`` partition whose coordinator sends them
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    partitions: frozenset[TopicPartition]


class MarkerCompletion(Protocol):
    """The coordinator's side of a transaction being completed."""

    def markers_still_wanted(self, entry: TxnMarkerEntry) -> bool:
        """Is this node still completing that transaction, at that coordinator epoch?"""
        ...

    def markers_written(self, entry: TxnMarkerEntry) -> None:
        """Every partition has its marker (or is gone): write the Complete state."""
        ...


class MarkerWriter(Protocol):
    """Appends markers to the partitions this node leads (TransactionMarkerWriter)."""

    def write_markers(
        self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int | asyncio.Future[int]]:
        """Each partition's error code, or its future while the marker is being replicated."""
        ...


class MarkerSender(Protocol):
    """NetworkClient.send."""

    async def send(self, destination: tuple[str, int], body: Any, timeout_ms: int | None = None) -> Any: ...


Remote = dict[int, tuple[BrokerEndpoint, list[TopicPartition]]]
# Local markers appended and waiting for their followers.
Replicating = dict[TopicPartition, "asyncio.Future[int]"]


@dataclass(slots=True)
class MarkerDestinations:
    """Where each partition's marker goes, by the image at one moment."""

    local: list[TopicPartition] = field(default_factory=list)
    remote: dict[int, tuple[BrokerEndpoint, list[TopicPartition]]] = field(default_factory=dict)
    # Led by nobody now, or by a broker with no endpoint on the listener: tried again later.
    unknown: list[TopicPartition] = field(default_factory=list)
    # Gone from the image: no marker is needed.
    deleted: list[TopicPartition] = field(default_factory=list)


def group_by_leader(
    image: MetadataImage, node_id: int, partitions: Iterable[TopicPartition], endpoint_of: Callable[[int], BrokerEndpoint | None]
) -> MarkerDestinations:
    out = MarkerDestinations()
    for tp in sorted(partitions):
        topic = image.topics.get(tp[0])
        registration = topic.partitions.get(tp[1]) if topic is not None else None
        if registration is None:
            out.deleted.append(tp)
            continue
        leader = registration.leader
        if leader == node_id:
            out.local.append(tp)
            continue
        endpoint = endpoint_of(leader) if leader != NO_LEADER else None
        if endpoint is None:
            out.unknown.append(tp)
            continue
        out.remote.setdefault(leader, (endpoint, []))[1].append(tp)
    return out


def write_txn_markers_request(entry: TxnMarkerEntry, partitions: Iterable[TopicPartition]) -> WriteTxnMarkersRequest:
    by_topic: dict[str, list[int]] = {}
    for topic, index in sorted(partitions):
        by_topic.setdefault(topic, []).append(index)
    marker = WritableTxnMarker(
        producer_id=ProducerId(entry.producer_id),
        producer_epoch=i16(entry.producer_epoch),
        transaction_result=entry.commit,
        topics=tuple(WritableTxnMarkerTopic(name=TopicName(topic), partition_indexes=tuple(i32(p) for p in indexes)) for topic, indexes in by_topic.items()),
        coordinator_epoch=i32(entry.coordinator_epoch),
    )
    return WriteTxnMarkersRequest(markers=(marker,))


@dataclass(eq=False, slots=True)
class _PendingMarkers:
    entry: TxnMarkerEntry
    completion: MarkerCompletion
    remaining: set[TopicPartition]
    fenced: bool = False
    rounds: int = 0
    task: asyncio.Task[None] | None = None


class TransactionMarkerChannelManager:
    def __init__(
        self,
        metadata: MetadataCache,
        local: MarkerWriter,
        network: MarkerSender,
        *,
        inter_broker_listener_name: str,
        request_timeout_ms: int | None = None,
        retry_backoff_ms: int = RETRY_BACKOFF_MS,
        retry_backoff_max_ms: int = RETRY_BACKOFF_MAX_MS,
        rng: random.Random | None = None,
    ) -> None:
        self._metadata = metadata
        self._local = local
        self._network = network
        # Listener names are upper case in registrations, as Kafka's ListenerName normalises them.
        self._listener = inter_broker_listener_name.upper()
        self._request_timeout_ms = request_timeout_ms
        self._retry_backoff_ms = retry_backoff_ms
        self._retry_backoff_max_ms = retry_backoff_max_ms
        self._rng = rng or random.Random()
        self._pending: dict[str, _PendingMarkers] = {}

    @property
    def pending_transactions(self) -> set[str]:
        """The transactional ids whose markers are still being written."""
        return set(self._pending)

    def add_txn_markers_to_send(self, entry: TxnMarkerEntry, completion: MarkerCompletion) -> None:
        """Write the markers: the local ones now, the rest in the background. ``completion`` hears
        of the end, synchronously if every partition was written here and now. Asking again for
        markers already in flight changes nothing; other markers of the same id replace them."""
        current = self._pending.get(entry.transactional_id)
        if current is not None:
            if current.entry == entry:
                return
            log.info("txn_markers.replaced", transactional_id=entry.transactional_id, producer_epoch=entry.producer_epoch, coordinator_epoch=entry.coordinator_epoch)
            self._drop(current)
        pending = _PendingMarkers(entry, completion, set(entry.partitions))
        remote, replicating = self._write_local(pending)
        if pending.fenced:
            return
        if not pending.remaining:
            completion.markers_written(entry)
            return
        self._pending[entry.transactional_id] = pending
        pending.task = asyncio.get_running_loop().create_task(self._send(pending, remote, replicating), name=f"txn-markers-{entry.transactional_id}")
        pending.task.add_done_callback(partial(self._send_done, pending))

    def remove_markers_for_txn_topic_partition(self, txn_partition: int) -> None:
        """This node stopped coordinating ``__transaction_state`` partition ``txn_partition``: its new
        coordinator completes those transactions, from their Prepare records."""
        for pending in [p for p in self._pending.values() if p.entry.txn_partition == txn_partition]:
            log.info("txn_markers.withdrawn", transactional_id=pending.entry.transactional_id, txn_partition=txn_partition)
            self._drop(pending)

    def shutdown(self) -> None:
        for pending in list(self._pending.values()):
            self._drop(pending)

    # -- one transaction ---------------------------------------------------------------------------------

    async def _send(self, pending: _PendingMarkers, remote: Remote, replicating: Replicating) -> None:
        entry = pending.entry
        while True:
            waits = [self._send_to(entry, broker_id, endpoint, tps) for broker_id, (endpoint, tps) in remote.items()]
            if replicating:
                waits.append(_replicated(replicating))
            if waits:
                for results in await asyncio.gather(*waits):
                    self._settle(pending, results)
            if pending.fenced:
                self._forget(pending)
                return
            if not pending.remaining:
                break
            delay_ms = exponential_backoff_ms(pending.rounds - 1, self._retry_backoff_ms, self._retry_backoff_max_ms, self._rng.random())
            await asyncio.sleep(delay_ms / 1000)
            if not pending.completion.markers_still_wanted(entry):
                log.info("txn_markers.no_longer_wanted", transactional_id=entry.transactional_id, coordinator_epoch=entry.coordinator_epoch)
                self._forget(pending)
                return
            remote, replicating = self._write_local(pending)
        self._forget(pending)
        pending.completion.markers_written(entry)

    def _write_local(self, pending: _PendingMarkers) -> tuple[Remote, Replicating]:
        """Resolve every partition still waiting and append the local markers: the remote ones by
        leader, and the local ones still being replicated."""
        entry = pending.entry
        pending.rounds += 1
        destinations = group_by_leader(self._metadata.image, self._metadata.node_id, pending.remaining, self._endpoint)
        for tp in destinations.deleted:
            pending.remaining.discard(tp)
            log.info("txn_markers.partition_gone", transactional_id=entry.transactional_id, topic=tp[0], partition=tp[1])
        if destinations.unknown:
            self._log(pending)("txn_markers.no_leader", transactional_id=entry.transactional_id, partitions=_names(destinations.unknown))
        replicating: Replicating = {}
        if destinations.local:
            results = self._local.write_markers(entry.producer_id, entry.producer_epoch, entry.coordinator_epoch, entry.commit, destinations.local)
            replicating = {tp: r for tp, r in results.items() if isinstance(r, asyncio.Future)}
            self._settle(pending, {tp: r for tp, r in results.items() if not isinstance(r, asyncio.Future)})
        return destinations.remote, replicating

    def _endpoint(self, broker_id: int) -> BrokerEndpoint | None:
        return self._metadata.broker_endpoint(broker_id, self._listener)

    async def _send_to(self, entry: TxnMarkerEntry, broker_id: int, endpoint: BrokerEndpoint, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The error of each partition the leader answered for; none when it did not answer."""
        request = write_txn_markers_request(entry, partitions)
        try:
            response = await self._network.send((endpoint.host, endpoint.port), request, timeout_ms=self._request_timeout_ms)
        except NetworkError as e:
            log.info("txn_markers.send_failed", transactional_id=entry.transactional_id, broker=broker_id, error=str(e))
            return {}
        results: dict[TopicPartition, int] = {}
        for marker in response.markers:
            if marker.producer_id != entry.producer_id:
                continue
            for topic in marker.topics:
                for p in topic.partitions:
                    results[(str(topic.name), int(p.partition_index))] = int(p.error_code)
        return results

    def _settle(self, pending: _PendingMarkers, results: dict[TopicPartition, int]) -> None:
        entry = pending.entry
        retried: dict[str, str] = {}
        for tp, code in results.items():
            if tp not in pending.remaining:
                continue
            if code == ErrorCode.none or code in NO_MARKER_NEEDED:
                pending.remaining.discard(tp)
            elif code in FENCED:
                pending.fenced = True
                log.warning("txn_markers.fenced", transactional_id=entry.transactional_id, topic=tp[0], partition=tp[1], error=ErrorCode(code).name)
            else:
                retried[f"{tp[0]}-{tp[1]}"] = _error_name(code)
        if retried and not pending.fenced:
            self._log(pending)("txn_markers.retrying", transactional_id=entry.transactional_id, failed=retried)

    @staticmethod
    def _log(pending: _PendingMarkers) -> Callable[..., Any]:
        # The first failure of a transaction is news; its retries are not.
        return log.info if pending.rounds <= 1 else log.debug

    def _forget(self, pending: _PendingMarkers) -> None:
        if self._pending.get(pending.entry.transactional_id) is pending:
            del self._pending[pending.entry.transactional_id]

    def _drop(self, pending: _PendingMarkers) -> None:
        self._forget(pending)
        if pending.task is not None:
            pending.task.cancel()

    def _send_done(self, pending: _PendingMarkers, task: asyncio.Task[None]) -> None:
        self._forget(pending)
        if not task.cancelled() and task.exception() is not None:
            log.error("txn_markers.failed", transactional_id=pending.entry.transactional_id, exc_info=task.exception())


async def _replicated(replicating: Replicating) -> dict[TopicPartition, int]:
    return {tp: await written for tp, written in replicating.items()}


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


def _names(partitions: Iterable[TopicPartition]) -> list[str]:
    return [f"{t}-{p}" for t, p in partitions]


__all__ = [
    "MarkerCompletion",
    "MarkerDestinations",
    "MarkerSender",
    "MarkerWriter",
    "TransactionMarkerChannelManager",
    "TxnMarkerEntry",
    "group_by_leader",
    "write_txn_markers_request",
]
