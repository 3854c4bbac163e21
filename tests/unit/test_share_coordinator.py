"""The share coordinator core (broker/share_coordinator): records, batch merging, the shard."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from broker.group.coordinator_records import CoordinatorRecordError, UnknownRecordType
from broker.share.persister import PersisterStateBatch
from broker.share.record_state import RecordState
from broker.share_coordinator.config import ShareCoordinatorConfig
from broker.share_coordinator.offsets_manager import ShareCoordinatorOffsetsManager
from broker.share_coordinator.record_pruner import RecordPruner
from broker.share_coordinator.records import (
    ShareCoordinatorRecord,
    ShareSnapshotKey,
    ShareSnapshotValue,
    ShareStateBatch,
    ShareUpdateKey,
    ShareUpdateValue,
    decode_record,
    encode_record,
)
from broker.share_coordinator.share_coordinator_shard import ReadStateResult, ShareCoordinatorResult, ShareCoordinatorShard, WriteStateData
from broker.share_coordinator.share_partition_key import SharePartitionKey, kafka_uuid_string, partition_for
from broker.share_coordinator.state_batch_combiner import combine_state_batches

TOPIC = uuid.UUID(int=(0x0123456789ABCDEF << 64) | 0x0FEDCBA987654321)
KEY = SharePartitionKey("group-1", TOPIC, 7)


class Clock:
    def __init__(self, now_ms: int = 1_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


class Harness:
    """A shard with the log it writes: every operation's records are appended and replayed, as the runtime does."""

    def __init__(self, *, per_snapshot: int = 500, partitions: int = 8, clock: Clock | None = None) -> None:
        self.clock = clock or Clock()
        self.config = ShareCoordinatorConfig(snapshot_update_records_per_snapshot=per_snapshot)
        self.shard = ShareCoordinatorShard(self.config, self.clock)
        self.shard.on_loaded(lambda topic_id: partitions if topic_id == TOPIC else None)
        self.log: list[tuple[bytes, bytes | None]] = []

    def apply(self, records: Iterable[ShareCoordinatorRecord]) -> None:
        for record in records:
            self.shard.replay(record, len(self.log))
            self.log.append(encode_record(record))

    def initialize(self, key: SharePartitionKey = KEY, state_epoch: int = 0, start_offset: int = 0) -> int:
        result = self.shard.initialize_state(key, state_epoch, start_offset)
        self.apply(result.records)
        return result.response.error_code

    def write(self, data: WriteStateData, key: SharePartitionKey = KEY) -> int:
        result = self.shard.write_state(key, data)
        self.apply(result.records)
        return result.response.error_code

    def read(self, leader_epoch: int, key: SharePartitionKey = KEY) -> ShareCoordinatorResult[ReadStateResult]:
        result = self.shard.read_state_and_maybe_update_leader_epoch(key, leader_epoch)
        self.apply(result.records)
        return result


def batch(first: int, last: int, state: RecordState, count: int) -> PersisterStateBatch:
    return PersisterStateBatch(first, last, state, count)


def per_offset(batches: Iterable[PersisterStateBatch]) -> dict[int, tuple[int, int]]:
    return {o: (b.delivery_count, int(b.delivery_state)) for b in batches for o in range(b.first_offset, b.last_offset + 1)}


# -- records ------------------------------------------------------------------------------------------
# Written by Kafka 4.4's ShareCoordinatorRecordSerde (a small Java program against the 4.4 jars).

KAFKA_KEY_SNAPSHOT = "0000000767726f75702d310123456789abcdef0fedcba98765432100000007"
KAFKA_KEY_UPDATE = "0001000767726f75702d310123456789abcdef0fedcba98765432100000007"
KAFKA_SNAPSHOT_VALUE = (
    "000000000003000000020000000500000000000000640000018bcfe568000000018bcfe5687b03000000000000006400000000"
    "0000006d02000100000000000000006e000000000000006e0000030001000400000004"
)
KAFKA_SNAPSHOT_VALUE_NO_DCC = (
    "000000000003000000020000000500000000000000640000018bcfe568000000018bcfe5687b03000000000000006400000000"
    "0000006d02000100000000000000006e000000000000006e0000030000"
)
KAFKA_UPDATE_VALUE = "00000000000300000006ffffffffffffffff02000000000000006f00000000000000780400020001000400000009"

