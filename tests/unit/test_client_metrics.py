"""Client metrics (KIP-714), sans-IO: subscriptions checked as Kafka's ClientMetricsConfigs checks them
(every message below is Kafka 4.4's answer to the same IncrementalAlterConfigs), the controller's
records, the match rules, GetTelemetrySubscriptions, the PushTelemetry rules in Kafka's order, the
OTLP decoding and the instance cache (broker/client_metrics_config.py, protocol/otlp_metrics.py,
broker/client_metrics_manager.py)."""

from __future__ import annotations

import gzip
import struct
import uuid
from types import MappingProxyType

import pytest
import zstandard
from kio.schema.errors import ErrorCode

from broker.client_metrics_config import ClientAttributes, ClientMetricsConfigError, described_configs, parse_subscription, subscription_id, validate
from broker.client_metrics_manager import ClientMetricsManager
from broker.controller.configuration_control_manager import ConfigurationControlManager
from broker.metadata.metadata_image import CLIENT_METRICS_RESOURCE, EMPTY_IMAGE, MetadataImage
from protocol.otlp_metrics import decode_metrics_data

INVALID_REQUEST, INVALID_CONFIG = ErrorCode.invalid_request, ErrorCode.invalid_config


@pytest.mark.parametrize(
    ("configs", "error", "message"),
    [
        ({"foo": "1"}, INVALID_REQUEST, "Unknown client metrics configuration: foo"),
        ({"interval.ms": "abc"}, INVALID_CONFIG, "Invalid value abc for configuration interval.ms: Not a number of type INT"),
        ({"interval.ms": ""}, INVALID_CONFIG, "Invalid value  for configuration interval.ms: Not a number of type INT"),
        ({"interval.ms": "99"}, INVALID_REQUEST, "Invalid value 99 for interval.ms, interval must be between 100 and 3600000 (1 hour)"),
        ({"interval.ms": "3600001"}, INVALID_REQUEST, "Invalid value 3600001 for interval.ms, interval must be between 100 and 3600000 (1 hour)"),
        ({"metrics": "a,,b"}, INVALID_CONFIG, "Configuration 'metrics' values must not be empty."),
        ({"metrics": "a,b,"}, INVALID_CONFIG, "Configuration 'metrics' values must not be empty."),
        ({"match": "client_id=a,"}, INVALID_CONFIG, "Configuration 'match' values must not be empty."),
        ({"match": "client_id"}, INVALID_CONFIG, "Illegal client matching pattern: client_id"),
        ({"match": "client_id=a=b"}, INVALID_CONFIG, "Illegal client matching pattern: client_id=a=b"),
        ({"match": "client_id=("}, INVALID_CONFIG, "Illegal client matching pattern: client_id=("),
        ({"match": "=a"}, INVALID_CONFIG, "Illegal client matching pattern: =a"),
        ({"match": "bogus=a"}, INVALID_CONFIG, "Illegal client matching pattern: bogus=a"),
        # The unknown name first, then the values in ConfigDef's order (metrics before interval.ms).
        ({"foo": "1", "interval.ms": "5"}, INVALID_REQUEST, "Unknown client metrics configuration: foo"),
        ({"metrics": "a,,", "interval.ms": "x"}, INVALID_CONFIG, "Configuration 'metrics' values must not be empty."),
    ],
)
def test_refused_subscriptions_get_kafkas_errors(configs: dict[str, str], error: int, message: str) -> None:
    with pytest.raises(ClientMetricsConfigError) as refused:
        validate("sub", configs)
    assert (refused.value.error_code, str(refused.value)) == (error, message)


@pytest.mark.parametrize(
    "configs",
    [{"metrics": "a,a"}, {"metrics": ""}, {"metrics": " "}, {"match": " client_id = a "}, {"match": "client_id=a="}, {"match": "client_id=a,client_id=b"}, {"interval.ms": " 500 "}, {}],
)
def test_accepted_subscriptions(configs: dict[str, str]) -> None:
    validate("sub", configs)


def test_a_nameless_subscription_is_refused() -> None:
    with pytest.raises(ClientMetricsConfigError, match="Subscription name can't be empty"):
        validate("", {"metrics": "x"})


