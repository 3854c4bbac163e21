"""QuorumControllerLogic, the facade over the control managers: Kafka's KRaft controller rules, with the records replayed into images."""

from __future__ import annotations

import itertools
import uuid
from typing import Iterator, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.controller.controller_logic import (
    LIST_CONFIGS,
    METADATA_VERSION_LEVEL,
    CreatableTopic,
    ProducerIdsExhaustedError,
    QuorumControllerLogic,
    bootstrap_records,
    topic_name_error,
)
from broker.metadata.metadata_image import BROKER_RESOURCE, MIGRATING_DIR, TOPIC_RESOURCE, UNASSIGNED_DIR, MetadataImage
from broker.metadata.metadata_records import (
    ConfigRecord,
    FeatureLevelRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from tests.unit.control_manager_images import Log

DIR = uuid.UUID(int=0xD1)


class InvalidConfig(ValueError):
    error_code = 40


def ids() -> Iterator[uuid.UUID]:
    return (uuid.UUID(int=0x100 + i) for i in itertools.count())


def logic(**kw: object) -> QuorumControllerLogic:
    return QuorumControllerLogic(new_topic_id=ids().__next__, **kw)  # type: ignore[arg-type]


def accept(configs: dict[str, str]) -> None:
    return None


def accept_any(resource_type: int, name: str, configs: dict[str, str]) -> None:
    return None


def refuse_bad_retention(configs: dict[str, str]) -> None:
    if not configs.get("retention.ms", "0").lstrip("-").isdigit():
        raise InvalidConfig(f"Invalid value {configs['retention.ms']} for configuration retention.ms: Not a number of type LONG")


def cluster(*brokers: int, dirs: dict[int, tuple[uuid.UUID, ...]] | None = None) -> Log:
    log = Log()
    for b in brokers:
        log.commit([RegisterBrokerRecord(broker_id=b, incarnation_id=uuid.UUID(int=b), broker_epoch=0, fenced=False, log_dirs=(dirs or {}).get(b, ()))])
    return log


def topic(name: str, partitions: int = 1, rf: int = 1, *, assignments: dict[int, list[int]] | None = None, **configs: str | None) -> CreatableTopic:
    return CreatableTopic(name, partitions, rf, assignments, {k.replace("_", "."): v for k, v in configs.items()})


def create(
    ctl: QuorumControllerLogic,
    log: Log,
    *topics: CreatableTopic,
    brokers: Sequence[int] = (1,),
    validate_only: bool = False,
    validate_config=accept,  # type: ignore[no-untyped-def]
) -> list[tuple[int, str | None]]:
    records, results = ctl.create_topics(
        log.image,
        list(topics),
        validate_only=validate_only,
        broker_ids=list(brokers),
        default_partitions=2,
        default_replication_factor=1,
        validate_config=validate_config,
    )
    log.commit(records)
    return [(r.error_code, r.error_message) for r in results]


# --- CreateTopics ---------------------------------------------------------------


def test_create_topics_writes_topic_config_and_partition_records() -> None:
    log = cluster(1, 2, 3, dirs={1: (DIR,), 2: (DIR, uuid.UUID(int=0xD2))})
    ctl = logic()
    records, results = ctl.create_topics(
        log.image,
        [topic("orders", 3, 2, retention_ms="1000", cleanup_policy="compact"), topic("defaults", -1, -1)],
        validate_only=False,
        broker_ids=[3, 1, 2],
        default_partitions=2,
        default_replication_factor=3,
        validate_config=accept,
    )
    first = uuid.UUID(int=0x100)
    assert [(r.name, r.error_code, r.topic_id, r.num_partitions, r.replication_factor) for r in results] == [
        ("orders", 0, first, 3, 2),
        ("defaults", 0, uuid.UUID(int=0x101), 2, 3),
    ]
    assert results[0].configs == {"retention.ms": "1000", "cleanup.policy": "compact"}
    assert records[:3] == [
        TopicRecord(name="orders", topic_id=first),
        ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="orders", name="cleanup.policy", value="compact"),
        ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="orders", name="retention.ms", value="1000"),
    ]
    parts = [r for r in records if isinstance(r, PartitionRecord) and r.topic_id == first]
    # Striped placement: distinct replicas, every broker leads one of the three partitions.
    assert all(len(set(p.replicas)) == 2 for p in parts) and sorted(p.replicas[0] for p in parts) == [1, 2, 3]
    # The broker's only directory, UNASSIGNED for several, MIGRATING for a broker that reports none.
    directory = {1: DIR, 2: UNASSIGNED_DIR, 3: MIGRATING_DIR}
    assert all(p.directories == tuple(directory[b] for b in p.replicas) for p in parts)
    assert all(p.isr == p.replicas and p.leader == p.replicas[0] and p.leader_epoch == 0 and p.partition_epoch == 0 for p in parts)
    log.commit(records)
    assert log.image.topics["orders"].topic_id == first and len(log.image.topics["orders"].partitions) == 3
    assert log.image.topic_config("orders") == {"retention.ms": "1000", "cleanup.policy": "compact"}
    defaults = [p for p in records if isinstance(p, PartitionRecord) and p.topic_id != first]
    assert [sorted(p.replicas) for p in defaults] == [[1, 2, 3]] * 2 and defaults[0].leader != defaults[1].leader


