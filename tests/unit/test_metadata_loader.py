"""MetadataLoader: committed batches to images and publishers, metadata transactions, snapshots,
failing publishers, and the single-voter log replaying into it."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.metadata.metadata_delta import MetadataDelta, apply_records
from broker.metadata.metadata_image import EMPTY_IMAGE, TOPIC_RESOURCE, MetadataImage, MetadataImageError
from broker.metadata.metadata_loader import Batch, MetadataLoader
from broker.metadata.metadata_records import (
    AbortTransactionRecord,
    BeginTransactionRecord,
    ConfigRecord,
    EndTransactionRecord,
    FeatureLevelRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from raft.replicated_log import OffsetAndEpoch
from tests.unit.test_metadata_delta import ops, valid_records

A = uuid.UUID(int=0xA)
B = uuid.UUID(int=0xB)


def partition(topic_id: uuid.UUID, index: int, replicas: tuple[int, ...] = (1,)) -> PartitionRecord:
    return PartitionRecord(partition_id=index, topic_id=topic_id, replicas=replicas, isr=replicas, leader=replicas[0], leader_epoch=0, partition_epoch=0)


class Recorder:
    def __init__(self, calls: list[tuple[str, MetadataDelta, MetadataImage]], name: str = "recorder", fail: bool = False) -> None:
        self.calls = calls
        self.name = name
        self.fail = fail

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        self.calls.append((self.name, delta, image))
        if self.fail:
            raise RuntimeError("publisher bug")


def loader_with(*names: str) -> tuple[MetadataLoader, list[tuple[str, MetadataDelta, MetadataImage]]]:
    loader = MetadataLoader()
    calls: list[tuple[str, MetadataDelta, MetadataImage]] = []
    for name in names:
        loader.install_publisher(Recorder(calls, name))
    return loader, calls


def test_each_batch_is_one_delta_published_in_order() -> None:
    loader, calls = loader_with("first", "second")
    image = loader.handle_commit([(0, TopicRecord(name="a", topic_id=A)), (1, partition(A, 0))])
    assert image is loader.image and image.has_partition("a", 0) and image.provenance == 1
    assert [c[0] for c in calls] == ["first", "second"] and calls[0][1] is calls[1][1]
    assert calls[0][1].image is EMPTY_IMAGE and calls[0][2] is image
    loader.handle_commit(Batch(base_offset=2, last_offset=3, records=[partition(A, 1), PartitionChangeRecord(partition_id=0, topic_id=A, isr=())], epoch=4))
    _, delta, new = calls[-1]
    assert delta.image is image and new.provenance == 3 and new.highest_offset_and_epoch == (3, 4)
    assert new.topics["a"].partitions[0].isr == () and new.has_partition("a", 1)


def test_a_failing_publisher_is_logged_and_the_others_still_run() -> None:
    loader = MetadataLoader()
    calls: list[tuple[str, MetadataDelta, MetadataImage]] = []
    loader.install_publisher(Recorder(calls, "broken", fail=True))
    loader.install_publisher(Recorder(calls, "fine"))
    loader.handle_commit([(0, TopicRecord(name="a", topic_id=A))])
    loader.handle_commit([(1, partition(A, 0))])
    assert [c[0] for c in calls] == ["broken", "fine"] * 2
    assert loader.image.has_partition("a", 0)


def test_a_contradicting_record_raises_and_publishes_nothing() -> None:
    loader, calls = loader_with("p")
    loader.handle_commit([(0, TopicRecord(name="a", topic_id=A))])
    before = loader.image
    with pytest.raises(MetadataImageError):
        loader.handle_commit([(1, partition(A, 0)), (2, partition(B, 0))])
    assert loader.image is before and len(calls) == 1


def test_transactions_are_held_back_across_batches_and_published_together() -> None:
    loader, calls = loader_with("p")
    loader.handle_commit([(0, TopicRecord(name="a", topic_id=A)), (1, BeginTransactionRecord(name="create")), (2, TopicRecord(name="b", topic_id=B))])
    # What came before the transaction is published on its own.
    assert len(calls) == 1 and loader.image.provenance == 0 and "a" in loader.image.topics and "b" not in loader.image.topics
    assert loader.in_transaction
    loader.handle_commit([(3, partition(B, 0))])
    assert len(calls) == 1
    loader.handle_commit([(4, EndTransactionRecord()), (5, partition(A, 0))])
    assert len(calls) == 2 and not loader.in_transaction
    image = loader.image
    assert image.has_partition("b", 0) and image.has_partition("a", 0) and image.provenance == 5
    assert calls[-1][1].topics_delta is not None and calls[-1][1].topics_delta.created_topics == {"b": B}


def test_an_aborted_transaction_vanishes() -> None:
    loader, calls = loader_with("p")
    loader.handle_commit([(0, TopicRecord(name="a", topic_id=A))])
    loader.handle_commit([(1, BeginTransactionRecord()), (2, RemoveTopicRecord(topic_id=A))])
    loader.handle_commit([(3, AbortTransactionRecord(reason="changed my mind"))])
    assert "a" in loader.image.topics and loader.image.provenance == 3 and not loader.in_transaction
    with pytest.raises(MetadataImageError):
        loader.handle_commit([(4, EndTransactionRecord())])
    with pytest.raises(MetadataImageError):
        loader.handle_commit([(4, AbortTransactionRecord())])
    with pytest.raises(MetadataImageError):
        loader.handle_commit([(4, BeginTransactionRecord()), (5, BeginTransactionRecord())])
    assert not loader.in_transaction and loader.image.provenance == 3


def test_a_snapshot_replaces_the_image_and_publishers_get_the_difference() -> None:
    loader, calls = loader_with("p")
    loader.handle_commit([(0, TopicRecord(name="a", topic_id=A)), (1, partition(A, 0)), (2, partition(A, 1)), (3, TopicRecord(name="gone", topic_id=B)), (4, partition(B, 0))])
    before = loader.image
    c = uuid.UUID(int=0xC)
    snapshot = [
        TopicRecord(name="a", topic_id=A),
        partition(A, 0),  # unchanged
        partition(A, 1, (2, 1)),  # moved away: now a follower here
        TopicRecord(name="new", topic_id=c),
        partition(c, 0),
    ]
    image = loader.handle_load_snapshot(OffsetAndEpoch(100, 7), snapshot)
    assert image is loader.image and image.highest_offset_and_epoch == (99, 7)
    fresh = MetadataDelta(EMPTY_IMAGE)
    for record in snapshot:
        fresh.replay(record)
    assert image == fresh.apply(99, 7)
    _, delta, published = calls[-1]
    assert delta.image is before and published is image
    assert delta.topics_delta is not None
    changes = delta.topics_delta.local_changes(1)
    assert changes.deletes == {("gone", 0): B}
    assert set(changes.followers) == {("a", 1)} and set(changes.leaders) == {("new", 0)}
    assert delta.topics_delta.created_topics == {"new": c}


def test_a_late_publisher_catches_up_from_the_empty_image() -> None:
    loader, _ = loader_with()
    loader.handle_commit([(0, TopicRecord(name="a", topic_id=A)), (1, partition(A, 0))])
    calls: list[tuple[str, MetadataDelta, MetadataImage]] = []
    loader.install_publisher(Recorder(calls))
    [(_, delta, image)] = calls
    assert delta.image is EMPTY_IMAGE and image is loader.image
    assert delta.topics_delta is not None and set(delta.topics_delta.local_changes(1).leaders) == {("a", 0)}


ABORTED = (FeatureLevelRecord(name="aborted", feature_level=1), ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="a", name="aborted", value="1"))


def with_transactions(records: list[MetadataRecord], marks: list[int]) -> list[MetadataRecord]:
    """Wrap some runs of records in metadata transactions, and add aborted transactions of
    records that must leave no trace."""
    out: list[MetadataRecord] = []
    i = 0
    for n, mark in enumerate(sorted(m % (len(records) + 1) for m in marks)):
        if mark < i:
            continue
        out.extend(records[i:mark])
        if n % 3 == 2:
            out.extend([BeginTransactionRecord(), *ABORTED, AbortTransactionRecord()])
        end = min(len(records), mark + 1 + n % 3)
        out.append(BeginTransactionRecord())
        out.extend(records[mark:end])
        out.append(EndTransactionRecord())
        i = end
    out.extend(records[i:])
    return out


@settings(max_examples=100, deadline=None)
@given(ops, st.lists(st.integers(0, 100), max_size=4), st.lists(st.integers(0, 200), max_size=8))
def test_the_loader_gives_the_same_image_however_the_log_is_cut_into_batches(script: list[tuple[int, int, int, int]], marks: list[int], cuts: list[int]) -> None:
    records = valid_records(script)
    committed = with_transactions(records, marks)
    expected = apply_records(EMPTY_IMAGE, records)
    loader = MetadataLoader()
    bounds = sorted({0, len(committed), *(c % (len(committed) + 1) for c in cuts)})
    for start, end in zip(bounds, bounds[1:]):
        loader.handle_commit([(o, committed[o]) for o in range(start, end)])
    assert not loader.in_transaction
    image = loader.image
    assert (image.topics, image.configs, image.features, image.brokers, image.next_producer_id) == (
        expected.topics,
        expected.configs,
        expected.features,
        expected.brokers,
        expected.next_producer_id,
    )
    assert image.provenance == len(committed) - 1 or not committed


def catching_up_loader(high_watermark: list[int | None]) -> tuple[MetadataLoader, list[tuple[str, MetadataDelta, MetadataImage]]]:
    loader = MetadataLoader(high_watermark=lambda: high_watermark[0])
    calls: list[tuple[str, MetadataDelta, MetadataImage]] = []
    loader.install_publisher(Recorder(calls, "replicas"))
    return loader, calls


def test_a_restarted_node_publishes_nothing_until_it_reaches_the_high_watermark() -> None:
    """Replaying an old leadership batch by batch would make the node, for a moment, leader of a
    partition it lost long ago: publishers get one delta once the log is read to the high watermark."""
    hw: list[int | None] = [None]
    loader, calls = catching_up_loader(hw)
    loader.handle_commit([(0, TopicRecord(name="a", topic_id=A)), (1, partition(A, 0, (1, 2)))])
    hw[0] = 4
    loader.handle_commit([(2, PartitionChangeRecord(partition_id=0, topic_id=A, leader=2))])
    assert calls == [] and loader.image.provenance == 2
    loader.handle_commit([(3, PartitionChangeRecord(partition_id=0, topic_id=A, isr=(2,)))])
    assert len(calls) == 1
    _, delta, image = calls[0]
    assert delta.image is EMPTY_IMAGE and image is loader.image
    assert image.topics["a"].partitions[0].leader == 2 and image.topics["a"].partitions[0].isr == (2,)
    loader.handle_commit([(4, PartitionChangeRecord(partition_id=0, topic_id=A, leader=1))])
    assert len(calls) == 2 and calls[1][1].image is image, "caught up once, every batch is published again"


def test_a_snapshot_that_covers_the_whole_log_is_published_when_the_high_watermark_is_learned() -> None:
    hw: list[int | None] = [None]
    loader, calls = catching_up_loader(hw)
    loader.handle_load_snapshot(OffsetAndEpoch(2, 1), [TopicRecord(name="a", topic_id=A), partition(A, 0)])
    loader.maybe_finish_catching_up()
    assert calls == []
    hw[0] = 2
    loader.maybe_finish_catching_up()
    assert len(calls) == 1 and calls[0][2].has_partition("a", 0)
    loader.maybe_finish_catching_up()
    assert len(calls) == 1


def test_a_publisher_installed_while_catching_up_sees_only_published_images() -> None:
    hw: list[int | None] = [10]
    loader, calls = catching_up_loader(hw)
    loader.handle_commit([(0, TopicRecord(name="a", topic_id=A))])
    late: list[tuple[str, MetadataDelta, MetadataImage]] = []
    loader.install_publisher(Recorder(late, "late"))
    assert late == [] and calls == []


def test_a_removed_publisher_gets_nothing_more() -> None:
    """A stopping broker removes its publishers first: a delta applied after its fetchers stopped
    would start new ones, appending to logs already closed."""
    loader, calls = loader_with("snapshots")
    broker = Recorder(calls, "broker")
    loader.install_publisher(broker)
    loader.handle_commit([(0, TopicRecord(name="a", topic_id=A))])
    loader.remove_publisher(broker)
    loader.handle_commit([(1, partition(A, 0))])
    assert [c[0] for c in calls] == ["snapshots", "broker", "snapshots"]
