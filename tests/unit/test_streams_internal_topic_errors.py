"""What a StreamsGroupHeartbeat answer says about internal topics that could not be created, as
Kafka 4.4's KafkaApis.handleStreamsGroupHeartbeat says it: "; Unauthorized to CREATE on topics
a, b." when the member may not CREATE some of them (and then none is asked for), else the creation
errors still kept, "; Creation failed: a (error), b (error), c (error) and N more." (three at most:
KafkaApis' take(3)). Both lists in the order of Kafka's java.util.HashMaps, pinned here from a JVM
(java.util.HashMap, and Kafka's missingInternalTopics replayed in Java); the texts from the
constants of Kafka 4.4's KafkaApis class and a Kafka 4.4 node's answers. The errors are kept by
ExpiringErrorCache, Kafka's, for twice the group's heartbeat interval."""

from __future__ import annotations

import asyncio
import datetime
import types
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.streams_group_heartbeat.v0 import request as heartbeat_v0
from kio.static.primitive import i16, i32

from broker.auth_helper import AuthHelper
from broker.config import load_config
from broker.expiring_error_cache import ExpiringErrorCache
from broker.group.streams_group import ASSIGNMENT_DELAYED, MISSING_INTERNAL_TOPICS, InternalTopic
from broker.group_coordinator import GroupCoordinator
from broker.group.streams_group_manager import Status, with_internal_topic_errors
from broker.group.streams_group_records import StreamsGroupTopologyValue, StreamsTopicInfo, Subtopology
from broker.group.streams_group import creatable_topics_order
from broker.handlers.streams_groups import StreamsGroupHeartbeatHandler
from broker.java_hash_map import java_hash_map_order
from broker.metadata.metadata_delta import apply_records
from broker.metadata.metadata_image import EMPTY_IMAGE
from broker.metadata.metadata_records import FeatureLevelRecord, PartitionRecord, TopicRecord
from broker.security.standard_acl import AclOperation, ResourceType
from broker.security.standard_authorizer import Action
from protocol.api_keys import ApiKey
from tests.unit.test_streams_groups_v1 import Coordinator, context

MISSING = Status(MISSING_INTERNAL_TOPICS, "Internal topics are missing: a, b")
DELAYED = Status(ASSIGNMENT_DELAYED, "Assignment delayed due to the configured initial rebalance delay.")

# -- the status detail -------------------------------------------------------------------------------


def test_unauthorized_topics_are_appended_to_the_missing_internal_topics_detail() -> None:
    assert with_internal_topic_errors([DELAYED, MISSING], unauthorized=["b", "a"]) == (
        DELAYED,
        Status(MISSING_INTERNAL_TOPICS, "Internal topics are missing: a, b; Unauthorized to CREATE on topics b, a."),
    )
    # Without a MISSING_INTERNAL_TOPICS status, Kafka adds one.
    assert with_internal_topic_errors([DELAYED], unauthorized=["a"]) == (DELAYED, Status(MISSING_INTERNAL_TOPICS, "Unauthorized to CREATE on topics a."))
    # When some are refused, the creation errors are not told.
    assert with_internal_topic_errors([MISSING], unauthorized=["a"], creation_errors={"b": "Boom."}) == (
        Status(MISSING_INTERNAL_TOPICS, "Internal topics are missing: a, b; Unauthorized to CREATE on topics a."),
    )


def errors(count: int) -> dict[str, str]:
    return {f"t{i}": f"Error {i}." for i in range(count)}


def test_creation_errors_are_cut_after_three() -> None:
    def told(count: int) -> str:
        [status] = with_internal_topic_errors([MISSING], creation_errors=errors(count))
        return status.status_detail.removeprefix(MISSING.status_detail)

    assert told(1) == "; Creation failed: t0 (Error 0.)."
    assert told(3) == "; Creation failed: t0 (Error 0.), t1 (Error 1.), t2 (Error 2.)."
    assert told(4) == "; Creation failed: t0 (Error 0.), t1 (Error 1.), t2 (Error 2.) and 1 more."
    assert told(7) == "; Creation failed: t0 (Error 0.), t1 (Error 1.), t2 (Error 2.) and 4 more."