def test_validate_only_answers_without_records() -> None:
    log = cluster(1)
    ctl = logic()
    records, results = ctl.create_topics(
        log.image, [topic("t", 2)], validate_only=True, broker_ids=[1], default_partitions=1, default_replication_factor=1, validate_config=accept
    )
    assert records == [] and results[0].error_code == 0 and results[0].num_partitions == 2 and results[0].topic_id is not None


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "Topic name is illegal, it can't be empty"),
        (".", 'Topic name cannot be "." or ".."'),
        ("..", 'Topic name cannot be "." or ".."'),
        ("x" * 250, "Topic name is illegal, it can't be longer than 249 characters, Topic name: " + "x" * 250),
        ("bad/name", "Topic name \"bad/name\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"),
        ("caf\u00e9", "Topic name \"caf\u00e9\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"),
    ],
)
def test_illegal_topic_names(name: str, message: str) -> None:
    assert topic_name_error(name) == message
    assert create(logic(), cluster(1), topic(name)) == [(17, message)]


def test_legal_names_and_the_length_limit() -> None:
    assert topic_name_error("x" * 249) is None
    assert topic_name_error("Ok-name_1.2") is None
    assert topic_name_error("__consumer_offsets") is None


def test_existing_and_colliding_names() -> None:
    log = cluster(1)
    ctl = logic()
    assert create(ctl, log, topic("a.b"), topic("plain")) == [(0, None), (0, None)]
    assert create(ctl, log, topic("a.b"), topic("a_b"), topic("plain"), topic("a-b")) == [
        (36, "Topic 'a.b' already exists."),
        (17, "Topic 'a_b' collides with existing topic: a.b"),
        (36, "Topic 'plain' already exists."),
        (0, None),
    ]
    # Kafka only checks collisions against committed topics: two new ones may collide.
    assert create(ctl, log, topic("x.y"), topic("x_y")) == [(0, None), (0, None)]


def test_partition_and_replication_factor_errors() -> None:
    log = cluster(1)
    ctl = logic()
    rf_message = "Replication factor must be larger than 0, or -1 to use the default value."
    np_message = "Number of partitions was set to an invalid non-positive value."
    assert create(ctl, log, topic("a", 0), topic("b", -2), topic("c", 1, 0), topic("d", 1, -3), topic("e", 0, 0)) == [
        (37, np_message),
        (37, np_message),
        (38, rf_message),
        (38, rf_message),
        (38, rf_message),
    ]
    assert create(ctl, log, topic("f", 1, 3)) == [
        (
            38,
            "Unable to replicate the partition 3 time(s): The target replication factor of 3 cannot be reached "
            "because only 1 broker(s) are registered or some brokers have all their log directories cordoned.",
        )
    ]
    assert create(ctl, log, topic("g"), brokers=()) == [(38, "Unable to replicate the partition 1 time(s): All brokers are currently fenced, or have all their log directories cordoned.")]
    records, results = ctl.create_topics(
        log.image, [topic("h", -1, -1)], validate_only=False, broker_ids=[1], default_partitions=1, default_replication_factor=0, validate_config=accept
    )
    assert records == [] and results[0].error_message == (
        "Unable to replicate the partition 0 time(s): Invalid replication factor 0: the replication factor must be positive."
    )
    records, results = ctl.create_topics(
        log.image, [topic("i", -1)], validate_only=False, broker_ids=[1], default_partitions=0, default_replication_factor=1, validate_config=accept
    )
    assert records == [] and (results[0].error_code, results[0].error_message) == (37, np_message)
    assert log.image.topics == {}


