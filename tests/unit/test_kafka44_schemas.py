"""Issue 34: the Kafka 4.4 versions kio 0.6.5 lacks (protocol/schema/): ApiVersions v5,
TxnOffsetCommit v6 and DeleteGroups v3. Their codecs (round trips; bytes from the 4.4 specs by
hand, or as a Kafka 4.4 node encoded them), and what each new version changes in the handlers,
as Kafka 4.4 answered the same requests (tests/integration/test_kafka44_versions.py over TCP)."""

from __future__ import annotations

import datetime
import io
import struct
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32, i64

from broker.handlers.api_versions import NodeIdentity, api_versions_answer, unsupported_version_fallback
from broker.group.group_coordinator_shard import GroupCoordinatorShard
from broker.group.group_metadata_manager import GROUP_ID_NOT_FOUND, ILLEGAL_GENERATION, GroupConfig
from broker.group.offset_metadata_manager import PartitionCommit
from protocol.api_keys import SUPPORTED_APIS, ApiKey, request_schema, response_schema
from protocol.entities import build, nested
from protocol.messages import encode_body
from protocol.schema.api_versions.v5 import request as api_versions_v5
from protocol.schema.delete_groups.v3 import response as delete_groups_v3
from protocol.schema.txn_offset_commit.v6 import request as txn_offset_commit_v6

TOPIC_ID = uuid.UUID("61399e4a-db16-48cb-a176-e5a5208d44b6")


def encode(entity: Any) -> bytes:
    out = io.BytesIO()
    entity_writer(type(entity))(out, entity)
    return out.getvalue()


def decode(schema: type, data: bytes) -> Any:
    entity, size = entity_reader(schema)(memoryview(data).toreadonly(), 0)
    assert size == len(data)
    return entity


def compact(text: str | None) -> bytes:
    return b"\x00" if text is None else bytes([len(text) + 1]) + text.encode()


@pytest.mark.parametrize(("api_key", "version"), [(18, 5), (28, 6), (42, 3)])
def test_our_schemas_are_loaded_where_kio_has_none(api_key: int, version: int) -> None:
    for schema in (request_schema(api_key, version), response_schema(api_key, version)):
        assert schema.__module__.startswith("protocol.schema.")
        assert (int(schema.__api_key__), int(schema.__version__), schema.__flexible__) == (api_key, version, True)
    assert SUPPORTED_APIS[api_key].max_version == version
    # The version below is still kio's.
    assert request_schema(api_key, version - 1).__module__.startswith("kio.schema.")


# -- ApiVersions v5 (KIP-1242) -----------------------------------------------------------------------------


@pytest.mark.parametrize(("cluster_id", "node_id"), [("amrgvVU5R1GvjzAYFnriyQ", 1), (None, -1)])
def test_api_versions_v5_request_bytes(cluster_id: str | None, node_id: int) -> None:
    body = api_versions_v5.ApiVersionsRequest(client_software_name="probe", client_software_version="1", cluster_id=cluster_id, node_id=i32(node_id))
    # The 4.4 spec: two compact strings, the nullable compact ClusterId, the int32 NodeId, no tags.
    wire = compact("probe") + compact("1") + compact(cluster_id) + struct.pack(">i", node_id) + b"\x00"
    assert encode(body) == wire
    assert decode(api_versions_v5.ApiVersionsRequest, wire) == body
    if cluster_id is None:
        # ClusterId and NodeId default to null and -1, as in the spec.
        assert api_versions_v5.ApiVersionsRequest(client_software_name="probe", client_software_version="1") == body


def api_versions(cluster_id: str | None, node_id: int) -> Any:
    return api_versions_v5.ApiVersionsRequest(client_software_name="probe", client_software_version="1", cluster_id=cluster_id, node_id=i32(node_id))


ME = NodeIdentity("amrgvVU5R1GvjzAYFnriyQ", 1)


