"""Frames, request headers, API ranges and the sendfile-shaped FetchResponse encoder."""

from __future__ import annotations

import json
import re
import struct
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader

from protocol.api_keys import CONTROLLER_APIS, SUPPORTED_APIS, ApiKey, is_flexible, response_schema
from protocol.fetch_response import FetchPartitionResult, FetchTopicResult, encode_fetch_response
from protocol.frame import FrameDecoder, FrameTooLarge
from protocol.headers import InvalidRequest, parse_request_header

SPECS = Path(__file__).resolve().parents[3] / "shared" / "kafka-protocol" / "message"


@given(st.lists(st.binary(max_size=300), max_size=20), st.integers(min_value=1, max_value=64), st.sampled_from([16, 64, 1024]))
@settings(max_examples=300)
def test_frames_survive_any_split(payloads: list[bytes], step: int, buffer_size: int) -> None:
    stream = b"".join(struct.pack(">i", len(p)) + p for p in payloads)
    decoder = FrameDecoder(1 << 20, buffer_size)
    out: list[bytes] = []
    for i in range(0, len(stream), step):
        out.extend(bytes(f) for f in decoder.feed(stream[i : i + step]))
    assert out == payloads
    assert decoder.buffered == 0


@given(st.lists(st.binary(max_size=300), max_size=20), st.lists(st.integers(min_value=1, max_value=100), min_size=1), st.sampled_from([16, 64]))
@settings(max_examples=300)
def test_frames_received_in_place(payloads: list[bytes], reads: list[int], buffer_size: int) -> None:
    """The socket's view: receive at most what buffer() offers, in reads of any size."""
    stream = memoryview(b"".join(struct.pack(">i", len(p)) + p for p in payloads))
    decoder = FrameDecoder(1 << 20, buffer_size)
    out: list[bytes] = []
    position, turn = 0, 0
    while position < len(stream):
        target = decoder.buffer()
        assert len(target) > 0
        n = min(len(target), reads[turn % len(reads)], len(stream) - position)
        target[:n] = stream[position : position + n]
        position += n
        turn += 1
        out.extend(bytes(f) for f in decoder.received(n))
    assert out == payloads and decoder.buffered == 0


def test_a_large_frame_gets_its_own_buffer() -> None:
    decoder = FrameDecoder(1 << 20, 64)
    body = bytes(range(256)) * 40
    assert decoder.feed(struct.pack(">i", len(body)) + body[:10]) == []
    target = decoder.buffer()
    assert len(target) == len(body) - 10  # the rest of the frame, received straight into it
    target[:] = body[10:]
    (frame,) = decoder.received(len(body) - 10)
    assert frame == body and isinstance(frame, bytearray)
    assert len(decoder.buffer()) == 64


@pytest.mark.parametrize("size", [-1, -2**31, 1 << 20 + 1, 2**31 - 1])
def test_frame_size_out_of_bounds_is_refused_before_buffering(size: int) -> None:
    with pytest.raises(FrameTooLarge):
        FrameDecoder(1 << 20).feed(struct.pack(">i", size) + b"xx")


def test_frames_before_an_oversized_one_come_with_the_refusal() -> None:
    # Found by the fuzzer: a good request and a bad size in one read lost the good request,
    # which Kafka (reading one request at a time) would have answered before closing.
    decoder = FrameDecoder(1 << 20)
    data = struct.pack(">i", 3) + b"one" + struct.pack(">i", -1) + b"xx"
    target = decoder.buffer()
    target[: len(data)] = data
    with pytest.raises(FrameTooLarge) as refused:
        decoder.received(len(data))
    assert refused.value.complete == [bytearray(b"one")]


def _header(api_key: int, version: int, correlation: int, client_id: bytes | None, tagged: bytes = b"") -> bytes:
    cid = struct.pack(">h", -1) if client_id is None else struct.pack(">h", len(client_id)) + client_id
    return struct.pack(">hhi", api_key, version, correlation) + cid + tagged