def test_described_as_kafka_shows_it() -> None:
    assert described_configs({"metrics": " a , a ", "interval.ms": " 500 "}) == [
        ("interval.ms", "500", True),
        ("match", "", False),
        ("metrics", "a", True),
    ]
    assert described_configs({}) == [("interval.ms", "300000", False), ("match", "", False), ("metrics", "", False)]


def alter(image: MetadataImage, name: str, ops: list[tuple[str, int, str | None]]):  # type: ignore[no-untyped-def]
    return ConfigurationControlManager().alter_configs(
        image, [(CLIENT_METRICS_RESOURCE, name, ops)], incremental=True, validate_only=False, validate_config=lambda *_: None, node_id=1
    )


def test_the_controller_writes_subscriptions_as_config_records() -> None:
    written = alter(EMPTY_IMAGE, "sub", [("metrics", 0, "org.apache.kafka.producer."), ("interval.ms", 0, "1000")])
    assert [r.error_code for r in written.response] == [0]
    assert sorted((r.resource_type, r.resource_name, r.name, r.value) for r in written.records) == [
        (16, "sub", "interval.ms", "1000"),
        (16, "sub", "metrics", "org.apache.kafka.producer."),
    ]
    image = MetadataImage(configs=MappingProxyType({(16, "sub"): MappingProxyType({"metrics": "m", "interval.ms": "1000"})}))
    refused = alter(image, "sub", [("interval.ms", 0, "50")])
    assert [(r.error_code, r.error_message) for r in refused.response] == [
        (INVALID_REQUEST, "Invalid value 50 for interval.ms, interval must be between 100 and 3600000 (1 hour)")
    ]
    assert refused.records == []
    appended = alter(image, "sub", [("metrics", 2, "x")])
    assert [(r.error_code, r.error_message) for r in appended.response] == [(INVALID_CONFIG, "Can't APPEND to key metrics because its type is not LIST.")]
    deleted = alter(image, "sub", [("metrics", 1, None), ("interval.ms", 1, None)])
    assert sorted((r.name, r.value) for r in deleted.records) == [("interval.ms", None), ("metrics", None)]


ID = uuid.UUID("6a1ff2a9-3a40-4c33-8b0e-8de3ed8e1b5f")
JAVA = ClientAttributes("app-1", "apache-kafka-java", "4.4.0", "127.0.0.1", "50123")


def manager(subscriptions: dict[str, dict[str, str]], **kw) -> ClientMetricsManager:  # type: ignore[no-untyped-def]
    m = ClientMetricsManager(new_uuid=lambda: ID, **kw)
    m.update_subscriptions(subscriptions)
    return m


def test_a_client_gets_the_union_of_the_subscriptions_it_matches() -> None:
    m = manager(
        {
            "producers": {"metrics": "org.apache.kafka.producer.", "interval.ms": "1000"},
            "java": {"metrics": "org.apache.kafka.consumer.", "interval.ms": "2000", "match": "client_software_name=apache-kafka-.*,client_id=app-\\d"},
            "python": {"metrics": "x.", "interval.ms": "100", "match": "client_software_name=confluent-kafka-python"},
            "port": {"metrics": "y.", "match": "client_source_port=50"},  # the whole port must match
        }
    )
    answer = m.get_telemetry_subscriptions(uuid.UUID(int=0), JAVA, now_ms=10_000)
    assert answer.error_code == 0
    assert answer.client_instance_id == ID  # assigned for the zero UUID
    assert set(answer.requested_metrics) == {"org.apache.kafka.producer.", "org.apache.kafka.consumer."}
    assert answer.push_interval_ms == 1000
    assert answer.accepted_compression_types == (4, 3, 1, 2)
    assert (answer.telemetry_max_bytes, answer.delta_temporality) == (1_048_576, True)
    assert answer.subscription_id == subscription_id(answer.requested_metrics, 1000, ID)


def test_a_star_subscribes_everything_and_no_match_subscribes_nothing() -> None:
    m = manager({"all": {"metrics": "*,a.", "match": "client_instance_id=6a1ff2a9-.*"}, "other": {"metrics": "b.", "match": "client_id=nobody"}})
    assert m.get_telemetry_subscriptions(None, JAVA, 10_000).requested_metrics == ("*",)
    lonely = manager({"other": {"metrics": "b.", "match": "client_id=nobody"}})
    answer = lonely.get_telemetry_subscriptions(None, JAVA, 10_000)
    assert (answer.requested_metrics, answer.push_interval_ms) == ((), 300_000)
    # A missing attribute never matches.
    assert manager({"s": {"metrics": "b.", "match": "client_software_name=.*"}}).get_telemetry_subscriptions(None, ClientAttributes("c"), 10_000).requested_metrics == ()