@pytest.mark.parametrize(
    ("cluster_id", "node_id", "broker_error", "controller_error"),
    [
        (None, -1, ErrorCode.none, ErrorCode.none),  # neither: no check
        (ME.cluster_id, 1, ErrorCode.none, ErrorCode.none),  # this node
        ("XXXXXXXXXXXXXXXXXXXXXX", 1, ErrorCode.rebootstrap_required, ErrorCode.none),  # another cluster
        (ME.cluster_id, 6, ErrorCode.rebootstrap_required, ErrorCode.none),  # another node
        (ME.cluster_id, -1, ErrorCode.invalid_request, ErrorCode.invalid_request),  # one without the other
        (None, 1, ErrorCode.invalid_request, ErrorCode.invalid_request),
    ],
)
def test_api_versions_v5_checks_the_cluster_and_node_as_kafka_44(cluster_id: str | None, node_id: int, broker_error: ErrorCode, controller_error: ErrorCode) -> None:
    broker = api_versions_answer(5, api_versions(cluster_id, node_id), identity=ME)
    controller = api_versions_answer(5, api_versions(cluster_id, node_id))  # a controller listener does not check
    assert (broker.error_code, controller.error_code) == (broker_error, controller_error)
    if broker_error:
        # Byte for byte what a Kafka 4.4 broker answered: the error, no ranges, throttle 0, no tags.
        assert encode_body(broker) == struct.pack(">h", broker_error) + b"\x01" + b"\x00\x00\x00\x00" + b"\x00"
    else:
        assert {int(k.api_key): int(k.max_version) for k in broker.api_keys}[ApiKey.API_VERSIONS] == 5


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_older_api_versions_are_answered_as_before(version: int) -> None:
    schema = request_schema(18, version)
    request = build(schema, client_software_name="probe", client_software_version="1")
    answer = api_versions_answer(version, request, identity=ME)
    assert answer.error_code == ErrorCode.none and type(answer).__version__ == version
    assert {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in answer.api_keys}[ApiKey.API_VERSIONS] == (0, 5)


def test_the_unsupported_version_fallback_is_a_v0_body_listing_api_versions_alone() -> None:
    frame = unsupported_version_fallback(9)
    size, correlation, error, count = struct.unpack_from(">iihi", frame)
    assert (size, correlation, error, count) == (len(frame) - 4, 9, ErrorCode.unsupported_version, 1)
    assert list(struct.iter_unpack(">hhh", frame[14:])) == [(ApiKey.API_VERSIONS, 0, 5)]


# -- DeleteGroups v3 ---------------------------------------------------------------------------------------


def test_delete_groups_v3_response_bytes_as_kafka_44_encoded_them() -> None:
    # A Kafka 4.4 node's answer body to DeleteGroups v3 ["nope", "consumer-7a58d7"] and two more,
    # in its order: ErrorMessage is null for every group.
    kafka = bytes.fromhex("00000000050100450000" + "0e" + b"simple-7a58d7".hex() + "00000000" + "05" + b"nope".hex() + "00450000" + "10" + b"consumer-7a58d7".hex() + "00440000" + "00")
    result = delete_groups_v3.DeletableGroupResult
    answer = delete_groups_v3.DeleteGroupsResponse(
        throttle_time=datetime.timedelta(0),
        results=(
            result(group_id="", error_code=ErrorCode.group_id_not_found),
            result(group_id="simple-7a58d7", error_code=ErrorCode.none),
            result(group_id="nope", error_code=ErrorCode.group_id_not_found),
            result(group_id="consumer-7a58d7", error_code=ErrorCode.non_empty_group),
        ),
    )
    assert encode_body(answer) == kafka
    assert decode(delete_groups_v3.DeleteGroupsResponse, kafka).results == answer.results
    with_message = result(group_id="g", error_code=ErrorCode.group_id_not_found, error_message="why")
    assert encode(with_message) == compact("g") + b"\x00\x45" + compact("why") + b"\x00"


def test_delete_groups_request_v3_is_v2s() -> None:
    wire = b"\x03" + compact("a") + compact("b") + b"\x00"
    assert decode(request_schema(42, 3), wire).groups_names == ("a", "b") == decode(request_schema(42, 2), wire).groups_names


# -- TxnOffsetCommit v6 (KIP-1319) -------------------------------------------------------------------------


def test_txn_offset_commit_v6_request_bytes() -> None:
    partition = txn_offset_commit_v6.TxnOffsetCommitRequestPartition(partition_index=i32(1), committed_offset=i64(3), committed_leader_epoch=i32(-1), committed_metadata="m")
    body = txn_offset_commit_v6.TxnOffsetCommitRequest(
        transactional_id="t",
        group_id="g",
        producer_id=i64(7),
        producer_epoch=i16(2),
        generation_id_or_member_epoch=i32(5),
        member_id="m1",
        group_instance_id=None,
        topics=(txn_offset_commit_v6.TxnOffsetCommitRequestTopic(topic_id=TOPIC_ID, partitions=(partition,)),),
    )
    wire = (
        compact("t") + compact("g") + struct.pack(">qhi", 7, 2, 5) + compact("m1") + b"\x00"  # null GroupInstanceId
        + b"\x02" + TOPIC_ID.bytes  # one topic, by ID (no name from v6)
        + b"\x02" + struct.pack(">iqi", 1, 3, -1) + compact("m") + b"\x00"  # one partition
        + b"\x00" + b"\x00"
    )  # fmt: skip
    assert encode(body) == wire
    assert decode(txn_offset_commit_v6.TxnOffsetCommitRequest, wire) == body


