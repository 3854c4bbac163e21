"""Record batches through every codec, and KRaft metadata records, round trip."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.compression import CompressionError, compress, decompress
from protocol.record_batch import is_crc_valid, read_header, set_base_offset
from protocol.records import ControlRecordType, build_batch, build_control_batch, decode_varint, encode_varint, iter_records, parse_control_record
from raft.controller_logic import CreatableTopic, create_topics, delete_topics, topic_name_error
from raft.metadata_image import MetadataImage
from raft.metadata_records import RECORD_TYPES, ConfigRecord, PartitionRecord, RegisterBrokerRecord, TopicRecord, decode_metadata_record

METADATA_SPECS = Path(__file__).resolve().parents[3] / "shared" / "kafka-protocol" / "metadata"

records_strategy = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=50),
        st.none() | st.binary(max_size=300),
        st.lists(st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=20)), max_size=3),
        st.integers(0, 2**41),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(records=records_strategy, codec=st.sampled_from([0, 1, 2, 3, 4]), base=st.integers(0, 2**40))
def test_batch_round_trip_every_codec(records, codec: int, base: int) -> None:  # type: ignore[no-untyped-def]
    batch = bytearray(build_batch(records, compression=codec))
    header = read_header(batch)
    assert is_crc_valid(batch, header) and header.compression == codec
    set_base_offset(batch, header, base)  # not covered by the CRC
    assert is_crc_valid(batch, read_header(batch))
    decoded = list(iter_records(bytes(batch)))
    assert [r.offset for r in decoded] == list(range(base, base + len(records)))
    for r, (key, value, headers, ts) in zip(decoded, records):
        assert (r.key, r.value, list(r.headers), r.timestamp) == (key, value, [tuple(h) for h in headers], ts)


@given(st.integers(-(2**63), 2**63 - 1))
def test_varints(value: int) -> None:
    assert decode_varint(encode_varint(value), 0) == (value, len(encode_varint(value)))


def test_codecs_read_what_kafka_python_writes() -> None:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    for codec in (0, 1, 2, 3, 4):
        builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
        for i in range(10):
            builder.append(i, timestamp=5000 + i, key=b"k%d" % i, value=b"v" * i, headers=[("h", b"x")])
        data = bytes(builder.build())
        assert [(r.key, r.value, r.timestamp) for r in iter_records(data)] == [(b"k%d" % i, b"v" * i, 5000 + i) for i in range(10)]


def test_corrupt_compressed_data_raises() -> None:
    for codec in (1, 2, 3, 4):
        with pytest.raises(CompressionError):
            decompress(codec, compress(codec, b"hello world" * 100)[:-7] + b"garbage")


def test_control_batch() -> None:
    batch = build_control_batch(ControlRecordType.COMMIT, producer_id=7, producer_epoch=1, coordinator_epoch=3, timestamp=1)
    header = read_header(batch)
    assert header.is_control and header.is_transactional and header.producer_id == 7
    assert parse_control_record(next(iter_records(batch))) == (ControlRecordType.COMMIT, 3)


def test_metadata_records_round_trip() -> None:
    tid = uuid.uuid4()
    samples = [
        TopicRecord(name="orders", topic_id=tid),
        PartitionRecord(partition_id=2, topic_id=tid, replicas=(1, 2), isr=(1,), leader=1, leader_epoch=4, partition_epoch=5, directories=(uuid.UUID(int=0),) * 2),
        ConfigRecord(resource_type=2, resource_name="orders", name="retention.ms", value=None),
        RegisterBrokerRecord(broker_id=1, incarnation_id=tid, broker_epoch=9, fenced=False),
    ]
    for record in samples:
        assert decode_metadata_record(record.encode()) == record


def test_metadata_record_api_keys_match_kafka_specs() -> None:
    if not METADATA_SPECS.is_dir():
        pytest.skip("../shared/kafka-protocol is not present")
    for api_key, cls in RECORD_TYPES.items():
        text = "\n".join(line for line in (METADATA_SPECS / f"{cls.__name__}.json").read_text().splitlines() if not line.strip().startswith("//"))
        spec = json.loads(text)
        assert spec["apiKey"] == api_key
        high = int(spec["validVersions"].split("-")[-1])
        assert cls.VERSION <= cls.MAX_VERSION <= high


def test_controller_creates_and_deletes_topics() -> None:
    image = MetadataImage()

    def ok(_configs: dict[str, str]) -> None:
        return None

    topics = [CreatableTopic("a.b", 3, 1, None, {"retention.ms": "5"}), CreatableTopic("bad/name", 1, 1, None, {}), CreatableTopic("x", 1, 2, None, {})]
    records, results = create_topics(image, topics, validate_only=False, broker_ids=[1], default_partitions=1, default_replication_factor=1, validate_config=ok)
    assert [r.error_code for r in results] == [0, 17, 38]
    for offset, record in enumerate(records):
        image.apply(decode_metadata_record(record.encode()), offset)
    assert len(image.topics["a.b"].partitions) == 3 and image.topic_config("a.b") == {"retention.ms": "5"}
    _, clash = create_topics(image, [CreatableTopic("a_b", 1, 1, None, {})], validate_only=False, broker_ids=[1], default_partitions=1, default_replication_factor=1, validate_config=ok)
    assert clash[0].error_code == 17 and "collides" in (clash[0].error_message or "")
    records, results = delete_topics(image, [("a.b", None), ("nope", None)])
    assert [r.error_code for r in results] == [0, 3]
    image.apply(records[0])
    assert "a.b" not in image.topics and not image.topic_config("a.b")
    assert topic_name_error("x" * 250) and topic_name_error("..") and topic_name_error("ok-name_1.2") is None