def subscribed(interval: int = 1000) -> tuple[ClientMetricsManager, int]:
    m = manager({"s": {"metrics": "org.", "interval.ms": str(interval)}}, telemetry_max_bytes=100)
    answer = m.get_telemetry_subscriptions(None, JAVA, 10_000)
    return m, answer.subscription_id


def test_push_rules_in_kafkas_order() -> None:
    m, sub = subscribed()
    push = lambda now, **kw: m.push_telemetry(kw.get("id", ID), kw.get("sub", sub), kw.get("terminating", False), kw.get("codec", 0), kw.get("data", b""), JAVA, now)[0]  # noqa: E731
    assert push(10_000, id=uuid.UUID(int=0)) == ErrorCode.invalid_request
    assert push(10_000, id=uuid.UUID(int=1)) == ErrorCode.invalid_request
    assert push(10_100) == 0  # the first push after a GetTelemetrySubscriptions may come early
    assert push(10_200) == ErrorCode.throttling_quota_exceeded
    assert push(11_100, sub=sub + 1) == ErrorCode.unknown_subscription_id
    assert push(12_100, codec=9) == ErrorCode.unsupported_compression_type
    assert push(13_100, data=b"x" * 101) == ErrorCode.telemetry_too_large
    assert push(13_200, terminating=True) == 0  # a terminating push is never throttled
    assert push(20_000) == ErrorCode.invalid_request  # nothing after it


def test_get_is_throttled_within_the_interval_unless_the_last_push_was_refused_for_its_subscription() -> None:
    m, sub = subscribed()
    assert m.get_telemetry_subscriptions(ID, JAVA, 10_500).error_code == ErrorCode.throttling_quota_exceeded
    assert m.push_telemetry(ID, sub + 1, False, 0, b"", JAVA, 10_600)[0] == ErrorCode.unknown_subscription_id
    assert m.get_telemetry_subscriptions(ID, JAVA, 10_700).error_code == 0


def test_a_changed_subscription_gives_a_new_subscription_id() -> None:
    m, sub = subscribed()
    m.update_subscriptions({"s": {"metrics": "org.,com.", "interval.ms": "1000"}})
    assert m.push_telemetry(ID, sub, False, 0, b"", JAVA, 10_100)[0] == ErrorCode.unknown_subscription_id
    answer = m.get_telemetry_subscriptions(ID, JAVA, 10_200)
    assert answer.error_code == 0 and answer.subscription_id != sub and set(answer.requested_metrics) == {"org.", "com."}


# OTLP MetricsData, encoded by hand.
def field(number: int, wire: int, payload: bytes | int) -> bytes:
    key = varint(number << 3 | wire)
    if wire == 2:
        assert isinstance(payload, bytes)
        return key + varint(len(payload)) + payload
    assert isinstance(payload, int)
    return key + (varint(payload) if wire == 0 else payload.to_bytes(8, "little"))


def varint(v: int) -> bytes:
    out = bytearray()
    while True:
        out.append(v & 0x7F | (0x80 if v > 0x7F else 0))
        v >>= 7
        if not v:
            return bytes(out)


def double(v: float) -> int:
    return int.from_bytes(struct.pack("<d", v), "little")


def key_value(k: str, v: str) -> bytes:
    return field(1, 2, k.encode()) + field(2, 2, field(1, 2, v.encode()))


def metrics_data() -> bytes:
    gauge = field(1, 2, b"org.apache.kafka.producer.record.queue.time.avg") + field(5, 2, field(1, 2, field(7, 2, key_value("node_id", "1")) + field(3, 1, 7) + field(4, 1, double(2.5))))
    total = field(1, 2, b"org.apache.kafka.producer.connection.creation.total") + field(7, 2, field(1, 2, field(6, 1, 3)) + field(3, 0, 1))
    histogram = field(1, 2, b"h") + field(9, 2, field(1, 2, field(4, 1, 4) + field(5, 1, double(10.0))))
    scope = field(2, 2, gauge) + field(2, 2, total) + field(2, 2, histogram)
    resource = field(1, 2, key_value("client_id", "app-1"))
    return field(1, 2, field(1, 2, resource) + field(2, 2, scope))