SNAPSHOT_VALUE = ShareSnapshotValue(
    snapshot_epoch=3,
    state_epoch=2,
    leader_epoch=5,
    start_offset=100,
    delivery_complete_count=4,
    create_timestamp=1_700_000_000_000,
    write_timestamp=1_700_000_000_123,
    state_batches=(
        ShareStateBatch(first_offset=100, last_offset=109, delivery_state=2, delivery_count=1),
        ShareStateBatch(first_offset=110, last_offset=110, delivery_state=0, delivery_count=3),
    ),
)
UPDATE_VALUE = ShareUpdateValue(
    snapshot_epoch=3,
    leader_epoch=6,
    start_offset=-1,
    delivery_complete_count=9,
    state_batches=(ShareStateBatch(first_offset=111, last_offset=120, delivery_state=4, delivery_count=2),),
)


@pytest.mark.parametrize(
    ("record", "key_hex", "value_hex"),
    [
        (ShareCoordinatorRecord(ShareSnapshotKey(group_id="group-1", topic_id=TOPIC, partition=7), SNAPSHOT_VALUE), KAFKA_KEY_SNAPSHOT, KAFKA_SNAPSHOT_VALUE),
        (
            ShareCoordinatorRecord(ShareSnapshotKey(group_id="group-1", topic_id=TOPIC, partition=7), replace(SNAPSHOT_VALUE, delivery_complete_count=-1)),
            KAFKA_KEY_SNAPSHOT,
            KAFKA_SNAPSHOT_VALUE_NO_DCC,
        ),
        (ShareCoordinatorRecord(ShareUpdateKey(group_id="group-1", topic_id=TOPIC, partition=7), UPDATE_VALUE), KAFKA_KEY_UPDATE, KAFKA_UPDATE_VALUE),
        (ShareCoordinatorRecord(ShareSnapshotKey(group_id="group-1", topic_id=TOPIC, partition=7), None), KAFKA_KEY_SNAPSHOT, None),
    ],
)
def test_records_are_kafkas_bytes(record: ShareCoordinatorRecord, key_hex: str, value_hex: str | None) -> None:
    key, value = encode_record(record)
    assert key.hex() == key_hex
    assert (value.hex() if value is not None else None) == value_hex
    assert decode_record(bytes.fromhex(key_hex), None if value_hex is None else bytes.fromhex(value_hex)) == record


def test_malformed_records_are_refused() -> None:
    key = bytes.fromhex(KAFKA_KEY_SNAPSHOT)
    with pytest.raises(UnknownRecordType):
        decode_record(b"\x00\x05" + key[2:], None)
    with pytest.raises(CoordinatorRecordError):
        decode_record(key, b"\x00\x01" + bytes.fromhex(KAFKA_SNAPSHOT_VALUE)[2:])  # no version 1
    with pytest.raises(CoordinatorRecordError):
        decode_record(key, bytes.fromhex(KAFKA_SNAPSHOT_VALUE) + b"\x00")  # trailing bytes
    with pytest.raises(CoordinatorRecordError):
        decode_record(key, bytes.fromhex(KAFKA_SNAPSHOT_VALUE)[:-3])  # truncated
    with pytest.raises(CoordinatorRecordError):
        encode_record(ShareCoordinatorRecord(ShareUpdateKey(group_id="g", topic_id=TOPIC, partition=0), ShareUpdateValue(
            snapshot_epoch=0, leader_epoch=0, start_offset=0,
            state_batches=(ShareStateBatch(first_offset=0, last_offset=0, delivery_state=0, delivery_count=1 << 15),),
        )))


