"""A single controller on the in-memory quorum with topic "t" failed over: broker 1 fenced and
back, its preferred partitions led by others until it rejoins their ISRs."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from broker.controller.replication_control_manager import AlterPartitionTopic, IsrMember, PartitionIsrChange
from broker.metadata.metadata_image import PartitionRegistration
from tests.unit.quorum_controller_fakes import Clock, FakeQuorum, Node
from tests.unit.test_quorum_controller import live_brokers, topic


def single(**config: Any) -> tuple[FakeQuorum, Node, Clock]:
    """Controller 1 alone, its writes committed as soon as appended."""
    quorum = FakeQuorum()
    quorum.auto_commit = True
    clock = Clock()
    return quorum, Node(quorum, 1, clock, **config), clock


async def failed_over(node: Node, *, partitions: int = 3) -> tuple[dict[int, int], dict[int, int]]:
    """Brokers 1-3 with topic "t" (RF 3), broker 1 fenced and back: (broker epochs, preferred leader by partition)."""
    c = node.controller
    epochs = await live_brokers(node, 1, 2, 3)
    [created] = await c.create_topics([topic("t", partitions)], validate_only=False)
    assert created.error_code == 0
    preferred = {i: p.replicas[0] for i, p in node.loader.image.topics["t"].partitions.items()}
    await c.broker_heartbeat(1, epochs[1], c.committed_offset, True, False)  # want_fence: its leaderships move
    await c.broker_heartbeat(1, epochs[1], c.committed_offset, False, False)
    assert not any(p.leader == 1 for p in partitions_of(node))
    return epochs, preferred


async def rejoin(node: Node, epochs: dict[int, int], broker: int) -> None:
    """Each leader's AlterPartition putting ``broker`` back in the ISR of its partitions of "t"."""
    info = node.loader.image.topics["t"]
    by_leader: dict[int, list[PartitionIsrChange]] = {}
    for i, p in info.partitions.items():
        if broker not in p.isr:
            isr = tuple(IsrMember(b, epochs[b]) for b in (*p.isr, broker))
            by_leader.setdefault(p.leader, []).append(PartitionIsrChange(i, p.leader_epoch, isr, 0, p.partition_epoch))
    for leader, changes in by_leader.items():
        reply = await node.controller.alter_partition(leader, epochs[leader], [AlterPartitionTopic(info.topic_id, tuple(changes))])
        assert all(r.error_code == ErrorCode.none for t in reply.topics for r in t.partitions)


def partitions_of(node: Node) -> list[PartitionRegistration]:
    return [p for _, p in sorted(node.loader.image.topics["t"].partitions.items())]


def balanced(node: Node, preferred: dict[int, int]) -> bool:
    return all(p.leader == preferred[i] for i, p in enumerate(partitions_of(node)))
