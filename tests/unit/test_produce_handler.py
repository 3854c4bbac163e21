"""ProduceHandler over a real ReplicaManager and logs: what an acks=all produce is answered when the
leadership moves while it waits for replication."""

from __future__ import annotations

import asyncio
import importlib
import uuid
from pathlib import Path

from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from broker.handlers.produce import ProduceHandler
from broker.kafka_apis import RequestContext
from broker.metadata.metadata_cache import BrokerEndpoint, MetadataCache
from broker.metadata.metadata_records import BrokerEndpoint as RegisteredEndpoint
from broker.metadata.metadata_records import RegisterBrokerRecord, TopicRecord
from broker.network import ClientInfo
from protocol.headers import RequestHeader
from protocol.produce_request import PartitionProduceData, ProduceRequest, TopicProduceData
from tests.unit.batch_factory import make_batch
from tests.unit.test_replica_manager_delta import ME, A, Node, change, partition

VERSION = 10


def register(node_id: int) -> RegisterBrokerRecord:
    return RegisterBrokerRecord(
        broker_id=node_id,
        incarnation_id=uuid.UUID(int=node_id),
        broker_epoch=node_id,
        end_points=(RegisteredEndpoint(name="PLAINTEXT", host="127.0.0.1", port=9090 + node_id),),
        fenced=False,
    )


def test_a_produce_whose_leadership_moves_while_it_waits_names_the_new_leader(tmp_path: Path) -> None:
    """Kafka's handleProduceRequest adds KIP-951's CurrentLeader and NodeEndpoints to every
    NOT_LEADER_OR_FOLLOWER it answers, also one a DelayedProduce completes after the append."""
    node = Node(tmp_path)
    try:
        node.commit(register(1), register(2), TopicRecord(name="a", topic_id=A), partition(0, (ME, 2)))
        cache = MetadataCache(ME, "c", BrokerEndpoint(ME, "127.0.0.1", 9091, None), node.loader.image)
        handler = ProduceHandler(node.rm, cache)
        request = ProduceRequest(None, -1, 30_000, (TopicProduceData("a", (PartitionProduceData(0, memoryview(bytearray(make_batch([b"v"])))),)),))
        ctx = RequestContext(RequestHeader(0, VERSION, 7, "test", 0), ClientInfo("c1", "test", "127.0.0.1:1"))

        async def produce_then_lose_the_leadership() -> list[bytes]:
            waiting = asyncio.ensure_future(handler(ctx, request))
            await asyncio.sleep(0.05)
            assert not waiting.done(), "acks=all waits for replica 2"
            cache.image = node.commit(change(0, leader=2))
            return await asyncio.wait_for(waiting, 5)

        (frame,) = asyncio.run(produce_then_lose_the_leadership())
        schema = importlib.import_module(f"kio.schema.produce.v{VERSION}.response").ProduceResponse
        decoded, _ = entity_reader(schema)(memoryview(frame).toreadonly(), 9)
        answer = decoded.responses[0].partition_responses[0]
        assert answer.error_code == ErrorCode.not_leader_or_follower
        assert (answer.current_leader.leader_id, answer.current_leader.leader_epoch) == (2, 1)
        assert [(n.node_id, n.port) for n in decoded.node_endpoints] == [(2, 9092)]
    finally:
        node.log_manager.shutdown()