batches_strategy = st.lists(
    st.builds(
        ShareStateBatch,
        first_offset=st.integers(-(2**63), 2**63 - 1),
        last_offset=st.integers(-(2**63), 2**63 - 1),
        delivery_state=st.integers(-128, 127),
        delivery_count=st.integers(-(2**15), 2**15 - 1),
    ),
    max_size=4,
).map(tuple)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)


@settings(max_examples=100, deadline=None)
@given(
    group=st.text(max_size=20),
    partition=int32,
    snapshot=st.builds(
        ShareSnapshotValue, snapshot_epoch=int32, state_epoch=int32, leader_epoch=int32, start_offset=int64,
        delivery_complete_count=int32, create_timestamp=int64, write_timestamp=int64, state_batches=batches_strategy,
    ),
    update=st.builds(
        ShareUpdateValue, snapshot_epoch=int32, leader_epoch=int32, start_offset=int64, delivery_complete_count=int32, state_batches=batches_strategy
    ),
)
def test_records_round_trip(group: str, partition: int, snapshot: ShareSnapshotValue, update: ShareUpdateValue) -> None:
    topic = uuid.uuid4()
    for record in (
        ShareCoordinatorRecord(ShareSnapshotKey(group_id=group, topic_id=topic, partition=partition), snapshot),
        ShareCoordinatorRecord(ShareUpdateKey(group_id=group, topic_id=topic, partition=partition), update),
    ):
        assert decode_record(*encode_record(record)) == record


# -- the partition a key maps to ------------------------------------------------------------------------
# Kafka 4.4: Utils.abs(SharePartitionKey.asCoordinatorKey().hashCode()) % partitions.


@pytest.mark.parametrize(
    ("group", "topic", "partition", "coordinator_key", "of_50", "of_7"),
    [
        ("group-1", TOPIC, 0, "group-1:ASNFZ4mrze8P7cuph2VDIQ:0", 30, 5),
        ("group-1", TOPIC, 1000, "group-1:ASNFZ4mrze8P7cuph2VDIQ:1000", 5, 4),
        ("group-1", uuid.UUID(int=((2**64 - 1) << 64) | 42), 3, "group-1:__________8AAAAAAAAAKg:3", 21, 1),
        ("g", uuid.UUID(int=(7 << 64) | (2**64 - 7)), 0, "g:AAAAAAAAAAf_________-Q:0", 30, 2),
        ("g", uuid.UUID(int=((2**64 - 1) << 64) | 42), 3, "g:__________8AAAAAAAAAKg:3", 5, 0),
        ("分享组", TOPIC, 1000, "分享组:ASNFZ4mrze8P7cuph2VDIQ:1000", 43, 1),
        ("分享组", uuid.UUID(int=(7 << 64) | (2**64 - 7)), 0, "分享组:AAAAAAAAAAf_________-Q:0", 46, 4),
    ],
)
def test_partition_for_is_kafkas(group: str, topic: uuid.UUID, partition: int, coordinator_key: str, of_50: int, of_7: int) -> None:
    key = SharePartitionKey(group, topic, partition)
    assert key.as_coordinator_key() == coordinator_key
    assert partition_for(key, 50) == of_50
    assert partition_for(key, 7) == of_7
    assert kafka_uuid_string(topic) == coordinator_key.split(":")[1]


# -- merging state batches ----------------------------------------------------------------------------------
# Inputs and outputs of Kafka 4.4's PersisterStateBatchCombiner (start offset | so far | new # combined);
# a differential run of 3000 random cases against the jar matched too.