def test_request_header_v1_and_v2() -> None:
    h = parse_request_header(_header(3, 1, 42, b"me") + b"BODY")
    assert (h.api_key, h.api_version, h.correlation_id, h.client_id) == (3, 1, 42, "me")
    assert h.body_offset == 12
    # v12 Metadata is flexible: header v2 carries tagged fields (here one, tag 5, 2 bytes).
    h = parse_request_header(_header(3, 12, 7, None, b"\x01\x05\x02ab") + b"BODY")
    assert h.client_id is None and h.body_offset == 10 + 5


@pytest.mark.parametrize(
    "frame",
    [b"", b"\x00\x03\x00", _header(3, 1, 1, b"x")[:-1] + b"", struct.pack(">hhih", 3, 1, 1, 50) + b"short", struct.pack(">hhih", 3, 1, 1, -7)],
)
def test_malformed_headers_raise(frame: bytes) -> None:
    with pytest.raises(InvalidRequest):
        parse_request_header(frame)


def test_supported_ranges_match_kafka_specs() -> None:
    if not SPECS.is_dir():
        pytest.skip("../shared/kafka-protocol is not present")
    by_key = {}
    for path in SPECS.glob("*Request.json"):
        text = "\n".join(line for line in path.read_text().splitlines() if not line.strip().startswith("//"))
        spec = json.loads(text)
        by_key[spec["apiKey"]] = spec
    # APIs newer than the specs in ../shared: their Kafka 4.4 spec's versions (protocol/schema/).
    by_key.setdefault(ApiKey.UNREGISTER_CONTROLLER, {"name": "UnregisterControllerRequest", "validVersions": "0", "flexibleVersions": "0+"})
    # KIP-932's share APIs as Kafka 4.4's specs have them: the specs in ../shared predate their
    # release (v0 early access only, and no share group offsets APIs).
    kafka_44_share_apis = {
        ApiKey.SHARE_GROUP_HEARTBEAT: "1",
        ApiKey.SHARE_GROUP_DESCRIBE: "1",
        ApiKey.SHARE_FETCH: "1-2",
        ApiKey.SHARE_ACKNOWLEDGE: "1-2",
        ApiKey.INITIALIZE_SHARE_GROUP_STATE: "0",
        ApiKey.READ_SHARE_GROUP_STATE: "0",
        ApiKey.WRITE_SHARE_GROUP_STATE: "0-1",
        ApiKey.DELETE_SHARE_GROUP_STATE: "0",
        ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: "0-1",
        ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: "0-1",
        ApiKey.ALTER_SHARE_GROUP_OFFSETS: "0",
        ApiKey.DELETE_SHARE_GROUP_OFFSETS: "0",
    }
    for key, versions in kafka_44_share_apis.items():
        by_key[key] = {"name": key.name, "validVersions": versions, "flexibleVersions": "0+"}
    # KIP-1071's streams group APIs, newer than the specs in ../shared; v1 is KIP-1331's (protocol/schema/).
    for key in (ApiKey.STREAMS_GROUP_HEARTBEAT, ApiKey.STREAMS_GROUP_DESCRIBE):
        by_key[key] = {"name": key.name, "validVersions": "0-1", "flexibleVersions": "0+"}
    by_key[ApiKey.STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE] = {"name": "StreamsGroupTopologyDescriptionUpdateRequest", "validVersions": "0", "flexibleVersions": "0+"}
    # Vote v2 (KIP-996 pre-vote), AlterPartitionReassignments v1 (KIP-860, Kafka 4.1), Produce v12
    # and TxnOffsetCommit v5 (KIP-890 part 2, Kafka 4.0) are newer than the specs in ../shared, as
    # are the tops Kafka 4.4 serves: Produce v13, Fetch v18, ListOffsets v11, Metadata v13,
    # OffsetCommit v10 and OffsetFetch v10.
    newer_than_specs = {
        ApiKey.VOTE: 2,
        ApiKey.ALTER_PARTITION_REASSIGNMENTS: 1,
        ApiKey.TXN_OFFSET_COMMIT: 5,
        ApiKey.PRODUCE: 13,
        ApiKey.FETCH: 18,
        ApiKey.LIST_OFFSETS: 11,
        ApiKey.METADATA: 13,
        ApiKey.OFFSET_COMMIT: 10,
        ApiKey.OFFSET_FETCH: 10,
        ApiKey.LIST_CONFIG_RESOURCES: 1,  # KIP-1142 (Kafka 4.1): ListClientMetricsResources renamed, v1 every type
        # Kafka 4.4's tops, from its own specs (kafka-clients' common/message/*.json):
        ApiKey.DESCRIBE_GROUPS: 6,  # KIP-1043: GROUP_ID_NOT_FOUND with a message
        ApiKey.WRITE_TXN_MARKERS: 2,  # KIP-1228: TransactionVersion per marker
        ApiKey.DESCRIBE_LOG_DIRS: 5,  # KIP-1066: IsCordoned
        ApiKey.BROKER_HEARTBEAT: 2,  # KIP-1066: CordonedLogDirs
        ApiKey.DESCRIBE_CLUSTER: 2,  # KIP-1073: IncludeFencedBrokers, IsFenced
        ApiKey.LIST_TRANSACTIONS: 2,  # KIP-1152: TransactionalIdPattern
        ApiKey.CONSUMER_GROUP_DESCRIBE: 1,  # KIP-1099: MemberType
        ApiKey.ADD_RAFT_VOTER: 1,  # AckWhenCommitted
        ApiKey.API_VERSIONS: 5,  # KIP-1242: ClusterId and NodeId (protocol/schema/)
        ApiKey.DELETE_GROUPS: 3,  # a per-group ErrorMessage (protocol/schema/)
    }
    newer_than_specs[ApiKey.TXN_OFFSET_COMMIT] = 6  # KIP-1319: topic IDs (protocol/schema/)
    for key, r in [*SUPPORTED_APIS.items(), *CONTROLLER_APIS.items()]:
        spec = by_key[key]
        bounds = [int(x) for x in spec["validVersions"].split("-")]
        low, high = bounds[0], max(bounds[-1], newer_than_specs.get(key, 0))
        assert low <= r.min_version <= r.max_version <= high, spec["name"]
        flex = re.match(r"(\d+)\+", spec["flexibleVersions"])
        first_flexible = int(flex.group(1)) if flex else 10**6
        for v in range(r.min_version, r.max_version + 1):
            assert is_flexible(key, v) == (v >= first_flexible), (spec["name"], v)


