"""MetadataDelta and TopicsDelta: structural sharing, local replica changes, and batch splits
that make no difference."""

from __future__ import annotations

import time
import uuid
from types import MappingProxyType

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.metadata import topics_delta
from broker.metadata.metadata_delta import MetadataDelta, apply_records
from broker.metadata.metadata_image import (
    BROKER_RESOURCE,
    EMPTY_IMAGE,
    TOPIC_RESOURCE,
    MetadataImage,
    PartitionRegistration,
    TopicImage,
)
from broker.metadata.metadata_records import (
    ConfigRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    MetadataRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)

ME = 1
A = uuid.UUID(int=0xA)
B = uuid.UUID(int=0xB)


def partition(topic_id: uuid.UUID, index: int, replicas: tuple[int, ...], leader: int | None = None) -> PartitionRecord:
    return PartitionRecord(
        partition_id=index, topic_id=topic_id, replicas=replicas, isr=replicas, leader=replicas[0] if leader is None else leader, leader_epoch=0, partition_epoch=0
    )


def big_image(topics: int, partitions: int) -> MetadataImage:
    """Built directly, not by replay: the point is what a delta over it costs."""
    by_name = {}
    for t in range(topics):
        reg = PartitionRegistration(replicas=(1, 2), isr=(1, 2), leader=1, leader_epoch=0, partition_epoch=0)
        parts = MappingProxyType({p: reg for p in range(partitions)})
        by_name[f"t{t}"] = TopicImage(f"t{t}", uuid.UUID(int=t + 1), parts)
    return MetadataImage(topics=MappingProxyType(by_name), topics_by_id=MappingProxyType({t.topic_id: t for t in by_name.values()}))


def one_change(image: MetadataImage, topic: str) -> tuple[MetadataDelta, MetadataImage, float]:
    started = time.perf_counter()
    delta = MetadataDelta(image)
    delta.replay(PartitionChangeRecord(partition_id=7, topic_id=image.topics[topic].topic_id, isr=(1,)))
    new = delta.apply(image.provenance + 1)
    changes = delta.topics_delta.local_changes(ME)  # type: ignore[union-attr]
    return delta, new, time.perf_counter() - started if changes.leaders else float("inf")


def test_a_delta_over_100k_partitions_in_many_topics_touches_only_what_changed() -> None:
    image = big_image(1000, 100)
    calls = []
    real_merge = PartitionRegistration.merge

    def counting_merge(self: PartitionRegistration, change: PartitionChangeRecord) -> PartitionRegistration:
        calls.append(change.partition_id)
        return real_merge(self, change)

    PartitionRegistration.merge = counting_merge  # type: ignore[method-assign]
    try:
        delta, new, seconds = one_change(image, "t500")
    finally:
        PartitionRegistration.merge = real_merge  # type: ignore[method-assign]
    assert calls == [7]
    assert list(delta.topics_delta.changed_topics) == [image.topics["t500"].topic_id]  # type: ignore[union-attr]
    assert delta.topics_delta.changed_topics[image.topics["t500"].topic_id].partition_changes.keys() == {7}  # type: ignore[union-attr]
    shared = sum(new.topics[name] is topic for name, topic in image.topics.items())
    assert shared == 999 and new.topics["t500"] is not image.topics["t500"]
    old_parts, new_parts = image.topics["t500"].partitions, new.topics["t500"].partitions
    assert sum(new_parts[p] is old_parts[p] for p in old_parts) == 99 and new_parts[7].isr == (1,)
    assert new.configs is image.configs and new.brokers is image.brokers and new.features is image.features
    # Rebuilding 100,000 registrations takes a good part of a second; a delta over them, a few ms.
    assert seconds < 0.1


def test_a_delta_over_one_topic_of_100k_partitions_copies_one_map() -> None:
    image = big_image(1, 100_000)
    _, new, seconds = one_change(image, "t0")
    old_parts, new_parts = image.topics["t0"].partitions, new.topics["t0"].partitions
    assert new_parts[7].partition_epoch == 1 and new_parts[8] is old_parts[8]
    assert seconds < 0.25


def leader_change(topic_id: uuid.UUID, index: int, **kw: object) -> PartitionChangeRecord:
    return PartitionChangeRecord(partition_id=index, topic_id=topic_id, **kw)  # type: ignore[arg-type]


def base() -> MetadataImage:
    return apply_records(
        EMPTY_IMAGE,
        [
            TopicRecord(name="a", topic_id=A),
            partition(A, 0, (1, 2)),  # led here
            partition(A, 1, (2, 1)),  # followed here
            partition(A, 2, (2, 3)),  # not here
            TopicRecord(name="b", topic_id=B),
            partition(B, 0, (1,)),
        ],
    )