KAFKA_COMBINER_CASES = """\
-1|13,13,4,0 30,33,4,0 18,24,0,1 1,9,0,2|4,12,0,2 17,19,0,1 11,12,4,0#1,12,0,2 13,13,4,0 17,24,0,1 30,33,4,0
3|15,23,2,2|18,25,2,2 7,9,4,1 2,6,4,3#3,6,4,3 7,9,4,1 15,25,2,2
0|12,17,0,3 11,13,4,0 15,15,0,2 4,7,2,3 29,36,0,1|12,20,2,1 26,32,4,2 22,28,2,3#4,7,2,3 11,11,4,0 12,17,0,3 18,20,2,1 22,28,2,3 29,32,4,2 33,36,0,1
0|5,9,2,0 4,10,4,2 19,24,0,0 14,22,2,3|12,13,2,3 1,4,0,1 14,16,0,2#1,3,0,1 4,10,4,2 12,22,2,3 23,24,0,0
-1|30,38,2,1|17,17,4,2 20,21,4,2 16,21,0,2 24,27,4,2 20,23,4,1#16,16,0,2 17,17,4,2 18,19,0,2 20,21,4,2 22,23,4,1 24,27,4,2 30,38,2,1
0|25,28,0,3 11,11,0,2 15,19,0,2 14,19,2,0 7,8,0,3|10,13,2,0#7,8,0,3 10,10,2,0 11,11,0,2 12,14,2,0 15,19,0,2 25,28,0,3
-1|11,18,4,3 26,34,0,1 16,24,0,3 24,26,4,0 24,26,0,1|19,20,4,0 10,18,4,3 25,26,4,0#10,18,4,3 19,24,0,3 25,34,0,1
-1|1,2,4,3 17,17,0,3|19,27,4,1 22,26,2,3#1,2,4,3 17,17,0,3 19,21,4,1 22,26,2,3 27,27,4,1
-1|16,20,4,1 26,33,0,3 3,9,2,2 2,5,2,0 6,10,0,1|20,25,0,2 28,30,2,1 23,24,2,3 5,8,0,3 16,22,2,3#2,2,2,0 3,4,2,2 5,8,0,3 9,9,2,2 10,10,0,1 16,24,2,3 25,25,0,2 26,33,0,3
0|2,7,0,2 17,24,2,0|10,18,4,2 16,17,0,1 28,29,0,2#2,7,0,2 10,18,4,2 19,24,2,0 28,29,0,2
-1|16,24,0,3 7,14,0,3 21,28,4,3 16,20,4,1 7,12,0,1|11,11,0,0 2,6,2,1 1,2,4,3#1,2,4,3 3,6,2,1 7,14,0,3 16,20,0,3 21,28,4,3
10|1,4,0,1|9,9,0,1#
7|1,9,0,1|#7,9,0,1
-1|5,9,0,1 1,4,0,1|#1,9,0,1
"""


def _parse_batches(text: str) -> list[PersisterStateBatch]:
    return [batch(int(f), int(l), RecordState(int(s)), int(c)) for f, l, s, c in (b.split(",") for b in text.split())]


@pytest.mark.parametrize("case", KAFKA_COMBINER_CASES.splitlines())
def test_combiner_matches_kafka(case: str) -> None:
    inputs, expected = case.split("#")
    start, so_far, new = inputs.split("|")
    assert combine_state_batches(_parse_batches(so_far), _parse_batches(new), int(start)) == _parse_batches(expected)


batch_strategy = st.builds(
    lambda first, length, state, count: batch(first, first + length, state, count),
    st.integers(0, 60),
    st.integers(0, 10),
    st.sampled_from([RecordState.AVAILABLE, RecordState.ACKNOWLEDGED, RecordState.ARCHIVED]),
    st.integers(0, 5),
)


