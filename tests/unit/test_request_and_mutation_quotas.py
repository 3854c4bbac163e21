"""The request_percentage and controller_mutation_rate quotas against Kafka's rules: request time
as a percentage of one thread with the throttle bounded to a window, Kafka's exemptions, the
KIP-599 token bucket with strict and permissive requests per API version, and the forwarding
broker answering THROTTLING_QUOTA_EXCEEDED per topic."""

from __future__ import annotations

import asyncio
import datetime
import uuid
from typing import Any

import pytest
from kio.schema.create_partitions.v3 import request as create_partitions_v3
from kio.schema.create_topics.v5 import request as create_topics_v5
from kio.schema.create_topics.v7 import request as create_topics_v7
from kio.schema.delete_topics.v5 import request as delete_topics_v5
from kio.schema.delete_topics.v6 import request as delete_topics_v6
from kio.schema.metadata.v12 import request as metadata_v12

from broker.client_request_quota_manager import REQUEST, ClientRequestQuotaManager, is_exempt
from broker.controller_mutation_quota_manager import MUTATION, UNBOUNDED, ControllerMutationQuotaManager
from broker.handlers.forwarding import ForwardToControllerHandler
from broker.kafka_apis import KafkaApis, RequestContext
from broker.metadata.metadata_image import MetadataImage, PartitionRegistration, TopicImage
from broker.network import ClientInfo, Throttle
from broker.wire_client import encode_request
from protocol.api_keys import SUPPORTED_APIS, ApiKey, response_schema
from protocol.entities import build, nested
from protocol.headers import RequestHeader, parse_request_header

CLIENT = (("client-id", "c"),)
SECOND_NS = 1_000_000_000
METADATA_ONLY = {int(ApiKey.METADATA): SUPPORTED_APIS[int(ApiKey.METADATA)]}


# -- request_percentage ---------------------------------------------------------------------------


