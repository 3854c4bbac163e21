"""ErrorsPerSec (broker/metrics/request_errors.py): each answer's error codes counted as Kafka 4.4's
``AbstractResponse.errorCounts()`` counts them, and exported as the JMX exporter names the meter."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import request as metadata_v12
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from broker.kafka_apis import KafkaApis, RequestContext
from broker.metrics.request_errors import ErrorCounts, count_response, error_name
from broker.metrics.request_metrics import RequestChannelMetrics, RequestMetricsCollector
from broker.network import ClientInfo
from broker.wire_client import encode_request
from protocol.api_keys import SUPPORTED_APIS, ApiKey, response_schema
from protocol.entities import build, nested
from protocol.headers import parse_request_header

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