@settings(max_examples=300, deadline=None)
@given(so_far=st.lists(batch_strategy, max_size=6), new=st.lists(batch_strategy, max_size=6), start=st.integers(-1, 70))
def test_combiner_keeps_the_highest_priority_of_each_offset(so_far: list[PersisterStateBatch], new: list[PersisterStateBatch], start: int) -> None:
    combined = combine_state_batches(so_far, new, start)
    expected: dict[int, tuple[int, int]] = {}
    for b in so_far + new:
        for offset in range(max(b.first_offset, start), b.last_offset + 1):
            expected[offset] = max(expected.get(offset, (-1, -1)), (b.delivery_count, int(b.delivery_state)))
    assert per_offset(combined) == expected
    if len(so_far) + len(new) > 1:  # Kafka hands a lone batch back as it is
        assert all(a.last_offset < b.first_offset for a, b in zip(combined, combined[1:]))
        assert not any(  # coalesced: no two neighbours could be one batch
            a.last_offset + 1 == b.first_offset and (a.delivery_state, a.delivery_count) == (b.delivery_state, b.delivery_count)
            for a, b in zip(combined, combined[1:])
        )


# -- the shard ---------------------------------------------------------------------------------------------


def test_initialize_read_write_delete() -> None:
    h = Harness()
    assert h.initialize(state_epoch=1, start_offset=10) == 0
    assert h.shard.share_states[KEY].snapshot_epoch == 0

    read = h.read(leader_epoch=3)
    assert read.response.error_code == 0
    assert (read.response.state_epoch, read.response.start_offset, read.response.state_batches) == (1, 10, ())
    # The new leader's epoch is written (a ShareUpdate), so an older leader is fenced from now on.
    assert [type(r.value) for r in read.records] == [ShareUpdateValue]
    assert h.shard.leader_epochs[KEY] == 3
    assert h.read(leader_epoch=3).records == []

    written = WriteStateData(state_epoch=1, leader_epoch=3, start_offset=10, state_batches=(
        batch(10, 14, RecordState.ACKNOWLEDGED, 1), batch(15, 19, RecordState.AVAILABLE, 1),
    ))
    assert h.write(written) == 0
    assert h.write(WriteStateData(state_epoch=1, leader_epoch=3, start_offset=12, state_batches=(batch(15, 16, RecordState.ARCHIVED, 2),))) == 0
    read = h.read(leader_epoch=3)
    assert read.response.start_offset == 12
    assert read.response.state_batches == (
        batch(12, 14, RecordState.ACKNOWLEDGED, 1), batch(15, 16, RecordState.ARCHIVED, 2), batch(17, 19, RecordState.AVAILABLE, 1),
    )

    summary = h.shard.read_state_summary(KEY).response
    assert (summary.error_code, summary.start_offset, summary.state_epoch, summary.leader_epoch) == (0, 12, 1, 3)

    deleted = h.shard.delete_state(KEY)
    assert deleted.response.error_code == 0
    assert deleted.records == [ShareCoordinatorRecord(ShareSnapshotKey(group_id=KEY.group_id, topic_id=TOPIC, partition=7), None)]
    h.apply(deleted.records)
    assert KEY not in h.shard.share_states and KEY not in h.shard.leader_epochs
    assert h.read(leader_epoch=3).response.error_code == ErrorCode.invalid_request
    summary = h.shard.read_state_summary(KEY).response
    assert (summary.error_code, summary.start_offset, summary.delivery_complete_count, summary.leader_epoch, summary.state_epoch) == (0, -1, -1, 0, 0)
    assert h.shard.delete_state(KEY).records == []  # nothing left to delete


