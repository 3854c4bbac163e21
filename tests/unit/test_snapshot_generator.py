"""image_records rebuilds the image it was taken from; SnapshotGenerator snapshots the published
image after enough bytes or time, at the offset and epoch Raft expects."""

from __future__ import annotations

import uuid
from typing import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.metadata.image_writer import image_records
from broker.metadata.metadata_delta import apply_records
from broker.metadata.metadata_image import EMPTY_IMAGE, MetadataImage
from broker.metadata.metadata_loader import MetadataLoader
from broker.metadata.metadata_records import (
    BrokerEndpoint,
    BrokerFeature,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnregisterBrokerRecord,
    decode_metadata_record,
)
from broker.metadata.snapshot_generator import SnapshotGenerator
from raft.records import Batch
from raft.replicated_log import OffsetAndEpoch

BROKER_IDS = st.integers(0, 5)
replica_lists = st.lists(BROKER_IDS, min_size=1, max_size=3, unique=True)
names = st.sampled_from(["a", "b", "c.d", "e_f"])
values = st.text(alphabet="xyz019", min_size=0, max_size=4)
dirs = st.lists(st.integers(100, 110).map(lambda i: uuid.UUID(int=i)), max_size=2, unique=True)


@st.composite
def metadata_logs(draw: st.DrawFn) -> list[MetadataRecord]:
    """A valid log: every record applies to the image the ones before it make."""
    records: list[MetadataRecord] = [FeatureLevelRecord(name="metadata.version", feature_level=draw(st.integers(7, 25)))]
    for name in draw(st.lists(st.sampled_from(["group.version", "transaction.version"]), unique=True)):
        records.append(FeatureLevelRecord(name=name, feature_level=draw(st.integers(1, 2))))
    # A snapshot keeps partitions' ELR only while the feature is on, as Kafka's.
    elr_on = draw(st.booleans())
    if elr_on:
        records.append(FeatureLevelRecord(name="eligible.leader.replicas.version", feature_level=1))
    brokers: dict[int, int] = {}
    for broker_id in draw(st.lists(BROKER_IDS, unique=True, max_size=4)):
        epoch = draw(st.integers(0, 1000))
        brokers[broker_id] = epoch
        records.append(
            RegisterBrokerRecord(
                broker_id=broker_id,
                incarnation_id=uuid.UUID(int=draw(st.integers(1, 2**64))),
                broker_epoch=epoch,
                end_points=(BrokerEndpoint(name="PLAINTEXT", host="h", port=9000 + broker_id, security_protocol=0),),
                features=(BrokerFeature(name="metadata.version", min_supported_version=7, max_supported_version=33),),
                rack=draw(st.none() | st.sampled_from(["r1", "r2"])),
                fenced=draw(st.booleans()),
                in_controlled_shutdown=draw(st.booleans()),
                log_dirs=tuple(draw(dirs)),
            )
        )
    for broker_id, epoch in list(brokers.items()):
        action = draw(st.sampled_from(["none", "fence", "change", "unregister"]))
        if action == "fence":
            records.append(FenceBrokerRecord(id=broker_id, epoch=epoch))
        elif action == "change":
            records.append(BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=epoch, fenced=-1, in_controlled_shutdown=1))
        elif action == "unregister":
            records.append(UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=epoch))
    topics: dict[str, uuid.UUID] = {}
    for i, name in enumerate(draw(st.lists(names, unique=True, max_size=3))):
        topic_id = uuid.UUID(int=(i + 1) << 32)
        topics[name] = topic_id
        records.append(TopicRecord(name=name, topic_id=topic_id))
        for partition_id in range(draw(st.integers(1, 3))):
            replicas = tuple(draw(replica_lists))
            isr = tuple(b for b in replicas if draw(st.booleans())) or replicas[:1]
            elr = draw(st.none() | st.lists(BROKER_IDS, max_size=2, unique=True).map(tuple)) if elr_on else None
            records.append(
                PartitionRecord(
                    partition_id=partition_id,
                    topic_id=topic_id,
                    replicas=replicas,
                    isr=isr,
                    leader=draw(st.sampled_from(isr + (-1,))),
                    leader_recovery_state=draw(st.sampled_from([0, 1])),
                    leader_epoch=draw(st.integers(0, 50)),
                    partition_epoch=draw(st.integers(0, 50)),
                    directories=draw(st.just(()) | st.just(tuple(uuid.UUID(int=200 + b) for b in replicas))),
                    eligible_leader_replicas=elr,
                    last_known_elr=elr,
                )
            )
            if draw(st.booleans()):
                records.append(PartitionChangeRecord(partition_id=partition_id, topic_id=topic_id, isr=replicas, leader=replicas[0]))
    for _ in range(draw(st.integers(0, 6))):
        resource = draw(st.sampled_from([(2, n) for n in topics] + [(4, ""), (4, "1")]))
        records.append(ConfigRecord(resource_type=resource[0], resource_name=resource[1], name=draw(st.sampled_from(["k1", "k2"])), value=draw(st.none() | values)))
    for name, topic_id in topics.items():
        if draw(st.booleans()):
            records.append(RemoveTopicRecord(topic_id=topic_id))
    if draw(st.booleans()):
        records.append(ProducerIdsRecord(broker_id=1, broker_epoch=3, next_producer_id=draw(st.integers(1, 2**40))))
    return records


