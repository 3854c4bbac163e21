"""The share coordinator's periodic jobs on a real node (share.version 2, a new cluster's), with
``__share_group_state`` in one partition so that every offset below is known: records below the
oldest latest snapshot are deleted (the log start offset moves, as ListOffsets earliest shows) and
the state reads back the same after a restart; a deleted topic's share partitions get tombstones
and stop holding the pruning back; and a share partition nobody writes is snapshotted after
``share.coordinator.cold.partition.snapshot.interval.ms``, once."""

from __future__ import annotations

import time
import uuid
from typing import Any

from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode
from kio.schema.read_share_group_state_summary.v1 import request as summary_v1
from kio.static.primitive import i32

from broker.share_coordinator.config import STATE_TOPIC
from broker.share_coordinator.records import ShareSnapshotKey, ShareSnapshotValue, decode_record
from broker.share_coordinator.share_partition_key import SharePartitionKey
from tests.integration.conftest import BrokerProcess, StartBroker
from tests.integration.helpers import consume, create_topic, wait_for, watermarks
from tests.integration.test_features import await_finalized
from tests.integration.test_share_coordinator_wire import ACKNOWLEDGED, GROUP, initialize, partition_of, read, topic_id, until_coordinator, write
from tests.integration.wire import request

WAIT_S = 30.0
NOT_READY = (ErrorCode.coordinator_load_in_progress, ErrorCode.not_coordinator, ErrorCode.coordinator_not_available)
# Every share partition's state in partition 0; a snapshot after every two updates; pruning often.
STATE_IN_ONE_PARTITION = {
    "share.coordinator.state.topic.num.partitions": "1",
    "share.coordinator.snapshot.update.records.per.snapshot": "2",
    "share.coordinator.state.topic.prune.interval.ms": "300",
}


def share_node(broker_factory: StartBroker, overrides: dict[str, str]) -> BrokerProcess:
    node = broker_factory(overrides)
    await_finalized(node.bootstrap, "share.version", 2)
    return node


def state_topic_offsets(bs: str) -> tuple[int, int]:
    """ListOffsets earliest and latest of ``__share_group_state`` partition 0."""
    return watermarks(bs, STATE_TOPIC, 0)


def until_log_start(bs: str, offset: int) -> None:
    assert wait_for(lambda: state_topic_offsets(bs)[0] == offset, WAIT_S), state_topic_offsets(bs)


def batches(state: Any) -> list[tuple[int, int, int, int]]:
    return [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in state.state_batches]


def summary(bs: str, tid: uuid.UUID) -> Any:
    data = summary_v1.ReadStateSummaryData(topic_id=tid, partitions=(summary_v1.PartitionData(partition=i32(0), leader_epoch=i32(0)),))
    return partition_of(request(bs, summary_v1.ReadShareGroupStateSummaryRequest(group_id=GROUP, topics=(data,))))


def state_records(bs: str, offset: int, count: int) -> list[Any]:
    messages = consume(bs, STATE_TOPIC, 0, offset, count)
    assert [m.offset() for m in messages] == list(range(offset, offset + count))
    return [decode_record(m.key(), m.value()) for m in messages]


def acknowledge(bs: str, tid: uuid.UUID, offsets: range) -> None:
    """One WriteShareGroupState per offset (leader epoch 0, as initialized: no read writes a record)."""
    for offset in offsets:
        assert write(bs, tid, 0, 0, 0, ((offset, offset, ACKNOWLEDGED, 1),)).error_code == ErrorCode.none


def test_the_state_topic_is_pruned_and_deleted_topics_are_cleaned_up(broker_factory: StartBroker) -> None:
    node = share_node(broker_factory, {**STATE_IN_ONE_PARTITION, "share.coordinator.cold.partition.snapshot.interval.ms": "3600000"})
    bs = node.bootstrap
    create_topic(bs, "prune-a")
    create_topic(bs, "prune-b")
    a, b = topic_id(bs, "prune-a"), topic_id(bs, "prune-b")
    until_coordinator(bs, SharePartitionKey(GROUP, a, 0))

    # A snapshot at 0, updates at 1 and 2, a snapshot at 3, updates at 4 and 5, a snapshot at 6.
    assert initialize(bs, a, 0, 0).error_code == ErrorCode.none
    acknowledge(bs, a, range(6))
    until_log_start(bs, 6)
    assert state_topic_offsets(bs) == (6, 7)

    # B's snapshot at 7 holds the pruning back once A's next snapshot (10) passes it.
    assert initialize(bs, b, 0, 0).error_code == ErrorCode.none
    acknowledge(bs, a, range(6, 9))
    until_log_start(bs, 7)

    # Deleting B writes its tombstone (11): nothing holds A's snapshot at 10 back any more.
    admin = AdminClient({"bootstrap.servers": bs})
    admin.delete_topics(["prune-b"])["prune-b"].result(15)
    until_log_start(bs, 10)
    snapshot, tombstone = state_records(bs, 10, 2)
    assert isinstance(snapshot.value, ShareSnapshotValue) and snapshot.key.topic_id == a
    assert tombstone.key == ShareSnapshotKey(group_id=GROUP, topic_id=b, partition=0) and tombstone.value is None
    assert summary(bs, b).error_code == ErrorCode.unknown_topic_or_partition
    before = read(bs, a, 0)
    assert (before.error_code, before.start_offset, batches(before)) == (ErrorCode.none, 0, [(0, 8, ACKNOWLEDGED, 1)])

    # The state is loaded from the pruned log (its start kept, with no pruning after the restart):
    # the same after a restart, B's still gone.
    node.stop()
    node.overrides["share.coordinator.state.topic.prune.interval.ms"] = "3600000"
    node.start()
    assert state_topic_offsets(bs) == (10, 12)
    until_coordinator(bs, SharePartitionKey(GROUP, a, 0))
    deadline = time.monotonic() + WAIT_S
    while (after := read(bs, a, 0)).error_code in NOT_READY:
        assert time.monotonic() < deadline, after
        time.sleep(0.2)
    assert (after.error_code, after.state_epoch, after.start_offset, batches(after)) == (ErrorCode.none, before.state_epoch, 0, batches(before))
    assert summary(bs, b).error_code == ErrorCode.unknown_topic_or_partition


def test_a_cold_share_partition_is_snapshotted_once(broker_factory: StartBroker) -> None:
    node = share_node(broker_factory, {**STATE_IN_ONE_PARTITION, "share.coordinator.cold.partition.snapshot.interval.ms": "1000"})
    bs = node.bootstrap
    create_topic(bs, "cold-a")
    a = topic_id(bs, "cold-a")
    until_coordinator(bs, SharePartitionKey(GROUP, a, 0))
    assert initialize(bs, a, 0, 0).error_code == ErrorCode.none
    acknowledge(bs, a, range(1))  # an update at 1, which the snapshot at 0 holds for pruning

    # With no more writes, a snapshot of the same state (2) makes the records before it redundant.
    until_log_start(bs, 2)
    [cold] = state_records(bs, 2, 1)
    assert isinstance(cold.value, ShareSnapshotValue)
    assert (cold.value.snapshot_epoch, batches(cold.value)) == (1, [(0, 0, ACKNOWLEDGED, 1)])
    assert cold.value.write_timestamp >= cold.value.create_timestamp + 1000
    # Every state is a cold snapshot now: the quiet partition is not written again.
    time.sleep(2.5)
    assert state_topic_offsets(bs) == (2, 3)
    state = read(bs, a, 0)
    assert (state.error_code, batches(state)) == (ErrorCode.none, [(0, 0, ACKNOWLEDGED, 1)])