def test_creation_errors_are_told_only_while_topics_are_missing() -> None:
    assert with_internal_topic_errors([DELAYED], creation_errors=errors(2)) == (DELAYED,)
    assert with_internal_topic_errors([], creation_errors=errors(2)) == ()
    assert with_internal_topic_errors([DELAYED, MISSING]) == (DELAYED, MISSING)


# -- Kafka's HashMap orders ---------------------------------------------------------------------------


def test_java_hash_map_order_is_a_jvms() -> None:
    # new HashMap<>(), put in this order, keySet() joined: Java 17.
    five = ["app-store-changelog", "app-counts-changelog", "app-repartition", "app-KSTREAM-AGGREGATE-STATE-STORE-0000000003-changelog",
            "app-KSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition"]  # fmt: skip
    assert java_hash_map_order(five) == [
        "app-counts-changelog",
        "app-KSTREAM-AGGREGATE-STATE-STORE-0000000003-changelog",
        "app-KSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition",
        "app-repartition",
        "app-store-changelog",
    ]
    assert java_hash_map_order([f"wc-c{i}" for i in range(5)]) == ["wc-c0", "wc-c1", "wc-c4", "wc-c2", "wc-c3"]
    # Fourteen keys: the table has grown to 32 buckets.
    assert java_hash_map_order([f"t{i}" for i in range(14)]) == ["t4", "t5", "t6", "t7", "t8", "t9", "t10", "t12", "t11", "t13", "t0", "t1", "t2", "t3"]


def info(name: str) -> StreamsTopicInfo:
    return StreamsTopicInfo(name=name, partitions=0, replication_factor=0, topic_configs=())


def subtopology(subtopology_id: str, repartition: Iterable[str], changelogs: Iterable[str]) -> Subtopology:
    return Subtopology(
        subtopology_id=subtopology_id,
        source_topics=("input",),
        source_topic_regex=(),
        state_changelog_topics=tuple(info(n) for n in changelogs),
        repartition_sink_topics=(),
        repartition_source_topics=tuple(info(n) for n in repartition),
        copartition_groups=(),
    )


def test_creatable_topics_come_in_the_order_of_kafkas_missing_internal_topics() -> None:
    """Fourteen internal topics over three subtopologies (out of id order), two of which exist:
    the HashMap had grown to 32 buckets before they were taken out. Pinned from a JVM running the
    puts of InternalTopicManager.missingInternalTopics (a TreeMap of subtopologies, each one's
    topics from Collectors.toMap) and the two removes."""
    topology = StreamsGroupTopologyValue(
        epoch=0,
        subtopologies=(
            subtopology(
                "1",
                ["app-KSTREAM-AGGREGATE-0000000004-repartition", "app-KTABLE-FK-JOIN-0000000012-repartition"],
                ["app-counts-changelog", "app-totals-changelog", "app-KTABLE-FK-JOIN-0000000012-changelog", "app-s1-a-changelog", "app-s1-b-changelog"],
            ),
            subtopology("0", [], ["app-store-changelog", "app-s0-a-changelog", "app-s0-b-changelog", "app-s0-c-changelog"]),
            subtopology("2", ["app-s2-repartition"], ["app-s2-a-changelog", "app-s2-b-changelog"]),
        ),
    )
    existing = {"app-store-changelog", "app-s2-repartition"}
    every = {t.name for s in topology.subtopologies for t in (*s.repartition_source_topics, *s.state_changelog_topics)}
    assert creatable_topics_order(topology, sorted(every - existing)) == [
        "app-totals-changelog",
        "app-s2-b-changelog",
        "app-KTABLE-FK-JOIN-0000000012-changelog",
        "app-s0-a-changelog",
        "app-KTABLE-FK-JOIN-0000000012-repartition",
        "app-counts-changelog",
        "app-KSTREAM-AGGREGATE-0000000004-repartition",
        "app-s0-c-changelog",
        "app-s1-b-changelog",
        "app-s1-a-changelog",
        "app-s2-a-changelog",
        "app-s0-b-changelog",
    ]


# -- ExpiringErrorCache -------------------------------------------------------------------------------