# The client APIs whose top stays below the one Kafka 4.4 serves, and why: none.
# (ApiVersions v5, TxnOffsetCommit v6, DeleteGroups v3 and StreamsGroupHeartbeat/Describe v1, which kio
# 0.6.5 lacks, are protocol/schema/'s.
# InitProducerId v6, KIP-939's two-phase commit, is latestVersionUnstable in 4.4: served only with
# unstable.api.versions.enable, so 5 is Kafka's top by default; UNSTABLE_VERSIONS names it.)
BELOW_KAFKA_44: dict[ApiKey, int] = {}


def test_client_api_tops_match_kafka_44() -> None:
    """Issue 34: every client API's top is Kafka 4.4's, read from its own specs (kafka-clients'
    common/message/*.json), but for the few BELOW_KAFKA_44 names. Kafka serves a version its spec
    marks latestVersionUnstable only with unstable.api.versions.enable (default false): its top is
    the one below, and UNSTABLE_VERSIONS lists exactly those."""
    from protocol.api_keys import UNSTABLE_VERSIONS

    import zipfile

    from benchmarks.apache_kafka import KAFKA_VERSION, cached_lib

    lib = cached_lib()
    if lib is None:
        pytest.skip("Kafka 4.4's jars are not cached (python -m benchmarks.apache_kafka fetch)")
    tops: dict[int, int] = {}
    unstable: dict[int, int] = {}
    with zipfile.ZipFile(lib / f"kafka-clients-{KAFKA_VERSION}.jar") as jar:
        for name in jar.namelist():
            if name.startswith("common/message/") and name.endswith("Request.json"):
                spec = json.loads("\n".join(line for line in jar.read(name).decode().splitlines() if not line.strip().startswith("//")))
                if spec["validVersions"] != "none":
                    tops[spec["apiKey"]] = int(spec["validVersions"].split("-")[-1])
                    if spec.get("latestVersionUnstable"):
                        unstable[spec["apiKey"]] = tops[spec["apiKey"]]
                        tops[spec["apiKey"]] -= 1
    assert {key: top for key, top in unstable.items() if key in SUPPORTED_APIS} == UNSTABLE_VERSIONS
    below = {ApiKey(key): tops[key] for key, r in SUPPORTED_APIS.items() if r.max_version != tops[key]}
    assert below == BELOW_KAFKA_44
    assert all(SUPPORTED_APIS[key].max_version == top - 1 for key, top in BELOW_KAFKA_44.items())


