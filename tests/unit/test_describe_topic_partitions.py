"""DescribeTopicPartitions (API 75): Kafka's paging by cursor, the errors of unknown and illegal topics
and of a bad cursor, and each partition's eligible leader replicas and last known ELR."""

from __future__ import annotations

import io
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer

from broker.handlers.describe_topic_partitions import DescribeTopicPartitionsHandler, describe_topic_partitions
from broker.metadata.metadata_cache import BrokerEndpoint, MetadataCache
from broker.metadata.metadata_image import MetadataImage
from broker.metadata.metadata_records import PartitionChangeRecord, PartitionRecord, TopicRecord
from protocol.api_keys import ApiKey, request_schema
from protocol.entities import build, nested
from protocol.length_guard import LengthError, check_lengths
from protocol.messages import encode_body
from tests.unit.control_manager_images import cluster_log

A, B = uuid.UUID(int=0xA), uuid.UUID(int=0xB)


def image() -> MetadataImage:
    """Topic "a" with 3 partitions, "b" with 2, partition b-1 led from its ELR after its ISR emptied."""
    log = cluster_log(1, 2, 3)
    records: list[Any] = [TopicRecord(name="a", topic_id=A), TopicRecord(name="b", topic_id=B)]
    for topic_id, count in ((A, 3), (B, 2)):
        records += [PartitionRecord(partition_id=i, topic_id=topic_id, replicas=(1, 2, 3), isr=(1, 2, 3), leader=1, leader_epoch=0, partition_epoch=0) for i in range(count)]
    records.append(PartitionChangeRecord(partition_id=1, topic_id=B, leader=2, isr=(2,), eligible_leader_replicas=(3,), last_known_elr=(1,)))
    return log.commit(records)


def pages(requested: list[str], cursor: tuple[str, int] | None, limit: int) -> tuple[list[tuple[str, int, list[int]]], tuple[str, int] | None]:
    topics, next_cursor = describe_topic_partitions(image(), requested, cursor, limit)
    return [(t.name, t.error_code, [i for i, _ in t.partitions]) for t in topics], next_cursor


def test_every_topic_in_one_page_or_several() -> None:
    assert pages([], None, 10) == ([("a", 0, [0, 1, 2]), ("b", 0, [0, 1])], None)
    assert pages([], None, 2) == ([("a", 0, [0, 1])], ("a", 2))
    assert pages([], ("a", 2), 2) == ([("a", 0, [2]), ("b", 0, [0])], ("b", 1))
    assert pages([], ("b", 1), 2) == ([("b", 0, [1])], None)
    # A page that ends with a topic: the next one starts at the next topic.
    assert pages([], None, 3) == ([("a", 0, [0, 1, 2])], ("b", 0))


def test_requested_topics_by_name_with_their_errors() -> None:
    ok, unknown, illegal = ErrorCode.none, ErrorCode.unknown_topic_or_partition, ErrorCode.invalid_topic_exception
    assert pages(["zz", "b", "bad name"], None, 10) == ([("b", ok, [0, 1]), ("bad name", illegal, []), ("zz", unknown, [])], None)
    assert pages(["b", "a"], ("b", 0), 10) == ([("b", ok, [0, 1])], None)  # topics before the cursor's are done


def request(topics: list[str], limit: int = 2000, cursor: tuple[str, int] | None = None) -> Any:
    schema = request_schema(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0)
    return build(
        schema,
        topics=tuple(build(nested(schema, "TopicRequest"), name=n) for n in topics),
        response_partition_limit=limit,
        cursor=None if cursor is None else build(nested(schema, "Cursor"), topic_name=cursor[0], partition_index=cursor[1]),
    )


def answer(req: Any, max_partitions: int = 2000) -> Any:
    cache = MetadataCache(1, "c", BrokerEndpoint(1, "localhost", 9092), image())
    response = DescribeTopicPartitionsHandler(cache, max_partitions)(SimpleNamespace(version=0), req)  # type: ignore[arg-type]
    encode_body(response)
    return response


def test_the_answer_carries_the_eligible_leader_replicas() -> None:
    response = answer(request(["b"]))
    [topic] = response.topics
    assert (topic.name, topic.topic_id, topic.error_code) == ("b", B, ErrorCode.none)
    fields = [(p.partition_index, p.leader_id, p.isr_nodes, p.eligible_leader_replicas, p.last_known_elr) for p in topic.partitions]
    assert fields == [(0, 1, (1, 2, 3), (), ()), (1, 2, (2,), (3,), (1,))]
    assert response.next_cursor is None


def test_the_broker_limit_caps_the_client_limit_and_a_page_names_the_next() -> None:
    response = answer(request([], limit=5), max_partitions=1)
    assert [(t.name, len(t.partitions)) for t in response.topics] == [("a", 1)]
    assert (response.next_cursor.topic_name, response.next_cursor.partition_index) == ("a", 1)
    assert [len(t.partitions) for t in answer(request([], limit=0)).topics] == [1]  # at least one partition


def test_a_cursor_outside_the_requested_topics_or_at_a_negative_partition_is_invalid() -> None:
    for req in (request(["a"], cursor=("b", 0)), request(["a"], cursor=("a", -1))):
        assert [(t.name, t.error_code) for t in answer(req).topics] == [("a", ErrorCode.invalid_request)]


def test_the_length_guard_reads_the_nullable_cursor() -> None:
    """The cursor is a nullable struct (an int8 marker first): the guard must not take the marker for a length."""
    schema = request_schema(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0)
    for req in (request(["a"]), request(["a", "b"], cursor=("b", 1))):
        out = io.BytesIO()
        entity_writer(schema)(out, req)
        body = out.getvalue()
        check_lengths(schema, memoryview(body), 0)
        with pytest.raises(LengthError):
            check_lengths(schema, memoryview(body[:-2]), 0)
