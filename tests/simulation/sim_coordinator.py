"""The group coordinator on the leaders of __consumer_offsets: GroupCoordinatorShard over the simulated log.

Kafka's coordinator runtime, reduced to what the simulation drives: a shard per
__consumer_offsets partition the broker leads and serves, rebuilt from the partition's log when
the leadership begins (as the coordinator loads), taking simple consumers' OffsetCommit (no
generation): the shard's records are appended as the leader's with acks=all, replayed into the
shard and answered once the high watermark passes them, and dropped with the leadership.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from broker.group.group_coordinator_shard import GroupCoordinatorShard
from broker.group.group_metadata_manager import GroupConfig
from broker.group.offset_metadata_manager import PartitionCommit
from tests.simulation.sim_replica import SimPartition, TopicPartition, append_to_leader

if TYPE_CHECKING:
    from tests.simulation.sim_broker import ProduceResponse, SimNode

OFFSETS_TOPIC = "__consumer_offsets"
NOT_COORDINATOR = 16
OFFSET_COMMIT_VERSION = 9
RETENTION_MS = 7 * 24 * 3600 * 1000


@dataclass(frozen=True, slots=True)
class OffsetCommitRequest:
    tp: TopicPartition  # the __consumer_offsets partition of the group
    group: str
    committed: TopicPartition  # the partition whose position is committed
    offset: int


@dataclass(frozen=True, slots=True)
class OffsetCommitResponse:
    error_code: int
    base_offset: int = -1
    records: tuple[Any, ...] = ()  # what the coordinator wrote: the simulation checks they stay


class SimGroupCoordinator:
    def __init__(self, node: "SimNode") -> None:
        self.node = node
        self.shards: dict[TopicPartition, GroupCoordinatorShard] = {}

    def load(self, tp: TopicPartition, replica: SimPartition) -> None:
        shard = GroupCoordinatorShard(GroupConfig(), offset_metadata_max_bytes=4096, offsets_retention_ms=RETENTION_MS)
        for offset, (key, value) in enumerate(replica.log.values):
            shard.replay(key, value, offset)
        self.shards[tp] = shard
        sim = self.node.sim
        sim.stats.coordinator_loads += 1
        sim.invariants.coordinator_loaded(tp, self.node.node_id, replica.log.values, lambda group, committed: _committed_offset(shard, group, committed))

    def unload(self, tp: TopicPartition) -> None:
        self.shards.pop(tp, None)

    def offset_commit(self, request: OffsetCommitRequest, reply: Callable[[OffsetCommitResponse], None]) -> None:
        node = self.node
        tp = request.tp
        shard = self.shards.get(tp)
        replica = node.replicas.get(tp)
        if shard is None or replica is None or not replica.is_leader:
            reply(OffsetCommitResponse(NOT_COORDINATOR))
            return
        commit = PartitionCommit(request.committed[0], request.committed[1], request.offset, -1, None)
        answers, records = shard.offsets.commit(request.group, -1, "", None, -1, [commit], OFFSET_COMMIT_VERSION, node.sim.now)
        if any(code for _, code in answers) or not records:
            reply(OffsetCommitResponse(next(code for _, code in answers if code)))
            return
        error, base, last = append_to_leader(replica, records, True)
        if error:
            reply(OffsetCommitResponse(error))
            return

        def written(response: "ProduceResponse") -> None:
            if response.error_code == 0 and self.shards.get(tp) is shard:
                for i, (key, value) in enumerate(records):
                    shard.replay(key, value, base + i)
            reply(OffsetCommitResponse(response.error_code, base, tuple(records)))

        node.await_replication(tp, last + 1, base, written)


def _committed_offset(shard: GroupCoordinatorShard, group: str, committed: TopicPartition) -> int | None:
    [(_, _, offset)] = shard.offsets.fetch(group, [committed])
    return None if offset is None else offset.offset
