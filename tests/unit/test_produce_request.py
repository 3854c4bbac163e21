"""protocol/produce_request.py against kio: same fields for every version, views not copies, no overreads."""

from __future__ import annotations

import datetime
import importlib
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader

from protocol.headers import InvalidRequest
from protocol.produce_request import read_produce_request
from tests.unit.body_cases import damaged, encode, names

VERSIONS = range(3, 14)


def schema(version: int) -> Any:
    return importlib.import_module(f"kio.schema.produce.v{version}.request")


records = st.none() | st.binary(max_size=300)
# The zero UUID stands for "no ID": kio writes None as it.
topic_ids = st.none() | st.uuids()


@st.composite
def produce_requests(draw: st.DrawFn) -> tuple[int, bytes, object]:
    version = draw(st.sampled_from(VERSIONS))
    m = schema(version)
    topics = tuple(
        m.TopicProduceData(
            **({"topic_id": draw(topic_ids)} if version >= 13 else {"name": draw(names)}),
            partition_data=tuple(
                m.PartitionProduceData(index=draw(st.integers(-(2**31), 2**31 - 1)), records=draw(records))
                for _ in range(draw(st.integers(0, 4)))
            ),
        )
        for _ in range(draw(st.integers(0, 4)))
    )
    timeout_ms = draw(st.integers(0, 2**31 - 1))
    request = build_request(m, draw(st.none() | names), draw(st.integers(-(2**15), 2**15 - 1)), timeout_ms, topics)
    return version, encode(request), request


def build_request(m: Any, transactional_id: str | None, acks: int, timeout_ms: int, topics: tuple[Any, ...]) -> Any:
    return m.ProduceRequest(transactional_id=transactional_id, acks=acks, timeout=datetime.timedelta(milliseconds=timeout_ms), topic_data=topics)


@settings(max_examples=400, deadline=None)
@given(produce_requests())
def test_same_fields_as_kio(case: tuple[int, bytes, Any]) -> None:
    version, body, expected = case
    frame = bytearray(b"header" + body)
    got = read_produce_request(frame, 6, version)
    kio_request, _ = entity_reader(type(expected))(memoryview(body).toreadonly(), 0)
    assert got.transactional_id == kio_request.transactional_id
    assert got.acks == kio_request.acks
    assert got.timeout_ms == kio_request.timeout // datetime.timedelta(milliseconds=1)
    if version >= 13:
        # Names come from the metadata image, in the handler.
        assert [t.topic_id for t in got.topic_data] == [t.topic_id for t in kio_request.topic_data]
        assert all(t.name == "" for t in got.topic_data)
    else:
        assert [t.name for t in got.topic_data] == [t.name for t in kio_request.topic_data]
        assert all(t.topic_id is None for t in got.topic_data)
    for ours, theirs in zip(got.topic_data, kio_request.topic_data, strict=True):
        assert [p.index for p in ours.partition_data] == [p.index for p in theirs.partition_data]
        assert [None if p.records is None else bytes(p.records) for p in ours.partition_data] == [p.records for p in theirs.partition_data]


def test_records_are_writable_views_into_the_frame() -> None:
    m = schema(9)
    request = build_request(m, None, 1, 30000, (m.TopicProduceData(name="t", partition_data=(m.PartitionProduceData(index=0, records=b"abcdef"),)),))
    frame = bytearray(encode(request))
    records = read_produce_request(frame, 0, 9).topic_data[0].partition_data[0].records
    assert records is not None and not records.readonly
    records[0:1] = b"X"
    assert b"Xbcdef" in frame


@settings(max_examples=400, deadline=None)
@given(produce_requests(), st.data())
def test_truncated_or_damaged_bodies_are_refused_cleanly(case: tuple[int, bytes, Any], data: st.DataObject) -> None:
    version, body, _ = case
    cut = damaged(body, data)
    try:
        request = read_produce_request(cut, 0, version)
    except InvalidRequest:
        return
    for topic in request.topic_data:
        for partition in topic.partition_data:
            assert partition.records is None or len(partition.records) <= len(cut)


def test_zero_topic_id_reads_as_none() -> None:
    m = schema(13)
    request = build_request(m, None, 1, 1000, (m.TopicProduceData(topic_id=uuid.UUID(int=0), partition_data=()),))
    assert read_produce_request(bytearray(encode(request)), 0, 13).topic_data[0].topic_id is None


@pytest.mark.parametrize("version", [3, 9, 13])
def test_huge_counts_are_refused_before_any_allocation(version: int) -> None:
    m = schema(version)
    body = bytearray(encode(build_request(m, None, 1, 1000, ())))
    # the topic count is the last field before the (flexible) tagged fields
    count_at = len(body) - (2 if version >= 9 else 4)
    patched = body[:count_at] + (b"\xff\xff\xff\xff\x0f" if version >= 9 else b"\x7f\xff\xff\xff")
    with pytest.raises(InvalidRequest):
        read_produce_request(patched, 0, version)