def test_errors_are_kept_for_their_time_to_live() -> None:
    cache = ExpiringErrorCache()
    cache.put("a", "A failed.", ttl_ms=10_000, now_ms=1_000)
    cache.put("b", "B failed.", ttl_ms=10_000, now_ms=5_000)
    assert cache.has_error("a", 10_999) and not cache.has_error("a", 11_000) and not cache.has_error("c", 0)
    assert cache.errors_for_topics(["c", "b", "a"], 10_999) == {"b": "B failed.", "a": "A failed."}
    assert cache.errors_for_topics(["a", "b"], 11_000) == {"b": "B failed."}
    # A newer error of a topic replaces the older one, with its own time to live.
    cache.put("a", "A failed again.", ttl_ms=10_000, now_ms=12_000)
    assert cache.errors_for_topics(["a", "b"], 15_000) == {"a": "A failed again."}
    cache.clear()
    assert cache.errors_for_topics(["a"], 15_000) == {}


def test_past_its_capacity_the_error_expiring_first_goes() -> None:
    cache = ExpiringErrorCache(max_size=2)
    cache.put("late", "x", ttl_ms=9_000, now_ms=0)
    cache.put("early", "x", ttl_ms=1_000, now_ms=0)
    cache.put("middle", "x", ttl_ms=5_000, now_ms=0)
    assert cache.errors_for_topics(["late", "early", "middle"], 0) == {"late": "x", "middle": "x"}


# -- the group coordinator keeps the errors --------------------------------------------------------------


class Controller:
    """CreateTopics as the controller answers it: ``answers`` per topic (code, message), NONE for the rest."""

    def __init__(self, answers: Mapping[str, tuple[int, str | None]]) -> None:
        self.answers = answers
        self.asked: list[list[str]] = []

    async def create_topic_results(self, topics: list[Any]) -> dict[str, tuple[int, str | None]]:
        self.asked.append([t.name for t in topics])
        return {t.name: self.answers.get(t.name, (ErrorCode.none, None)) for t in topics}


def test_the_coordinator_keeps_each_creation_error_and_does_not_ask_again_meanwhile() -> None:
    controller = Controller(
        {
            "refused": (ErrorCode.invalid_config, "Unknown topic config name: no.such.config"),
            "no-message": (ErrorCode.invalid_replication_factor, None),
            "raced": (ErrorCode.topic_already_exists, "Topic 'raced' already exists."),
        }
    )
    topics = {n: InternalTopic(n, 1, -1, {}) for n in ("created", "refused", "no-message", "raced")}

    async def created(coordinator: GroupCoordinator, ttl_ms: int, times: int = 1) -> GroupCoordinator:
        for _ in range(times):
            coordinator.create_streams_internal_topics(topics, error_ttl_ms=ttl_ms)
        while coordinator._creating:
            await asyncio.sleep(0.01)
        return coordinator

    def new() -> GroupCoordinator:
        return GroupCoordinator(load_config(None, {}), controller, None, None)  # type: ignore[arg-type]

    async def test() -> None:
        # Each topic asked for once at a time.
        coordinator = await created(new(), 60_000, times=2)
        assert controller.asked == [list(topics)]
        # Every error but NONE, TOPIC_ALREADY_EXISTS too; without a message, the error's default one.
        assert coordinator.streams_internal_topic_creation_errors(["raced", "created", "no-message", "refused"]) == {
            "raced": "Topic 'raced' already exists.",
            "no-message": "Replication factor is below 1 or larger than the number of available brokers.",
            "refused": "Unknown topic config name: no.such.config",
        }
        # Kept: only the topic that had no error is asked for again.
        await created(coordinator, 60_000)
        assert controller.asked[-1] == ["created"]
        # Kept 1 ms: expired, and asked for again.
        coordinator = await created(new(), 1)
        await asyncio.sleep(0.05)
        assert coordinator.streams_internal_topic_creation_errors(topics) == {}
        await created(coordinator, 1)
        assert controller.asked[-1] == list(topics)

    asyncio.run(test())


# -- the handler -------------------------------------------------------------------------------------

CHANGELOGS = ("app-counts-changelog", "app-totals-changelog", "app-avg-changelog")


class Creating(Coordinator):
    """The test coordinator, which also records what it is asked to create and keeps ``kept``."""

    def __init__(self, kept: Mapping[str, str] | None = None, write_error: int = ErrorCode.none) -> None:
        super().__init__()
        self.shard.streams_groups.heartbeat_interval_ms = 3000
        self.asked: list[tuple[list[str], int]] = []
        self.kept = dict(kept or {})
        self.write_error = write_error

    def execute(self, group_id: str, result: Any, before: Any) -> int:
        return self.write_error

    def create_streams_internal_topics(self, topics: Mapping[str, Any], error_ttl_ms: int) -> None:
        self.asked.append((list(topics), error_ttl_ms))

    def streams_internal_topic_creation_errors(self, topics: Iterable[str]) -> dict[str, str]:
        return {t: self.kept[t] for t in topics if t in self.kept}