def test_manual_assignments() -> None:
    log = cluster(1, 2, 3)
    ctl = logic()
    brokers = (1, 2, 3)
    assert create(ctl, log, topic("m", assignments={0: [3, 1], 1: [1, 2]}, partitions=-1, rf=-1), brokers=brokers) == [(0, None)]
    assert [log.image.topics["m"].partitions[p].replicas for p in (0, 1)] == [(3, 1), (1, 2)]
    assert log.image.topics["m"].partitions[0].leader == 3
    cases = [
        (topic("a", 2, -1, assignments={0: [1]}), 42, "A manual partition assignment was specified, but numPartitions was not set to -1."),
        (topic("b", -1, 1, assignments={0: [1]}), 42, "A manual partition assignment was specified, but replication factor was not set to -1."),
        (topic("c", -1, -1, assignments={0: []}), 39, "The manual partition assignment includes an empty replica list."),
        (topic("d", -1, -1, assignments={0: [1, 7]}), 39, "The manual partition assignment includes broker 7, but no such broker is registered."),
        (topic("e", -1, -1, assignments={0: [2, 1, 2]}), 39, "The manual partition assignment includes the broker 2 more than once."),
        (
            topic("f", -1, -1, assignments={0: [1, 2], 1: [3]}),
            39,
            "The manual partition assignment includes a partition with 1 replica(s), but this is not consistent with previous "
            "partitions, which have 2 replica(s).",
        ),
        (topic("g", -1, -1, assignments={0: [1], 2: [2]}), 39, "partitions should be a consecutive 0-based integer sequence"),
    ]
    assert create(ctl, log, *(c[0] for c in cases), brokers=brokers) == [(c[1], c[2]) for c in cases]


def test_configs_are_validated() -> None:
    log = cluster(1)
    ctl = logic()

    def custom(configs: dict[str, str]) -> None:
        if "policy" in configs:
            error = ValueError("refused by policy")
            error.error_code = 44  # type: ignore[attr-defined]
            raise error

    assert create(ctl, log, topic("a", retention_ms="soon"), topic("b", retention_ms="5"), validate_config=refuse_bad_retention) == [
        (40, "Invalid value soon for configuration retention.ms: Not a number of type LONG"),
        (0, None),
    ]
    assert create(ctl, log, topic("c", policy="x"), validate_config=custom) == [(44, "refused by policy")]
    assert create(ctl, log, topic("d", retention_ms=None, segment_ms=None, flush_ms="1")) == [
        (40, "Null value not supported for topic configs: retention.ms,segment.ms")
    ]
    assert create(ctl, log, topic("e", retention_ms="x" * 32768)) == [
        (40, "The configuration value cannot be added because it exceeds the maximum value size of 32767 bytes.")
    ]
    assert set(log.image.topics) == {"b"} and log.image.topic_config("b") == {"retention.ms": "5"}


def test_request_level_errors() -> None:
    log = cluster(1)
    ctl = logic()
    assert create(ctl, log, topic("dup"), topic("ok"), topic("dup", 3)) == [(42, "Duplicate topic name."), (0, None)]
    assert create(ctl, log, topic("__cluster_metadata")) == [(42, "Creation of internal topic __cluster_metadata is prohibited.")]
    assert create(ctl, log, topic("__consumer_offsets", 50, 1, cleanup_policy="compact")) == [(0, None)]
    too_many = [topic("big", 6000), topic("bigger", 4001)]
    assert create(ctl, log, *too_many) == [(44, "Excessively large number of partitions per request.")] * 2
    assert set(log.image.topics) == {"ok", "__consumer_offsets"}