class _Bytes:
    """A stand-in region: the encoder only asks for its length; the test splices the bytes in."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.length = len(data)


@pytest.mark.parametrize("version", range(4, 19))
def test_fetch_response_decodes_with_kio(version: int) -> None:
    topic_id = uuid.uuid4()
    records = b"R" * 70
    part = FetchPartitionResult(3, high_watermark=10, last_stable_offset=9, log_start_offset=2, aborted_transactions=[(5, 6)], records=[_Bytes(records)])
    empty = FetchPartitionResult(4, error_code=1, high_watermark=-1)
    chunks = encode_fetch_response(version, 99, [FetchTopicResult("t", topic_id, [part, empty])], session_id=77)
    wire = b"".join(c.data if isinstance(c, _Bytes) else bytes(c) for c in chunks)
    (size,) = struct.unpack_from(">i", wire)
    assert size == len(wire) - 4
    (correlation,) = struct.unpack_from(">i", wire, 4)
    assert correlation == 99
    body_at = 8 + (1 if version >= 12 else 0)
    resp, _ = entity_reader(response_schema(1, version))(wire, body_at)
    topic = resp.responses[0]
    assert (topic.topic_id if version >= 13 else topic.topic) == (topic_id if version >= 13 else "t")
    p0, p1 = topic.partitions
    assert p0.partition_index == 3 and p0.high_watermark == 10 and p0.last_stable_offset == 9
    assert bytes(p0.records) == records
    assert p0.aborted_transactions[0].producer_id == 5
    assert p1.error_code == 1
    if version >= 5:
        assert p0.log_start_offset == 2
    if version >= 7:
        assert resp.session_id == 77


@pytest.mark.parametrize("version", range(12, 19))
def test_fetch_response_tagged_fields_decode_with_kio(version: int) -> None:
    """KIP-320's DivergingEpoch for a follower, KIP-951's CurrentLeader and NodeEndpoints for a
    client sent to the wrong broker (both read by clients from v16)."""
    diverged = FetchPartitionResult(0, high_watermark=5, diverging_epoch=(3, 42))
    moved = FetchPartitionResult(1, error_code=6, current_leader=(2, 7))
    both = FetchPartitionResult(2, error_code=74, diverging_epoch=(1, 9), current_leader=(3, 8))
    nodes = [(2, "127.0.0.1", 9093, None), (3, "localhost", 9094, "r1")]
    chunks = encode_fetch_response(version, 1, [FetchTopicResult("t", uuid.uuid4(), [diverged, moved, both])], node_endpoints=nodes)
    wire = b"".join(bytes(c) for c in chunks)
    assert struct.unpack_from(">i", wire)[0] == len(wire) - 4
    resp, read = entity_reader(response_schema(1, version))(wire, 9)
    assert 9 + read == len(wire)
    p0, p1, p2 = resp.responses[0].partitions
    assert (p0.diverging_epoch.epoch, p0.diverging_epoch.end_offset) == (3, 42)
    assert (p2.diverging_epoch.epoch, p2.diverging_epoch.end_offset) == (1, 9)
    if version >= 16:
        assert (p1.current_leader.leader_id, p1.current_leader.leader_epoch) == (2, 7)
        assert (p2.current_leader.leader_id, p2.current_leader.leader_epoch) == (3, 8)
        assert [(n.node_id, n.host, n.port, n.rack) for n in resp.node_endpoints] == nodes