def changes_after(image: MetadataImage, *records: MetadataRecord) -> topics_delta.LocalReplicaChanges:
    delta = MetadataDelta(image)
    for record in records:
        delta.replay(record)
    assert delta.topics_delta is not None
    return delta.topics_delta.local_changes(ME)


def test_first_delta_from_the_empty_image_leads_and_follows() -> None:
    changes = changes_after(EMPTY_IMAGE, TopicRecord(name="a", topic_id=A), partition(A, 0, (1, 2)), partition(A, 1, (2, 1)), partition(A, 2, (2, 3)))
    assert set(changes.leaders) == set(changes.elected_leaders) == {("a", 0)}
    assert set(changes.followers) == {("a", 1)} and changes.deletes == {}
    assert changes.followers[("a", 1)].registration.leader == 2 and changes.followers[("a", 1)].topic_id == A


def test_leader_moves_both_ways() -> None:
    changes = changes_after(base(), leader_change(A, 0, leader=2), leader_change(A, 1, leader=1))
    assert set(changes.followers) == {("a", 0)} and changes.followers[("a", 0)].registration.leader_epoch == 1
    assert set(changes.leaders) == set(changes.elected_leaders) == {("a", 1)}
    assert changes.deletes == {}


def test_isr_change_of_a_led_partition_is_a_leader_change_without_election() -> None:
    changes = changes_after(base(), leader_change(A, 0, isr=(1,)), leader_change(A, 2, isr=(2,)))
    assert set(changes.leaders) == {("a", 0)} and changes.elected_leaders == {} and changes.followers == {}


def test_removed_from_the_replicas_means_delete() -> None:
    changes = changes_after(base(), leader_change(A, 1, replicas=(2, 3), isr=(2, 3)), leader_change(A, 2, replicas=(3, 1), isr=(3, 1), leader=3))
    assert changes.deletes == {("a", 1): A}
    assert set(changes.followers) == {("a", 2)}


def test_topic_deletion_and_recreation_under_the_same_name() -> None:
    image = base()
    changes = changes_after(image, RemoveTopicRecord(topic_id=A))
    assert changes.deletes == {("a", 0): A, ("a", 1): A}
    new_id = uuid.UUID(int=0xC)
    delta = MetadataDelta(image)
    for record in (RemoveTopicRecord(topic_id=A), TopicRecord(name="a", topic_id=new_id), partition(new_id, 0, (1,))):
        delta.replay(record)
    td = delta.topics_delta
    assert td is not None
    assert td.deleted_topic_ids == {A} and td.created_topics == {"a": new_id} and [t.name for t in td.deleted_topics] == ["a"]
    changes = td.local_changes(ME)
    assert changes.deletes == {("a", 0): A, ("a", 1): A} and changes.leaders[("a", 0)].topic_id == new_id
    new = delta.apply()
    assert new.topics["a"].topic_id == new_id and set(new.topics_by_id) == {new_id, B}


def test_created_and_deleted_in_one_delta_leaves_no_trace() -> None:
    image = base()
    delta = MetadataDelta(image)
    c = uuid.UUID(int=0xC)
    for record in (TopicRecord(name="c", topic_id=c), partition(c, 0, (1,)), RemoveTopicRecord(topic_id=c)):
        delta.replay(record)
    assert delta.topics_delta is not None
    assert delta.topics_delta.created_topics == {} and delta.topics_delta.deleted_topic_ids == set()
    assert delta.topics_delta.local_changes(ME).leaders == {}
    assert delta.apply() == image


def test_changed_partitions_and_topology() -> None:
    delta = MetadataDelta(base())
    delta.replay(leader_change(A, 2, isr=(2,)))
    assert delta.topics_delta is not None
    changed = delta.topics_delta.changed_topic("a")
    assert changed is not None and set(changed.partition_changes) == {2} and changed.new_partitions == []
    assert not delta.topics_delta.topology_changed
    delta.replay(partition(B, 1, (1,)))
    assert delta.topics_delta.topology_changed
    assert delta.configs_delta is None and delta.cluster_delta is None


def test_config_delta_names_its_resources_and_remove_topic_drops_them() -> None:
    image = apply_records(base(), [ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="a", name="retention.ms", value="1")])
    delta = MetadataDelta(image)
    delta.replay(ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="b", name="retention.ms", value="2"))
    delta.replay(ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="", name="x", value="3"))
    delta.replay(RemoveTopicRecord(topic_id=A))
    assert delta.configs_delta is not None
    assert sorted(delta.configs_delta.changed_resources(TOPIC_RESOURCE)) == ["a", "b"]
    new = delta.apply()
    assert new.topic_config("a") == {} and new.topic_config("b") == {"retention.ms": "2"}


# -- batch splits make no difference ---------------------------------------------------------------

NAMES = ("a", "b", "c")

