"""A transactional producer (transactional.id, acks=all) as librdkafka runs one, with transaction version 1.

InitProducerId, then one transaction after another: AddPartitionsToTxn for the partitions it
writes, its batches (idempotent: sequences per partition, a retry sent unchanged until the
leader acknowledges it), and EndTxn. Every request goes to the coordinator the metadata names
(the leader of the id's ``__transaction_state`` partition) and is sent again after the backoff
when the answer is retriable (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
CONCURRENT_TRANSACTIONS, ...) or does not come within the request timeout.

A transaction commits only once every batch in it is acknowledged. A batch not acknowledged
within the delivery timeout, or refused for good (a stale epoch, a sequence the leader will not
take), makes the transaction abortable: the producer waits until no produce is in flight,
aborts, and bumps its epoch with InitProducerId naming its current id and epoch (KIP-360), as
librdkafka does after an abortable error that may have left a gap in its sequences. A fenced
producer (PRODUCER_FENCED, INVALID_PRODUCER_ID_MAPPING) starts over as a new instance would:
InitProducerId without an id, and its open transaction's fate is the coordinator's (it aborts
it). What the producer learns of each transaction (committed, aborted, unknown) goes to the
invariants, with the records and offsets the leaders acknowledged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.coordinator.coordinator_partitioner import partition_for
from tests.simulation.sim_broker import ProduceRequest, ProduceResponse
from tests.simulation.sim_replica import TopicPartition
from tests.simulation.sim_transactions import TXN_TOPIC, AddPartitionsRequest, EndTxnRequest, InitProducerIdRequest, TxnResponse
from tests.simulation.simulated_disk import ProducedRecord

if TYPE_CHECKING:
    from tests.simulation.cluster_simulation import Simulation

FENCED = frozenset({int(ErrorCode.producer_fenced), int(ErrorCode.invalid_producer_id_mapping), int(ErrorCode.invalid_producer_epoch)})
# A produce the leader refused for good: the transaction can only be aborted.
ABORTABLE = frozenset({int(ErrorCode.invalid_producer_epoch), int(ErrorCode.out_of_order_sequence_number), int(ErrorCode.invalid_txn_state), int(ErrorCode.transactional_id_authorization_failed)})


@dataclass(eq=False, slots=True)
class TxnBatch:
    tp: TopicPartition
    records: tuple[ProducedRecord, ...]
    acked_offset: int = -1
    in_flight: int = 0  # the correlation id awaiting an answer
    unanswered: int = 0


@dataclass(eq=False, slots=True)
class Transaction:
    name: str
    partitions: tuple[TopicPartition, ...]
    batches: list[TxnBatch] = field(default_factory=list)
    commit: bool = True
    started_ms: int = 0
    abortable: str = ""  # why it can only be aborted now

    @property
    def values(self) -> list[tuple[TopicPartition, int, int]]:
        """(partition, value, acknowledged offset or -1) of every record it sent."""
        return [(b.tp, r.value, b.acked_offset + r.index if b.acked_offset >= 0 else -1) for b in self.batches for r in b.records]


class TransactionalProducer:
    def __init__(self, sim: "Simulation", topic: str, transactional_id: str, txn_timeout_ms: int, request_timeout_ms: int, delivery_timeout_ms: int, retry_backoff_ms: int) -> None:
        self.sim = sim
        self.topic = topic
        self.transactional_id = transactional_id
        self.txn_timeout_ms = txn_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.delivery_timeout_ms = delivery_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.producer_id = -1
        self.epoch = -1
        self.next_sequence: dict[TopicPartition, int] = {}
        self.txn: Transaction | None = None
        self.count = 0
        # The coordinator request in flight: (correlation id, request); one at a time.
        self.request: tuple[int, Any] | None = None
        self.phase = "init"  # init, idle, adding, producing, ending, bumping

    @property
    def busy(self) -> bool:
        return self.phase != "idle"

    def summary(self) -> str:
        txn = self.txn.name if self.txn is not None else "-"
        return f"txn producer {self.transactional_id} p{self.producer_id}e{self.epoch} {self.phase} {txn}"

    # -- the coordinator ------------------------------------------------------------------------------

    def start(self) -> None:
        self._init(None)

    def _coordinator(self) -> int:
        image = self.sim.latest_image()
        topic = image.topics.get(TXN_TOPIC) if image is not None else None
        if topic is None:
            return -1
        return self.sim.partition_leader((TXN_TOPIC, partition_for(self.transactional_id, len(topic.partitions))))

    def _ask(self, request: Any) -> None:
        sim = self.sim
        coordinator = self._coordinator()
        if coordinator < 0:
            sim.at(sim.now + self.retry_backoff_ms, self._ask, request)
            return
        correlation_id = sim.next_correlation_id()
        self.request = (correlation_id, request)
        sim.send_txn_request(self, coordinator, correlation_id, request)
        sim.at(sim.now + self.request_timeout_ms, self._request_timeout, correlation_id)

    def _request_timeout(self, correlation_id: int) -> None:
        if self.request is not None and self.request[0] == correlation_id:
            self._ask(self.request[1])

    def on_txn_response(self, correlation_id: int, response: TxnResponse) -> None:
        if self.request is None or self.request[0] != correlation_id:
            return  # a timed-out attempt's late answer: the retry decides
        request = self.request[1]
        self.request = None
        code = response.error_code
        if code and code not in FENCED and not (isinstance(request, EndTxnRequest) and code == ErrorCode.invalid_txn_state):
            self.sim.stats.txn_request_retries += 1
            self.sim.at(self.sim.now + self.retry_backoff_ms, self._ask, request)
            return
        if isinstance(request, InitProducerIdRequest):
            self._initialised(request, response)
        elif isinstance(request, AddPartitionsRequest):
            self._added(response)
        else:
            self._ended(request, response)

    # -- InitProducerId ------------------------------------------------------------------------------------

    def _init(self, expected: tuple[int, int] | None) -> None:
        self.phase = "init" if expected is None else "bumping"
        self._ask(InitProducerIdRequest(self.transactional_id, self.txn_timeout_ms, expected))

    def _initialised(self, request: InitProducerIdRequest, response: TxnResponse) -> None:
        if response.error_code:
            # A bump refused (someone fenced this instance): start over as a new instance.
            self._init(None)
            return
        self.producer_id, self.epoch = response.producer_id, response.producer_epoch
        self.next_sequence.clear()
        self.sim.note("txn-init", f"{self.transactional_id} p{self.producer_id}e{self.epoch}")
        self.phase = "idle"
        self.sim.at(self.sim.now + self.sim.rng.randint(*self.sim.params.produce_gap_ms), self._begin)

    # -- one transaction -----------------------------------------------------------------------------------

    def _begin(self) -> None:
        sim = self.sim
        if self.phase != "idle" or not sim.producing:
            return
        topic = sim.events_topic()
        if topic is None:
            sim.at(sim.now + self.retry_backoff_ms, self._begin)
            return
        self.count += 1
        indexes = sorted(sim.rng.sample(range(len(topic.partitions)), sim.rng.randint(1, len(topic.partitions))))
        partitions = tuple((self.topic, i) for i in indexes)
        txn = self.txn = Transaction(f"{self.transactional_id}.{self.count}", partitions, commit=sim.rng.random() < 0.75, started_ms=sim.now)
        for tp in partitions:
            for _ in range(sim.rng.randint(1, 2)):
                values = sim.new_values()
                first = self.next_sequence.get(tp, 0)
                records = tuple(ProducedRecord(v, self.producer_id, self.epoch, first, i, len(values), True) for i, v in enumerate(values))
                self.next_sequence[tp] = first + len(values)
                txn.batches.append(TxnBatch(tp, records))
        self.phase = "adding"
        self._ask(AddPartitionsRequest(self.transactional_id, self.producer_id, self.epoch, partitions))

    def _added(self, response: TxnResponse) -> None:
        if response.error_code:
            self._fenced(f"AddPartitionsToTxn {ErrorCode(response.error_code).name}")
            return
        self.phase = "producing"
        self._pump()

    def _pump(self) -> None:
        """Send the first batch not acknowledged yet (one at a time, in order), or end the transaction."""
        sim = self.sim
        txn = self.txn
        if self.phase != "producing" or txn is None:
            return
        if not txn.abortable and sim.now - txn.started_ms >= self.delivery_timeout_ms:
            txn.abortable = "a batch reached the delivery timeout"
        pending = [b for b in txn.batches if b.acked_offset < 0]
        if any(b.in_flight for b in pending):
            return
        if txn.abortable or not pending:
            self._end(commit=txn.commit and not txn.abortable)
            return
        batch = pending[0]
        leader = sim.partition_leader(batch.tp)
        if leader < 0:
            sim.at(sim.now + self.retry_backoff_ms, self._pump)
            return
        correlation_id = sim.next_correlation_id()
        batch.in_flight = correlation_id
        sim.send_idempotent(self, leader, correlation_id, ProduceRequest(batch.tp, batch.records, True))  # type: ignore[arg-type]
        sim.at(sim.now + self.request_timeout_ms, self._produce_timeout, batch, correlation_id)

    def _produce_timeout(self, batch: TxnBatch, correlation_id: int) -> None:
        if batch.in_flight == correlation_id:
            batch.in_flight = 0
            batch.unanswered += 1
            self.sim.at(self.sim.now + self.retry_backoff_ms, self._pump)

    def on_response(self, correlation_id: int, request: ProduceRequest, response: ProduceResponse) -> None:
        txn = self.txn
        if txn is None:
            return
        batch = next((b for b in txn.batches if b.records == request.values), None)
        if batch is None or batch.acked_offset >= 0:
            return
        if response.error_code in (0, int(ErrorCode.duplicate_sequence_number)):
            batch.acked_offset = response.base_offset
            batch.in_flight = 0
            self.sim.stats.txn_records_acked += len(batch.records)
            self.sim.invariants.acknowledged(batch.tp, response.base_offset, batch.records)
            self.sim.idempotent_acknowledged(batch.tp)
            self._pump()
            return
        if batch.in_flight != correlation_id:
            return
        batch.in_flight = 0
        if response.error_code in ABORTABLE:
            txn.abortable = f"{batch.tp[0]}-{batch.tp[1]} answered {ErrorCode(response.error_code).name}"
        self.sim.at(self.sim.now + self.retry_backoff_ms, self._pump)

    def _end(self, commit: bool) -> None:
        assert self.txn is not None
        self.phase = "ending"
        self.txn.commit = commit
        self._ask(EndTxnRequest(self.transactional_id, self.producer_id, self.epoch, commit))

    def _ended(self, request: EndTxnRequest, response: TxnResponse) -> None:
        txn = self.txn
        assert txn is not None
        sim = self.sim
        if response.error_code:
            self._fenced(f"EndTxn {ErrorCode(response.error_code).name}")
            return
        outcome = "committed" if request.commit else "aborted"
        sim.note("txn-" + outcome, txn.name, f"p{self.producer_id}e{self.epoch}", txn.abortable)
        sim.invariants.transaction_ended(txn.name, outcome, txn.values)
        if request.commit:
            sim.stats.txn_committed += 1
        else:
            sim.stats.txn_aborted += 1
        self.txn = None
        if txn.abortable:
            self._init((self.producer_id, self.epoch))
            return
        self.phase = "idle"
        sim.at(sim.now + sim.rng.randint(*sim.params.produce_gap_ms), self._begin)

    def _fenced(self, why: str) -> None:
        """This instance is fenced: its open transaction is the coordinator's to abort; a new instance starts."""
        sim = self.sim
        txn = self.txn
        if txn is not None:
            sim.note("txn-fenced", txn.name, why)
            sim.invariants.transaction_ended(txn.name, "unknown", txn.values)
            sim.stats.txn_unknown += 1
        self.txn = None
        # Its produces in flight are forgotten; their answers find no transaction.
        self._init(None)