def test_fencing_and_invalid_requests() -> None:
    h = Harness()
    uninitialized = h.shard.write_state(KEY, WriteStateData(state_epoch=0, leader_epoch=0, start_offset=0))
    assert (uninitialized.response.error_code, uninitialized.records) == (ErrorCode.invalid_request, [])
    assert h.read(leader_epoch=0).response.error_code == ErrorCode.invalid_request

    h.initialize(state_epoch=2, start_offset=0)
    h.read(leader_epoch=5)
    assert h.read(leader_epoch=4).response.error_code == ErrorCode.fenced_leader_epoch
    assert h.write(WriteStateData(state_epoch=2, leader_epoch=4, start_offset=0)) == ErrorCode.fenced_leader_epoch
    assert h.write(WriteStateData(state_epoch=1, leader_epoch=5, start_offset=0)) == ErrorCode.fenced_state_epoch
    assert h.write(WriteStateData(state_epoch=2, leader_epoch=-1, start_offset=0)) == ErrorCode.invalid_request
    assert h.write(WriteStateData(state_epoch=-1, leader_epoch=5, start_offset=0)) == ErrorCode.invalid_request
    assert h.read(leader_epoch=-1).response.error_code == ErrorCode.invalid_request
    # A write does not raise the leader epoch; a newer one is accepted and the record keeps the recorded epoch.
    assert h.write(WriteStateData(state_epoch=3, leader_epoch=6, start_offset=0)) == 0
    assert h.shard.leader_epochs[KEY] == 5

    assert h.initialize(state_epoch=1) == ErrorCode.fenced_state_epoch
    assert h.initialize(state_epoch=-1) == ErrorCode.invalid_request
    assert h.initialize(state_epoch=3, start_offset=50) == 0
    state = h.shard.share_states[KEY]
    assert (state.snapshot_epoch, state.state_epoch, state.start_offset, state.state_batches) == (1, 3, 50, ())
    assert h.shard.leader_epochs[KEY] == 5  # a fresh state does not lower the fence

    for key in (SharePartitionKey("g", uuid.uuid4(), 0), SharePartitionKey("g", TOPIC, 8)):
        assert h.initialize(key) == ErrorCode.unknown_topic_or_partition
        assert h.shard.read_state_summary(key).response.error_code == ErrorCode.unknown_topic_or_partition
        assert h.shard.delete_state(key).response.error_code == ErrorCode.unknown_topic_or_partition
    assert h.shard.delete_state(SharePartitionKey("g", TOPIC, -1)).response.error_code == ErrorCode.invalid_request

    unloaded = ShareCoordinatorShard(ShareCoordinatorConfig(), Clock())
    assert unloaded.initialize_state(KEY, 0, 0).response.error_code == ErrorCode.unknown_topic_or_partition


def test_a_snapshot_every_n_updates() -> None:
    h = Harness(per_snapshot=3)
    h.initialize()
    kinds = []
    for i in range(9):
        result = h.shard.write_state(KEY, WriteStateData(state_epoch=0, leader_epoch=0, start_offset=0, state_batches=(
            batch(i, i, RecordState.ACKNOWLEDGED, 1),
        )))
        kinds.append("S" if isinstance(result.records[0].value, ShareSnapshotValue) else "U")
        h.apply(result.records)
    assert "".join(kinds) == "UUUSUUUSU"
    state = h.shard.share_states[KEY]
    assert state.snapshot_epoch == 2
    assert state.state_batches == (batch(0, 8, RecordState.ACKNOWLEDGED, 1),)


def test_delivery_complete_count_follows_the_start_offset() -> None:
    h = Harness()
    h.initialize(start_offset=0)
    assert h.shard.share_states[KEY].delivery_complete_count == 0
    h.write(WriteStateData(state_epoch=0, leader_epoch=0, start_offset=5, delivery_complete_count=7))
    h.write(WriteStateData(state_epoch=0, leader_epoch=0, start_offset=5, delivery_complete_count=3))  # same start: the larger stays
    assert h.shard.share_states[KEY].delivery_complete_count == 7
    h.write(WriteStateData(state_epoch=0, leader_epoch=0, start_offset=2, delivery_complete_count=1))  # a stale start offset
    state = h.shard.share_states[KEY]
    assert (state.start_offset, state.delivery_complete_count) == (5, 7)
    uninitialized = Harness()
    uninitialized.initialize(start_offset=-1)
    assert uninitialized.shard.share_states[KEY].delivery_complete_count == -1


write_strategy = st.builds(
    lambda start, batches, leader, read: (start, tuple(batches), leader, read),
    st.integers(-1, 40),
    st.lists(batch_strategy, max_size=4),
    st.integers(0, 3),
    st.booleans(),
)


