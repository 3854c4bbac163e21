"""The quorum controller on the virtual clock: QuorumController's write path without asyncio.

QuorumController (broker/controller/quorum_controller.py) is the asyncio shell; its decisions
are QuorumControllerLogic and the control managers, used here unchanged. This class keeps the
shell's rules, which are what make the decisions safe: active only once Raft has reported this
node as leader of the epoch (so everything committed earlier is in the image), one decision at
a time over the committed image, the next decided only once the previous one's records are
committed, the answer sent only then, and every waiting write failed with NOT_CONTROLLER when
leadership goes.
"""

from __future__ import annotations

import random
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from broker.controller import controller_logic
from broker.controller.controller_logic import QuorumControllerLogic
from broker.controller.feature_control_manager import METADATA_VERSION_FEATURE, NEW_CLUSTER_FEATURES
from broker.metadata.metadata_image import MetadataImage
from broker.metadata.metadata_records import MetadataRecord
from raft.kafka_raft_client import KafkaRaftClient, NotLeaderError

Decide = Callable[[MetadataImage], tuple[list[MetadataRecord], Any]]
Reply = Callable[[Any], None]


@dataclass(frozen=True, slots=True)
class NotController:
    """The answer of a controller that is not (or no longer) active."""

    error_code: int = int(ErrorCode.not_controller)


@dataclass(slots=True)
class _Write:
    decide: Decide
    reply: Reply


class SimController:
    def __init__(self, node_id: int, cluster_id: str, session_timeout_ms: int, rng: random.Random, clock: Callable[[], int]) -> None:
        self.node_id = node_id
        self.clock = clock
        self.logic = QuorumControllerLogic(new_topic_id=lambda: uuid.UUID(int=rng.getrandbits(128)), rng=random.Random(rng.getrandbits(64)), node_id=node_id)
        self.cluster = self.logic.new_cluster_control(cluster_id, session_timeout_ms=session_timeout_ms)
        self.active_epoch: int | None = None
        self.committed = -1
        self.last_written = -1
        self._queue: deque[_Write] = deque()
        self._waiting: deque[tuple[int, Reply, Any]] = deque()  # (offset, reply, answer), offsets increasing
        self._fencing = False  # a fencing write is queued: the timer does not queue another

    @property
    def is_active(self) -> bool:
        return self.active_epoch is not None

    # -- the Raft listener (after the loader, as in the server) -------------------------------------

    def handle_commit(self, last_offset: int) -> None:
        self.committed = max(self.committed, last_offset)
        while self._waiting and self._waiting[0][0] <= self.committed:
            _, reply, answer = self._waiting.popleft()
            reply(answer)

    def handle_leader_change(self, leader_id: int | None, epoch: int, image: MetadataImage, raft: KafkaRaftClient[MetadataRecord], now_ms: int) -> None:
        if leader_id == self.node_id:
            if self.active_epoch == epoch:
                return
            self.deactivate()
            self._activate(epoch, image, raft, now_ms)
        elif self.active_epoch is not None:
            self.deactivate()

    def _activate(self, epoch: int, image: MetadataImage, raft: KafkaRaftClient[MetadataRecord], now_ms: int) -> None:
        self.active_epoch = epoch
        self.last_written = self.committed
        self.cluster.activate(image, now_ms)
        if METADATA_VERSION_FEATURE not in image.features:
            self._append(controller_logic.cluster_bootstrap_records(features=NEW_CLUSTER_FEATURES), raft, now_ms)

    def deactivate(self) -> None:
        self.active_epoch = None
        queued, self._queue = list(self._queue), deque()
        waiting, self._waiting = list(self._waiting), deque()
        for write in queued:
            write.reply(NotController())
        for _, reply, _ in waiting:
            reply(NotController())

    def _append(self, records: list[MetadataRecord], raft: KafkaRaftClient[MetadataRecord], now_ms: int) -> int | None:
        try:
            offset = raft.append(records, now_ms)
        except NotLeaderError:
            self.deactivate()
            return None
        self.last_written = offset
        return offset

    # -- writes ----------------------------------------------------------------------------------

    def submit(self, decide: Decide, reply: Reply) -> None:
        if not self.is_active:
            reply(NotController())
            return
        self._queue.append(_Write(decide, reply))

    def run(self, image: MetadataImage, raft: KafkaRaftClient[MetadataRecord], now_ms: int) -> None:
        """Decide the queued writes, one at a time over the committed image."""
        if self.is_active and not raft.is_leader():
            self.deactivate()
        while self.is_active and self._queue and self.committed >= self.last_written:
            write = self._queue.popleft()
            records, answer = write.decide(image)
            if not records:
                write.reply(answer)
                continue
            offset = self._append(list(records), raft, now_ms)
            if offset is None:
                write.reply(NotController())
                return
            self._waiting.append((offset, write.reply, answer))
            return

    def fence_stale_brokers(self, image: MetadataImage) -> None:
        """The session timer's job: queued as a write when some unfenced broker's session ran out."""
        if not self.is_active or self._fencing or not self.cluster.heartbeats.stale_brokers(image, self.clock()):
            return
        self._fencing = True

        def decide(current: MetadataImage) -> tuple[list[MetadataRecord], Any]:
            self._fencing = False
            result = self.cluster.fence_stale_brokers(self.clock(), current)
            return result.records, result.response

        self.submit(decide, self._fenced)

    def _fenced(self, answer: Any) -> None:
        self._fencing = False