# --- DeleteTopics ---------------------------------------------------------------


def test_delete_topics_by_name_and_id() -> None:
    log = cluster(1)
    ctl = logic()
    create(ctl, log, topic("a", retention_ms="1"), topic("b"), topic("c", retention_ms="1"), topic("__consumer_offsets"))
    a, b = log.image.topics["a"].topic_id, log.image.topics["b"].topic_id
    ghost = uuid.UUID(int=0xDEAD)
    records, results = ctl.delete_topics(log.image, [("a", None), (None, b), ("nope", None), (None, ghost), ("__consumer_offsets", uuid.UUID(int=0))])
    assert [(r.name, r.topic_id, r.error_code, r.error_message) for r in results] == [
        ("a", a, 0, None),
        ("b", b, 0, None),
        ("nope", None, 3, "This server does not host this topic-partition."),
        (None, ghost, 100, "This server does not host this topic ID."),
        ("__consumer_offsets", log.image.topics["__consumer_offsets"].topic_id, 0, None),
    ]
    assert all(isinstance(r, RemoveTopicRecord) for r in records) and len(records) == 3
    log.commit(records)
    assert set(log.image.topics) == {"c"} and log.image.topic_config("a") == {} and log.image.topic_config("c") == {"retention.ms": "1"}


def test_delete_topics_request_errors() -> None:
    log = cluster(1)
    ctl = logic()
    create(ctl, log, topic("a"), topic("b"), topic("c"))
    a, b, c = (log.image.topics[n].topic_id for n in "abc")
    records, results = ctl.delete_topics(log.image, [("a", None), ("a", None), (None, b), (None, b), (None, None), ("c", c), (None, c), ("c", None)]
    )
    assert [(r.name, r.topic_id, r.error_code, r.error_message) for r in results] == [
        ("a", None, 42, "Duplicate topic name."),
        (None, b, 42, "Duplicate topic id."),
        (None, None, 42, "Neither topic name nor id were specified."),
        ("c", c, 42, "You may not specify both topic name and topic id."),
        ("c", c, 42, "The provided topic name maps to an ID that was already supplied."),
    ]
    assert records == []


# --- CreatePartitions -----------------------------------------------------------


def test_create_partitions() -> None:
    log = cluster(1, 2, 3)
    ctl = logic()
    create(ctl, log, topic("t", 2, 2), topic("u", 1, 1), brokers=(1, 2, 3))
    records, results = ctl.create_partitions(
        log.image, [("t", 4, None), ("u", 3, [[3], [2]]), ("nope", 2, None)], validate_only=False, broker_ids=[1, 2, 3]
    )
    assert [(r.name, r.error_code, r.error_message) for r in results] == [("t", 0, None), ("u", 0, None), ("nope", 3, None)]
    log.commit(records)
    t = log.image.topics["t"].partitions
    assert sorted(t) == [0, 1, 2, 3] and all(len(t[p].replicas) == 2 and t[p].leader == t[p].replicas[0] for p in t)
    assert [log.image.topics["u"].partitions[p].replicas for p in (1, 2)] == [(3,), (2,)]
    records, results = ctl.create_partitions(log.image, [("t", 9, None)], validate_only=True, broker_ids=[1, 2, 3])
    assert records == [] and results[0].error_code == 0