def test_request_time_is_a_percentage_of_one_thread_and_the_throttle_at_most_a_window() -> None:
    m = ClientRequestQuotaManager(lambda: {CLIENT: {REQUEST: 10.0}}, samples=11, window_s=1)
    # One second of handling is 100 percent-seconds; over the assumed 10 s window, 10 %: the quota.
    assert m.record("alice", "c", SECOND_NS, 0) == 0
    # 15 % is (15 - 10) / 10 * 10 s = 5 s over, bounded to one window as Kafka's request quota.
    assert m.record("alice", "c", SECOND_NS // 2, 0) == 1000
    # Another client id has no quota.
    assert m.record("alice", "other", 100 * SECOND_NS, 0) == 0


def test_time_recorded_without_throttle_weighs_on_the_next_request() -> None:
    m = ClientRequestQuotaManager(lambda: {CLIENT: {REQUEST: 10.0}}, samples=11, window_s=1)
    m.record_no_throttle("alice", "c", SECOND_NS * 95 // 100, 0)  # 9.5 %: within the quota
    assert m.record("alice", "c", SECOND_NS // 10, 0) == 500  # 10.5 %: (10.5 - 10) / 10 * 10 s


def test_no_request_quota_no_timing() -> None:
    assert not ClientRequestQuotaManager(lambda: {CLIENT: {"producer_byte_rate": 1.0}}).enabled
    assert ClientRequestQuotaManager(lambda: {CLIENT: {REQUEST: 1.0}}).enabled


class _Fetch:
    def __init__(self, replica_id: int) -> None:
        self.replica_id = replica_id


class _Produce:
    def __init__(self, acks: int) -> None:
        self.acks = acks


def test_kafkas_exemptions() -> None:
    allowed, denied = (lambda: True), (lambda: False)
    assert is_exempt(ApiKey.FETCH, _Fetch(2), denied)  # a follower's fetch, whoever sends it
    assert not is_exempt(ApiKey.FETCH, _Fetch(-1), allowed)  # a consumer's
    assert is_exempt(ApiKey.PRODUCE, _Produce(0), denied)
    assert not is_exempt(ApiKey.PRODUCE, _Produce(-1), allowed)
    assert is_exempt(ApiKey.WRITE_TXN_MARKERS, object(), allowed)
    assert not is_exempt(ApiKey.WRITE_TXN_MARKERS, object(), denied)  # its refusal is throttled
    assert not is_exempt(ApiKey.METADATA, object(), allowed)


def _ctx(api_key: ApiKey, version: int, client_id: str = "c", principal: str = "User:alice") -> RequestContext:
    return RequestContext(RequestHeader(api_key, version, 7, client_id, 0), ClientInfo("conn", client_id, "127.0.0.1", principal=principal))


def _metadata_frame(client_id: str) -> tuple[RequestHeader, bytearray]:
    frame = bytearray(encode_request(metadata_v12.MetadataRequest(topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False), 7, client_id)[4:])
    return parse_request_header(frame), frame


def _metadata_answer(ctx: RequestContext, request: Any) -> Any:
    return build(response_schema(ApiKey.METADATA, ctx.version), throttle_time=0, brokers=(), cluster_id=None, controller_id=-1, topics=())


def test_a_client_over_its_request_quota_gets_a_throttle_time_and_a_held_connection() -> None:
    quota = ClientRequestQuotaManager(lambda: {CLIENT: {REQUEST: 1e-9}}, samples=2, window_s=1)
    apis = KafkaApis({ApiKey.METADATA: _metadata_answer}, apis=METADATA_ONLY, request_quota=quota)
    header, frame = _metadata_frame("c")
    answer = apis.dispatch(header, frame, ClientInfo("conn", "c", "127.0.0.1"))
    assert isinstance(answer, list) and answer[-1] == Throttle(1000)
    header, frame = _metadata_frame("free")
    assert len(apis.dispatch(header, frame, ClientInfo("conn", "free", "127.0.0.1"))) == 1  # type: ignore[arg-type]


def test_an_async_handler_is_charged_its_own_steps_not_its_waits() -> None:
    recorded: list[int] = []

    class Recording(ClientRequestQuotaManager):
        def record(self, user: str, client_id: str, nanos: int, now_ms: int) -> int:
            recorded.append(nanos)
            return 0

    async def waits(ctx: RequestContext, request: Any) -> Any:
        await asyncio.sleep(0.2)
        return _metadata_answer(ctx, request)

    apis = KafkaApis({ApiKey.METADATA: waits}, apis=METADATA_ONLY, request_quota=Recording(lambda: {CLIENT: {REQUEST: 1.0}}))
    header, frame = _metadata_frame("c")

    async def run() -> Any:
        return await apis.dispatch(header, frame, ClientInfo("conn", "c", "127.0.0.1"))  # type: ignore[misc]

    answer = asyncio.run(run())
    assert len(answer) == 1 and len(recorded) == 1
    assert recorded[0] < 100_000_000, "the 200 ms the handler waited was counted as its work"


def test_an_answers_own_throttle_time_holds_the_connection() -> None:
    def throttled(ctx: RequestContext, request: Any) -> Any:
        return build(response_schema(ApiKey.METADATA, ctx.version), throttle_time=250, brokers=(), cluster_id=None, controller_id=-1, topics=())

    apis = KafkaApis({ApiKey.METADATA: throttled}, apis=METADATA_ONLY)
    header, frame = _metadata_frame("c")
    assert apis.dispatch(header, frame, ClientInfo("conn", "c", "127.0.0.1"))[-1] == Throttle(250)  # type: ignore[index]


# -- controller_mutation_rate -----------------------------------------------------------------------


def mutation_manager(rate: float = 1.0, samples: int = 3) -> ControllerMutationQuotaManager:
    return ControllerMutationQuotaManager(lambda: {CLIENT: {MUTATION: rate}}, samples=samples, window_s=1)


def test_strict_takes_a_topic_while_the_bucket_is_not_below_zero_then_refuses() -> None:
    m = mutation_manager()  # a burst of 3 partitions, refilled at 1 a second
    quota = m.new_quota("alice", "c", ApiKey.CREATE_TOPICS, 6, 0)
    assert quota.strict
    assert quota.record(5, 0)  # the bucket was full: 5 partitions taken though only 3 were there
    assert quota.throttle_time_ms(0) == 0  # a strict request that went through is not throttled
    assert not quota.record(1, 0)  # 2 partitions below zero: 2 s to wait
    assert quota.throttle_time_ms(0) == 2000
    assert quota.throttle_time_ms(500) == 1500  # less the time since it was measured
    later = m.new_quota("alice", "c", ApiKey.CREATE_TOPICS, 6, 2000)
    assert later.record(1, 2000) and later.throttle_time_ms(2000) == 0


def test_permissive_takes_everything_and_throttles_after() -> None:
    m = mutation_manager()
    quota = m.new_quota("alice", "c", ApiKey.CREATE_TOPICS, 5, 0)
    assert not quota.strict
    assert quota.record(2, 0) and quota.throttle_time_ms(0) == 0
    assert quota.record(4, 0)  # 3 below zero
    assert quota.throttle_time_ms(0) == 3000
    # The bucket is shared by the entity: a strict request now is refused.
    assert not m.new_quota("alice", "c", ApiKey.CREATE_TOPICS, 6, 1000).record(1, 1000)


def test_the_bucket_refills_at_the_quota_up_to_its_burst() -> None:
    m = mutation_manager(rate=2.0, samples=3)  # burst 6
    quota = m.new_quota("alice", "c", ApiKey.DELETE_TOPICS, 5, 0)
    assert quota.record(6, 0)
    assert quota.record(0, 0)
    quota.record(1, 0)
    assert not quota.record(1, 0) and quota.throttle_time_ms(0) == 500  # -1 token at 2 per second
    # Long idle: full again, but no more than the burst.
    quota = m.new_quota("alice", "c", ApiKey.DELETE_TOPICS, 5, 3_600_000)
    assert quota.record(6, 3_600_000) and quota.record(1, 3_600_000)
    assert not quota.record(1, 3_600_000)


@pytest.mark.parametrize(
    ("api_key", "permissive", "strict"),
    [(ApiKey.CREATE_TOPICS, 5, 6), (ApiKey.CREATE_PARTITIONS, 2, 3), (ApiKey.DELETE_TOPICS, 4, 5)],
)
def test_strict_from_kafkas_versions(api_key: ApiKey, permissive: int, strict: int) -> None:
    m = mutation_manager()
    assert not m.new_quota("alice", "c", api_key, permissive, 0).strict
    assert m.new_quota("alice", "c", api_key, strict, 0).strict


def test_no_mutation_quota_is_unbounded() -> None:
    m = ControllerMutationQuotaManager(lambda: {CLIENT: {REQUEST: 1.0}})
    assert m.new_quota("alice", "c", ApiKey.CREATE_TOPICS, 7, 0) is UNBOUNDED
    assert UNBOUNDED.record(10**9, 0) and UNBOUNDED.throttle_time_ms(0) == 0


# -- the forwarding broker --------------------------------------------------------------------------


class FakeController:
    """Answers every forwarded item as made, except the names in ``refuse``."""

    def __init__(self, refuse: frozenset[str] = frozenset()) -> None:
        self.forwarded: list[Any] = []
        self._refuse = refuse

    async def send(self, request: Any, timeout_ms: int | None = None) -> Any:
        self.forwarded.append(request)
        api_key, version = ApiKey(int(request.__api_key__)), int(request.__version__)
        schema = response_schema(api_key, version)
        code = lambda name: 36 if name in self._refuse else 0  # noqa: E731 - TOPIC_ALREADY_EXISTS
        if api_key == ApiKey.CREATE_TOPICS:
            cls = nested(schema, "CreatableTopicResult")
            items = tuple(
                build(cls, name=t.name, topic_id=uuid.uuid4(), error_code=code(t.name), error_message=None, topic_config_error_code=0, num_partitions=t.num_partitions, replication_factor=1, configs=())
                for t in request.topics
            )
            return build(schema, throttle_time=0, topics=items)
        if api_key == ApiKey.DELETE_TOPICS:
            cls = nested(schema, "DeletableTopicResult")
            names = request.topic_names if version < 6 else [t.name for t in request.topics]
            return build(schema, throttle_time=0, responses=tuple(build(cls, name=n, topic_id=uuid.UUID(int=0), error_code=code(n), error_message=None) for n in names))
        cls = nested(schema, "CreatePartitionsTopicResult")
        return build(schema, throttle_time=0, results=tuple(build(cls, name=t.name, error_code=code(t.name), error_message=None) for t in request.topics))


def _image(**partitions: int) -> MetadataImage:
    registration = PartitionRegistration(replicas=(1,), isr=(1,), leader=1, leader_epoch=0, partition_epoch=0)
    topics = {name: TopicImage(name, uuid.UUID(int=i + 1), {p: registration for p in range(n)}) for i, (name, n) in enumerate(partitions.items())}
    return MetadataImage(topics=topics, topics_by_id={t.topic_id: t for t in topics.values()})


def _handler(api_key: ApiKey, controller: FakeController, image: MetadataImage, manager: ControllerMutationQuotaManager) -> ForwardToControllerHandler:
    return ForwardToControllerHandler(api_key, controller, image=lambda: image, mutation_quota=manager, default_partitions=2)  # type: ignore[arg-type]


def _creatable(module: Any, name: str, partitions: int) -> Any:
    return module.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1, assignments=(), configs=())


def _throttle_ms(response: Any) -> int:
    assert isinstance(response.throttle_time, datetime.timedelta)
    return round(response.throttle_time.total_seconds() * 1000)


def test_strict_create_topics_refuses_the_topics_after_the_quota_without_forwarding_them() -> None:
    controller, m = FakeController(), mutation_manager()
    handler = _handler(ApiKey.CREATE_TOPICS, controller, _image(), m)
    topics = tuple(_creatable(create_topics_v7, name, n) for name, n in (("a", 5), ("b", 1), ("c", -1)))
    request = create_topics_v7.CreateTopicsRequest(topics=topics, timeout=datetime.timedelta(seconds=5), validate_only=False)
    response = asyncio.run(handler(_ctx(ApiKey.CREATE_TOPICS, 7), request))
    assert [(t.name, t.error_code) for t in response.topics] == [("a", 0), ("b", 89), ("c", 89)]
    assert response.topics[1].error_message is None  # Kafka's default message, which its ApiError leaves out
    assert response.topics[1].num_partitions == -1
    assert [t.name for t in controller.forwarded[0].topics] == ["a"]
    assert 1900 <= _throttle_ms(response) <= 2000


def test_permissive_create_topics_goes_through_and_throttles_after() -> None:
    controller, m = FakeController(), mutation_manager()
    handler = _handler(ApiKey.CREATE_TOPICS, controller, _image(), m)
    topics = tuple(_creatable(create_topics_v5, name, n) for name, n in (("a", 5), ("b", 1), ("c", -1)))
    request = create_topics_v5.CreateTopicsRequest(topics=topics, timeout=datetime.timedelta(seconds=5), validate_only=False)
    response = asyncio.run(handler(_ctx(ApiKey.CREATE_TOPICS, 5), request))
    assert [t.error_code for t in response.topics] == [0, 0, 0]
    # 5 + 1 + 2 (num.partitions) from a bucket of 3: 5 below zero.
    assert 4900 <= _throttle_ms(response) <= 5000


def test_what_the_controller_refuses_is_not_counted() -> None:
    controller, m = FakeController(refuse=frozenset({"exists", "a"})), mutation_manager()
    handler = _handler(ApiKey.CREATE_TOPICS, controller, _image(exists=4), m)
    topics = tuple(_creatable(create_topics_v7, name, n) for name, n in (("exists", 4), ("a", 3), ("b", 3)))
    request = create_topics_v7.CreateTopicsRequest(topics=topics, timeout=datetime.timedelta(seconds=5), validate_only=False)
    response = asyncio.run(handler(_ctx(ApiKey.CREATE_TOPICS, 7), request))
    # "exists" counts nothing (the image shows it), "a" is given back once the controller refused it.
    assert [t.error_code for t in response.topics] == [36, 36, 0]
    assert m.new_quota("alice", "c", ApiKey.CREATE_TOPICS, 7, 0).record(1, 0)  # 3 - 3 = 0: not below zero yet


def test_strict_delete_topics_counts_each_topics_partitions() -> None:
    controller, m = FakeController(), mutation_manager()
    image = _image(x=4, y=1)
    handler = _handler(ApiKey.DELETE_TOPICS, controller, image, m)
    response = asyncio.run(handler(_ctx(ApiKey.DELETE_TOPICS, 5), delete_topics_v5.DeleteTopicsRequest(topic_names=("x", "y"), timeout=datetime.timedelta(seconds=5))))
    assert [(r.name, r.error_code) for r in response.responses] == [("x", 0), ("y", 89)]
    assert controller.forwarded[0].topic_names == ("x",)
    # v6 by id: the refusal names the topic and its id, as Kafka's controller does.
    by_id = delete_topics_v6.DeleteTopicState(name=None, topic_id=image.topics["y"].topic_id)
    response = asyncio.run(handler(_ctx(ApiKey.DELETE_TOPICS, 6), delete_topics_v6.DeleteTopicsRequest(topics=(by_id,), timeout=datetime.timedelta(seconds=5))))
    assert [(r.name, r.topic_id, r.error_code) for r in response.responses] == [("y", image.topics["y"].topic_id, 89)]


def test_strict_create_partitions_counts_the_added_partitions() -> None:
    controller, m = FakeController(), mutation_manager()
    handler = _handler(ApiKey.CREATE_PARTITIONS, controller, _image(t=1, u=1), m)
    topics = (
        create_partitions_v3.CreatePartitionsTopic(name="t", count=5, assignments=None),
        create_partitions_v3.CreatePartitionsTopic(name="u", count=2, assignments=None),
    )
    response = asyncio.run(handler(_ctx(ApiKey.CREATE_PARTITIONS, 3), create_partitions_v3.CreatePartitionsRequest(topics=topics, timeout=datetime.timedelta(seconds=5), validate_only=False)))
    assert [(r.name, r.error_code) for r in response.results] == [("t", 0), ("u", 89)]
    assert 900 <= _throttle_ms(response) <= 1000
