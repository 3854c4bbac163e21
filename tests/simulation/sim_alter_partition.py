"""A broker's AlterPartition requests on the virtual clock: the shell broker/alter_partition_manager.py
is, over the same sans-IO core (replication/unsent_isr_updates.py, which decides what waits, what
a request carries and how its answer settles each partition).

What waits goes out in one request, one request at a time; a request that gets no answer (no
active controller, a lost message) goes again after a backoff, unchanged, and so does one
refused as a whole, and the partitions an answer does not name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker.controller.replication_control_manager import AlterPartitionReply, AlterPartitionTopic, IsrMember, PartitionIsrChange
from replication.partition_state import AlterPartitionIntent
from replication.unsent_isr_updates import IsrUpdateAnswer, UnsentIsrUpdates
from tests.simulation.sim_controller import NotController
from tests.simulation.sim_replica import SimPartition, TopicPartition

if TYPE_CHECKING:
    from tests.simulation.sim_broker import SimNode

RETRY_MS = 50  # alter_partition_manager.RETRY_BACKOFF_S

Batch = dict[TopicPartition, tuple[SimPartition, AlterPartitionIntent]]


class SimAlterPartitionManager:
    def __init__(self, node: "SimNode") -> None:
        self.node = node
        self.unsent: UnsentIsrUpdates[SimPartition] = UnsentIsrUpdates()
        self.inflight: tuple[int, Batch] | None = None

    def submit(self, replica: SimPartition, intent: AlterPartitionIntent) -> None:
        self.unsent.submit(replica, intent)
        tp = replica.key
        self.node.sim.note("alter-partition", f"broker {self.node.node_id} asks {tp[0]}-{tp[1]} isr={list(intent.isr)} at partition epoch {intent.partition_epoch}")
        self.send()

    def is_answered_by(self, correlation_id: int) -> bool:
        return self.inflight is not None and self.inflight[0] == correlation_id

    def send(self) -> None:
        if self.inflight is not None or not self.unsent:
            return
        node = self.node
        batch = self.unsent.batch()
        by_topic: dict[Any, list[PartitionIsrChange]] = {}
        for (topic_name, index), (_, intent) in sorted(batch.items(), key=lambda item: item[0]):
            topic = node.image.topics.get(topic_name)
            if topic is None:
                continue
            members = tuple(IsrMember(b, e) for b, e in intent.new_isr)
            by_topic.setdefault(topic.topic_id, []).append(PartitionIsrChange(index, intent.leader_epoch, members, intent.leader_recovery_state, intent.partition_epoch))
        topics = [AlterPartitionTopic(topic_id, tuple(changes)) for topic_id, changes in by_topic.items()]
        correlation = node.to_controller("alter_partition", (node.node_id, node.broker_epoch, topics))
        self.inflight = (correlation if correlation is not None else -1, batch)
        wait = node.sim.params.request_timeout_ms if correlation is not None else RETRY_MS
        node.schedule(node.sim.now + wait, self._timeout, self.inflight[0])

    def _timeout(self, correlation_id: int) -> None:
        if self.is_answered_by(correlation_id):
            self.inflight = None
            self.node.schedule(self.node.sim.now + RETRY_MS, self.send)

    def answered(self, answer: Any) -> None:
        assert self.inflight is not None
        node = self.node
        batch = self.inflight[1]
        self.inflight = None
        if isinstance(answer, NotController):
            # The channel's ControllerUnavailableError: the same batch again, to the next active controller.
            node.schedule(node.sim.now + RETRY_MS, self.send)
            return
        assert isinstance(answer, AlterPartitionReply)
        if answer.error_code != 0:
            node.sim.note("alter-partition", f"broker {node.node_id} refused as a whole: {answer.error_code}")
            node.schedule(node.sim.now + RETRY_MS, self.send)
            return
        parts = {(t.topic_id, p.partition_index): p for t in answer.topics for p in t.partitions}
        answers: dict[TopicPartition, IsrUpdateAnswer] = {}
        for tp in batch:
            topic = node.image.topics.get(tp[0])
            part = parts.get((topic.topic_id, tp[1])) if topic is not None else None
            if part is not None:
                answers[tp] = IsrUpdateAnswer(part.error_code) if part.error_code else IsrUpdateAnswer(0, tuple(part.isr), part.leader_epoch, part.partition_epoch)
        settled, unanswered = self.unsent.settle(batch, answers, node.sim.now)
        for update in settled:
            tp, result = update.partition.key, update.answer
            if result.error_code:
                node.sim.note("alter-partition", f"broker {node.node_id} {tp[0]}-{tp[1]} isr={list(update.intent.isr)} refused: {result.error_code}")
                continue
            node.sim.note("alter-partition", f"broker {node.node_id} {tp[0]}-{tp[1]} isr={list(result.isr)} at partition epoch {result.partition_epoch}")
            if update.high_watermark_moved:
                node.complete_produces(tp)
        if unanswered:
            node.schedule(node.sim.now + RETRY_MS, self.send)
        else:
            self.send()
