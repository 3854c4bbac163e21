"""CreateTopics, DeleteTopics and CreatePartitions: requests in, the quorum controller's calls, answers out.

The controller listener's ControllerApis serves them with the QuorumController; anything with
the same calls (TopicController) will do.
"""

from __future__ import annotations

import uuid
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from broker.controller.controller_logic import CreatableTopic, CreatePartitionsResult, CreateTopicResult, DeleteTopicResult
from broker.kafka_apis import RequestContext
from broker.metadata.metadata_image import MetadataImage
from protocol.api_keys import ApiKey, response_schema
from protocol.entities import build, nested, nested_or_none

CONFIG_SOURCE_TOPIC = 1
CONFIG_SOURCE_DEFAULT = 5


class TopicController(Protocol):
    """The QuorumController calls these handlers make."""

    async def create_topics(self, topics: list[CreatableTopic], validate_only: bool) -> list[CreateTopicResult]: ...

    async def delete_topics(self, entries: list[tuple[str | None, uuid.UUID | None]]) -> list[DeleteTopicResult]: ...

    async def create_partitions(self, topics: list[tuple[str, int, list[list[int]] | None]], validate_only: bool) -> list[CreatePartitionsResult]: ...

    def effective_topic_config(self, overrides: dict[str, str | None]) -> dict[str, str]: ...


class CreateTopicsHandler:
    def __init__(self, controller: TopicController) -> None:
        self._controller = controller

    async def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        topics = [
            CreatableTopic(
                name=t.name,
                num_partitions=t.num_partitions,
                replication_factor=t.replication_factor,
                assignments={a.partition_index: list(a.broker_ids) for a in t.assignments} or None,
                configs={c.name: c.value for c in t.configs},
            )
            for t in request.topics
        ]
        results = await self._controller.create_topics(topics, validate_only=request.validate_only)
        schema = response_schema(ApiKey.CREATE_TOPICS, ctx.version)
        result_cls = nested(schema, "CreatableTopicResult")
        config_cls = nested_or_none(schema, "CreatableTopicConfigs")
        out = []
        for r in results:
            configs = None
            if r.error_code == 0 and config_cls is not None:
                overrides = r.configs or {}
                configs = tuple(
                    build(
                        config_cls,
                        name=name,
                        value=value,
                        read_only=False,
                        config_source=CONFIG_SOURCE_TOPIC if name in overrides else CONFIG_SOURCE_DEFAULT,
                        is_sensitive=False,
                    )
                    for name, value in sorted(self._controller.effective_topic_config(overrides).items())
                )
            out.append(
                build(
                    result_cls,
                    name=r.name,
                    topic_id=r.topic_id or uuid.UUID(int=0),
                    error_code=r.error_code,
                    error_message=r.error_message,
                    topic_config_error_code=0,
                    num_partitions=r.num_partitions if r.error_code == 0 else -1,
                    replication_factor=r.replication_factor if r.error_code == 0 else -1,
                    configs=configs,
                )
            )
        return build(schema, throttle_time=0, topics=tuple(out))


class DeleteTopicsHandler:
    def __init__(self, controller: TopicController) -> None:
        self._controller = controller

    async def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        if ctx.version >= 6:
            entries = [(t.name, t.topic_id) for t in request.topics]
        else:
            entries = [(name, None) for name in request.topic_names]
        results = await self._controller.delete_topics(entries)
        schema = response_schema(ApiKey.DELETE_TOPICS, ctx.version)
        result_cls = nested(schema, "DeletableTopicResult")
        out = tuple(
            build(result_cls, name=r.name, topic_id=r.topic_id or uuid.UUID(int=0), error_code=r.error_code, error_message=r.error_message)
            for r in results
        )
        return build(schema, throttle_time=0, responses=out)


class CreatePartitionsHandler:
    def __init__(self, controller: TopicController) -> None:
        self._controller = controller

    async def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        topics = [
            (t.name, t.count, None if t.assignments is None else [list(a.broker_ids) for a in t.assignments])
            for t in request.topics
        ]
        results = await self._controller.create_partitions(topics, validate_only=request.validate_only)
        schema = response_schema(ApiKey.CREATE_PARTITIONS, ctx.version)
        result_cls = nested(schema, "CreatePartitionsTopicResult")
        out = tuple(build(result_cls, name=r.name, error_code=r.error_code, error_message=r.error_message) for r in results)
        return build(schema, throttle_time=0, results=out)


def mutation_permits(api_key: ApiKey, item: Any, image: MetadataImage, default_partitions: int) -> int:
    """The partitions a CreateTopics, DeleteTopics or CreatePartitions item would create or
    delete, as the controller counts them against a controller mutation quota, predicted from
    the broker's image: an item the image says the controller refuses (a topic that exists, or
    does not) counts nothing, as Kafka charges only mutations that pass validation."""
    if api_key == ApiKey.CREATE_TOPICS:
        if item.name in image.topics:
            return 0
        if item.assignments:
            return len(item.assignments)
        return default_partitions if item.num_partitions == -1 else max(item.num_partitions, 0)
    if api_key == ApiKey.DELETE_TOPICS:
        name = item if isinstance(item, str) else item.name
        topic = image.topics.get(name) if name is not None else image.topics_by_id.get(item.topic_id)
        return 0 if topic is None else len(topic.partitions)
    topic = image.topics.get(item.name)
    return 0 if topic is None else max(item.count - len(topic.partitions), 0)


def unknown_topic(name: str) -> tuple[int, str]:
    return ErrorCode.unknown_topic_or_partition, f"Topic '{name}' does not exist."