def test_txn_offset_commit_v6_response_round_trip() -> None:
    schema = response_schema(28, 6)
    topic, part = nested(schema, "TxnOffsetCommitResponseTopic"), nested(schema, "TxnOffsetCommitResponsePartition")
    answer = build(schema, throttle_time=0, topics=(build(topic, topic_id=TOPIC_ID, name="ignored", partitions=(build(part, partition_index=7, error_code=3),)),))
    wire = encode_body(answer)
    assert wire == b"\x00\x00\x00\x00" + b"\x02" + TOPIC_ID.bytes + b"\x02" + struct.pack(">ih", 7, 3) + b"\x00" + b"\x00" + b"\x00"
    assert decode(schema, wire) == answer


def shard() -> GroupCoordinatorShard:
    return GroupCoordinatorShard(GroupConfig(), offset_metadata_max_bytes=10, offsets_retention_ms=60_000)


@pytest.mark.parametrize(("version", "error"), [(5, ILLEGAL_GENERATION), (6, GROUP_ID_NOT_FOUND)])
def test_a_member_of_an_unknown_group_is_told_group_id_not_found_from_v6(version: int, error: int) -> None:
    answers, records = shard().offsets.txn_commit("g", 5, "m", None, [PartitionCommit("t", 0, 3, -1, "m")], 0, version)
    assert [code for _, code in answers] == [error] and records == []


# -- InitProducerId v6 (KIP-939): kio's codec, Kafka 4.4's refusals -----------------------------------------
# Kafka 4.4 marks v6 latestVersionUnstable: with its defaults it lists 0-5 and drops the connection
# on v6 (tests/integration/test_kafka44_versions.py), as kbroker does. The answers below are those
# of a Kafka 4.4 node with unstable.api.versions.enable=true and the default
# transaction.two.phase.commit.enable=false, which kbroker's handler gives at v6.

# Kafka 4.4's v6 answer bodies: ThrottleTimeMs, ErrorCode, ProducerId, ProducerEpoch,
# OngoingTxnProducerId, OngoingTxnProducerEpoch, no tags. The ongoing fields were -1 in every answer.
KAFKA_44_REFUSED_2PC = bytes.fromhex("00000000" "0035" "ffffffffffffffff" "ffff" "ffffffffffffffff" "ffff" "00")
KAFKA_44_REFUSED_KEEP = bytes.fromhex("00000000" "0023" "ffffffffffffffff" "ffff" "ffffffffffffffff" "ffff" "00")
KAFKA_44_EPOCH_1 = bytes.fromhex("00000000" "0000" "0000000000000000" "0001" "ffffffffffffffff" "ffff" "00")


def test_init_producer_id_v6_is_kios_and_not_served() -> None:
    from protocol.api_keys import UNSTABLE_VERSIONS, is_supported, with_unstable_versions

    assert request_schema(22, 6).__module__ == "kio.schema.init_producer_id.v6.request"
    assert (22, 6) not in __import__("protocol.schema.index", fromlist=["SCHEMAS"]).SCHEMAS
    assert not is_supported(22, 6) and SUPPORTED_APIS[ApiKey.INIT_PRODUCER_ID].max_version == 5
    assert UNSTABLE_VERSIONS == {ApiKey.INIT_PRODUCER_ID: 6}
    raised = with_unstable_versions(SUPPORTED_APIS)
    assert is_supported(22, 6, raised) and {k: r for k, r in raised.items() if k != 22} == {k: r for k, r in SUPPORTED_APIS.items() if k != 22}


@pytest.mark.parametrize(("enable_2pc", "keep"), [(False, False), (True, False), (False, True), (True, True)])
def test_init_producer_id_v6_request_bytes(enable_2pc: bool, keep: bool) -> None:
    body = request_schema(22, 6)(transactional_id="t", transaction_timeout=datetime.timedelta(seconds=60), producer_id=i64(-1), producer_epoch=i16(-1), enable2_pc=enable_2pc, keep_prepared_txn=keep)
    # The 4.4 spec: v5's fields, then the two bools, then no tags.
    wire = compact("t") + struct.pack(">iqh??", 60000, -1, -1, enable_2pc, keep) + b"\x00"
    assert encode(body) == wire and decode(request_schema(22, 6), wire) == body


