"""The share coordinator's shell: which node answers a share partition's state (FindCoordinator
key type SHARE, Kafka 4.4's getCoordinator), the errors of a node that is not its coordinator, and
the answers every share-group state API gives before it reaches a coordinator."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v5.request import FindCoordinatorRequest as FindV5
from kio.schema.find_coordinator.v6.request import FindCoordinatorRequest as FindV6
from kio.schema.read_share_group_state.v0.request import PartitionData, ReadShareGroupStateRequest, ReadStateData

from broker.config import load_config
from broker.group_coordinator import GroupCoordinator
from broker.handlers.groups import FindCoordinatorHandler
from broker.handlers.share_group_state import ReadShareGroupStateHandler
from broker.kafka_apis import RequestContext
from broker.metadata.metadata_cache import BrokerEndpoint, MetadataCache
from broker.metadata.metadata_delta import MetadataDelta, apply_records
from broker.metadata.metadata_image import MetadataImage
from broker.metadata.metadata_records import FeatureLevelRecord, MetadataRecord, PartitionRecord, TopicRecord
from broker.network import ClientInfo
from broker.share_coordinator.config import STATE_TOPIC
from broker.share_coordinator.share_coordinator_service import ShareCoordinatorService, state_topic_configs
from broker.share_coordinator.share_partition_key import SharePartitionKey, kafka_uuid_string, parse_share_partition_key
from broker.transaction.transaction_state_manager import TransactionStateManager
from protocol.api_keys import ApiKey
from protocol.headers import RequestHeader
from tests.unit.test_group_coordinator_routing import NODE, broker_records

PARTITIONS = 4
CONFIG = load_config(None, {"share.coordinator.state.topic.num.partitions": str(PARTITIONS)})
STATE_TOPIC_ID = uuid.uuid5(uuid.NAMESPACE_DNS, STATE_TOPIC)
TOPIC_ID = uuid.UUID(int=7)


def metadata(leaders: dict[int, int] | None) -> MetadataCache:
    records: list[MetadataRecord] = broker_records()
    if leaders is not None:
        records.append(TopicRecord(name=STATE_TOPIC, topic_id=STATE_TOPIC_ID))
        for index, leader in leaders.items():
            records.append(PartitionRecord(partition_id=index, topic_id=STATE_TOPIC_ID, replicas=(1, 2), isr=(1, 2), leader=leader, leader_epoch=0, partition_epoch=0))
    return MetadataCache(NODE, "cluster", BrokerEndpoint(NODE, "host1", 9091), image=apply_records(MetadataImage(), records))


def service(leaders: dict[int, int] | None) -> ShareCoordinatorService:
    # Routing needs neither the controller nor the replica manager.
    return ShareCoordinatorService(CONFIG, None, metadata(leaders), None)  # type: ignore[arg-type]


def key_on(s: ShareCoordinatorService, partition: int) -> SharePartitionKey:
    return next(k for k in (SharePartitionKey("g", TOPIC_ID, i) for i in range(1000)) if s.partition_for(k) == partition)


def context(api_key: ApiKey, version: int) -> RequestContext:
    return RequestContext(RequestHeader(api_key, version, 7, "test", 0), ClientInfo("c", "test", "127.0.0.1"))


def test_the_state_topic_is_created_with_kafkas_configs() -> None:
    s = service(None)
    # CONFIG is the zero-config node's: one replica, min ISR 1.
    assert (s.config.state_topic_num_partitions, s.config.state_topic_replication_factor, s.config.state_topic_min_isr) == (PARTITIONS, 1, 1)
    assert state_topic_configs(s.config) == {
        "cleanup.policy": "delete",
        "compression.type": "producer",
        "segment.bytes": "104857600",
        "min.insync.replicas": "1",
        "retention.ms": "-1",
    }


def test_only_the_zero_config_node_replicates_the_state_topic_once() -> None:
    cfg = load_config(None, {"log.dirs": "/tmp/kbroker-unit", "node.id": "2", "process.roles": "broker", "controller.quorum.voters": "1@127.0.0.1:9093", "controller.listener.names": "CONTROLLER"})
    assert (cfg.share_coordinator_state_topic_replication_factor, cfg.share_coordinator_state_topic_min_isr) == (3, 2)


def test_a_share_partition_key_is_parsed_as_kafka_does() -> None:
    key = SharePartitionKey("a:b", TOPIC_ID, 3)
    assert parse_share_partition_key(key.as_coordinator_key()) == key
    tid = kafka_uuid_string(TOPIC_ID)
    for bad in ("", "g:1", f" :{tid}:1", f"g:{tid}:x", "g:notauuid:1", f"g:{tid}:"):
        assert parse_share_partition_key(bad) is None, bad


@pytest.mark.parametrize(
    ("leaders", "partition", "error"),
    [
        (None, 0, ErrorCode.coordinator_not_available),  # no __share_group_state yet
        ({0: 2, 1: 1, 2: 2, 3: 2}, 0, ErrorCode.not_coordinator),  # led elsewhere
        ({0: 1, 1: 1, 2: 1, 3: 1}, 0, ErrorCode.not_coordinator),  # led here, not loaded (no leadership change seen)
    ],
)
def test_a_node_that_is_not_the_coordinator_answers_kafkas_error(leaders: dict[int, int] | None, partition: int, error: int) -> None:
    s = service(leaders)
    assert s.read_state(key_on(s, partition), 0).error_code == error


def test_a_partition_being_loaded_is_load_in_progress() -> None:
    s = service({0: 1, 1: 1, 2: 1, 3: 1})

    async def loading() -> int:
        s.runtime._loading[0] = asyncio.get_running_loop().create_task(asyncio.sleep(10))
        try:
            return s.write_state(key_on(s, 0), None).error_code  # type: ignore[arg-type,union-attr]
        finally:
            s.runtime._loading.pop(0).cancel()

    assert asyncio.run(loading()) == ErrorCode.coordinator_load_in_progress


def read(s: ShareCoordinatorService, request: ReadShareGroupStateRequest) -> Any:
    return ReadShareGroupStateHandler(s)(context(ApiKey.READ_SHARE_GROUP_STATE, 0), request)


def test_read_state_splits_the_request_into_share_partitions() -> None:
    s = service({0: 2, 1: 2, 2: 2, 3: 2})
    request = ReadShareGroupStateRequest(group_id="g", topics=(ReadStateData(topic_id=TOPIC_ID, partitions=(PartitionData(partition=0, leader_epoch=1), PartitionData(partition=1, leader_epoch=1))),))
    [topic] = read(s, request).results
    assert topic.topic_id == TOPIC_ID
    assert [(p.partition, p.error_code, p.state_batches) for p in topic.partitions] == [(0, ErrorCode.not_coordinator, ()), (1, ErrorCode.not_coordinator, ())]


def test_the_zero_topic_id_is_keyed_as_kafka_keys_it() -> None:
    """kio reads Uuid.ZERO_UUID as None; Kafka keys it "AAAAAAAAAAAAAAAAAAAAAA" as any topic id (a fuzzed frame)."""
    s = service({0: 2, 1: 2, 2: 2, 3: 2})
    request = ReadShareGroupStateRequest(group_id="g", topics=(ReadStateData(topic_id=None, partitions=(PartitionData(partition=0, leader_epoch=1),)),))  # type: ignore[arg-type]
    [topic] = read(s, request).results
    assert (topic.topic_id, [(p.partition, p.error_code) for p in topic.partitions]) == (None, [(0, ErrorCode.not_coordinator)])
    assert SharePartitionKey("g", uuid.UUID(int=0), 0).as_coordinator_key() == "g:AAAAAAAAAAAAAAAAAAAAAA:0"


@pytest.mark.parametrize(
    "request_",
    [
        ReadShareGroupStateRequest(group_id="g", topics=()),
        ReadShareGroupStateRequest(group_id="g", topics=(ReadStateData(topic_id=TOPIC_ID, partitions=()),)),
        ReadShareGroupStateRequest(group_id=" ", topics=(ReadStateData(topic_id=TOPIC_ID, partitions=(PartitionData(partition=0, leader_epoch=1),)),)),
    ],
)
def test_an_empty_request_gets_no_results(request_: ReadShareGroupStateRequest) -> None:
    assert read(service({0: 1}), request_).results == ()


def find(s: ShareCoordinatorService, request: Any, version: int) -> Any:
    groups = GroupCoordinator(CONFIG, None, s._metadata, None)  # type: ignore[arg-type]
    txns = TransactionStateManager(CONFIG, None, s._metadata, None)  # type: ignore[arg-type]
    handler = FindCoordinatorHandler(groups, s._metadata, txns, s)
    return asyncio.run(asyncio.wait_for(handler(context(ApiKey.FIND_COORDINATOR, version), request), 10))


def test_find_coordinator_share_answers_the_state_partitions_leader() -> None:
    s = service({0: 1, 1: 2, 2: 3, 3: 2})
    keys = tuple(key_on(s, p).as_coordinator_key() for p in range(PARTITIONS)) + ("not-a-key",)
    response = find(s, FindV6(key_type=2, coordinator_keys=keys), 6)
    assert [(c.key, c.error_code, c.node_id) for c in response.coordinators] == [
        (keys[0], ErrorCode.none, 1),
        (keys[1], ErrorCode.none, 2),
        (keys[2], ErrorCode.none, 3),
        (keys[3], ErrorCode.none, 2),
        ("not-a-key", ErrorCode.invalid_request, -1),
    ]
    # Key type SHARE is FindCoordinator v6's (KIP-932): Kafka refuses it in older versions.
    old = find(s, FindV5(key_type=2, coordinator_keys=keys[:1]), 5)
    assert [(c.error_code, c.node_id) for c in old.coordinators] == [(ErrorCode.invalid_request, -1)]


def test_the_periodic_jobs_run_while_share_groups_are_enabled() -> None:
    """Kafka's setupPeriodicJobs: pruning and cold-partition snapshots follow share.version."""
    s = service({0: 2})

    def share_version(level: int) -> MetadataDelta:
        delta = MetadataDelta(s.runtime._metadata.image)
        delta.replay(FeatureLevelRecord(name="share.version", feature_level=level))
        return delta

    async def jobs() -> list[tuple[str, ...]]:
        seen = []
        for level in (1, 1, 0, 1):
            delta = share_version(level)
            s.on_metadata_update(delta, delta.apply(1))
            seen.append(tuple(sorted(t.get_name() for t in s._periodic_jobs if not t.done())))
        running = list(s._periodic_jobs)
        s.shutdown()
        await asyncio.sleep(0)
        seen.append(tuple(t.get_name() for t in running if not t.cancelled()))
        return seen

    both = ("share-coordinator-cold-snapshots", "share-coordinator-prune")
    assert asyncio.run(jobs()) == [both, both, (), both, ()]