ops = st.lists(
    st.tuples(st.integers(0, 9), st.integers(0, 1000), st.integers(0, 1000), st.integers(0, 1000)),
    max_size=60,
)


def valid_records(script: list[tuple[int, int, int, int]]) -> list[MetadataRecord]:
    """Turn random numbers into a sequence of records each valid after the ones before it."""
    records: list[MetadataRecord] = []
    topics: dict[str, tuple[uuid.UUID, int]] = {}  # name -> (id, partition count)
    brokers: dict[int, int] = {}  # id -> epoch
    next_id = 1
    for kind, x, y, z in script:
        replicas = tuple(sorted({1 + x % 4, 1 + y % 4}))
        if kind == 0:
            name = NAMES[x % 3]
            topics[name] = (uuid.UUID(int=next_id), 0)
            next_id += 1
            records.append(TopicRecord(name=name, topic_id=topics[name][0]))
        elif kind in (1, 2, 3) and topics:
            name = sorted(topics)[y % len(topics)]
            topic_id, count = topics[name]
            if kind == 1 or count == 0:
                records.append(partition(topic_id, count, replicas, leader=replicas[z % len(replicas)]))
                topics[name] = (topic_id, count + 1)
            elif kind == 2:
                records.append(leader_change(topic_id, z % count, leader=replicas[0], isr=replicas, replicas=replicas))
            else:
                records.append(leader_change(topic_id, z % count, isr=replicas[:1]))
        elif kind == 4 and topics:
            name = sorted(topics)[x % len(topics)]
            records.append(RemoveTopicRecord(topic_id=topics.pop(name)[0]))
        elif kind == 5:
            resource = (TOPIC_RESOURCE, NAMES[x % 3]) if y % 2 else (BROKER_RESOURCE, "")
            records.append(ConfigRecord(resource_type=resource[0], resource_name=resource[1], name=f"k{z % 3}", value=None if z % 4 == 0 else str(z)))
        elif kind == 6:
            records.append(FeatureLevelRecord(name=f"f{x % 2}", feature_level=y % 3))
        elif kind == 7:
            broker = 1 + x % 3
            if broker in brokers and y % 2:
                cls = FenceBrokerRecord if z % 2 else UnfenceBrokerRecord
                records.append(cls(id=broker, epoch=brokers[broker]))
            else:
                brokers[broker] = z
                records.append(RegisterBrokerRecord(broker_id=broker, incarnation_id=uuid.UUID(int=z), broker_epoch=z))
        elif kind == 8:
            records.append(ProducerIdsRecord(broker_id=1, broker_epoch=0, next_producer_id=x * 1000))
        else:
            records.append(NoOpRecord())
    return records


def replay_in_batches(records: list[MetadataRecord], cuts: list[int]) -> tuple[MetadataImage, list[MetadataDelta]]:
    image = EMPTY_IMAGE
    deltas = []
    bounds = sorted({0, len(records), *(c % (len(records) + 1) for c in cuts)})
    for start, end in zip(bounds, bounds[1:]):
        delta = MetadataDelta(image)
        for record in records[start:end]:
            delta.replay(record)
        deltas.append(delta)
        image = delta.apply(end - 1)
    return image, deltas


@settings(max_examples=150, deadline=None)
@given(ops, st.lists(st.integers(0, 100), max_size=8))
def test_any_batch_split_gives_the_image_of_one_delta(script: list[tuple[int, int, int, int]], cuts: list[int]) -> None:
    records = valid_records(script)
    whole = apply_records(EMPTY_IMAGE, records)
    split, deltas = replay_in_batches(records, cuts)
    assert split == whole
    # Every replica the split path ever led and still hosts is what one delta says it leads now.
    hosted: dict[tuple[str, int], uuid.UUID] = {}
    for delta in deltas:
        changes = delta.topics_delta.local_changes(ME) if delta.topics_delta else topics_delta.LocalReplicaChanges()
        for tp, topic_id in changes.deletes.items():
            if hosted.get(tp) == topic_id:
                del hosted[tp]
        for tp, info in {**changes.leaders, **changes.followers}.items():
            hosted[tp] = info.topic_id
    expected = {(t.name, i): t.topic_id for t in whole.topics.values() for i, reg in t.partitions.items() if ME in reg.replicas}
    assert hosted == expected


@settings(max_examples=100, deadline=None)
@given(ops, ops)
def test_diff_leads_from_one_image_to_the_other(first: list[tuple[int, int, int, int]], second: list[tuple[int, int, int, int]]) -> None:
    before = apply_records(EMPTY_IMAGE, valid_records(first))
    after = apply_records(EMPTY_IMAGE, valid_records(second))
    diff = MetadataDelta.diff(before, after)
    assert diff.image is before
    assert diff.apply(after.provenance) == after
