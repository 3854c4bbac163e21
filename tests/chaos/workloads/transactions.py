"""The transactions workload: consume-transform-produce loops that commit and abort at random.

Each loop (process ``<name>-<i>``) has a read_committed consumer subscribed to the input topic in
the workload's group, and a transactional producer of its own ``transactional.id``: KIP-447's
pattern, in which the group's generation, sent with the offsets, fences a loop that lost its
partitions to another. A transaction takes a few input records, writes one output per input to
the output topic's single partition (``<txn id>/<partition>/<offset>``, so an output names its
transaction and its input), sends the consumer's next offsets to the transaction, and then
commits or aborts as a seeded coin decides. It is recorded as one ``txn`` operation: ``ok`` committed, ``fail`` certainly not (aborted,
or failed before EndTxn was asked), ``info`` unknown (commit_transaction raised).

After any transaction that did not commit, the loop does what a correct application does: it
rewinds its consumer to the group's committed offsets, and, after a fatal error (fenced) or an
unknown outcome, replaces its producer, whose init_transactions resolves whatever the old one
left open. The drain reads the output topic with both isolation levels and the group's committed
offsets; checks_transactions judges them.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any, Callable

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.chaos import checks_transactions
from tests.chaos.history import History, Op
from tests.chaos.workload import Verdict
from tests.chaos.workloads.kafka_io import TIMEOUT_S, committed_offsets, create_topic, fill, read_to_end, retry, unique

API_TIMEOUT_S = 15.0


class TransactionsWorkload:
    def __init__(self, *, loops: int = 3, inputs_per_partition: int = 2000, max_txn_size: int = 5, abort_probability: float = 0.3, seed: int = 0, name: str = "transactions") -> None:
        self.name = name
        self.loops = loops
        self.inputs_per_partition = inputs_per_partition
        self.max_txn_size = max_txn_size
        self.abort_probability = abort_probability
        self.seed = seed
        self.input = unique(f"{name}-in")
        self.output = unique(f"{name}-out")
        self.group = unique(f"{name}-group")
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.failures: list[BaseException] = []

    def setup(self, admin_bootstrap: str) -> None:
        create_topic(admin_bootstrap, self.input, self.loops)
        create_topic(admin_bootstrap, self.output, 1)
        fill(admin_bootstrap, self.input, {p: [f"in-{p}-{o}" for o in range(self.inputs_per_partition)] for p in range(self.loops)})

    def start(self, history: History, bootstrap: Callable[[], str]) -> None:
        for i in range(self.loops):
            loop = _Loop(self, i, history, bootstrap, random.Random(self.seed * 1000 + i))
            thread = threading.Thread(target=loop.run, name=f"{self.name}-{i}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(TIMEOUT_S + 2 * API_TIMEOUT_S)
        stuck = [t.name for t in self._threads if t.is_alive()]
        assert not stuck, f"transaction loops {stuck} did not stop"
        if self.failures:
            raise self.failures[0]

    def drain(self, history: History, bootstrap: str) -> None:
        process = f"{self.name}-drain"
        for isolation in ("read_committed", "read_uncommitted"):
            history.invoke(process, "read", {"isolation": isolation, "topic": self.output})
            records, ends = read_to_end(bootstrap, self.output, 1, isolation)
            history.ok(process, "read", {"isolation": isolation, "topic": self.output, "records": records, "ends": {str(p): o for p, o in ends.items()}})
        history.invoke(process, "committed-offsets", {"group": self.group, "topic": self.input})
        offsets = committed_offsets(bootstrap, self.group, self.input, self.loops)
        history.ok(process, "committed-offsets", {"group": self.group, "topic": self.input, "offsets": {str(p): o for p, o in offsets.items()}})

    def check(self, ops: list[Op]) -> list[Verdict]:
        return checks_transactions.check(ops, self.name)


class _Loop:
    """One consume-transform-produce loop, run in its own thread until the workload stops."""

    def __init__(self, workload: TransactionsWorkload, index: int, history: History, bootstrap: Callable[[], str], rng: random.Random) -> None:
        self.w = workload
        self.index = index
        self.process = f"{workload.name}-{index}"
        self.history = history
        self.bootstrap = bootstrap
        self.rng = rng
        self.transactional_id = f"{workload.output}-{index}"
        self.txns = 0
        self.consumer: Consumer | None = None
        self.producer: Producer | None = None

    def run(self) -> None:
        try:
            self.consumer = Consumer({
                "bootstrap.servers": self.bootstrap(),
                "group.id": self.w.group,
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            })
            self.consumer.subscribe([self.w.input])
            self.producer = self._new_producer()
            while not self.w._stop.is_set():
                messages = [m for m in self.consumer.consume(self.rng.randint(1, self.w.max_txn_size), 0.5) if m.error() is None]
                if messages:
                    self._transaction(messages)
        except BaseException as e:
            self.w.failures.append(e)
        finally:
            if self.consumer is not None:
                self.consumer.close()
            if self.producer is not None:
                self.producer.flush(API_TIMEOUT_S)

    def _new_producer(self) -> Producer:
        producer = Producer({
            "bootstrap.servers": self.bootstrap(),
            "transactional.id": self.transactional_id,
            "linger.ms": 5,
            # A transaction the loop abandons (its node killed mid-commit) is aborted soon.
            "transaction.timeout.ms": 10000,
            "socket.timeout.ms": 6000,
        })
        retry(f"{self.process}: init_transactions", lambda: producer.init_transactions(API_TIMEOUT_S))
        return producer

    def _rewind(self, partitions: list[int]) -> None:
        """Back to the group's committed offsets on the transaction's partitions: what the last
        committed transaction consumed. No rebalance can happen in between (rebalance callbacks
        run in consume()), so the partitions are still this loop's."""
        assert self.consumer is not None
        tps = [TopicPartition(self.w.input, p) for p in partitions]
        for tp in retry(f"{self.process}: the committed offsets", lambda: self.consumer.committed(tps, timeout=API_TIMEOUT_S)):  # type: ignore[union-attr]
            if tp.error is not None:
                raise KafkaException(tp.error)
            self.consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))

    def _transaction(self, messages: list[Any]) -> None:
        assert self.consumer is not None and self.producer is not None
        self.txns += 1
        txn_id = f"{self.index}.{self.txns}"
        inputs = [[m.partition(), m.offset(), m.value().decode()] for m in messages]
        outputs = [f"{txn_id}/{p}/{o}" for p, o, _ in inputs]
        nexts: dict[int, int] = {}
        for m in messages:
            nexts[m.partition()] = m.offset() + 1
        offsets = {str(p): o for p, o in nexts.items()}
        commit = self.rng.random() >= self.w.abort_probability
        self.history.invoke(self.process, "txn", {"id": txn_id, "inputs": inputs, "outputs": outputs, "offsets": offsets, "commit": commit})
        try:
            self.producer.begin_transaction()
            for out in outputs:
                self.producer.produce(self.w.output, value=out.encode(), partition=0)
            positions = [TopicPartition(self.w.input, p, o) for p, o in nexts.items()]
            self.producer.send_offsets_to_transaction(positions, self.consumer.consumer_group_metadata(), API_TIMEOUT_S)
        except KafkaException as e:
            # EndTxn(commit) was never asked: the transaction cannot have committed.
            self._abandon(e.args[0])
            self.history.fail(self.process, "txn", {"id": txn_id, "error": str(e.args[0])})
            self._rewind(list(nexts))
            return
        if not commit:
            try:
                self.producer.abort_transaction(API_TIMEOUT_S)
            except KafkaException as e:
                self._abandon(e.args[0])
            self.history.fail(self.process, "txn", {"id": txn_id, "aborted": True})
            self._rewind(list(nexts))
            return
        error = self._commit()
        if error is None:
            self.history.ok(self.process, "txn", {"id": txn_id})
            return
        # The commit may or may not have been decided; a new producer's init_transactions
        # completes or aborts it before this loop reads the committed offset again.
        self.history.info(self.process, "txn", {"id": txn_id, "error": str(error)})
        self.producer = self._new_producer()
        self._rewind(list(nexts))

    def _commit(self) -> KafkaError | None:
        """commit_transaction, retried while its error is retriable; the error it ended with."""
        assert self.producer is not None
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            try:
                self.producer.commit_transaction(API_TIMEOUT_S)
                return None
            except KafkaException as e:
                error: KafkaError = e.args[0]
                if not error.retriable() or time.monotonic() > deadline:
                    return error
                time.sleep(0.1)

    def _abandon(self, error: KafkaError) -> None:
        """Ends a transaction that will not commit: abort it if the producer still can, otherwise
        (fatal, fenced, or the abort failing) replace the producer."""
        assert self.producer is not None
        if not error.fatal():
            try:
                self.producer.abort_transaction(API_TIMEOUT_S)
                return
            except KafkaException:
                pass
        self.producer = self._new_producer()
