"""A broker's AlterPartition requests on the virtual clock: broker/alter_partition_manager.py's rules.

The latest change per partition waits; what waits goes out in one request, one request at a
time; a request that gets no answer (no active controller, a lost message) goes again after a
backoff, unchanged, and so does one refused as a whole; each partition is handed its own answer,
with its error code, whatever changed on the leader since it was asked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker.controller.replication_control_manager import AlterPartitionReply, AlterPartitionTopic, IsrMember, PartitionIsrChange
from replication.partition_state import AlterPartitionIntent
from tests.simulation.sim_controller import NotController
from tests.simulation.sim_replica import TopicPartition

if TYPE_CHECKING:
    from tests.simulation.sim_broker import SimNode

RETRY_MS = 50  # alter_partition_manager.RETRY_BACKOFF_S


class SimAlterPartitionManager:
    def __init__(self, node: "SimNode") -> None:
        self.node = node
        self.waiting: dict[TopicPartition, AlterPartitionIntent] = {}
        self.inflight: tuple[int, dict[TopicPartition, AlterPartitionIntent]] | None = None

    def submit(self, tp: TopicPartition, intent: AlterPartitionIntent) -> None:
        self.waiting[tp] = intent
        self.node.sim.note("alter-partition", f"broker {self.node.node_id} asks {tp[0]}-{tp[1]} isr={list(intent.isr)} at partition epoch {intent.partition_epoch}")
        self.send()

    def is_answered_by(self, correlation_id: int) -> bool:
        return self.inflight is not None and self.inflight[0] == correlation_id

    def send(self) -> None:
        if self.inflight is not None or not self.waiting:
            return
        node = self.node
        batch = dict(self.waiting)
        by_topic: dict[Any, list[PartitionIsrChange]] = {}
        for (topic_name, index), intent in sorted(batch.items()):
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
        answered = {(t.topic_id, p.partition_index): p for t in answer.topics for p in t.partitions}
        unanswered = False
        for tp, intent in batch.items():
            topic = node.image.topics.get(tp[0])
            result = answered.get((topic.topic_id, tp[1])) if topic is not None else None
            if result is None:
                unanswered = True  # it stays waiting and goes again, after the backoff
                continue
            if self.waiting.get(tp) == intent:
                del self.waiting[tp]
            replica = node.replicas.get(tp)
            if replica is None:
                continue
            if result.error_code != 0:
                node.sim.note("alter-partition", f"broker {node.node_id} {tp[0]}-{tp[1]} isr={list(intent.isr)} refused: {result.error_code}")
                replica.alter_partition_failed(result.error_code)
                continue
            node.sim.note("alter-partition", f"broker {node.node_id} {tp[0]}-{tp[1]} isr={list(result.isr)} at partition epoch {result.partition_epoch}")
            replica.alter_partition_succeeded(result.isr, result.leader_epoch, result.partition_epoch, node.sim.now)
            node.complete_produces(tp)
        if unanswered:
            node.schedule(node.sim.now + RETRY_MS, self.send)
        else:
            self.send()
