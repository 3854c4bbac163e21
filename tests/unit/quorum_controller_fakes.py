"""An in-memory metadata quorum for controller tests: appends wait until the test commits them.

Every node gets committed batches in log order, first in its MetadataLoader, then in its
QuorumController, as KafkaRaftManager delivers them. ``elect`` commits the new epoch's
LeaderChange control batch before reporting the leader, as the Raft contract promises.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, Callable

from broker.config import BrokerConfig
from broker.controller.cluster_control_manager import BrokerRegistrationRequest
from broker.controller.feature_control_manager import BROKER_SUPPORTED_FEATURES
from broker.controller.quorum_controller import QuorumController
from broker.metadata.metadata_loader import MetadataLoader
from broker.metadata.metadata_records import BrokerEndpoint, MetadataRecord
from raft.kafka_raft_client import NotLeaderError
from raft.records import Batch

CLUSTER_ID = "kbroker-quorum-test"
VOTERS = "1@127.0.0.1:19093,2@127.0.0.1:19094,3@127.0.0.1:19095"


def controller_config(node_id: int, **overrides: Any) -> BrokerConfig:
    fields: dict[str, Any] = {
        "node_id": node_id,
        "process_roles": "controller",
        "listeners": f"CONTROLLER://127.0.0.1:{19092 + node_id}",
        "controller_quorum_voters": VOTERS,
        "log_dirs": "/nonexistent",
        "default_replication_factor": 3,
    }
    fields.update(overrides)
    return BrokerConfig(**fields)


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


class FakeQuorum:
    def __init__(self) -> None:
        self.leader_id: int | None = None
        self.epoch = 0
        self.end_offset = 0  # the next offset
        self.committed: list[Batch[MetadataRecord]] = []
        self.pending: list[Batch[MetadataRecord]] = []
        self.nodes: dict[int, Node] = {}
        self.auto_commit = False

    def append(self, node_id: int, records: list[MetadataRecord]) -> int:
        if node_id != self.leader_id:
            raise NotLeaderError(f"node {node_id} does not lead epoch {self.epoch}")
        batch: Batch[MetadataRecord] = Batch(self.end_offset, self.end_offset + len(records) - 1, self.epoch, 0, 0, list(records))
        self.end_offset += len(records)
        self.pending.append(batch)
        if self.auto_commit:
            asyncio.get_running_loop().call_soon(self.commit)
        return batch.last_offset

    def commit(self, count: int | None = None) -> int:
        """Commit the first ``count`` pending batches (all by default); how many were committed."""
        batches = self.pending if count is None else self.pending[:count]
        self.pending = self.pending[len(batches) :]
        for batch in batches:
            self._deliver(batch)
        return len(batches)

    def _deliver(self, batch: Batch[MetadataRecord]) -> None:
        self.committed.append(batch)
        for node in self.nodes.values():
            node.loader.handle_commit(batch)
            node.controller.handle_commit(batch)

    def elect(self, node_id: int) -> None:
        """``node_id`` wins the next epoch; what was not committed is lost."""
        self.pending.clear()
        self.end_offset = self.committed[-1].last_offset + 1 if self.committed else 0
        self.epoch += 1
        self.leader_id = node_id
        self._deliver(Batch(self.end_offset, self.end_offset, self.epoch, 0, 0, [], [object()]))
        self.end_offset += 1
        for node in self.nodes.values():
            node.controller.handle_leader_change(node_id, self.epoch)

    def resign(self) -> None:
        """An election starts: no leader in the next epoch; what was not committed is lost."""
        self.pending.clear()
        self.epoch += 1
        self.leader_id = None
        for node in self.nodes.values():
            node.controller.handle_leader_change(None, self.epoch)


class FakeRaft:
    """One node's view of the quorum: the RaftClient protocol QuorumController uses."""

    def __init__(self, quorum: FakeQuorum, node_id: int) -> None:
        self._quorum = quorum
        self._node_id = node_id

    def append(self, records: list[MetadataRecord]) -> int:
        return self._quorum.append(self._node_id, records)

    def is_leader(self) -> bool:
        return self._quorum.leader_id == self._node_id

    @property
    def leader(self) -> tuple[int | None, int]:
        return self._quorum.leader_id, self._quorum.epoch

    def next_append_offset(self) -> int:
        if not self.is_leader():
            raise NotLeaderError("not the leader")
        return self._quorum.end_offset

    def kraft_version(self) -> int:
        return 0  # a static quorum: no KRaftVersionRecord

    def upgrade_kraft_version(self, epoch: int, kraft_version: int, validate_only: bool) -> None:
        raise RuntimeError("the fake quorum has no Raft layer to upgrade kraft.version in")


class Node:
    def __init__(self, quorum: FakeQuorum, node_id: int, clock: Clock, **config: Any) -> None:
        self.raft = FakeRaft(quorum, node_id)
        self.loader = MetadataLoader()
        self.config = controller_config(node_id, **config)
        self.controller = QuorumController(self.config, self.raft, lambda: self.loader.image, CLUSTER_ID, now_ms=clock, new_topic_id=_topic_ids(node_id))
        quorum.nodes[node_id] = self


def _topic_ids(node_id: int) -> Callable[[], uuid.UUID]:
    counter = iter(range(1, 1 << 30))
    return lambda: uuid.UUID(int=(node_id << 64) + next(counter))


def registration(broker_id: int, *, incarnation: uuid.UUID | None = None, cluster_id: str = CLUSTER_ID) -> BrokerRegistrationRequest:
    return BrokerRegistrationRequest(
        broker_id=broker_id,
        cluster_id=cluster_id,
        incarnation_id=incarnation or uuid.UUID(int=broker_id),
        listeners=(BrokerEndpoint(name="PLAINTEXT", host="127.0.0.1", port=9092 + broker_id),),
        features=dict(BROKER_SUPPORTED_FEATURES),  # a broker of this build
        log_dirs=(uuid.UUID(int=0x1000 + broker_id),),
    )


async def settle() -> None:
    """Let every task that can run do so (no task here waits on anything but others and the quorum)."""
    for _ in range(20):
        await asyncio.sleep(0)


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 10))