def test_init_producer_id_v6_response_bytes_as_kafka_44_encoded_them() -> None:
    schema = response_schema(22, 6)
    answer = schema(throttle_time=datetime.timedelta(0), error_code=ErrorCode.transactional_id_authorization_failed, producer_id=i64(-1), producer_epoch=i16(-1))
    # OngoingTxnProducerId and OngoingTxnProducerEpoch default to -1, as in the spec.
    assert encode_body(answer) == KAFKA_44_REFUSED_2PC
    assert decode(schema, KAFKA_44_EPOCH_1).producer_epoch == 1


def v6_request(transactional_id: str | None, enable_2pc: bool = False, keep: bool = False, timeout_ms: int = 30000) -> Any:
    return request_schema(22, 6)(transactional_id=transactional_id, transaction_timeout=datetime.timedelta(milliseconds=timeout_ms), enable2_pc=enable_2pc, keep_prepared_txn=keep)


def init_v6(node: Any, request: Any, version: int = 6) -> Any:
    """kbroker's InitProducerId handler over ``node``'s transaction coordinator, at ``version``."""
    from broker.handlers.init_producer_id import InitProducerIdHandler
    from tests.unit.test_transaction_coordinator import context

    handler = InitProducerIdHandler(node.ids)  # type: ignore[arg-type]
    handler.transaction_coordinator = node.coordinator
    return handler(context(ApiKey.INIT_PRODUCER_ID, version), request)


def test_init_producer_id_v6_answers_as_kafka_44_without_2pc(tmp_path: Any) -> None:
    from tests.unit.test_transaction_coordinator import DATA, TXN, S, run

    async def test(node: Any) -> None:
        v5 = build(request_schema(22, 5), transactional_id=TXN, transaction_timeout=datetime.timedelta(seconds=30))
        assert (await init_v6(node, v5, 5)).producer_epoch == 0
        # Neither flag: v5's answer, the epoch bumped, no ongoing transaction named.
        neither = await init_v6(node, v6_request(TXN))
        assert encode_body(neither) == bytes.fromhex("00000000" "0000") + struct.pack(">qh", neither.producer_id, 1) + bytes.fromhex("ffffffffffffffff" "ffff" "00")
        # Enable2Pc: refused as unauthorized, whatever KeepPreparedTxn says (Kafka's first check).
        assert encode_body(await init_v6(node, v6_request(TXN, enable_2pc=True))) == KAFKA_44_REFUSED_2PC
        assert encode_body(await init_v6(node, v6_request(TXN, enable_2pc=True, keep=True))) == KAFKA_44_REFUSED_2PC
        # KeepPreparedTxn alone: UNSUPPORTED_VERSION, and an open transaction is left open at its
        # epoch (neither kept for the caller nor aborted, as by v5).
        pid = neither.producer_id
        assert node.coordinator.add_partitions(TXN, pid, 1, [(DATA, 0)]) == 0
        assert encode_body(await init_v6(node, v6_request(TXN, keep=True))) == KAFKA_44_REFUSED_KEEP
        assert (node.meta().state, node.meta().producer_epoch) == (S.ONGOING, 1)
        # An empty transactional id is INVALID_REQUEST before the flags are looked at.
        assert (await init_v6(node, v6_request("", enable_2pc=True))).error_code == ErrorCode.invalid_request
        # An idempotent producer (no transactional id) gets a new id whatever the flags.
        idempotent = await init_v6(node, v6_request(None, enable_2pc=True, keep=True))
        assert (idempotent.error_code, idempotent.producer_epoch, idempotent.ongoing_txn_producer_id, idempotent.ongoing_txn_producer_epoch) == (0, 0, -1, -1)

    run(tmp_path, test)


def test_init_producer_id_v6_refuses_2pc_on_a_broker_that_is_not_the_coordinator(tmp_path: Any) -> None:
    from tests.unit.test_transaction_coordinator import TXN, run

    async def test(node: Any) -> None:
        node.state.partitions.pop(node.state.partition_for(TXN))
        assert (await init_v6(node, v6_request(TXN))).error_code == ErrorCode.not_coordinator
        # Kafka checks the flags before it looks for the transaction's partition.
        assert encode_body(await init_v6(node, v6_request(TXN, enable_2pc=True))) == KAFKA_44_REFUSED_2PC
        assert encode_body(await init_v6(node, v6_request(TXN, keep=True))) == KAFKA_44_REFUSED_KEEP

    run(tmp_path, test)