@settings(max_examples=150, deadline=None)
@given(writes=st.lists(write_strategy, max_size=20), per_snapshot=st.integers(0, 4), initial_start=st.integers(-1, 10))
def test_writes_then_read_and_replay(writes: list[tuple[int, tuple[PersisterStateBatch, ...], int, bool]], per_snapshot: int, initial_start: int) -> None:
    """Whatever the writes, a read gives each offset at or above the start offset the highest
    (delivery count, state) written for it, and replaying the log rebuilds the same shard."""
    h = Harness(per_snapshot=per_snapshot)
    h.initialize(start_offset=initial_start)
    model: dict[int, tuple[int, int]] = {}
    start = initial_start
    for write_start, batches, leader, read_first in writes:
        if read_first:
            h.read(leader_epoch=leader)
        code = h.write(WriteStateData(state_epoch=0, leader_epoch=leader, start_offset=write_start, state_batches=batches))
        if code == ErrorCode.fenced_leader_epoch:
            continue
        assert code == 0
        start = max(start, write_start)
        for b in batches:
            for offset in range(b.first_offset, b.last_offset + 1):
                model[offset] = max(model.get(offset, (-1, -1)), (b.delivery_count, int(b.delivery_state)))
    read = h.read(leader_epoch=h.shard.leader_epochs.get(KEY, 0))
    assert read.response.error_code == 0
    assert read.response.start_offset == start
    assert per_offset(read.response.state_batches) == {o: v for o, v in model.items() if start == -1 or o >= start}

    replayed = ShareCoordinatorShard(h.config, h.clock)
    for offset, (key, value) in enumerate(h.log):
        replayed.replay(decode_record(key, value), offset)
    assert replayed.share_states == h.shard.share_states
    assert replayed.leader_epochs == h.shard.leader_epochs
    assert replayed.state_epochs == h.shard.state_epochs
    assert replayed.snapshot_update_counts == h.shard.snapshot_update_counts
    assert replayed.last_redundant_offset() == h.shard.last_redundant_offset()


def test_revert_takes_a_failed_write_back() -> None:
    h = Harness(per_snapshot=1)
    h.initialize()
    h.write(WriteStateData(state_epoch=0, leader_epoch=0, start_offset=0, state_batches=(batch(0, 3, RecordState.AVAILABLE, 1),)))
    other = SharePartitionKey("other", TOPIC, 1)
    before = (dict(h.shard.share_states), dict(h.shard.leader_epochs), dict(h.shard.snapshot_update_counts), h.shard.last_redundant_offset())
    for operation in (
        lambda: h.shard.write_state(KEY, WriteStateData(state_epoch=0, leader_epoch=0, start_offset=2, state_batches=(batch(2, 9, RecordState.ARCHIVED, 2),))),
        lambda: h.shard.read_state_and_maybe_update_leader_epoch(KEY, 4),
        lambda: h.shard.delete_state(KEY),
        lambda: h.shard.initialize_state(other, 0, 0),
    ):
        result = operation()
        keys = {SharePartitionKey(r.key.group_id, r.key.topic_id, r.key.partition) for r in result.records}
        saved = h.shard.snapshot(keys)
        for offset, record in enumerate(result.records, start=len(h.log)):
            h.shard.replay(record, offset)
        h.shard.revert(saved)
        assert (dict(h.shard.share_states), dict(h.shard.leader_epochs), dict(h.shard.snapshot_update_counts), h.shard.last_redundant_offset()) == before