def test_create_partitions_errors() -> None:
    log = cluster(1, 2)
    ctl = logic()
    create(ctl, log, topic("t", 3, 2), topic("d", 1, 1), brokers=(1, 2))
    cases = [
        (("t", 2, None), 37, "The topic t currently has 3 partition(s); 2 would not be an increase."),
        (("t", 3, None), 37, "Topic already has 3 partition(s)."),
        (("d", 3, [[1]]), 39, "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified."),
        (("d", 2, [[1, 2]]), 39, "The manual partition assignment includes a partition with 2 replica(s), but this is not consistent with previous partitions, which have 1 replica(s)."),
        (("d", 2, [[5]]), 39, "The manual partition assignment includes broker 5, but no such broker is registered."),
    ]
    for request, code, message in cases:
        records, results = ctl.create_partitions(log.image, [request], validate_only=False, broker_ids=[1, 2])
        assert records == [] and [(r.error_code, r.error_message) for r in results] == [(code, message)]
    records, results = ctl.create_partitions(log.image, [("t", 4, None)], validate_only=False, broker_ids=[1])
    assert (results[0].error_code, results[0].error_message) == (
        38,
        "The target replication factor of 2 cannot be reached because only 1 broker(s) are registered or some brokers have all their log directories cordoned.",
    )
    records, results = ctl.create_partitions(log.image, [("d", 2, None), ("d", 3, None)], validate_only=False, broker_ids=[1, 2])
    assert records == [] and [(r.name, r.error_code, r.error_message) for r in results] == [("d", 42, "Duplicate topic name.")]


# --- AlterConfigs / IncrementalAlterConfigs -------------------------------------


def alter(
    ctl: QuorumControllerLogic,
    log: Log,
    *resources: tuple[int, str, list[tuple[str, int, str | None]]],
    incremental: bool = True,
    validate_only: bool = False,
    validate_config=accept_any,  # type: ignore[no-untyped-def]
) -> list[tuple[int, str | None]]:
    records, results = ctl.alter_configs(
        log.image, list(resources), incremental=incremental, validate_only=validate_only, validate_config=validate_config, node_id=1
    )
    log.commit(records)
    assert [(r.resource_type, r.resource_name) for r in results] == [(t, n) for t, n, _ in resources]
    return [(r.error_code, r.error_message) for r in results]


SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def test_incremental_alter_configs_operations() -> None:
    log = cluster(1)
    defaults = {"cleanup.policy": "delete"}
    ctl = logic(config_default=lambda resource_type, key: defaults.get(key))
    create(ctl, log, topic("t", retention_ms="1", segment_ms="2"))
    ops = [("retention.ms", SET, "10"), ("segment.ms", DELETE, None), ("cleanup.policy", APPEND, "compact"), ("x.unset", DELETE, None)]
    assert alter(ctl, log, (TOPIC_RESOURCE, "t", ops)) == [(0, None)]
    assert log.image.topic_config("t") == {"retention.ms": "10", "cleanup.policy": "delete,compact"}
    assert alter(ctl, log, (TOPIC_RESOURCE, "t", [("cleanup.policy", SUBTRACT, "delete,other"), ("retention.ms", SET, "10")])) == [(0, None)]
    assert log.image.topic_config("t") == {"retention.ms": "10", "cleanup.policy": "compact"}
    assert alter(ctl, log, (TOPIC_RESOURCE, "t", [("cleanup.policy", APPEND, "compact,delete")])) == [(0, None)]
    assert log.image.topic_config("t")["cleanup.policy"] == "compact,delete"
    assert "cleanup.policy" in LIST_CONFIGS


