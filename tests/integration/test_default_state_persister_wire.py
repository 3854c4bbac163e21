"""The persister against the share coordinator of a real node (its defaults, share.version 2),
over real TCP: it finds the coordinator with FindCoordinator(SHARE) (which creates
``__share_group_state``), initializes two share partitions, writes state batches, reads them back,
reads the summary, is fenced as an older leader, deletes, and reads the uninitialized values back.

The persister runs in the test process with its own NetworkClient and a metadata view holding
only the node's registration (read from its Metadata answer), so every call goes the
FindCoordinator way a broker takes before ``__share_group_state`` is in its metadata."""

from __future__ import annotations

import asyncio
import uuid

from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import request as metadata_v12

from broker.default_state_persister import DefaultStatePersister, StateSummary
from broker.metadata.metadata_cache import BrokerEndpoint, MetadataCache
from broker.metadata.metadata_delta import apply_records
from broker.metadata.metadata_image import MetadataImage
from broker.metadata.metadata_records import BrokerEndpoint as RegisteredEndpoint
from broker.metadata.metadata_records import RegisterBrokerRecord
from broker.network_client import NetworkClient
from broker.share.persister import PersisterStateBatch, SharePartitionStateData
from broker.share.record_state import RecordState
from tests.integration.conftest import BrokerProcess
from tests.integration.helpers import create_topic
from tests.integration.test_share_coordinator_wire import topic_id
from tests.integration.test_share_groups_wire import share_node  # noqa: F401 - the fixture
from tests.integration.wire import request

GROUP = "persister-g"
TOPIC = "persister-t"
REQUEST_TIMEOUT_MS = 10_000
# share.coordinator.state.topic.num.partitions, Kafka's default (the node's).
SHARE_PARTITIONS = 50


def node_metadata(bs: str) -> MetadataCache:
    """This node's view of the cluster as a broker's persister sees it before the state topic exists."""
    answer = request(bs, metadata_v12.MetadataRequest(topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    [broker] = answer.brokers
    node = int(broker.node_id)
    registration = RegisterBrokerRecord(
        broker_id=node,
        incarnation_id=uuid.uuid4(),
        broker_epoch=1,
        end_points=(RegisteredEndpoint(name="PLAINTEXT", host=broker.host, port=int(broker.port), security_protocol=0),),
        fenced=False,
    )
    return MetadataCache(node, answer.cluster_id or "", BrokerEndpoint(node, broker.host, int(broker.port)), image=apply_records(MetadataImage(), [registration]))


def test_the_persister_round_trips_share_group_state(share_node: BrokerProcess) -> None:  # noqa: F811
    bs = share_node.bootstrap
    create_topic(bs, TOPIC, partitions=2)
    tid = topic_id(bs, TOPIC)
    cache = node_metadata(bs)

    async def scenario() -> None:
        # Kafka's backoff (2, 4, 8, 16 s) covers COORDINATOR_LOAD_IN_PROGRESS while the new state topic loads.
        network = NetworkClient("persister-test", request_timeout_ms=REQUEST_TIMEOUT_MS)
        persister = DefaultStatePersister(cache, network, SHARE_PARTITIONS, inter_broker_listener_name="PLAINTEXT", request_timeout_ms=REQUEST_TIMEOUT_MS)
        try:
            assert await persister.initialize_state(GROUP, 0, {(tid, 0): 10, (tid, 1): 20}) == {(tid, 0): ErrorCode.none, (tid, 1): ErrorCode.none}

            first = SharePartitionStateData(10, 0, 1, (PersisterStateBatch(10, 14, RecordState.ACKNOWLEDGED, 1),), delivery_complete_count=5)
            assert await persister.write_state(GROUP, tid, 0, first) == ErrorCode.none
            second = SharePartitionStateData(10, 0, 1, (PersisterStateBatch(15, 19, RecordState.ARCHIVED, 2),), delivery_complete_count=10)
            assert await persister.write_state(GROUP, tid, 0, second) == ErrorCode.none

            read = await persister.read_state(GROUP, tid, 0, 1)
            assert read.error == ErrorCode.none
            assert read.state == SharePartitionStateData(
                10, 0, 1, (PersisterStateBatch(10, 14, RecordState.ACKNOWLEDGED, 1), PersisterStateBatch(15, 19, RecordState.ARCHIVED, 2))
            )

            summary = await persister.read_state_summary(GROUP, {tid: [0, 1]})
            assert summary[(tid, 0)] == StateSummary(ErrorCode.none, 10, 0, 1, 10)
            assert (summary[(tid, 1)].error, summary[(tid, 1)].start_offset, summary[(tid, 1)].state_epoch) == (ErrorCode.none, 20, 0)

            # A newer leader has read: the older one's write is fenced, and returned at once.
            assert (await persister.read_state(GROUP, tid, 0, 2)).error == ErrorCode.none
            assert await persister.write_state(GROUP, tid, 0, first) == ErrorCode.fenced_leader_epoch

            assert await persister.delete_state(GROUP, {tid: [0, 1]}) == {(tid, 0): ErrorCode.none, (tid, 1): ErrorCode.none}
            gone = await persister.read_state_summary(GROUP, {tid: [0, 1]})
            assert [(s.error, s.start_offset) for s in gone.values()] == [(ErrorCode.none, -1), (ErrorCode.none, -1)]
            assert await persister.read_state(GROUP, tid, 0, 3) == type(read)(ErrorCode.invalid_request, None)
        finally:
            network.close()
            await network.wait_closed()

    asyncio.run(scenario())