def test_offsets_manager_tracks_the_oldest_needed_snapshot() -> None:
    k1, k2 = SharePartitionKey("a", TOPIC, 0), SharePartitionKey("b", TOPIC, 0)
    manager = ShareCoordinatorOffsetsManager()
    assert manager.last_redundant_offset() is None
    manager.update_state(k1, 0, False)
    assert manager.last_redundant_offset() is None  # offset 0: nothing below it to delete
    manager.update_state(k2, 1, False)
    manager.update_state(k1, 3, False)
    assert manager.last_redundant_offset() == 1  # k2's only snapshot holds the log back
    manager.update_state(k2, 4, False)
    assert manager.last_redundant_offset() == 3
    manager.update_state(k1, 5, True)  # the tombstone counts once, then k1 holds nothing back
    assert manager.last_redundant_offset() == 4
    manager.update_state(k2, 6, False)
    assert manager.last_redundant_offset() == 6


def test_shard_feeds_the_offsets_manager_with_snapshots_only() -> None:
    h = Harness(per_snapshot=2)
    h.initialize()  # offset 0
    h.initialize(SharePartitionKey("other", TOPIC, 0))  # offset 1
    for _ in range(3):  # updates at 2 and 3, a snapshot at 4
        h.write(WriteStateData(state_epoch=0, leader_epoch=0, start_offset=0))
    assert isinstance(decode_record(*h.log[4]).value, ShareSnapshotValue)
    assert h.shard.last_redundant_offset() == 1


def test_cold_partitions_are_snapshotted() -> None:
    clock = Clock(0)
    h = Harness(clock=clock)
    h.initialize()
    h.initialize(SharePartitionKey("other", TOPIC, 0))
    clock.now_ms = h.config.cold_partition_snapshot_interval_ms - 1
    assert h.shard.snapshot_cold_partitions() == []
    clock.now_ms += 1
    records = h.shard.snapshot_cold_partitions()
    assert len(records) == 2
    h.apply(records)
    state = h.shard.share_states[KEY]
    assert (state.snapshot_epoch, state.create_timestamp, state.write_timestamp) == (1, 0, clock.now_ms)
    clock.now_ms *= 3
    assert h.shard.snapshot_cold_partitions() == []  # every state is a cold snapshot: the partition is quiet


def test_states_of_deleted_topics_are_cleaned_up() -> None:
    h = Harness()
    h.initialize()
    h.initialize(SharePartitionKey("other", TOPIC, 1))
    records = h.shard.maybe_cleanup_share_state({TOPIC})
    assert sorted(r.key.group_id for r in records) == ["group-1", "other"] and all(r.value is None for r in records)
    assert h.shard.maybe_cleanup_share_state({uuid.uuid4()}) == []


def test_config_defaults_and_bounds() -> None:
    config = ShareCoordinatorConfig()
    assert (config.state_topic_num_partitions, config.state_topic_replication_factor, config.state_topic_min_isr) == (50, 3, 2)
    assert (config.state_topic_segment_bytes, config.snapshot_update_records_per_snapshot, config.write_timeout_ms) == (104857600, 500, 5000)
    assert (config.state_topic_prune_interval_ms, config.cold_partition_snapshot_interval_ms) == (300_000, 300_000)
    with pytest.raises(ValueError):
        ShareCoordinatorConfig(snapshot_update_records_per_snapshot=501)
    with pytest.raises(ValueError):
        ShareCoordinatorConfig(state_topic_num_partitions=0)


def test_the_pruner_deletes_below_a_committed_last_redundant_offset_once() -> None:
    pruner = RecordPruner()
    assert pruner.prune_offset(0, None, 10) is None  # no snapshot yet
    assert pruner.prune_offset(0, 11, 10) is None  # not committed: a later round
    assert pruner.prune_offset(0, 10, 10) == 10
    pruner.pruned(0, 10)
    assert pruner.prune_offset(0, 10, 20) is None  # already pruned to it
    assert pruner.prune_offset(1, 10, 20) == 10  # each partition on its own
    assert pruner.prune_offset(0, 15, 20) == 15
    pruner.forget(0)  # resigned: a later leadership prunes afresh
    pruner.pruned(1, 10)
    assert (pruner.prune_offset(0, 10, 20), pruner.prune_offset(1, 10, 20)) == (10, None)
