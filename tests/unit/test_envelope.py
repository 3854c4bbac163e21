"""An Envelope's principal and address as Kafka's brokers write them, and the refusals of what
cannot be read, in the Envelope's own error code (EnvelopeUtils)."""

from __future__ import annotations

import asyncio
import datetime
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.create_topics.v7.response import CreatableTopicResult, CreateTopicsResponse
from kio.schema.envelope.v0.request import EnvelopeRequest
from kio.schema.envelope.v0.response import EnvelopeResponse
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.types import TopicName
from kio.serial import entity_reader
from kio.static.primitive import i16, i32

from broker.controller.envelope import EnvelopeError, EnvelopeHandler, parse_client_address, parse_principal, serialize_principal
from broker.kafka_apis import RequestContext
from broker.network import ClientInfo
from broker.wire_client import encode_request
from protocol.api_keys import ApiKey
from protocol.headers import RequestHeader

# DefaultKafkaPrincipalBuilder.serialize(new KafkaPrincipal("User", "alice")): version 0, then
# compact strings (length + 1) and the bool, and no tagged fields.
KAFKA_ALICE = bytes.fromhex("0000") + b"\x05User" + b"\x06alice" + b"\x00\x00"


def test_a_principal_reads_and_writes_as_kafka_serializes_it() -> None:
    assert serialize_principal("User:alice") == KAFKA_ALICE
    assert parse_principal(KAFKA_ALICE) == "User:alice"


# Principals are UTF-8 on the wire: lone surrogates are not text a client can send.
UNICODE = st.characters(blacklist_categories=("Cs",))


@given(st.text(alphabet=st.characters(blacklist_characters=":", blacklist_categories=("Cs",)), min_size=1), st.text(alphabet=UNICODE))
def test_any_principal_goes_round(kind: str, name: str) -> None:
    assert parse_principal(serialize_principal(f"{kind}:{name}")) == f"{kind}:{name}"


@pytest.mark.parametrize("data", [None, b"", b"\x00", b"\x00\x01" + KAFKA_ALICE[2:], b"\x00\x00\xff\xff"])
def test_a_principal_that_cannot_be_read_is_a_deserialization_failure(data: bytes | None) -> None:
    with pytest.raises(EnvelopeError) as e:
        parse_principal(data)
    assert e.value.code == ErrorCode.principal_deserialization_failure


def test_the_client_address_is_four_or_sixteen_bytes() -> None:
    assert parse_client_address(bytes([10, 0, 0, 7])) == "10.0.0.7"
    assert parse_client_address(bytes(15) + b"\x01") == "::1"
    with pytest.raises(EnvelopeError) as e:
        parse_client_address(b"\x01\x02\x03")
    assert e.value.code == ErrorCode.invalid_request


@dataclass
class Seen:
    ctx: Any = None
    request: Any = None


def test_the_inner_request_is_answered_for_the_envelope_s_client() -> None:
    seen = Seen()
    body = MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    envelope = EnvelopeRequest(request_data=encode_request(body, 3, "tool")[4:], request_principal=KAFKA_ALICE, client_host_address=bytes([10, 0, 0, 7]))
    ctx = type("Ctx", (), {"client": ClientInfo("c1", "kbroker-2", "127.0.0.1:5000", "CONTROLLER", "User:broker")})()
    # Metadata is never forwarded: refused while it is dispatched, before any handler runs.
    refused = EnvelopeHandler({})(ctx, envelope)  # type: ignore[arg-type]
    assert isinstance(refused, EnvelopeResponse)
    assert (refused.error_code, refused.response_data) == (ErrorCode.invalid_request, None)
    assert seen.ctx is None


def forwarded_create_topics(inner_code: ErrorCode) -> EnvelopeResponse:
    """An Envelope carrying CreateTopics v7 answered by a handler that gives ``inner_code``: the Envelope's answer."""
    topic = CreatableTopic(name=TopicName("t"), num_partitions=i32(1), replication_factor=i16(1), assignments=(), configs=())
    body = CreateTopicsRequest(topics=(topic,), timeout=datetime.timedelta(seconds=5), validate_only=False)
    envelope = EnvelopeRequest(request_data=encode_request(body, 3, "tool")[4:], request_principal=KAFKA_ALICE, client_host_address=bytes([10, 0, 0, 7]))

    def create_topics(ctx: RequestContext, request: CreateTopicsRequest) -> CreateTopicsResponse:
        return CreateTopicsResponse(
            throttle_time=datetime.timedelta(0),
            topics=(CreatableTopicResult(name=TopicName("t"), topic_id=None, error_code=inner_code, error_message=None, num_partitions=i32(-1), replication_factor=i16(-1), configs=None),),
        )

    header = RequestHeader(api_key=ApiKey.ENVELOPE, api_version=0, correlation_id=41, client_id="kbroker-2", body_offset=0)
    ctx = RequestContext(header, ClientInfo("c1", "kbroker-2", "127.0.0.1:5000", "CONTROLLER", "User:broker"))
    answer = EnvelopeHandler({ApiKey.CREATE_TOPICS: create_topics})(ctx, envelope)
    assert not isinstance(answer, EnvelopeResponse)
    [frame] = asyncio.run(answer)  # type: ignore[arg-type]
    # The frame's size, the correlation id, the flexible header's tagged fields, then the answer.
    decoded, _ = entity_reader(EnvelopeResponse)(memoryview(frame), 4 + 4 + 1)
    return decoded


def test_an_inner_answer_of_not_controller_is_the_envelope_s_own_error() -> None:
    """Kafka's RequestChannel.shouldReturnNotController: a forwarding broker's channel reads only
    the Envelope's error to learn that the controller moved, and sends the request again."""
    moved = forwarded_create_topics(ErrorCode.not_controller)
    assert (moved.error_code, moved.response_data) == (ErrorCode.not_controller, None)
    answered = forwarded_create_topics(ErrorCode.topic_already_exists)
    assert answered.error_code == ErrorCode.none and answered.response_data is not None
