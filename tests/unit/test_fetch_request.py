"""protocol/fetch_request.py against kio: same fields for every version, Kafka's defaults for
the fields a version lacks, and only InvalidRequest for truncated, damaged or oversized bodies."""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader

from protocol.fetch_request import NO_HIGH_WATERMARK, FetchRequest, read_fetch_request
from protocol.headers import InvalidRequest
from tests.unit.body_cases import damaged, encode, names

VERSIONS = range(4, 19)

i8s = st.integers(-(2**7), 2**7 - 1)
i32s = st.integers(-(2**31), 2**31 - 1)
i64s = st.integers(-(2**63), 2**63 - 1)
uuids = st.none() | st.uuids()


def schema(version: int) -> Any:
    return importlib.import_module(f"kio.schema.fetch.v{version}.request")


def entity(draw: st.DrawFn, cls: type, nested: dict[str, st.SearchStrategy[Any]]) -> Any:
    """An instance of a kio entity with every field drawn by its Kafka type."""
    by_type: dict[str, st.SearchStrategy[Any]] = {
        "int8": i8s,
        "int32": i32s,
        "int64": i64s,
        "uuid": uuids,
        "timedelta_i32": st.integers(0, 2**31 - 1).map(lambda ms: datetime.timedelta(milliseconds=ms)),
    }
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        kafka_type = f.metadata.get("kafka_type")
        if f.name in nested:
            values[f.name] = draw(nested[f.name])
        elif kafka_type == "string":
            values[f.name] = draw(st.none() | names if f.name == "cluster_id" else names)
        else:
            values[f.name] = draw(by_type[kafka_type])
    return cls(**values)


