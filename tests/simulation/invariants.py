"""The invariants the cluster simulation holds after every step, and what each one means exactly.

- committed metadata identical on every node: the record each node's loader applies at a
  metadata offset is the record every other node applied there (a global history by offset);
  the Raft layer also has at most one leader per epoch.
- at most one leader per partition epoch: no two brokers ever take leadership of the same
  (partition, leader epoch).
- high watermarks never go down within a leader epoch: a leader replica's high watermark,
  from the moment it takes the epoch until it gives it up or its process dies, only grows.
- no record acknowledged with acks=all is lost while fewer than min.insync.replicas replicas
  have failed: every replica that becomes leader, and at the end every replica of the
  healed cluster, holds each such record at its offset (unless DeleteRecords deleted it: below
  the replica's log start). The fault model keeps the premise:
  a crash that keeps unflushed writes (a killed process; the page cache survives) loses no
  replica's data, so any number of those may happen while no node is damaged; a crash that
  loses unflushed writes (a lost machine) damages its replicas, and happens only while every
  other node is whole, and no node crashes while one is damaged: so fewer than
  min.insync.replicas (2) replicas have failed at once whenever a failure lost writes. A
  crashed node is whole again once it registered anew and is back in the ISR of every
  partition it hosts. (A kill must count: the controller cannot tell it from a lost machine,
  both restart uncleanly and leave the ELR, and KIP-966 then elects the last known leader,
  which may be the damaged one.)
  Between those moments the same is checked in the form that makes it hold: after every step,
  every record below the current leader's high watermark is on every replica of the ISR the
  controller committed (a damaged node excepted), so whichever of them is elected has it.
- a new group coordinator holds the committed offsets: the shard loaded by the new leader of a
  __consumer_offsets partition answers, for every group and partition, the offset of the last
  commit record in that partition's log (and the acknowledged commit records are in that log, by
  the check above).
- a metadata snapshot holds the committed history: the image a node loads from a snapshot
  ending at offset o is the image of the committed records below o.
- no idempotent record is written twice: at the end, no replica of the healed cluster holds an
  idempotent producer's record twice from its log start on, whatever the producer retried (a batch sent again keeps
  its producer id, epoch and sequences; only batches never sent get the sequences of a bumped
  epoch, tests/simulation/sim_idempotent_producer.py).
- a leader never refuses a batch it holds: a produce answered OUT_OF_ORDER_SEQUENCE_NUMBER is
  not among its producer's last five batches in the answering leader's log from its log start
  on (a retry of a batch the leader remembers is answered with where it went), unless it is a
  transactional batch whose transaction a marker ended (refused on purpose). The producer takes
  that refusal of its oldest unacknowledged batch as fatal for the batch, so a leader that forgot
  what it replicated would go unseen without this.
- after healing, every committed transaction's records are visible to read_committed and no
  aborted one is: at the end, the read_committed view of every replica of the healed cluster
  (a producer's transactional records become visible at its COMMIT marker and are dropped at
  its ABORT marker) holds every record of each transaction whose EndTxn(commit) was answered
  OK (those DeleteRecords deleted excepted) and no record of each whose EndTxn(abort) was; a
  transaction whose outcome its producer never learnt (it was fenced) is visible everywhere
  or nowhere; and no transaction is left open in any log (a hanging transaction holds the
  last stable offset back for ever).
- a follower never keeps data past a divergence point: when a follower appends what its
  leader sent from offset o, its log below o is the leader's log below o (digests compared),
  from the later of their log starts on (below, records are deleted).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from broker.metadata.image_writer import image_records
from broker.metadata.metadata_delta import apply_records
from broker.metadata.metadata_image import MetadataImage
from broker.metadata.metadata_records import MetadataRecord
from tests.simulation.simulated_disk import ProducedRecord

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class Invariants:
    fail: Callable[[str, str], None]
    metadata: list[MetadataRecord | None] = field(default_factory=list)  # None: an offset holding a Raft control record
    # The image of everything committed, as soon as any node applied it (a crashed controller's last
    # commits included, which no running node may have applied yet).
    committed: MetadataImage = field(default_factory=MetadataImage)
    raft_leaders: dict[int, int] = field(default_factory=dict)  # Raft epoch -> leader
    partition_leaders: dict[tuple[TopicPartition, int], int] = field(default_factory=dict)
    high_watermarks: dict[tuple[TopicPartition, int, int, int], int] = field(default_factory=dict)  # (tp, epoch, node, incarnation) -> hw
    acked: dict[TopicPartition, dict[int, Any]] = field(default_factory=dict)  # tp -> offset -> value, acks=all only
    # Transaction name -> (outcome the producer learnt: committed, aborted or unknown; (partition, value, acknowledged offset or -1) of its records)
    transactions: dict[str, tuple[str, list[tuple[TopicPartition, int, int]]]] = field(default_factory=dict)
    # tp -> node -> (the transactional values read_committed sees, those it skips as aborted)
    _outcomes: dict[TopicPartition, dict[int, tuple[set[int], set[int]]]] = field(default_factory=dict)
    checks: int = 0

    def metadata_committed(self, node: int, offset: int, record: MetadataRecord | None) -> None:
        history = self.metadata
        if offset < len(history):
            if history[offset] != record:
                self.fail("committed metadata identical on every node", f"node {node} applied {record!r} at offset {offset}, where {history[offset]!r} was applied")
            return
        if offset > len(history):
            self.fail("committed metadata identical on every node", f"node {node} applied offset {offset} past the committed history's end {len(history)}")
        history.append(record)
        if record is not None:
            self.committed = apply_records(self.committed, [record])

    def snapshot_loaded(self, node: int, end_offset: int, image: MetadataImage) -> None:
        if end_offset > len(self.metadata):
            self.fail("a metadata snapshot holds the committed history", f"node {node} loaded a snapshot ending at {end_offset}, past the committed history's end {len(self.metadata)}")
            return
        expected = apply_records(MetadataImage(), [r for r in self.metadata[:end_offset] if r is not None])
        if image_records(image) != image_records(expected):
            self.fail("a metadata snapshot holds the committed history", f"node {node} loaded a snapshot ending at {end_offset} whose image differs from the committed records below it")

    def raft_leader(self, node: int, epoch: int) -> None:
        known = self.raft_leaders.setdefault(epoch, node)
        if known != node:
            self.fail("one metadata leader per Raft epoch", f"nodes {known} and {node} both lead Raft epoch {epoch}")

    def partition_leader(self, tp: TopicPartition, epoch: int, node: int) -> None:
        known = self.partition_leaders.setdefault((tp, epoch), node)
        if known != node:
            self.fail("at most one leader per partition epoch", f"brokers {known} and {node} both led {tp[0]}-{tp[1]} in leader epoch {epoch}")

    def high_watermark(self, tp: TopicPartition, epoch: int, node: int, incarnation: int, hw: int) -> None:
        key = (tp, epoch, node, incarnation)
        before = self.high_watermarks.get(key, -1)
        if hw < before:
            self.fail("high watermarks never go down within a leader epoch", f"{tp[0]}-{tp[1]} on leader {node} in epoch {epoch}: high watermark {before} -> {hw}")
        self.high_watermarks[key] = hw

    def acknowledged(self, tp: TopicPartition, base: int, values: Sequence[Any]) -> None:
        offsets = self.acked.setdefault(tp, {})
        for i, value in enumerate(values):
            known = offsets.setdefault(base + i, value)
            if known != value:
                self.fail("no record acknowledged with acks=all is lost", f"{tp[0]}-{tp[1]} offset {base + i} acknowledged as {known} and later as {value}")

    def holds_acknowledged(self, tp: TopicPartition, node: int, why: str, entry: Callable[[int], tuple[int, Any] | None], log_start: int) -> None:
        """Below the replica's log start a record was deleted (DeleteRecords), not lost."""
        for offset, value in self.acked.get(tp, {}).items():
            if offset < log_start:
                continue
            held = entry(offset)
            if held is None or held[1] != value:
                self.fail(
                    "no record acknowledged with acks=all is lost",
                    f"{tp[0]}-{tp[1]} offset {offset} was acknowledged as value {value}; broker {node} ({why}) holds {held}",
                )

    def isr_holds_high_watermark(self, tp: TopicPartition, leader: int, epoch: int, hw: int, ends: dict[int, int]) -> None:
        for replica, end in ends.items():
            if end < hw:
                self.fail(
                    "no record acknowledged with acks=all is lost",
                    f"{tp[0]}-{tp[1]}: leader {leader} of epoch {epoch} has high watermark {hw}, but replica {replica}, in the committed ISR, ends at {end}: electing it would lose acknowledged records",
                )

    def coordinator_loaded(self, tp: TopicPartition, node: int, records: Sequence[Any], loaded: Callable[[str, TopicPartition], int | None]) -> None:
        last: dict[tuple[str, TopicPartition], int | None] = {}
        for key, value in records:
            last[(key.group, (key.topic, key.partition))] = None if value is None else value.offset
        for (group, committed), offset in last.items():
            if loaded(group, committed) != offset:
                self.fail(
                    "a new group coordinator holds the committed offsets",
                    f"broker {node} loaded {tp[0]}-{tp[1]}: group {group} at {loaded(group, committed)} for {committed[0]}-{committed[1]}, its log's last commit says {offset}",
                )

    def written_once(self, tp: TopicPartition, node: int, records: Sequence[Any]) -> None:
        """``records``: the idempotent producers' records in one replica's log, in offset order."""
        seen: dict[int, Any] = {}
        for record in records:
            first = seen.setdefault(record.value, record)
            if first is not record:
                self.fail("no idempotent record is written twice", f"{tp[0]}-{tp[1]} on broker {node} holds value {record.value} twice: as {first!r} and as {record!r}")

    def refused(self, tp: TopicPartition, node: int, batch: Sequence[Any], records: Sequence[Any]) -> None:
        """``batch`` was answered OUT_OF_ORDER_SEQUENCE_NUMBER by the leader whose log from its log
        start is ``records`` (the idempotent producers' records and the transaction markers)."""
        if not batch or batch[0] not in records:
            return
        first = batch[0]
        mine = [r for r in records[records.index(first) + 1 :] if r.producer_id == first.producer_id and r.producer_epoch == first.producer_epoch]
        if first.transactional and any(not isinstance(r, ProducedRecord) for r in mine):
            return  # a batch of an ended transaction: refused on purpose (ProducerStateEntry.find_duplicate)
        # The producer state remembers its last five batches: an older one the leader may refuse
        # (its retry was overtaken on the network by five later batches).
        if sum(1 for r in mine if r.index == 0) < 5:
            self.fail("a leader never refuses a batch it holds", f"{tp[0]}-{tp[1]} on broker {node} refused {first!r} out of order, which it holds among the producer's last five batches")

    def transaction_ended(self, name: str, outcome: str, values: list[tuple[TopicPartition, int, int]]) -> None:
        self.transactions[name] = (outcome, values)

    def read_committed(self, tp: TopicPartition, node: int, log_start: int, records: Sequence[tuple[int, Any]], is_marker: Callable[[Any], bool]) -> None:
        """``records``: (offset, value) of one replica's log from its log start, every
        transaction in it ended. Checks the transactions that wrote to ``tp`` against what a
        read_committed consumer of this replica would see."""
        visible: set[int] = set()
        aborted: set[int] = set()
        open_txns: dict[int, list[tuple[int, int]]] = {}  # producer id -> (offset, value) of its open transaction
        for offset, value in records:
            if is_marker(value):
                done = open_txns.pop(value.producer_id, [])
                (visible if value.commit else aborted).update(v for _, v in done)
            elif getattr(value, "transactional", False):
                open_txns.setdefault(value.producer_id, []).append((offset, value.value))
        for producer_id, held in open_txns.items():
            self.fail(
                "after healing, every committed transaction's records are visible to read_committed and no aborted one is",
                f"{tp[0]}-{tp[1]} on broker {node}: producer {producer_id}'s transaction from offset {held[0][0]} has no marker (a hanging transaction)",
            )
        self.checks += 1
        for name, (outcome, values) in sorted(self.transactions.items()):
            mine = [(value, offset) for t, value, offset in values if t == tp]
            if not mine:
                continue
            seen = [value for value, _ in mine if value in visible]
            if outcome == "committed":
                missing = [value for value, offset in mine if value not in visible and offset >= log_start]
                if missing:
                    self.fail(
                        "after healing, every committed transaction's records are visible to read_committed and no aborted one is",
                        f"{tp[0]}-{tp[1]} on broker {node}: committed transaction {name} lacks {missing} (aborted there: {[v for v in missing if v in aborted]})",
                    )
            elif outcome == "aborted" and seen:
                self.fail(
                    "after healing, every committed transaction's records are visible to read_committed and no aborted one is",
                    f"{tp[0]}-{tp[1]} on broker {node}: aborted transaction {name} shows {seen}",
                )
        self._outcomes.setdefault(tp, {})[node] = (visible, aborted)

    def transactions_atomic(self, node_of: Callable[[TopicPartition], int]) -> None:
        """Each transaction whose outcome is unknown shows all of its records or none, across its partitions."""
        for name, (outcome, values) in sorted(self.transactions.items()):
            if outcome != "unknown":
                continue
            shown = {}
            for tp, value, _ in values:
                visible, aborted = self._outcomes.get(tp, {}).get(node_of(tp), (set(), set()))
                if value in visible or value in aborted:  # absent: never written, or deleted
                    shown[(tp, value)] = value in visible
            if len(set(shown.values())) > 1:
                self.fail(
                    "after healing, every committed transaction's records are visible to read_committed and no aborted one is",
                    f"transaction {name} (outcome unknown to its producer) is partly visible: {shown}",
                )

    def follower_append(self, tp: TopicPartition, node: int, leader: int, offset: int, since: int, local_digest: int, leader_digest: int) -> None:
        if local_digest != leader_digest:
            self.fail(
                "a follower never keeps data past a divergence point",
                f"{tp[0]}-{tp[1]}: follower {node} appended from leader {leader} at offset {offset} but its log in [{since}, {offset}) differs from the leader's",
            )
