"""ErrorsPerSec (broker/metrics/request_errors.py): each answer's error codes counted as Kafka 4.4's
``AbstractResponse.errorCounts()`` counts them, and exported as the JMX exporter names the meter."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.envelope.v0.request import EnvelopeRequest
from kio.schema.envelope.v0.response import EnvelopeResponse
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import request as metadata_v12
from kio.serial import entity_reader
from kio.static.primitive import i16, i32
from kio.schema.types import TopicName
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from broker.controller.envelope import EnvelopeHandler, serialize_principal
from broker.kafka_apis import KafkaApis, RequestContext
from broker.metrics.request_errors import ErrorCounts, count_response, error_name
from broker.metrics.request_metrics import RequestChannelMetrics, RequestMetricsCollector
from broker.network import ClientInfo, SocketServer, TransferMetrics
from broker.wire_client import encode_request
from protocol.api_keys import CONTROLLER_APIS, SUPPORTED_APIS, ApiKey, response_schema
from protocol.entities import build, nested
from protocol.headers import parse_request_header
from protocol.messages import response_header_version

NONE, UNKNOWN = int(ErrorCode.none), int(ErrorCode.unknown_topic_or_partition)


def _metadata(version: int, topics: list[tuple[int, list[int]]], top_level: int = 0) -> Any:
    schema = response_schema(ApiKey.METADATA, version)
    topic_cls, part_cls = nested(schema, "MetadataResponseTopic"), nested(schema, "MetadataResponsePartition")
    return build(
        schema,
        throttle_time=0,
        brokers=(),
        cluster_id=None,
        controller_id=-1,
        error_code=top_level,
        topics=tuple(
            build(
                topic_cls,
                error_code=code,
                name=f"t{i}",
                topic_id=None,
                is_internal=False,
                partitions=tuple(build(part_cls, error_code=p, partition_index=j, leader_id=1) for j, p in enumerate(parts)),
            )
            for i, (code, parts) in enumerate(topics)
        ),
    )


def test_every_code_once_per_occurrence_none_included() -> None:
    counts: ErrorCounts = {}
    count_response(counts, ApiKey.METADATA, _metadata(12, [(NONE, [NONE, NONE, int(ErrorCode.leader_not_available)]), (UNKNOWN, [])]))
    assert counts == {NONE: 3, int(ErrorCode.leader_not_available): 1, UNKNOWN: 1}
    # Added to, not replaced: the counts of an API over its answers.
    count_response(counts, ApiKey.METADATA, _metadata(12, [(NONE, [NONE])]))
    assert counts[NONE] == 5


def test_metadata_v13s_top_level_code_is_left_out_as_kafka_does() -> None:
    counts: ErrorCounts = {}
    count_response(counts, ApiKey.METADATA, _metadata(13, [(NONE, [NONE])], top_level=int(ErrorCode.cluster_authorization_failed)))
    assert counts == {NONE: 2}


def test_delete_acls_counts_its_filters_not_their_matching_acls() -> None:
    schema = response_schema(ApiKey.DELETE_ACLS, 3)
    filter_cls, acl_cls = nested(schema, "DeleteAclsFilterResult"), nested(schema, "DeleteAclsMatchingAcl")
    acl = build(
        acl_cls, error_code=0, error_message=None, resource_type=2, resource_name="t", pattern_type=3, principal="User:a", host="*", operation=2, permission_type=3
    )
    response = build(schema, throttle_time=0, filter_results=(build(filter_cls, error_code=0, error_message=None, matching_acls=(acl, acl)),))
    counts: ErrorCounts = {}
    count_response(counts, ApiKey.DELETE_ACLS, response)
    assert counts == {NONE: 1}


def test_unregister_broker_counts_no_none() -> None:
    schema = response_schema(ApiKey.UNREGISTER_BROKER, 0)
    counts: ErrorCounts = {}
    count_response(counts, ApiKey.UNREGISTER_BROKER, build(schema, throttle_time=0, error_code=0, error_message=None))
    assert counts == {}
    count_response(counts, ApiKey.UNREGISTER_BROKER, build(schema, throttle_time=0, error_code=int(ErrorCode.broker_id_not_registered), error_message=None))
    assert counts == {int(ErrorCode.broker_id_not_registered): 1}


def test_error_names_are_kafkas() -> None:
    assert error_name(0) == "NONE"
    assert error_name(int(ErrorCode.not_leader_or_follower)) == "NOT_LEADER_OR_FOLLOWER"
    assert error_name(-1) == "UNKNOWN_SERVER_ERROR"
    assert error_name(134) == "GROUP_DELETION_FAILED"  # a Kafka 4.4 error kio lacks
    assert error_name(9999) == "UNKNOWN_SERVER_ERROR"  # Errors.forCode of a code Kafka does not know


def test_kafka_apis_counts_the_answers_entities_under_the_requests_name() -> None:
    channel = RequestChannelMetrics()
    answer = _metadata(12, [(NONE, [NONE, NONE]), (UNKNOWN, [])])

    def handler(ctx: RequestContext, request: Any) -> Any:
        return answer

    apis = KafkaApis({ApiKey.METADATA: handler}, apis={int(ApiKey.METADATA): SUPPORTED_APIS[int(ApiKey.METADATA)]}, request_metrics=channel)
    frame = bytearray(encode_request(metadata_v12.MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False), 7, "c")[4:])
    apis.dispatch(parse_request_header(frame), frame, ClientInfo("conn", "c", "127.0.0.1"))
    apis.dispatch(parse_request_header(frame), frame, ClientInfo("conn", "c", "127.0.0.1"))

    registry = CollectorRegistry(auto_describe=False)
    registry.register(RequestMetricsCollector(channel))
    text = generate_latest(registry).decode()
    samples = {(s.name, frozenset(s.labels.items())): s.value for f in text_string_to_metric_families(text) for s in f.samples}
    assert samples[("kafka_network_requestmetrics_errors_total", frozenset({("request", "Metadata"), ("error", "NONE")}))] == 6
    assert samples[("kafka_network_requestmetrics_errors_total", frozenset({("request", "Metadata"), ("error", "UNKNOWN_TOPIC_OR_PARTITION")}))] == 2


def test_handlers_that_encode_their_own_answers_add_to_the_context() -> None:
    channel = RequestChannelMetrics()

    def handler(ctx: RequestContext, request: Any) -> Any:
        assert ctx.errors is not None
        ctx.errors[int(ErrorCode.not_leader_or_follower)] = 1
        return [b"encoded"]

    apis = KafkaApis({ApiKey.METADATA: handler}, apis={int(ApiKey.METADATA): SUPPORTED_APIS[int(ApiKey.METADATA)]}, request_metrics=channel)
    frame = bytearray(encode_request(metadata_v12.MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False), 7, "c")[4:])
    assert apis.dispatch(parse_request_header(frame), frame, ClientInfo("conn", "c", "127.0.0.1")) == [b"encoded"]
    assert channel.for_key(ApiKey.METADATA).errors == {int(ErrorCode.not_leader_or_follower): 1}


def test_no_counting_without_metrics() -> None:
    seen: list[ErrorCounts | None] = []

    def handler(ctx: RequestContext, request: Any) -> Any:
        seen.append(ctx.errors)
        return _metadata(12, [])

    apis = KafkaApis({ApiKey.METADATA: handler}, apis={int(ApiKey.METADATA): SUPPORTED_APIS[int(ApiKey.METADATA)]})
    frame = bytearray(encode_request(metadata_v12.MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False), 7, "c")[4:])
    apis.dispatch(parse_request_header(frame), frame, ClientInfo("conn", "c", "127.0.0.1"))
    assert seen == [None]


def _create_topics(*names: str) -> CreateTopicsRequest:
    topics = tuple(CreatableTopic(name=TopicName(n), num_partitions=i32(1), replication_factor=i16(1), assignments=(), configs=()) for n in names)
    return CreateTopicsRequest(topics=topics, timeout=datetime.timedelta(seconds=30), validate_only=False)


def _created(request: CreateTopicsRequest, codes: dict[str, int]) -> Any:
    schema = response_schema(ApiKey.CREATE_TOPICS, 7)
    result = nested(schema, "CreatableTopicResult")
    topics = tuple(
        build(result, name=t.name, topic_id=None, error_code=codes[t.name], error_message=None, topic_config_error_code=0, num_partitions=1, replication_factor=1, configs=())
        for t in request.topics
    )
    return build(schema, throttle_time=0, topics=topics)


def _answers(apis: KafkaApis, channel: RequestChannelMetrics, *requests: Any) -> list[bytes]:
    """``requests`` over one connection to a SocketServer that dispatches to ``apis`` and times
    each request in ``channel``: their answers, once all of them have been sent."""

    async def run() -> list[bytes]:
        server = SocketServer("127.0.0.1", 0, apis.dispatch, max_request_size=1 << 20, max_in_flight=16, metrics=TransferMetrics(), request_metrics=channel)
        await server.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        try:
            writer.write(b"".join(encode_request(r, i, "kbroker-2") for i, r in enumerate(requests)))
            answers = []
            for _ in requests:
                size = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), 5), "big")
                answers.append(await reader.readexactly(size))
        finally:
            writer.close()
            await server.stop_accepting()
            await server.close_connections()
        return answers

    return asyncio.run(run())


def test_an_envelope_s_inner_request_is_counted_under_its_own_name_as_kafka_does() -> None:
    """Kafka 4.4's EnvelopeUtils answers the inner request as a Request of its own: its answer's
    errorCounts() go to ErrorsPerSec under CreateTopics, its RequestsPerSec, times and RequestBytes
    too (its version, its body's size); the Envelope that carried it is counted nowhere. An
    Envelope refused before its inner request is handled is counted under Envelope."""
    channel = RequestChannelMetrics()
    inner = _create_topics("new", "taken")

    async def create_topics(ctx: RequestContext, request: CreateTopicsRequest) -> Any:
        assert ctx.client.principal == "User:alice"
        await asyncio.sleep(0)  # as the controller's write: answered after dispatch
        return _created(request, {"new": NONE, "taken": int(ErrorCode.topic_already_exists)})

    envelope_handler = EnvelopeHandler({ApiKey.CREATE_TOPICS: create_topics}, channel)
    apis = KafkaApis({ApiKey.ENVELOPE: envelope_handler}, apis={int(ApiKey.ENVELOPE): CONTROLLER_APIS[int(ApiKey.ENVELOPE)]}, request_metrics=channel)
    inner_frame = encode_request(inner, 7, "admin")[4:]
    alice, address = serialize_principal("User:alice"), bytes([10, 0, 0, 7])
    # Metadata is never forwarded: that Envelope is refused.
    metadata = metadata_v12.MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    forwarded, refused = _answers(
        apis,
        channel,
        EnvelopeRequest(request_data=inner_frame, request_principal=alice, client_host_address=address),
        EnvelopeRequest(request_data=encode_request(metadata, 8, "admin")[4:], request_principal=alice, client_host_address=address),
    )

    # The wire is unchanged: the inner answer goes back inside an EnvelopeResponse.
    read_envelope = entity_reader(EnvelopeResponse)
    offset = 4 + (1 if response_header_version(ApiKey.ENVELOPE, 0) >= 1 else 0)
    envelope, _ = read_envelope(memoryview(forwarded).toreadonly(), offset)
    assert (envelope.error_code, int.from_bytes(envelope.response_data[:4], "big")) == (ErrorCode.none, 7)
    envelope, _ = read_envelope(memoryview(refused).toreadonly(), offset)
    assert (envelope.error_code, envelope.response_data) == (ErrorCode.invalid_request, None)

    s = _scrape(channel)
    create, env = ("request", "CreateTopics"), ("request", "Envelope")
    assert s[("kafka_network_requestmetrics_errors_total", frozenset({create, ("error", "NONE")}))] == 1
    assert s[("kafka_network_requestmetrics_errors_total", frozenset({create, ("error", "TOPIC_ALREADY_EXISTS")}))] == 1
    assert s[("kafka_network_requestmetrics_requests_total", frozenset({create, ("version", "7")}))] == 1
    inner_header = parse_request_header(bytearray(inner_frame))
    assert s[("kafka_network_requestmetrics_requestbytes_sum", frozenset({create}))] == len(inner_frame) - inner_header.body_offset
    assert s[("kafka_network_requestmetrics_totaltimems_count", frozenset({create}))] == 1
    # The refused Envelope, and nothing else, under Envelope; its inner Metadata nowhere.
    assert {k for k in s if env in k[1] and k[0].endswith("_total")} == {
        ("kafka_network_requestmetrics_errors_total", frozenset({env, ("error", "INVALID_REQUEST")})),
        ("kafka_network_requestmetrics_requests_total", frozenset({env, ("version", "0")})),
    }
    assert s[("kafka_network_requestmetrics_errors_total", frozenset({env, ("error", "INVALID_REQUEST")}))] == 1
    assert s[("kafka_network_requestmetrics_requests_total", frozenset({env, ("version", "0")}))] == 1
    assert s[("kafka_network_requestmetrics_totaltimems_count", frozenset({env}))] == 1
    assert not [k for k in s if ("request", "Metadata") in k[1]]


def _scrape(channel: RequestChannelMetrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RequestMetricsCollector(channel))
    text = generate_latest(registry).decode()
    return {(s.name, frozenset(s.labels.items())): s.value for f in text_string_to_metric_families(text) for s in f.samples}