def test_incremental_alter_configs_errors() -> None:
    log = cluster(1)
    ctl = logic()
    create(ctl, log, topic("t"))

    def validate(resource_type: int, name: str, configs: dict[str, str]) -> None:
        refuse_bad_retention(configs)

    cases = [
        ((TOPIC_RESOURCE, "t", [("retention.ms", APPEND, "1")]), 40, "Can't APPEND to key retention.ms because its type is not LIST."),
        ((TOPIC_RESOURCE, "t", [("retention.ms", SET, "soon")]), 40, "Invalid value soon for configuration retention.ms: Not a number of type LONG"),
        ((TOPIC_RESOURCE, "nope", [("retention.ms", SET, "1")]), 3, "The topic 'nope' does not exist."),
        ((TOPIC_RESOURCE, "t", [("a", SET, None), ("b", DELETE, None), ("c", APPEND, None)]), 42, "Null value not supported for : a, c"),
        ((TOPIC_RESOURCE, "t", [("a", SET, "1"), ("a", DELETE, None)]), 42, "Error due to duplicate config keys"),
        ((TOPIC_RESOURCE, "t", [("a", 9, "1")]), 42, "Unknown operations type 9"),
        ((BROKER_RESOURCE, "2", [("log.retention.ms", SET, "1")]), 42, "Unexpected broker id, expected 1, but received 2"),
        ((BROKER_RESOURCE, "one", [("log.retention.ms", SET, "1")]), 42, "Node id must be an integer, but it is: one"),
        ((8, "1", [("root", SET, "INFO")]), 42, "Unknown resource type 8"),
    ]
    for resource, code, message in cases:
        assert alter(ctl, log, resource, validate_config=validate) == [(code, message)]
    assert alter(ctl, log, (TOPIC_RESOURCE, "t", [("a", SET, "1")]), (TOPIC_RESOURCE, "t", [("b", SET, "1")])) == [
        (42, "Each resource must appear at most once.")
    ] * 2
    assert log.image.topic_config("t") == {}


def test_broker_configs() -> None:
    log = cluster(1)
    ctl = logic()
    assert alter(ctl, log, (BROKER_RESOURCE, "1", [("log.retention.ms", SET, "5")]), (BROKER_RESOURCE, "", [("log.segment.bytes", SET, "9")])) == [
        (0, None),
        (0, None),
    ]
    assert log.image.configs[(BROKER_RESOURCE, "1")] == {"log.retention.ms": "5"}
    assert log.image.configs[(BROKER_RESOURCE, "")] == {"log.segment.bytes": "9"}
    # Unchanged broker configs are written again, so that brokers reload them.
    records, _ = ctl.alter_configs(
        log.image, [(BROKER_RESOURCE, "1", [("log.retention.ms", SET, "5")])], incremental=True, validate_only=False, validate_config=accept_any, node_id=1
    )
    assert records == [ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="1", name="log.retention.ms", value="5")]
    records, results = ctl.alter_configs(
        MetadataImage(), [(BROKER_RESOURCE, "1", [("a", SET, "1")])], incremental=True, validate_only=False, validate_config=accept_any, node_id=1
    )
    assert records == [] and (results[0].error_code, results[0].error_message) == (102, "No node with id 1 found.")


def test_legacy_alter_configs_replaces_the_whole_set() -> None:
    log = cluster(1)
    ctl = logic()
    create(ctl, log, topic("t", retention_ms="1", segment_ms="2"))
    records, _ = ctl.alter_configs(
        log.image, [(TOPIC_RESOURCE, "t", [("retention.ms", 0, "1"), ("cleanup.policy", 0, "compact")])],
        incremental=False, validate_only=False, validate_config=accept_any, node_id=1,
    )
    assert records == [
        ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="t", name="cleanup.policy", value="compact"),
        ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="t", name="segment.ms", value=None),
    ]
    log.commit(records)
    assert log.image.topic_config("t") == {"retention.ms": "1", "cleanup.policy": "compact"}
    assert alter(ctl, log, (TOPIC_RESOURCE, "t", [("retention.ms", 0, None)]), incremental=False) == [(42, "Null value not supported for : retention.ms")]
    assert alter(ctl, log, (BROKER_RESOURCE, "", [("a", 0, "1")]), incremental=False) == [(42, "Node id must be an integer, but it is: ")]
    assert alter(ctl, log, (TOPIC_RESOURCE, "t", []), incremental=False, validate_only=True) == [(0, None)]
    assert log.image.topic_config("t") == {"retention.ms": "1", "cleanup.policy": "compact"}
    assert alter(ctl, log, (TOPIC_RESOURCE, "t", []), incremental=False) == [(0, None)]
    assert log.image.topic_config("t") == {}


# --- producer ids, bootstrap ----------------------------------------------------


