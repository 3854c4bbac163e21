"""The share coordinator's APIs, which share partition leaders (the persister) send:
InitializeShareGroupState, ReadShareGroupState, WriteShareGroupState, DeleteShareGroupState and
ReadShareGroupStateSummary, answered as Kafka 4.4's KafkaApis and ShareCoordinatorService answer them.

Each needs CLUSTER_ACTION (every partition CLUSTER_AUTHORIZATION_FAILED otherwise, Kafka's
toGlobalErrorResponse). A request with no topics, a topic with no partitions or an empty group id
is answered with no results, as Kafka's service does. Each partition is answered by the share
coordinator of its key: NOT_COORDINATOR on a node that does not lead its ``__share_group_state``
partition, COORDINATOR_LOAD_IN_PROGRESS while it loads. share.version is not checked, as Kafka
does not.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from broker.auth_helper import AuthHelper
from broker.kafka_apis import RequestContext
from broker.metadata.metadata_records import ZERO_UUID
from broker.security.standard_acl import AclOperation
from broker.share.persister import PersisterStateBatch
from broker.share.record_state import RecordState
from broker.share_coordinator.records import UNKNOWN_DELIVERY_COMPLETE_COUNT
from broker.share_coordinator.share_coordinator_service import Answer, ShareCoordinatorService
from broker.share_coordinator.share_coordinator_shard import PartitionResult, ReadStateResult, ReadStateSummaryResult, WriteStateData
from broker.share_coordinator.share_partition_key import SharePartitionKey
from protocol.api_keys import ApiKey, response_schema
from protocol.entities import build, nested

# Kafka's Errors.CLUSTER_AUTHORIZATION_FAILED.message(), which toGlobalErrorResponse sends.
CLUSTER_AUTHORIZATION_FAILED_MESSAGE = "Cluster authorization failed."
_DELIVERY_STATES = frozenset(int(s) for s in RecordState)


class _ShareGroupStateHandler:
    """What the five APIs share: authorization, the empty-request answer, splitting the request
    into share partitions and gathering their answers into the response."""

    api_key: ApiKey
    result_entity: str  # the per-topic entity of the response

    def __init__(self, service: ShareCoordinatorService, auth: AuthHelper | None = None) -> None:
        self._service = service
        self._auth = auth or AuthHelper(None)

    def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        schema = response_schema(self.api_key, ctx.version)
        topic_cls = nested(schema, self.result_entity)
        partition_cls = nested(schema, "PartitionResult")
        if not self._auth.authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
            refused = self.failed(ErrorCode.cluster_authorization_failed, CLUSTER_AUTHORIZATION_FAILED_MESSAGE)
            results = tuple(
                build(topic_cls, topic_id=t.topic_id, partitions=tuple(self.partition(partition_cls, int(p.partition), refused) for p in t.partitions))
                for t in request.topics
            )
            return build(schema, results=results)
        if not request.topics or any(not t.partitions for t in request.topics) or not request.group_id or not request.group_id.strip():
            return build(schema, results=())
        answers: list[tuple[uuid.UUID, int, Answer[Any]]] = []
        for t in request.topics:
            for p in t.partitions:
                # kio reads Kafka's Uuid.ZERO_UUID as None; Kafka keys it like any other topic id.
                key = SharePartitionKey(request.group_id, t.topic_id if t.topic_id is not None else ZERO_UUID, int(p.partition))
                answers.append((t.topic_id, key.partition, self.run(key, p)))

        def respond(settled: list[tuple[uuid.UUID, int, Any]]) -> Any:
            by_topic: dict[uuid.UUID, list[Any]] = {}
            for topic_id, partition, answer in settled:
                by_topic.setdefault(topic_id, []).append(self.partition(partition_cls, partition, answer))
            return build(schema, results=tuple(build(topic_cls, topic_id=topic_id, partitions=tuple(ps)) for topic_id, ps in by_topic.items()))

        if not any(isinstance(answer, asyncio.Future) for _, _, answer in answers):
            return respond(answers)
        return _gather(answers, respond)

    def run(self, key: SharePartitionKey, partition: Any) -> Answer[Any]:
        raise NotImplementedError

    def failed(self, error: int, message: str | None) -> Any:
        return PartitionResult(error_code=error, error_message=message)

    def partition(self, partition_cls: type, partition: int, answer: Any) -> Any:
        return build(partition_cls, partition=partition, error_code=answer.error_code, error_message=answer.error_message)


async def _gather(answers: list[tuple[uuid.UUID, int, Answer[Any]]], respond: Callable[[list[tuple[uuid.UUID, int, Any]]], Any]) -> Any:
    return respond([(t, p, await a if isinstance(a, asyncio.Future) else a) for t, p, a in answers])


class InitializeShareGroupStateHandler(_ShareGroupStateHandler):
    api_key = ApiKey.INITIALIZE_SHARE_GROUP_STATE
    result_entity = "InitializeStateResult"

    def run(self, key: SharePartitionKey, partition: Any) -> Answer[Any]:
        return self._service.initialize_state(key, int(partition.state_epoch), int(partition.start_offset))


class WriteShareGroupStateHandler(_ShareGroupStateHandler):
    api_key = ApiKey.WRITE_SHARE_GROUP_STATE
    result_entity = "WriteStateResult"

    def run(self, key: SharePartitionKey, partition: Any) -> Answer[Any]:
        # A delivery state the records cannot hold would fail every later load of the partition.
        if any(int(b.delivery_state) not in _DELIVERY_STATES for b in partition.state_batches):
            return PartitionResult(error_code=ErrorCode.invalid_request, error_message="Invalid delivery state in the state batches.")
        data = WriteStateData(
            state_epoch=int(partition.state_epoch),
            leader_epoch=int(partition.leader_epoch),
            start_offset=int(partition.start_offset),
            state_batches=tuple(
                PersisterStateBatch(int(b.first_offset), int(b.last_offset), RecordState(int(b.delivery_state)), int(b.delivery_count)) for b in partition.state_batches
            ),
            delivery_complete_count=int(getattr(partition, "delivery_complete_count", UNKNOWN_DELIVERY_COMPLETE_COUNT)),
        )
        return self._service.write_state(key, data)


class DeleteShareGroupStateHandler(_ShareGroupStateHandler):
    api_key = ApiKey.DELETE_SHARE_GROUP_STATE
    result_entity = "DeleteStateResult"

    def run(self, key: SharePartitionKey, partition: Any) -> Answer[Any]:
        return self._service.delete_state(key)


class ReadShareGroupStateHandler(_ShareGroupStateHandler):
    api_key = ApiKey.READ_SHARE_GROUP_STATE
    result_entity = "ReadStateResult"

    def run(self, key: SharePartitionKey, partition: Any) -> Answer[Any]:
        return self._service.read_state(key, int(partition.leader_epoch))

    def failed(self, error: int, message: str | None) -> Any:
        return ReadStateResult(error_code=error, error_message=message)

    def partition(self, partition_cls: type, partition: int, answer: ReadStateResult) -> Any:
        batch_cls = nested(partition_cls, "StateBatch")
        return build(
            partition_cls,
            partition=partition,
            error_code=answer.error_code,
            error_message=answer.error_message,
            state_epoch=answer.state_epoch,
            start_offset=answer.start_offset,
            state_batches=tuple(
                build(batch_cls, first_offset=b.first_offset, last_offset=b.last_offset, delivery_state=int(b.delivery_state), delivery_count=b.delivery_count)
                for b in answer.state_batches
            ),
        )


class ReadShareGroupStateSummaryHandler(_ShareGroupStateHandler):
    api_key = ApiKey.READ_SHARE_GROUP_STATE_SUMMARY
    result_entity = "ReadStateSummaryResult"

    def run(self, key: SharePartitionKey, partition: Any) -> Answer[Any]:
        return self._service.read_state_summary(key)

    def failed(self, error: int, message: str | None) -> Any:
        return ReadStateSummaryResult(error_code=error, error_message=message)

    def partition(self, partition_cls: type, partition: int, answer: ReadStateSummaryResult) -> Any:
        # v0 has no leader epoch nor delivery-complete count: build leaves out the fields it lacks.
        return build(
            partition_cls,
            partition=partition,
            error_code=answer.error_code,
            error_message=answer.error_message,
            state_epoch=answer.state_epoch,
            leader_epoch=answer.leader_epoch,
            start_offset=answer.start_offset,
            delivery_complete_count=answer.delivery_complete_count,
        )