def entities(cls: type, nested: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    return st.composite(lambda draw: entity(draw, cls, nested))()


@st.composite
def fetch_requests(draw: st.DrawFn) -> tuple[int, bytes, Any]:
    version = draw(st.sampled_from(VERSIONS))
    m = schema(version)
    partitions = st.lists(entities(m.FetchPartition, {}), max_size=4).map(tuple)
    topics = st.lists(entities(m.FetchTopic, {"partitions": partitions}), max_size=3).map(tuple)
    nested: dict[str, st.SearchStrategy[Any]] = {"topics": topics}
    if hasattr(m, "ForgottenTopic"):
        forgotten = entities(m.ForgottenTopic, {"partitions": st.lists(i32s, max_size=4).map(tuple)})
        nested["forgotten_topics_data"] = st.lists(forgotten, max_size=3).map(tuple)
    if hasattr(m, "ReplicaState"):
        nested["replica_state"] = entities(m.ReplicaState, {})
    request = draw(entities(m.FetchRequest, nested))
    return version, encode(request), request


def expected_fields(request: Any) -> dict[str, Any]:
    """Our FetchRequest's fields from a kio one, with Kafka's defaults where the version has none."""
    state = getattr(request, "replica_state", None)

    def partition(p: Any) -> tuple[Any, ...]:
        return (
            p.partition,
            getattr(p, "current_leader_epoch", -1),
            p.fetch_offset,
            getattr(p, "last_fetched_epoch", -1),
            getattr(p, "log_start_offset", -1),
            p.partition_max_bytes,
            getattr(p, "replica_directory_id", None),
            getattr(p, "high_watermark", NO_HIGH_WATERMARK),
        )

    return {
        "cluster_id": getattr(request, "cluster_id", None),
        "replica_id": state.replica_id if state is not None else request.replica_id,
        "replica_epoch": state.replica_epoch if state is not None else -1,
        "max_wait_ms": request.max_wait // datetime.timedelta(milliseconds=1),
        "min_bytes": request.min_bytes,
        "max_bytes": request.max_bytes,
        "isolation_level": request.isolation_level,
        "session_id": getattr(request, "session_id", 0),
        "session_epoch": getattr(request, "session_epoch", -1),
        "topics": [(getattr(t, "topic", None), getattr(t, "topic_id", None), [partition(p) for p in t.partitions]) for t in request.topics],
        "forgotten_topics_data": [(getattr(t, "topic", None), getattr(t, "topic_id", None), list(t.partitions)) for t in getattr(request, "forgotten_topics_data", ())],
        "rack_id": getattr(request, "rack_id", ""),
    }


def our_fields(request: FetchRequest) -> dict[str, Any]:
    fields = request._asdict()
    fields["topics"] = [(t.topic, t.topic_id, [tuple(p) for p in t.partitions]) for t in request.topics]
    fields["forgotten_topics_data"] = [(t.topic, t.topic_id, list(t.partitions)) for t in request.forgotten_topics_data]
    return fields


@settings(max_examples=500, deadline=None)
@given(fetch_requests())
def test_same_fields_as_kio(case: tuple[int, bytes, Any]) -> None:
    version, body, written = case
    kio_request, _ = entity_reader(type(written))(memoryview(body).toreadonly(), 0)
    got = read_fetch_request(bytearray(b"header" + body), 6, version)
    assert our_fields(got) == expected_fields(kio_request)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_version_reads_a_consumer_fetch(version: int) -> None:
    m = schema(version)
    request = entity_for_one_partition(m, topic_id=uuid.UUID(int=7))
    got = read_fetch_request(encode(request), 0, version)
    assert got.max_wait_ms == 500 and got.min_bytes == 1 and got.max_bytes == 52428800
    (topic,) = got.topics
    assert (topic.topic, topic.topic_id) == (("t", None) if version < 13 else (None, uuid.UUID(int=7)))
    (partition,) = topic.partitions
    assert (partition.partition, partition.fetch_offset, partition.partition_max_bytes) == (3, 42, 1 << 20)


def entity_for_one_partition(m: Any, topic_id: uuid.UUID) -> Any:
    """A consumer's fetch of partition 3 from offset 42, built from whatever fields the version has."""
    partition_fields = {f.name for f in dataclasses.fields(m.FetchPartition)}
    partition = m.FetchPartition(
        partition=3,
        fetch_offset=42,
        partition_max_bytes=1 << 20,
        **{k: v for k, v in {"current_leader_epoch": -1, "last_fetched_epoch": -1, "log_start_offset": -1}.items() if k in partition_fields},
    )
    topic_fields = {f.name for f in dataclasses.fields(m.FetchTopic)}
    topic = m.FetchTopic(partitions=(partition,), **({"topic": "t"} if "topic" in topic_fields else {"topic_id": topic_id}))
    fields = {f.name for f in dataclasses.fields(m.FetchRequest)}
    optional = {"replica_id": -1, "session_id": 0, "session_epoch": -1, "forgotten_topics_data": (), "rack_id": "", "cluster_id": None}
    return m.FetchRequest(
        max_wait=datetime.timedelta(milliseconds=500),
        min_bytes=1,
        max_bytes=52428800,
        isolation_level=0,
        topics=(topic,),
        **{k: v for k, v in optional.items() if k in fields},
    )


@settings(max_examples=500, deadline=None)
@given(fetch_requests(), st.data())
def test_truncated_or_damaged_bodies_are_refused_cleanly(case: tuple[int, bytes, Any], data: st.DataObject) -> None:
    version, body, _ = case
    try:
        read_fetch_request(damaged(body, data), 0, version)
    except InvalidRequest:
        pass


@pytest.mark.parametrize("version", [4, 12, 13, 17])
def test_huge_counts_are_refused_before_any_allocation(version: int) -> None:
    m = schema(version)
    body = encode(entity_for_one_partition(m, uuid.UUID(int=1)))
    # The topic count follows the fixed request fields.
    count_at = {4: 17, 12: 25, 13: 25, 17: 21}[version]
    huge = b"\xff\xff\xff\xff\x0f" if version >= 12 else b"\x7f\xff\xff\xff"
    with pytest.raises(InvalidRequest, match="cannot fit"):
        read_fetch_request(body[:count_at] + huge + body[count_at + (1 if version >= 12 else 4) :], 0, version)
