"""The transactions workload: consume-transform-produce loops that commit and abort at random.

Each loop (process ``<name>-<i>``) has a read_committed consumer subscribed to the input topic in
the workload's group, and a transactional producer of its own ``transactional.id``: KIP-447's
pattern, in which the group's generation, sent with the offsets, fences a loop that lost its
partitions to another. A transaction takes a few input records, writes one output per input to
the output topic's single partition (``<txn id>/<partition>/<offset>``, so an output names its
transaction and its input), sends the consumer's next offsets to the transaction, and then
commits or aborts as a seeded coin decides. It is recorded as one ``txn`` operation: ``ok``
committed, ``fail`` certainly not (aborted, or failed before EndTxn was asked), ``info`` unknown
(commit_transaction raised, or the workload stopped in the middle).

After any transaction that did not commit, the loop does what a correct application does: it
rewinds its consumer to the group's committed offsets, and, after a fatal error (fenced) or an
unknown outcome, replaces its producer, whose init_transactions resolves whatever the old one
left open. The drain reads the output topic with both isolation levels and the group's committed
offsets; checks_transactions judges them.
"""

from __future__ import annotations

import random
import threading
from typing import Callable

from tests.chaos import checks_transactions
from tests.chaos.history import History, Op
from tests.chaos.workload import Verdict, stuck_threads
from tests.chaos.workloads.kafka_io import TIMEOUT_S, committed_offsets, create_topic, fill, read_to_end, unique
from tests.chaos.workloads.txn_clients import API_TIMEOUT_S, ClientError, ConfluentClient, Record, Stopped, TxnClient


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
        self._errors: list[BaseException] = []

    def transactional_id(self, loop: int) -> str:
        return f"{self.output}-{loop}"

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
        stuck = stuck_threads(self._threads)
        assert not stuck, f"transaction loops did not stop:\n{stuck}"

    def failures(self) -> list[str]:
        """The loops that died of an exception: the history after it is incomplete."""
        return [repr(e) for e in self._errors]

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
        return checks_transactions.check(ops, self.name, self.loops)


class _Loop:
    """One consume-transform-produce loop, run in its own thread until the workload stops."""

    def __init__(self, workload: TransactionsWorkload, index: int, history: History, bootstrap: Callable[[], str], rng: random.Random) -> None:
        self.w = workload
        self.index = index
        self.process = f"{workload.name}-{index}"
        self.history = history
        self.bootstrap = bootstrap
        self.rng = rng
        self.txns = 0

    def run(self) -> None:
        client: TxnClient | None = None
        try:
            client = ConfluentClient(self.bootstrap(), self.w.group, self.w.input, self.w.transactional_id(self.index), self.w._stop)
            while not self.w._stop.is_set():
                records = client.consume(self.rng.randint(1, self.w.max_txn_size))
                if records:
                    self._transaction(client, records)
        except Stopped:
            pass  # an operation under way stays without completion: unknown
        except BaseException as e:
            self.w._errors.append(e)
        finally:
            if client is not None:
                client.close()

    def _transaction(self, client: TxnClient, records: list[Record]) -> None:
        self.txns += 1
        txn_id = f"{self.index}.{self.txns}"
        outputs = [f"{txn_id}/{p}/{o}" for p, o, _ in records]
        nexts: dict[int, int] = {}
        for p, o, _ in records:
            nexts[p] = o + 1
        commit = self.rng.random() >= self.w.abort_probability
        self.history.invoke(self.process, "txn", {"id": txn_id, "inputs": [list(r) for r in records], "outputs": outputs, "offsets": {str(p): o for p, o in nexts.items()}, "commit": commit})
        try:
            client.send(self.w.output, outputs, nexts)
        except ClientError as e:
            # EndTxn(commit) was never asked: the transaction cannot have committed.
            self._abandon(client, e.fatal)
            self.history.fail(self.process, "txn", {"id": txn_id, "error": str(e)})
            client.rewind(list(nexts))
            return
        if not commit:
            self._abandon(client, fatal=False)
            self.history.fail(self.process, "txn", {"id": txn_id, "aborted": True})
            client.rewind(list(nexts))
            return
        error = client.commit()
        if error is None:
            self.history.ok(self.process, "txn", {"id": txn_id})
            return
        # The commit may or may not have been decided; a new producer's init_transactions
        # completes or aborts it before this loop reads the committed offsets again.
        self.history.info(self.process, "txn", {"id": txn_id, "error": error})
        client.replace_producer()
        client.rewind(list(nexts))

    def _abandon(self, client: TxnClient, fatal: bool) -> None:
        """Ends a transaction that will not commit: abort it if the producer still can, otherwise
        (fatal, fenced, or the abort failing) replace the producer."""
        if not fatal:
            try:
                client.abort()
                return
            except ClientError:
                pass
        client.replace_producer()