def test_otlp_metrics_data_is_decoded() -> None:
    resource, points = decode_metrics_data(metrics_data())
    assert resource == (("client_id", "app-1"),)
    assert [(p.name, p.kind, p.value, p.attributes, p.count) for p in points] == [
        ("org.apache.kafka.producer.record.queue.time.avg", "gauge", 2.5, (("node_id", "1"),), None),
        ("org.apache.kafka.producer.connection.creation.total", "sum", 3.0, (), None),
        ("h", "histogram", 10.0, (), 4),
    ]
    assert points[1].monotonic and points[0].time_unix_nano == 7


@pytest.mark.parametrize(("codec", "compress"), [(0, bytes), (1, gzip.compress), (4, zstandard.ZstdCompressor().compress)])
def test_the_latest_push_is_kept_decoded(codec: int, compress) -> None:  # type: ignore[no-untyped-def]
    m, sub = subscribed()
    m.push_telemetry(ID, sub, False, 0, b"", JAVA, 10_100)  # an empty push changes nothing
    assert m.latest_pushes() == []
    m = manager({"s": {"metrics": "org.", "interval.ms": "1000"}})
    sub = m.get_telemetry_subscriptions(None, JAVA, 10_000).subscription_id
    assert m.push_telemetry(ID, sub, False, codec, compress(metrics_data()), JAVA, 10_100) == (0, None)
    (push,) = m.latest_pushes()
    assert push.client_instance_id == ID and push.client.client_id == "app-1" and push.received_ms == 10_100
    assert push.values() == {
        "org.apache.kafka.producer.record.queue.time.avg": 2.5,
        "org.apache.kafka.producer.connection.creation.total": 3.0,
        "h": 10.0,
    }


def test_a_payload_that_does_not_decode_is_an_invalid_record() -> None:
    m, sub = subscribed()
    assert m.push_telemetry(ID, sub, False, 1, b"not gzip", JAVA, 10_100)[0] == ErrorCode.invalid_record
    assert m.push_telemetry(ID, sub, False, 0, b"\x0a\xff", JAVA, 11_100)[0] == ErrorCode.invalid_record
    assert m.latest_pushes() == []


def test_instances_expire_and_the_cache_is_bounded() -> None:
    ids = iter(uuid.UUID(int=i) for i in range(2, 100))
    m = ClientMetricsManager(cache_max_size=3, new_uuid=lambda: next(ids))
    m.update_subscriptions({"s": {"metrics": "org.", "interval.ms": "30000"}})
    for _ in range(5):
        m.get_telemetry_subscriptions(None, JAVA, 0)
    assert len(m) == 3
    # Kept max(60 s, 3 intervals) after the last request.
    assert len(m.latest_pushes(89_999)) == 0 and len(m) == 3
    m.latest_pushes(90_000)
    assert len(m) == 0


def test_client_software_comes_from_the_connections_api_versions() -> None:
    m = ClientMetricsManager()
    m.record_client_software("127.0.0.1:5000-7", "librdkafka", "2.16.0")
    software = m.client_software("127.0.0.1:5000-7")
    assert ClientAttributes.of("c", "127.0.0.1:5000", software) == ClientAttributes("c", "librdkafka", "2.16.0", "127.0.0.1", "5000")
    assert ClientAttributes.of(None, "::1:6000", None) == ClientAttributes(None, None, None, "::1", "6000")


def test_subscription_parsing() -> None:
    sub = parse_subscription("s", {"metrics": " a , b , a ", "match": "client_id = x.*"})
    assert (sub.metrics, sub.interval_ms, sorted(sub.match)) == (("a", "b"), 300_000, ["client_id"])


def test_a_payload_that_inflates_past_the_limit_is_refused() -> None:
    import lz4.frame

    from broker.client_metrics_manager import bounded_decompress
    from protocol.compression import CompressionError

    bomb = bytes(64 * 1024)
    for codec, compress in [(1, gzip.compress), (3, lz4.frame.compress), (4, zstandard.ZstdCompressor().compress)]:
        assert bounded_decompress(codec, compress(bomb)) == bomb
        with pytest.raises(CompressionError):
            bounded_decompress(codec, compress(bomb), limit=1000)