class MayCreate:
    """An authorizer that allows all but CREATE, which it allows on these topics only."""

    def __init__(self, *topics: str) -> None:
        self.topics = set(topics)

    def authorize(self, principal: str, host: str, action: Action) -> bool:
        return action.operation != AclOperation.CREATE or (action.resource_type == ResourceType.TOPIC and action.resource_name in self.topics)


def with_input_topic() -> Any:
    topic_id = uuid.uuid4()
    records = [
        FeatureLevelRecord(name="metadata.version", feature_level=33),
        FeatureLevelRecord(name="streams.version", feature_level=1),
        TopicRecord(name="input", topic_id=topic_id),
        *(PartitionRecord(partition_id=p, topic_id=topic_id, replicas=(1,), isr=(1,), leader=1, leader_epoch=0, partition_epoch=0) for p in range(2)),
    ]
    return types.SimpleNamespace(image=apply_records(EMPTY_IMAGE, records))


def join(coordinator: Creating, authorizer: MayCreate | None = None) -> Any:
    changelogs = tuple(heartbeat_v0.TopicInfo(name=n, partitions=i32(0), replication_factor=i16(0), topic_configs=()) for n in CHANGELOGS)
    sub = heartbeat_v0.Subtopology(subtopology_id="0", source_topics=("input",), state_changelog_topics=changelogs, repartition_source_topics=(), copartition_groups=())
    auth = AuthHelper(types.SimpleNamespace(authorizer=authorizer)) if authorizer else None  # type: ignore[arg-type]
    handler = StreamsGroupHeartbeatHandler(coordinator, with_input_topic(), auth)  # type: ignore[arg-type]
    request = heartbeat_v0.StreamsGroupHeartbeatRequest(
        group_id="app",
        member_id=str(uuid.uuid4()),
        member_epoch=i32(0),
        endpoint_information_epoch=i32(0),
        topology=heartbeat_v0.Topology(epoch=i32(0), subtopologies=(sub,)),
        rebalance_timeout=datetime.timedelta(seconds=30),
        process_id="p",
        active_tasks=(),
        standby_tasks=(),
        warmup_tasks=(),
        client_tags=(),
        task_offsets=None,
        task_end_offsets=None,
    )
    return handler(context(ApiKey.STREAMS_GROUP_HEARTBEAT, 0), request)


def missing_detail(answer: Any) -> str:
    [detail] = [s.status_detail for s in answer.status if s.status_code == MISSING_INTERNAL_TOPICS]
    return str(detail)


def test_a_member_that_may_not_create_them_all_has_none_created() -> None:
    coordinator = Creating(kept={"app-avg-changelog": "Ignored."})
    answer = join(coordinator, MayCreate("app-totals-changelog"))
    assert answer.error_code == ErrorCode.none and coordinator.asked == []
    # creatableTopics' order (a JVM's HashMap: totals, counts, avg), less the one it may create.
    assert missing_detail(answer).endswith("; Unauthorized to CREATE on topics app-counts-changelog, app-avg-changelog.")


def test_the_topics_are_asked_for_and_the_errors_kept_are_told_in_kafkas_order() -> None:
    coordinator = Creating(kept={"app-counts-changelog": "Counts failed.", "app-avg-changelog": "Avg failed."})
    answer = join(coordinator, MayCreate(*CHANGELOGS))
    # Kept twice the group's heartbeat interval (not its session timeout).
    assert coordinator.asked == [(["app-totals-changelog", "app-counts-changelog", "app-avg-changelog"], 6000)]
    assert missing_detail(answer).endswith("; Creation failed: app-counts-changelog (Counts failed.), app-avg-changelog (Avg failed.).")
    # Without an authorizer, everything may be created.
    assert join(Creating()).error_code == ErrorCode.none


def test_nothing_is_asked_for_when_the_heartbeat_is_not_written() -> None:
    coordinator = Creating(write_error=ErrorCode.not_coordinator)
    assert join(coordinator).error_code == ErrorCode.not_coordinator
    assert coordinator.asked == []
