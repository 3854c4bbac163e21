"""Frames the fuzzer (tests/fuzz/) sent to a running broker that ended in a traceback at error
level, each replayed over a raw socket: the broker must answer (or close) and log no error.

Each frame is the fuzzer's, byte for byte (``FUZZ_SEED=1 FUZZ_FRAME=<n>`` of the network run
rebuilds it); the answers are read with kio, the response header is the v0 one (4 bytes) or the
v1 one (5 bytes) as each version asks.
"""

from __future__ import annotations

import socket
import struct

import pytest
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from protocol.api_keys import response_schema
from tests.integration.conftest import BrokerProcess
from tests.integration.helpers import create_topic

IO_TIMEOUT_S = 10.0


def exchange(broker: BrokerProcess, frame: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", broker.port), timeout=IO_TIMEOUT_S) as s:
        s.sendall(frame)
        buf = bytearray()
        while True:
            if len(buf) >= 4 and len(buf) >= 4 + struct.unpack_from(">i", buf)[0]:
                return bytes(buf[4:])
            chunk = s.recv(65536)
            assert chunk, f"closed after {len(buf)} bytes, no answer"
            buf += chunk


def answer(broker: BrokerProcess, frame: bytes, api_key: int, version: int, header_size: int) -> object:
    body = exchange(broker, frame)
    assert struct.unpack_from(">i", body)[0] == struct.unpack_from(">i", frame, 8)[0]
    response, _ = entity_reader(response_schema(api_key, version))(memoryview(body[header_size:]).toreadonly(), 0)
    return response


def no_errors_logged(broker: BrokerProcess) -> None:
    assert [e for e in broker.log_events() if e.get("level") in ("error", "critical")] == []


# A combined node's broker forwarded these Raft APIs to its own controller, whose local entry
# point had no handler for them: KeyError. Found with a valid DescribeQuorum v0 (trailing bytes
# after it, which Kafka ignores too) and an AddRaftVoter v0.
DESCRIBE_QUORUM_V0 = bytes.fromhex(
    "0000002f00370000000002b8000466757a7a00020766757a7a2d61027ffffffe00000029996b2871d39eb53352fa05040f6055"
)
ADD_RAFT_VOTER_V0 = bytes.fromhex(
    "0000004a0050000000000701000466757a7a000d726574656e74696f6e2e6d73000000640000000070dfda1a297ff4b7c273cb4bc15301f8020766757a7a2d6101000000001c4cb09ec394f8c2e4"
)


def test_describe_quorum_through_a_combined_nodes_broker(module_broker: BrokerProcess) -> None:
    response = answer(module_broker, DESCRIBE_QUORUM_V0, 55, 0, header_size=5)
    # The fuzzer asked about "fuzz-a", not the metadata log: an error, answered by the Raft layer.
    assert response.error_code != ErrorCode.none or response.topics[0].partitions[0].error_code != ErrorCode.none
    no_errors_logged(module_broker)


def test_add_raft_voter_through_a_combined_nodes_broker(module_broker: BrokerProcess) -> None:
    response = answer(module_broker, ADD_RAFT_VOTER_V0, 80, 0, header_size=5)
    assert response.error_code != ErrorCode.none  # cluster id "retention.ms" is not this cluster's
    no_errors_logged(module_broker)


# Metadata v10 naming a topic null (which only v12 may, by id): the answer put None into v10's
# non-nullable topic name and failed to encode. Kafka answers INVALID_REQUEST for every topic.
METADATA_V10_NULL_NAME = bytes.fromhex(
    "000000560003000a000006dd000466757a7a0004000000000000000000000000000000010766757a7a2d6100eaca1c4f92f6c3d0dabdd856c06724f30766757a7a2d620000000000000000000000000000000001000000000100"
)


def test_metadata_v10_topic_named_by_id_gets_invalid_request(module_broker: BrokerProcess) -> None:
    response = answer(module_broker, METADATA_V10_NULL_NAME, 3, 10, header_size=5)
    assert [(t.name, t.error_code) for t in response.topics] == [("fuzz-a", ErrorCode.invalid_request), ("fuzz-b", ErrorCode.invalid_request), ("", ErrorCode.invalid_request)]
    no_errors_logged(module_broker)


@pytest.mark.parametrize("version", [10, 11])
def test_metadata_v10_topic_with_an_id_gets_invalid_request(module_broker: BrokerProcess, version: int) -> None:
    # One topic "t" with a non-zero id, then allow_auto_topic_creation and both include_*_authorized_operations, no tags.
    body = b"\x02" + b"\x00" * 15 + b"\x01" + b"\x02t" + b"\x00" + b"\x00\x00\x00" + b"\x00"
    header = struct.pack(">hhih", 3, version, 9, 1) + b"c" + b"\x00"
    response = answer(module_broker, struct.pack(">i", len(header) + len(body)) + header + body, 3, version, header_size=5)
    assert [(t.name, t.error_code) for t in response.topics] == [("t", ErrorCode.invalid_request)]
    no_errors_logged(module_broker)


# Fetch v17 whose first topic has the all-zero id (read as None, as kio reads it): the unknown
# topic was answered under None and the response encoder failed on None.bytes. Kafka answers
# UNKNOWN_TOPIC_ID under the id the client sent. Found by FUZZ_SEED=2, frame 761.
FETCH_V17_ZERO_TOPIC_ID = bytes.fromhex(
    "000000f600010011000002f9000466757a7a0000000000ffffffff0000000efb00000035ffffffff0200000000000000000000000000000000048000000100000062000000000000004200000000000000000000000200000000010010000000000000000000000000000000017fffffff000000630000000000000002000000020000000000000004000000000000000002000000007ffffffffffffffe00000002ffffffffffffffff00000001000004000000000000000000000000000000010200000002000000000000000000000000000000000002000000080000000000000000000000000000000000020000000d000672616e676500"
)


def test_fetch_v17_with_the_zero_topic_id_gets_unknown_topic_id(module_broker: BrokerProcess) -> None:
    response = answer(module_broker, FETCH_V17_ZERO_TOPIC_ID, 1, 17, header_size=5)
    zero = [t for t in response.responses if t.topic_id is None]  # kio reads the zero id as None
    assert zero and all(p.error_code == ErrorCode.unknown_topic_id for t in zero for p in t.partitions), response
    no_errors_logged(module_broker)


# CreatePartitions v1 growing topic "fuzz" to 2^31 - 1 partitions (a valid request, its count at
# the int32 limit): the controller placed partitions until the broker stopped answering anyone.
# Kafka refuses an operation of more than 10,000 records: POLICY_VIOLATION. FUZZ_SEED=20261126, frame 20014.
CREATE_PARTITIONS_V1_INT32_MAX = bytes.fromhex("000000250025000100004e2e000466757a7a00000001000466757a7a7fffffffffffffff0000000000")


def test_create_partitions_to_int32_max_is_refused(module_broker: BrokerProcess) -> None:
    create_topic(module_broker.bootstrap, "fuzz")
    response = answer(module_broker, CREATE_PARTITIONS_V1_INT32_MAX, 37, 1, header_size=4)
    assert [(r.name, r.error_code) for r in response.results] == [("fuzz", ErrorCode.policy_violation)]
    no_errors_logged(module_broker)


# CreatePartitions v3 with a negative timeout (so the forwarding gives up at once) naming topic "":
# the error answer looked items up by `name or resource_name` and put None in the non-nullable
# name. FUZZ_SEED=20261126, frame 134397 (of the long run).
CREATE_PARTITIONS_V3_EMPTY_NAME = bytes.fromhex(
    "000000450025000300020cfd000466757a7a0003017ffffffe01000a504c41494e544558540000004c03038000000000000000000400000000ffffffff0000ff000000800000640000"
)


def test_create_partitions_timing_out_for_an_empty_name_is_answered(module_broker: BrokerProcess) -> None:
    response = answer(module_broker, CREATE_PARTITIONS_V3_EMPTY_NAME, 37, 3, header_size=5)
    assert [r.name for r in response.results] == ["", "PLAINTEXT"]
    assert all(r.error_code != ErrorCode.none for r in response.results)
    no_errors_logged(module_broker)