def test_allocate_producer_ids() -> None:
    log = cluster(1)
    ctl = logic()
    first = ctl.allocate_producer_ids(log.image, 1, broker_epoch=0)
    assert (first.broker_id, first.broker_epoch, first.next_producer_id) == (1, 0, 1000)
    log.commit([first])
    assert ctl.allocate_producer_ids(log.image, 1, block_size=10).next_producer_id == 1010
    log.commit([ProducerIdsRecord(broker_id=1, next_producer_id=2**63 - 5)])
    with pytest.raises(ProducerIdsExhaustedError):
        ctl.allocate_producer_ids(log.image, 1)


def test_bootstrap_records_format_a_single_node_cluster() -> None:
    records = bootstrap_records(1, "localhost", 9092, log_dirs=(DIR,), features={"group.version": 1})
    assert records[0] == FeatureLevelRecord(name="metadata.version", feature_level=METADATA_VERSION_LEVEL) and METADATA_VERSION_LEVEL == 33
    assert records[1] == FeatureLevelRecord(name="group.version", feature_level=1)
    log = Log()
    log.commit(records)
    broker = log.image.brokers[1]
    assert not broker.fenced and broker.directories == (DIR,) and (broker.endpoints[0].host, broker.endpoints[0].port) == ("localhost", 9092)
    assert log.image.features == {"metadata.version": 33, "group.version": 1}
    create(logic(), log, topic("t", 1, 1))
    assert log.image.topics["t"].partitions[0].directories == (DIR,)


# --- a random walk keeps the image consistent ------------------------------------

NAMES = ["a", "b", "a.b", "a_b", "c"]
operation = st.one_of(
    st.tuples(st.just("create"), st.sampled_from(NAMES), st.integers(-2, 4), st.integers(-1, 4)),
    st.tuples(st.just("delete"), st.sampled_from(NAMES)),
    st.tuples(st.just("partitions"), st.sampled_from(NAMES), st.integers(0, 6)),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(operation, max_size=15))
def test_random_admin_operations_keep_the_image_consistent(ops: list[tuple[object, ...]]) -> None:
    log = cluster(1, 2, 3)
    ctl = logic()
    for op in ops:
        if op[0] == "create":
            _, name, partitions, rf = op
            create(ctl, log, topic(name, partitions, rf), brokers=(1, 2, 3))  # type: ignore[arg-type]
        elif op[0] == "delete":
            records, _ = ctl.delete_topics(log.image, [(op[1], None)])  # type: ignore[list-item]
            log.commit(records)
        else:
            records, _ = ctl.create_partitions(log.image, [(op[1], op[2], None)], validate_only=False, broker_ids=[1, 2, 3])  # type: ignore[list-item]
            log.commit(records)
        assert {t.topic_id: t for t in log.image.topics.values()} == log.image.topics_by_id
        for t in log.image.topics.values():
            assert sorted(t.partitions) == list(range(len(t.partitions))) and t.partitions
            rfs = {len(p.replicas) for p in t.partitions.values()}
            assert len(rfs) == 1
            assert all(p.leader == p.replicas[0] and len(set(p.replicas)) == len(p.replicas) for p in t.partitions.values())
        assert not any(k[0] == TOPIC_RESOURCE and k[1] not in log.image.topics for k in log.image.configs)


def test_create_partitions_of_an_excessive_count_are_refused_before_placing() -> None:
    """Found by the fuzzer: CreatePartitions to 2^31 - 1 partitions had the controller place two
    billion partitions on the event loop (the broker stopped answering). Kafka's bound on a user
    operation's records refuses it, as CreateTopics above 10,000 partitions is refused."""
    log = cluster(1, 2)
    ctl = logic()
    create(ctl, log, topic("t", 1, 1), topic("u", 1, 1), brokers=(1, 2))
    for request in ([("t", 2**31 - 1, None)], [("t", 6_000, None), ("u", 6_000, None)]):
        records, results = ctl.create_partitions(log.image, request, validate_only=False, broker_ids=[1, 2])
        assert records == [] and {(r.error_code, r.error_message) for r in results} == {(44, "Excessively large number of partitions per request.")}
    records, results = ctl.create_partitions(log.image, [("t", 10_001, None)], validate_only=False, broker_ids=[1, 2])
    assert len(records) == 10_000 and results[0].error_code == 0
