"""Which node coordinates a group or a transactional id: FindCoordinator's answer from the image
(the coordinator partition's leader, wherever it is), the errors a node that is not the
coordinator gives, and the coordinators loading and unloading their partitions as leadership
moves in the metadata."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v0.request import FindCoordinatorRequest as FindV0
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest as FindV4

from broker.config import load_config
from broker.coordinator.coordinator_partitioner import partition_for
from broker.group_coordinator import GROUP_METADATA_TOPIC, GroupCoordinator
from broker.handlers.groups import FindCoordinatorHandler, coordinator_endpoint
from broker.kafka_apis import RequestContext
from broker.share_coordinator.share_coordinator_service import ShareCoordinatorService
from broker.metadata.metadata_cache import BrokerEndpoint, MetadataCache
from broker.metadata.metadata_delta import MetadataDelta, apply_records
from broker.metadata.metadata_image import MetadataImage
from broker.metadata.metadata_records import BrokerEndpoint as RegisteredEndpoint
from broker.metadata.metadata_records import MetadataRecord, PartitionChangeRecord, PartitionRecord, RegisterBrokerRecord, TopicRecord
from broker.network import ClientInfo
from broker.transaction.transaction_state_manager import TRANSACTION_STATE_TOPIC, TransactionStateManager
from protocol.api_keys import ApiKey
from protocol.headers import RequestHeader

PARTITIONS = 4
NODE = 1
TOPIC_IDS = {GROUP_METADATA_TOPIC: uuid.uuid5(uuid.NAMESPACE_DNS, GROUP_METADATA_TOPIC), TRANSACTION_STATE_TOPIC: uuid.uuid5(uuid.NAMESPACE_DNS, TRANSACTION_STATE_TOPIC)}


def broker_records(fenced: tuple[int, ...] = ()) -> list[MetadataRecord]:
    """Brokers 1-3, each with a client listener (PLAINTEXT) and an inter-broker one."""
    return [
        RegisterBrokerRecord(
            broker_id=b,
            incarnation_id=uuid.UUID(int=b),
            broker_epoch=1,
            end_points=(RegisteredEndpoint(name="PLAINTEXT", host=f"host{b}", port=9090 + b), RegisteredEndpoint(name="INTERNAL", host=f"internal{b}", port=19090 + b)),
            fenced=b in fenced,
        )
        for b in (1, 2, 3)
    ]


def topic_records(topic: str, leaders: dict[int, int]) -> list[MetadataRecord]:
    records: list[MetadataRecord] = [TopicRecord(name=topic, topic_id=TOPIC_IDS[topic])]
    for index, leader in leaders.items():
        records.append(PartitionRecord(partition_id=index, topic_id=TOPIC_IDS[topic], replicas=(1, 2), isr=(1, 2), leader=leader, leader_epoch=0, partition_epoch=0))
    return records


def cache(leaders: dict[int, int] | None, topic: str = GROUP_METADATA_TOPIC, fenced: tuple[int, ...] = ()) -> MetadataCache:
    """This node is 1; ``leaders`` maps each partition of ``topic`` to its leader (None: no such topic)."""
    records = broker_records(fenced) + (topic_records(topic, leaders) if leaders is not None else [])
    return MetadataCache(NODE, "cluster", BrokerEndpoint(NODE, "host1", 9091), image=apply_records(MetadataImage(), records))


CONFIG = load_config(None, {"offsets.topic.num.partitions": str(PARTITIONS), "transaction.state.log.num.partitions": str(PARTITIONS)})


def coordinator(leaders: dict[int, int] | None) -> GroupCoordinator:
    # The routing answers need neither the controller nor the replica manager.
    return GroupCoordinator(CONFIG, None, cache(leaders), None)  # type: ignore[arg-type]


def key_on(partition: int) -> str:
    return next(g for g in (f"key-{i}" for i in range(1000)) if partition_for(g, PARTITIONS) == partition)


# -- FindCoordinator ---------------------------------------------------------------------------------------


def test_the_coordinator_is_the_partition_leader_wherever_it_is() -> None:
    metadata = cache({0: 1, 1: 2, 2: 3})
    assert coordinator_endpoint(metadata, GROUP_METADATA_TOPIC, 0) == (0, BrokerEndpoint(1, "host1", 9091))
    # Another node's client endpoint, not its inter-broker one.
    assert coordinator_endpoint(metadata, GROUP_METADATA_TOPIC, 1) == (0, BrokerEndpoint(2, "host2", 9092))
    assert coordinator_endpoint(metadata, GROUP_METADATA_TOPIC, 2) == (0, BrokerEndpoint(3, "host3", 9093))


@pytest.mark.parametrize(
    ("metadata", "partition"),
    [
        (cache(None), 0),  # no topic yet
        (cache({0: -1}), 0),  # no leader
        (cache({0: 4}), 0),  # a leader that is not registered
        (cache({0: 2}, fenced=(2,)), 0),  # a fenced leader
        (cache({0: 1}), 3),  # a partition the image does not have
    ],
)
def test_no_live_leader_is_coordinator_not_available(metadata: MetadataCache, partition: int) -> None:
    assert coordinator_endpoint(metadata, GROUP_METADATA_TOPIC, partition) == (ErrorCode.coordinator_not_available, None)


def find(handler: FindCoordinatorHandler, request: Any, version: int) -> Any:
    ctx = RequestContext(RequestHeader(ApiKey.FIND_COORDINATOR, version, 7, "test", 0), ClientInfo("c", "test", "127.0.0.1"))
    return asyncio.run(asyncio.wait_for(handler(ctx, request), 10))


def test_find_coordinator_answers_each_key_from_the_image() -> None:
    records = broker_records() + topic_records(GROUP_METADATA_TOPIC, {0: 1, 1: 2, 2: -1, 3: 3}) + topic_records(TRANSACTION_STATE_TOPIC, {0: 3, 1: 1, 2: 2, 3: 2})
    metadata = MetadataCache(NODE, "cluster", BrokerEndpoint(NODE, "host1", 9091), image=apply_records(MetadataImage(), records))
    groups = GroupCoordinator(CONFIG, None, metadata, None)  # type: ignore[arg-type]
    txns = TransactionStateManager(CONFIG, None, metadata, None)  # type: ignore[arg-type]
    handler = FindCoordinatorHandler(groups, metadata, txns, ShareCoordinatorService(CONFIG, None, metadata, None))  # type: ignore[arg-type]

    response = find(handler, FindV4(key_type=0, coordinator_keys=tuple(key_on(p) for p in range(PARTITIONS))), 4)
    assert [(c.error_code, c.node_id, c.host, c.port) for c in response.coordinators] == [
        (ErrorCode.none, 1, "host1", 9091),
        (ErrorCode.none, 2, "host2", 9092),
        (ErrorCode.coordinator_not_available, -1, "", -1),
        (ErrorCode.none, 3, "host3", 9093),
    ]
    response = find(handler, FindV4(key_type=1, coordinator_keys=(key_on(0), key_on(2), "")), 4)
    assert [(c.error_code, c.node_id) for c in response.coordinators] == [(ErrorCode.none, 3), (ErrorCode.none, 2), (ErrorCode.invalid_request, -1)]
    single = find(handler, FindV0(key=key_on(1)), 0)
    assert (single.error_code, single.node_id, single.port) == (ErrorCode.none, 2, 9092)


# -- a node that is not the coordinator ---------------------------------------------------------------------


def test_no_offsets_topic_yet_is_coordinator_not_available() -> None:
    assert coordinator(None).coordinator_error("g") == ErrorCode.coordinator_not_available


def test_a_partition_led_elsewhere_is_not_coordinator() -> None:
    c = coordinator({0: 1, 1: 2, 2: 1, 3: 2})
    assert c.coordinator_error(key_on(1)) == ErrorCode.not_coordinator
    assert c.coordinator_error(key_on(3)) == ErrorCode.not_coordinator


def test_a_partition_being_loaded_is_load_in_progress() -> None:
    c = coordinator({0: 1, 1: 2, 2: 1, 3: 2})
    c.runtime._loading[0] = None  # type: ignore[assignment]  # stands for the replay task
    assert c.coordinator_error(key_on(0)) == ErrorCode.coordinator_load_in_progress


def test_transactional_ids_route_the_same_way() -> None:
    assert TransactionStateManager(CONFIG, None, cache(None, TRANSACTION_STATE_TOPIC), None).coordinator_error("t") == ErrorCode.coordinator_not_available  # type: ignore[arg-type]
    txns = TransactionStateManager(CONFIG, None, cache({0: 1, 1: 2, 2: 1, 3: 2}, TRANSACTION_STATE_TOPIC), None)  # type: ignore[arg-type]
    assert txns.coordinator_error(key_on(1)) == ErrorCode.not_coordinator
    txns.runtime._loading[0] = None  # type: ignore[assignment]
    assert txns.coordinator_error(key_on(0)) == ErrorCode.coordinator_load_in_progress


# -- loading and unloading as leadership moves ---------------------------------------------------------------


class NoPartitions:
    """A replica manager holding no logs: a partition loads empty, and nothing is written."""

    def get_partition(self, topic: str, index: int) -> None:
        return None


def publish(metadata: MetadataCache, subscribers: list[Any], records: list[MetadataRecord]) -> None:
    delta = MetadataDelta(metadata.image)
    for record in records:
        delta.replay(record)
    image = delta.apply(metadata.image.provenance + len(records))
    metadata.on_metadata_update(delta, image)
    for subscriber in subscribers:
        subscriber.on_metadata_update(delta, image)


def leader_change(topic: str, index: int, leader: int) -> PartitionChangeRecord:
    return PartitionChangeRecord(partition_id=index, topic_id=TOPIC_IDS[topic], leader=leader)


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def test_coordinators_load_what_this_node_leads_and_unload_what_moves_away() -> None:
    async def test() -> None:
        metadata = MetadataCache(NODE, "cluster", BrokerEndpoint(NODE, "host1", 9091), image=apply_records(MetadataImage(), broker_records()))
        groups = GroupCoordinator(CONFIG, None, metadata, NoPartitions())  # type: ignore[arg-type]
        txns = TransactionStateManager(CONFIG, None, metadata, NoPartitions())  # type: ignore[arg-type]
        unloaded: list[int] = []
        txns.on_unloaded = unloaded.append
        subscribers = [groups, txns]
        publish(metadata, subscribers, topic_records(GROUP_METADATA_TOPIC, {0: 1, 1: 2, 2: 1, 3: 2}) + topic_records(TRANSACTION_STATE_TOPIC, {0: 2, 1: 1, 2: 1, 3: 2}))
        await settle()
        assert sorted(groups.shards) == [0, 2] and sorted(txns.partitions) == [1, 2]
        assert txns.partitions[1].coordinator_epoch == 0

        # Partition 0 of each moves to node 2; node 1 takes partition 3 of each.
        publish(
            metadata,
            subscribers,
            [leader_change(t, 0, 2) for t in TOPIC_IDS] + [leader_change(GROUP_METADATA_TOPIC, 3, 1), leader_change(TRANSACTION_STATE_TOPIC, 3, 1)],
        )
        await settle()
        assert sorted(groups.shards) == [2, 3] and sorted(txns.partitions) == [1, 2, 3]
        assert groups.coordinator_error(key_on(0)) == ErrorCode.not_coordinator
        assert txns.partitions[3].coordinator_epoch == 1  # the leader epoch the change bumped

        # Node 1 loses its txn partition 1: it is unloaded, and its markers are withdrawn.
        publish(metadata, subscribers, [leader_change(TRANSACTION_STATE_TOPIC, 1, -1)])
        await settle()
        assert sorted(txns.partitions) == [2, 3] and unloaded == [1]
        assert txns.coordinator_error(key_on(1)) == ErrorCode.not_coordinator
        groups.shutdown()
        txns.shutdown()

    asyncio.run(asyncio.wait_for(test(), 10))
