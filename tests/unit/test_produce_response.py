"""protocol/produce_response.py read back with kio, for every version kbroker serves."""

from __future__ import annotations

import datetime
import importlib
import struct
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader

from protocol.produce_response import encode_produce_response

i64 = st.integers(-(2**63), 2**63 - 1)


@dataclass(frozen=True)
class Result:
    error_code: int
    base_offset: int
    log_append_time: int
    log_start_offset: int
    error_message: str | None
    record_errors: tuple[tuple[int, str | None], ...]
    current_leader: tuple[int, int] | None = None


results = st.builds(
    Result,
    error_code=st.sampled_from([0, 1, 2, 6, 10, 19, 87]),
    base_offset=i64,
    log_append_time=st.just(-1) | st.integers(0, 4_102_444_800_000),  # to 2100: kio reads it through a float
    log_start_offset=i64,
    error_message=st.none() | st.text(max_size=30),
    record_errors=st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1), st.none() | st.text(max_size=30)), max_size=3).map(tuple),
    current_leader=st.none() | st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1)),
)
endpoints = st.lists(
    st.tuples(st.integers(0, 2**31 - 1), st.text(min_size=1, max_size=20), st.integers(0, 65535), st.none() | st.text(max_size=10)), max_size=3
)
topics = st.lists(
    st.tuples(st.text(max_size=20), st.none() | st.uuids(version=4), st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1), results), max_size=4)),
    max_size=4,
)


@settings(max_examples=300, deadline=None)
@given(st.integers(3, 13), st.integers(-(2**31), 2**31 - 1), topics, st.integers(0, 2**31 - 1), endpoints)
def test_kio_reads_what_we_write(version: int, correlation_id: int, data: list, throttle: int, nodes: list) -> None:
    frame = encode_produce_response(version, correlation_id, data, throttle, nodes)
    (size,) = struct.unpack_from(">i", frame)
    assert size == len(frame) - 4
    assert struct.unpack_from(">i", frame, 4)[0] == correlation_id
    body_at = 8 + (1 if version >= 9 else 0)  # response header v1 ends with an empty tagged-field section
    schema = importlib.import_module(f"kio.schema.produce.v{version}.response").ProduceResponse
    decoded, read = entity_reader(schema)(memoryview(frame).toreadonly(), body_at)
    assert body_at + read == len(frame)
    assert decoded.throttle_time == datetime.timedelta(milliseconds=throttle)
    if version >= 13:
        # KIP-516: topics named by ID; the zero UUID (an unknown ID's answer) reads as None.
        assert [t.topic_id for t in decoded.responses] == [topic_id for _, topic_id, _ in data]
    else:
        assert [t.name for t in decoded.responses] == [name for name, _, _ in data]
    for topic, (_, _, partitions) in zip(decoded.responses, data, strict=True):
        assert len(topic.partition_responses) == len(partitions)
        for got, (index, want) in zip(topic.partition_responses, partitions, strict=True):
            assert (got.index, got.error_code, got.base_offset) == (index, want.error_code, want.base_offset)
            epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
            millis = -1 if got.log_append_time is None else (got.log_append_time - epoch) // datetime.timedelta(milliseconds=1)
            assert millis == want.log_append_time
            if version >= 5:
                assert got.log_start_offset == want.log_start_offset
            if version >= 8:
                assert got.error_message == want.error_message
                assert [(e.batch_index, e.batch_index_error_message) for e in got.record_errors] == list(want.record_errors)
            if version >= 10:
                # KIP-951: the new leader's id and epoch, (-1, -1) when none is named.
                assert (got.current_leader.leader_id, got.current_leader.leader_epoch) == (want.current_leader or (-1, -1))
    if version >= 10:
        assert [(n.node_id, n.host, n.port, n.rack) for n in decoded.node_endpoints] == nodes