def rebuilt(records: Sequence[MetadataRecord], provenance: int = -1, epoch: int = -1) -> MetadataImage:
    image = apply_records(EMPTY_IMAGE, [decode_metadata_record(r.encode()) for r in records])
    return MetadataImage(
        topics=image.topics,
        topics_by_id=image.topics_by_id,
        configs=image.configs,
        features=image.features,
        brokers=image.brokers,
        next_producer_id=image.next_producer_id,
        provenance=provenance,
        provenance_epoch=epoch,
    )


@settings(max_examples=200, deadline=None)
@given(metadata_logs())
def test_image_records_rebuild_an_equal_image(log: list[MetadataRecord]) -> None:
    image = rebuilt(log)
    assert rebuilt(image_records(image)) == image


def test_image_records_start_with_metadata_version() -> None:
    image = rebuilt([FeatureLevelRecord(name="a.feature", feature_level=1), FeatureLevelRecord(name="metadata.version", feature_level=25)])
    assert image_records(image)[0] == FeatureLevelRecord(name="metadata.version", feature_level=25)
    assert image_records(EMPTY_IMAGE) == []


class FakeWriter:
    def __init__(self) -> None:
        self.records: list[MetadataRecord] = []
        self.frozen = False
        self.closed = False

    def append(self, records: Sequence[MetadataRecord]) -> None:
        self.records.extend(records)

    def freeze(self) -> None:
        self.frozen = True

    def close(self) -> None:
        self.closed = True


class FakeRaft:
    def __init__(self) -> None:
        self.snapshots: dict[OffsetAndEpoch, tuple[int, FakeWriter]] = {}

    def create_snapshot(self, snapshot_id: OffsetAndEpoch, last_contained_log_time_ms: int) -> FakeWriter | None:
        if snapshot_id in self.snapshots:
            return None
        writer = FakeWriter()
        self.snapshots[snapshot_id] = (last_contained_log_time_ms, writer)
        return writer


class Setup:
    """A loader with the generator installed, fed the way KafkaRaftManager feeds its listeners."""

    def __init__(self, max_bytes: int = 1000, max_time_ms: int = 60_000, raft: FakeRaft | None = None) -> None:
        self.now = 0
        self.raft = raft or FakeRaft()
        self.loader = MetadataLoader()
        self.generator = SnapshotGenerator(self.raft, max_bytes_since_last_snapshot=max_bytes, max_time_since_last_snapshot_ms=max_time_ms, now_ms=lambda: self.now)
        self.loader.install_publisher(self.generator)
        self.offset = 0

    def commit(self, records: list[MetadataRecord], size: int, epoch: int = 3) -> None:
        batch: Batch[MetadataRecord] = Batch(self.offset, self.offset + len(records) - 1, epoch, 5000 + self.offset, size, records)
        self.offset += len(records)
        self.generator.handle_commit(batch)
        self.loader.handle_commit(batch)


def features(level: int) -> list[MetadataRecord]:
    return [FeatureLevelRecord(name="metadata.version", feature_level=level)]


def test_a_snapshot_once_enough_bytes_were_published() -> None:
    s = Setup(max_bytes=1000)
    s.commit(features(25), 600)
    assert s.raft.snapshots == {}
    s.commit([TopicRecord(name="t", topic_id=uuid.UUID(int=9))], 400, epoch=4)
    [(snapshot_id, (log_time, writer))] = s.raft.snapshots.items()
    assert snapshot_id == OffsetAndEpoch(2, 4)
    assert log_time == 5001  # the append time of the last batch in it
    assert writer.frozen and writer.closed
    assert rebuilt(writer.records, 1, 4) == s.loader.image
    # The count starts over.
    s.commit(features(24), 999)
    assert len(s.raft.snapshots) == 1
    s.commit(features(25), 1)
    assert OffsetAndEpoch(4, 3) in s.raft.snapshots


def test_a_snapshot_once_the_interval_passed_with_something_new() -> None:
    s = Setup(max_bytes=10**9, max_time_ms=60_000)
    s.commit(features(25), 10)
    s.now += 60_000
    assert s.raft.snapshots == {}  # nothing published since the time ran out
    s.commit(features(24), 10)
    assert list(s.raft.snapshots) == [OffsetAndEpoch(2, 3)]


def test_interval_zero_turns_the_timer_off() -> None:
    s = Setup(max_bytes=10**9, max_time_ms=0)
    s.now += 10**9
    s.commit(features(25), 10)
    assert s.raft.snapshots == {}


def test_loading_a_snapshot_starts_the_count_over_and_is_not_snapshotted_again() -> None:
    s = Setup(max_bytes=100)
    s.generator.handle_load_snapshot(OffsetAndEpoch(10, 2), features(25))
    s.loader.handle_load_snapshot(OffsetAndEpoch(10, 2), features(25))
    assert s.raft.snapshots == {}
    s.offset = 10
    s.commit(features(24), 99)
    assert s.raft.snapshots == {}
    s.commit(features(25), 1)
    assert list(s.raft.snapshots) == [OffsetAndEpoch(12, 3)]


def test_a_snapshot_raft_refuses_for_now_is_tried_again_later() -> None:
    class Behind(FakeRaft):
        refuse = True

        def create_snapshot(self, snapshot_id: OffsetAndEpoch, last_contained_log_time_ms: int) -> FakeWriter | None:
            if self.refuse:
                raise ValueError("past the high watermark")
            return super().create_snapshot(snapshot_id, last_contained_log_time_ms)

    raft = Behind()
    s = Setup(max_bytes=10, raft=raft)
    s.commit(features(25), 20)
    assert raft.snapshots == {}
    raft.refuse = False
    s.commit(features(24), 1)
    assert list(raft.snapshots) == [OffsetAndEpoch(2, 3)]
