"""An idempotent producer (enable.idempotence, acks=all) as Kafka's Java client runs one.

Every batch of a partition gets the next sequences of the producer's epoch when it is created,
and is sent in order to the leader the cluster's metadata names. Only the five batches from the
oldest unacknowledged one on may be sent: the broker keeps the last five batches of a producer
to recognise a retry (a client on TCP gets its answers in order, so its five requests in flight
are that window; the simulated network loses and reorders single messages, so the window is
kept here). A batch answered with a retriable error (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS,
REQUEST_TIMED_OUT, OUT_OF_ORDER_SEQUENCE_NUMBER behind an unacknowledged batch, ...) or not
answered within the request timeout is sent again, unchanged: the broker must answer a retry
of a written batch with where it went, never write it twice. A batch is sent again only once
every batch before it is acknowledged, and nothing behind it is sent meanwhile, as the Java
client's RecordAccumulator drains a partition that has a retry (one request in flight): so a
later batch never reaches a new leader before an earlier one's retry.

A batch not acknowledged within the delivery timeout fails, and the producer bumps its epoch as
the clients do (KIP-360: its sequences can have a gap now): it stops sending, waits until no
request is in flight, fails every batch it ever sent (its fate is unknown), and gives the
batches it never sent the new epoch's sequences from 0. So does an OUT_OF_ORDER_SEQUENCE_NUMBER
for an attempt sent once all of the batch's predecessors were acknowledged, as in the Java
client: that batch fails too. The refusal speaks only for the refusing leader's log: another
replica may hold the batch (a deposed leader appended it, and a follower that copied it is
elected later), so sending it again under the new epoch could write it twice. librdkafka does
send it again: the duplicates of librdkafka issue #4953. Whether a leader refuses a batch it
holds is checked where it answers (tests/simulation/sim_broker.py), so that a duplicate here is
the broker's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from tests.simulation.sim_broker import ProduceRequest, ProduceResponse
from tests.simulation.sim_replica import TopicPartition
from tests.simulation.simulated_disk import ProducedRecord

if TYPE_CHECKING:
    from tests.simulation.cluster_simulation import Simulation

MAX_IN_FLIGHT = 5
OUT_OF_ORDER_SEQUENCE_NUMBER = int(ErrorCode.out_of_order_sequence_number)
DUPLICATE_SEQUENCE_NUMBER = int(ErrorCode.duplicate_sequence_number)


@dataclass(eq=False, slots=True)
class ProducerBatch:
    tp: TopicPartition
    values: tuple[int, ...]
    created_ms: int
    records: tuple[ProducedRecord, ...] = ()  # empty until it has sequences
    in_flight: int = 0  # the correlation id of the attempt awaiting an answer
    sends: int = 0
    head_attempt: int = 0  # the correlation id of the last attempt sent with every predecessor acknowledged
    retry_at: int = 0
    done: bool = False  # acknowledged or failed


class IdempotentProducer:
    def __init__(self, sim: "Simulation", producer_id: int, request_timeout_ms: int, delivery_timeout_ms: int, retry_backoff_ms: int) -> None:
        self.sim = sim
        self.producer_id = producer_id
        self.epoch = 0
        self.request_timeout_ms = request_timeout_ms
        self.delivery_timeout_ms = delivery_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.next_sequence: dict[TopicPartition, int] = {}
        # From the oldest unacknowledged batch on, oldest first (acknowledged ones behind it stay, done).
        self.queues: dict[TopicPartition, list[ProducerBatch]] = {}
        self.requests: dict[int, ProducerBatch] = {}  # correlation id -> the batch it carried
        self.bumping = False  # waiting for the requests in flight before bumping the epoch
        self.failed: set[int] = set()  # values of failed batches: absent from the log, or there once

    # -- the application's side ------------------------------------------------------------------------

    def send(self, tp: TopicPartition, values: tuple[int, ...]) -> None:
        batch = ProducerBatch(tp, values, self.sim.now)
        if not self.bumping:
            self._assign_sequences(batch)
        self.queues.setdefault(tp, []).append(batch)
        self._pump(tp)

    @property
    def pending(self) -> int:
        return sum(not b.done for q in self.queues.values() for b in q)

    def summary(self) -> str:
        waiting = {f"{tp[0]}-{tp[1]}": [(b.records[0].base_sequence if b.records else None, b.in_flight) for b in q] for tp, q in self.queues.items() if q}
        return f"producer {self.producer_id} epoch {self.epoch}{' bumping' if self.bumping else ''} waiting {waiting}"

    # -- sending ------------------------------------------------------------------------------------------

    def _assign_sequences(self, batch: ProducerBatch) -> None:
        first = self.next_sequence.get(batch.tp, 0)
        count = len(batch.values)
        batch.records = tuple(ProducedRecord(v, self.producer_id, self.epoch, first, i, count) for i, v in enumerate(batch.values))
        self.next_sequence[batch.tp] = first + count

    def _pump(self, tp: TopicPartition) -> None:
        if self.bumping:
            return
        sim = self.sim
        queue = self.queues.get(tp, [])
        if any(not b.done and sim.now - b.created_ms >= self.delivery_timeout_ms for b in queue):
            self._begin_bump("a batch reached the delivery timeout")
            return
        for batch in queue[:MAX_IN_FLIGHT]:
            if batch.in_flight or batch.done:
                continue
            if batch.sends and batch is not queue[0]:
                return  # a retry waits until every batch before it is acknowledged, as Kafka's Java client's does
            if batch.retry_at > sim.now:
                sim.at(batch.retry_at, self._pump, tp)
                return  # in order: the batches behind it wait for it
            leader = sim.partition_leader(tp)
            if leader < 0:
                sim.at(sim.now + self.retry_backoff_ms, self._pump, tp)
                return
            self._send(batch, leader)

    def _send(self, batch: ProducerBatch, leader: int) -> None:
        sim = self.sim
        correlation_id = sim.next_correlation_id()
        batch.in_flight = correlation_id
        batch.sends += 1
        if self.queues[batch.tp][0] is batch:
            batch.head_attempt = correlation_id
        self.requests[correlation_id] = batch
        sim.send_idempotent(self, leader, correlation_id, ProduceRequest(batch.tp, batch.records, True))
        sim.at(sim.now + self.request_timeout_ms, self._request_timeout, batch, correlation_id)

    def _request_timeout(self, batch: ProducerBatch, correlation_id: int) -> None:
        if batch.in_flight != correlation_id:
            return
        batch.in_flight = 0
        self._retry(batch)

    def _retry(self, batch: ProducerBatch) -> None:
        self.sim.stats.idempotent_retries += 1
        batch.retry_at = self.sim.now + self.retry_backoff_ms
        if self.bumping:
            self._maybe_bump()
        else:
            self._pump(batch.tp)

    # -- answers ------------------------------------------------------------------------------------------

    def on_response(self, correlation_id: int, request: ProduceRequest, response: ProduceResponse) -> None:
        batch = self.requests.pop(correlation_id, None)
        if batch is None or batch.done or batch.records != request.values:
            return
        if response.error_code in (0, DUPLICATE_SEQUENCE_NUMBER):
            # Any attempt's success will do, a timed-out one's too: the batch is written.
            self._acknowledged(batch, response.base_offset)
            return
        if batch.in_flight != correlation_id:
            return  # an older attempt's error: the newer one decides
        batch.in_flight = 0
        if response.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER and batch.head_attempt == correlation_id:
            self._begin_bump(f"{batch.tp[0]}-{batch.tp[1]} refused sequence {batch.records[0].base_sequence} after acknowledged ones")
            return
        self._retry(batch)

    def _acknowledged(self, batch: ProducerBatch, base_offset: int) -> None:
        sim = self.sim
        batch.done = True
        batch.in_flight = 0
        sim.note("acked", f"{batch.tp[0]}-{batch.tp[1]} [{base_offset}..{base_offset + len(batch.values) - 1}]", f"producer {self.producer_id}e{self.epoch}")
        sim.stats.idempotent_acked += len(batch.values)
        sim.invariants.acknowledged(batch.tp, base_offset, batch.records)
        queue = self.queues[batch.tp]
        while queue and queue[0].done:
            queue.pop(0)
        sim.idempotent_acknowledged(batch.tp)
        if self.bumping:
            self._maybe_bump()
        else:
            self._pump(batch.tp)

    # -- the epoch bump -------------------------------------------------------------------------------------

    def _begin_bump(self, why: str) -> None:
        self.sim.note("epoch-bump", f"producer {self.producer_id} waits to bump epoch {self.epoch}: {why}")
        self.bumping = True
        self._maybe_bump()

    def _maybe_bump(self) -> None:
        if any(b.in_flight for q in self.queues.values() for b in q):
            return
        sim = self.sim
        failed = 0
        for tp, queue in self.queues.items():
            kept = []
            for batch in queue:
                if batch.done:
                    continue
                timed_out = sim.now - batch.created_ms >= self.delivery_timeout_ms
                if timed_out or batch.sends > 0:
                    batch.done = True
                    self.failed.update(batch.values)
                    failed += len(batch.values)
                else:
                    kept.append(batch)
            self.queues[tp] = kept
        self.epoch += 1
        self.next_sequence.clear()
        self.bumping = False
        for queue in self.queues.values():
            for batch in queue:
                self._assign_sequences(batch)
        sim.stats.idempotent_epoch_bumps += 1
        sim.stats.idempotent_failed += failed
        sim.note("epoch-bump", f"producer {self.producer_id} epoch {self.epoch}, {failed} records failed")
        for tp in sorted(self.queues):
            self._pump(tp)
