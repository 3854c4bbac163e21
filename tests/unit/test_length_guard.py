"""The length guard in front of kio: hostile counts are refused, valid requests pass.

kio's native reader aborts the process when an array count makes it reserve more memory
than the machine has, so these inputs would kill a broker without the guard (and would
kill this test process too)."""

from __future__ import annotations

import datetime
import io
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.fetch.v12 import request as fetch_v12
from kio.schema.metadata.v4 import request as metadata_v4
from kio.schema.metadata.v12 import request as metadata_v12
from kio.schema.produce.v9 import request as produce_v9
from kio.serial import entity_writer

from protocol.api_keys import SUPPORTED_APIS, request_schema
from protocol.headers import InvalidRequest
from protocol.length_guard import LengthError, check_lengths, entity_step
from protocol.messages import decode_request


def encode(entity: object) -> bytes:
    out = io.BytesIO()
    entity_writer(type(entity))(out, entity)
    return out.getvalue()


def valid_requests() -> dict[tuple[int, int], bytes]:
    produce = produce_v9.ProduceRequest(
        transactional_id=None,
        acks=1,
        timeout=datetime.timedelta(seconds=30),
        topic_data=(produce_v9.TopicProduceData(name="t", partition_data=(produce_v9.PartitionProduceData(index=0, records=b"r" * 70),)),),
    )
    fetch = fetch_v12.FetchRequest(
        cluster_id=None,
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=500),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(
            fetch_v12.FetchTopic(
                topic="t",
                partitions=tuple(
                    fetch_v12.FetchPartition(partition=i, current_leader_epoch=0, fetch_offset=5, last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)
                    for i in range(3)
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )
    metadata = metadata_v12.MetadataRequest(
        topics=(metadata_v12.MetadataRequestTopic(topic_id=None, name="a"),), allow_auto_topic_creation=True, include_topic_authorized_operations=False
    )
    legacy = metadata_v4.MetadataRequest(topics=(metadata_v4.MetadataRequestTopic(name="a"),), allow_auto_topic_creation=True)
    return {(0, 9): encode(produce), (1, 12): encode(fetch), (3, 12): encode(metadata), (3, 4): encode(legacy)}


VALID = valid_requests()


def test_every_supported_request_schema_compiles() -> None:
    for key, r in SUPPORTED_APIS.items():
        for version in range(r.min_version, r.max_version + 1):
            entity_step(request_schema(key, version))


@pytest.mark.parametrize(("api", "body"), list(VALID.items()), ids=[f"{k}v{v}" for k, v in VALID])
def test_valid_requests_pass(api: tuple[int, int], body: bytes) -> None:
    check_lengths(request_schema(*api), memoryview(body), 0)
    decode_request(api[0], api[1], body, 0)


@pytest.mark.parametrize(
    ("api", "body"),
    [
        ((3, 12), b"\xff\xff\xff\xff\x0f" + bytes(8)),  # 2^32 - 2 topics, compact
        ((3, 4), struct.pack(">i", 0x7FFFFFFF) + bytes(8)),  # 2^31 - 1 topics, legacy
        ((3, 4), struct.pack(">i", -2) + bytes(8)),  # a negative count other than null
        ((0, 9), b"\x00" + struct.pack(">hi", 1, 30000) + b"\x02\x02t" + b"\xff\xff\xff\xff\x0f"),  # 2^32 partitions
        ((1, 12), VALID[(1, 12)][:-1] + b"\xff\xff\xff\x7f"),  # a tagged-field count far past the end
    ],
    ids=["compact-array", "legacy-array", "negative-count", "produce-partitions", "tagged-fields"],
)
def test_hostile_lengths_are_refused(api: tuple[int, int], body: bytes) -> None:
    with pytest.raises(LengthError):
        check_lengths(request_schema(*api), memoryview(body), 0)
    with pytest.raises(InvalidRequest):
        decode_request(api[0], api[1], body, 0)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(VALID)), st.data())
def test_damaged_requests_decode_or_are_refused(api: tuple[int, int], data: st.DataObject) -> None:
    body = bytearray(VALID[api])
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(body) - 1))
        body[position] = data.draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF, data.draw(st.integers(0, 255))]))
    cut = data.draw(st.integers(0, len(body)))
    try:
        decode_request(api[0], api[1], bytes(body[:cut]), 0)
    except InvalidRequest:
        pass


@pytest.mark.parametrize(
    ("api", "body"),
    [
        # The fuzzer's first find: ListOffsets v1 with topics null reached the handler as None
        # and failed with a TypeError traceback. replica_id -1, then topics: -1.
        ((2, 1), struct.pack(">ii", -1, -1)),
        # The same in a flexible version: replica_id, isolation_level, topics compact null (0), no tags.
        ((2, 6), struct.pack(">ib", -1, 0) + b"\x00\x00"),
        # OffsetFetch v1: group_id "g", topics null (nullable only from v2).
        ((9, 1), struct.pack(">h", 1) + b"g" + struct.pack(">i", -1)),
        # SyncGroup v0: group "g", generation 1, member "m", one assignment whose bytes are null.
        ((14, 0), struct.pack(">h", 1) + b"g" + struct.pack(">ih", 1, 1) + b"m" + struct.pack(">ih", 1, 1) + b"m" + struct.pack(">i", -1)),
    ],
    ids=["list-offsets-v1-topics", "list-offsets-v6-topics", "offset-fetch-v1-topics", "sync-group-v0-assignment"],
)
def test_null_where_the_spec_allows_none_is_refused(api: tuple[int, int], body: bytes) -> None:
    with pytest.raises(LengthError, match="null"):
        check_lengths(request_schema(*api), memoryview(body), 0)
    with pytest.raises(InvalidRequest, match="null"):
        decode_request(api[0], api[1], bytearray(body), 0)


def test_null_where_the_spec_allows_it_still_decodes() -> None:
    # Metadata v4 topics null: all topics. OffsetFetch v2 topics null: all of the group's offsets.
    assert decode_request(3, 4, bytearray(struct.pack(">ib", -1, 1)), 0).topics is None
    assert decode_request(9, 2, bytearray(struct.pack(">h", 1) + b"g" + struct.pack(">i", -1)), 0).topics is None
