"""ReplicationControlManager.alter_partition: a partition leader's ISR changes under Kafka 4's
checks, in Kafka's order and with its error codes, on images built from encoded records."""

from __future__ import annotations

import uuid
from typing import Any, Sequence

import pytest
from kio.schema.errors import ErrorCode

from broker.controller.controller_result import ControllerResult
from broker.controller.feature_control_manager import FeatureControlManager
from broker.controller.partition_change_builder import LOST_DIR, RECOVERED, RECOVERING
from broker.controller.replication_control_manager import (
    AlterPartitionReply,
    AlterPartitionResult,
    AlterPartitionTopic,
    IsrMember,
    PartitionIsrChange,
    ReplicationControlManager,
)
from broker.metadata.metadata_records import (
    BrokerRegistrationChangeRecord,
    PartitionChangeRecord,
    UnregisterBrokerRecord,
)
from tests.unit.control_manager_images import Log, registration
from tests.unit.test_replication_control_manager import assign, fence, manager, part

EPOCHS = {1: 101, 2: 102, 3: 103, 4: 104}


def directory(broker: int) -> uuid.UUID:
    return uuid.UUID(int=0x1000 + broker)


def cluster(**configs: str) -> tuple[ReplicationControlManager, Log, uuid.UUID]:
    """Brokers 1-4 registered (each with its own epoch) and unfenced; topic t with one partition on 1, 2, 3, led by 1."""
    log = Log()
    log.commit(FeatureControlManager.bootstrap_records())
    log.commit([registration(b, epoch=e, dirs=(directory(b),)) for b, e in EPOCHS.items()])
    rcm = manager()
    assert assign(rcm, log, "t", [1, 2, 3], **configs) == [(0, None)]
    return rcm, log, log.image.topics["t"].topic_id


def ask(log: Log, isr: Sequence[int], **fields: Any) -> PartitionIsrChange:
    """A request for partition 0 of t, from its current state unless ``fields`` say otherwise; each
    member at its registered epoch."""
    p = part(log, "t")
    wanted: dict[str, Any] = {
        "partition_index": 0,
        "leader_epoch": p.leader_epoch,
        "new_isr": tuple(IsrMember(b, EPOCHS.get(b, -1)) for b in isr),
        "leader_recovery_state": p.leader_recovery_state,
        "partition_epoch": p.partition_epoch,
    }
    wanted.update(fields)
    return PartitionIsrChange(**wanted)


def alter(
    rcm: ReplicationControlManager, log: Log, topic_id: uuid.UUID | None, *changes: PartitionIsrChange, broker: int = 1, epoch: int | None = None
) -> ControllerResult[AlterPartitionReply]:
    return rcm.alter_partition(log.image, broker, EPOCHS[broker] if epoch is None else epoch, [AlterPartitionTopic(topic_id, changes)])


def answers(result: ControllerResult[AlterPartitionReply]) -> list[AlterPartitionResult]:
    return [p for t in result.response.topics for p in t.partitions]


def codes(result: ControllerResult[AlterPartitionReply]) -> list[int]:
    return [p.error_code for p in answers(result)]


def refused(code: int, index: int = 0) -> AlterPartitionResult:
    return AlterPartitionResult(index, code)


# --- success --------------------------------------------------------------------------------


def test_a_shrink_writes_one_record_and_answers_the_state_it_makes() -> None:
    rcm, log, topic_id = cluster()
    result = alter(rcm, log, topic_id, ask(log, [1, 2]))
    assert result.records == [PartitionChangeRecord(partition_id=0, topic_id=topic_id, isr=(1, 2))]
    assert result.response.error_code == ErrorCode.none and [t.topic_id for t in result.response.topics] == [topic_id]
    assert answers(result) == [AlterPartitionResult(0, ErrorCode.none, leader_id=1, leader_epoch=0, isr=(1, 2), leader_recovery_state=RECOVERED, partition_epoch=1)]
    log.commit(result.records)
    p = part(log, "t")
    # The answer is what the committed record made: the leader keeps its epoch, the partition epoch moves.
    assert (p.leader, p.leader_epoch, p.isr, p.leader_recovery_state, p.partition_epoch) == (1, 0, (1, 2), RECOVERED, 1)


def test_an_expand_after_a_shrink_takes_the_new_partition_epoch() -> None:
    rcm, log, topic_id = cluster()
    log.commit(alter(rcm, log, topic_id, ask(log, [1, 3])).records)
    result = alter(rcm, log, topic_id, ask(log, [1, 3, 2]))
    assert answers(result) == [AlterPartitionResult(0, ErrorCode.none, leader_id=1, leader_epoch=0, isr=(1, 3, 2), partition_epoch=2)]
    log.commit(result.records)
    assert (part(log, "t").isr, part(log, "t").partition_epoch) == ((1, 3, 2), 2)


def test_the_isr_it_has_already_is_answered_with_no_record() -> None:
    rcm, log, topic_id = cluster()
    result = alter(rcm, log, topic_id, ask(log, [1, 2, 3]))
    assert result.records == []
    assert answers(result) == [AlterPartitionResult(0, ErrorCode.none, leader_id=1, leader_epoch=0, isr=(1, 2, 3), partition_epoch=0)]


def test_members_at_epoch_minus_one_skip_the_epoch_check_as_v2_sends_them() -> None:
    rcm, log, topic_id = cluster()
    result = alter(rcm, log, topic_id, ask(log, [1, 2], new_isr=(IsrMember(1), IsrMember(2))))
    assert codes(result) == [ErrorCode.none] and len(result.records) == 1


def test_a_recovering_leader_may_declare_itself_recovered_and_then_expand() -> None:
    rcm, log, topic_id = cluster()
    log.commit([PartitionChangeRecord(partition_id=0, topic_id=topic_id, isr=(1,), leader_recovery_state=RECOVERING)])
    assert codes(alter(rcm, log, topic_id, ask(log, [1], leader_recovery_state=RECOVERING))) == [ErrorCode.none]
    result = alter(rcm, log, topic_id, ask(log, [1, 2], leader_recovery_state=RECOVERED))
    assert result.records == [PartitionChangeRecord(partition_id=0, topic_id=topic_id, isr=(1, 2), leader_recovery_state=RECOVERED)]
    assert answers(result)[0].leader_recovery_state == RECOVERED and answers(result)[0].isr == (1, 2)


def test_every_partition_and_topic_is_answered_in_request_order() -> None:
    rcm, log, topic_id = cluster()
    assert assign(rcm, log, "u", [1, 2], [2, 1], [1, 3]) == [(0, None)]
    u = log.image.topics["u"]
    shrink_u0 = PartitionIsrChange(0, 0, (IsrMember(1),), RECOVERED, 0)
    not_leader_u1 = PartitionIsrChange(1, 0, (IsrMember(2),), RECOVERED, 0)
    same_u2 = PartitionIsrChange(2, 0, (IsrMember(1), IsrMember(3)), RECOVERED, 0)
    topics = [
        AlterPartitionTopic(u.topic_id, (shrink_u0, not_leader_u1, same_u2)),
        AlterPartitionTopic(uuid.UUID(int=99), (shrink_u0,)),
        AlterPartitionTopic(topic_id, (ask(log, [1, 3]),)),
    ]
    result = rcm.alter_partition(log.image, 1, EPOCHS[1], topics)
    assert [t.topic_id for t in result.response.topics] == [u.topic_id, uuid.UUID(int=99), topic_id]
    assert [[(p.partition_index, p.error_code) for p in t.partitions] for t in result.response.topics] == [
        [(0, ErrorCode.none), (1, ErrorCode.invalid_request), (2, ErrorCode.none)],
        [(0, ErrorCode.unknown_topic_id)],
        [(0, ErrorCode.none)],
    ]
    assert [(r.topic_id, r.partition_id) for r in result.records if isinstance(r, PartitionChangeRecord)] == [(u.topic_id, 0), (topic_id, 0)]


# --- the requesting broker ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("broker", "epoch", "message"),
    [
        (1, 100, "Expected broker epoch 101, but got broker epoch 100"),
        (1, -1, "Expected broker epoch 101, but got broker epoch -1"),
        (9, 109, "No broker registration found for broker id 9"),
    ],
)
def test_a_stale_broker_epoch_refuses_the_whole_request(broker: int, epoch: int, message: str) -> None:
    rcm, log, topic_id = cluster()
    result = rcm.alter_partition(log.image, broker, epoch, [AlterPartitionTopic(topic_id, (ask(log, [1, 2]),))])
    assert result.records == []
    assert result.response == AlterPartitionReply(ErrorCode.stale_broker_epoch, message, [])


# --- per partition, in Kafka's order ------------------------------------------------------------


@pytest.mark.parametrize("topic_id", [uuid.UUID(int=99), uuid.UUID(int=0), None])
def test_an_unknown_topic_id_answers_every_partition_asked(topic_id: uuid.UUID | None) -> None:
    rcm, log, _ = cluster()
    result = alter(rcm, log, topic_id, ask(log, [1, 2]), ask(log, [1], partition_index=5))
    assert result.records == [] and result.response.error_code == ErrorCode.none
    assert [t.topic_id for t in result.response.topics] == [topic_id]
    assert answers(result) == [refused(ErrorCode.unknown_topic_id), refused(ErrorCode.unknown_topic_id, 5)]


def test_an_unknown_partition() -> None:
    rcm, log, topic_id = cluster()
    assert answers(alter(rcm, log, topic_id, ask(log, [1, 2], partition_index=1))) == [refused(ErrorCode.unknown_topic_or_partition, 1)]


@pytest.mark.parametrize("ahead", [{"leader_epoch": 1}, {"partition_epoch": 1}])
def test_epochs_ahead_of_the_controller_answer_not_controller(ahead: dict[str, int]) -> None:
    rcm, log, topic_id = cluster()
    result = alter(rcm, log, topic_id, ask(log, [1, 2], **ahead))
    assert result.records == [] and codes(result) == [ErrorCode.not_controller]


def test_a_leader_epoch_behind_is_fenced_and_a_non_leader_is_an_invalid_request() -> None:
    rcm, log, topic_id = cluster()
    fence(rcm, log, 1)  # 2 leads now, at leader epoch 1
    assert (part(log, "t").leader, part(log, "t").leader_epoch) == (2, 1)
    assert codes(alter(rcm, log, topic_id, ask(log, [2, 3], leader_epoch=0), broker=2)) == [ErrorCode.fenced_leader_epoch]
    # The old leader (fenced brokers keep their epoch) at the current epochs: not the leader.
    assert codes(alter(rcm, log, topic_id, ask(log, [1, 2, 3]))) == [ErrorCode.invalid_request]
    assert codes(alter(rcm, log, topic_id, ask(log, [2, 3]), broker=2)) == [ErrorCode.none]


def test_a_retry_after_its_change_was_committed_is_an_invalid_update_version() -> None:
    """KRaft's rule (the idempotent retry is ZooKeeper mode's): the leader learns the outcome from the metadata."""
    rcm, log, topic_id = cluster()
    first = ask(log, [1, 2])
    log.commit(alter(rcm, log, topic_id, first).records)
    result = alter(rcm, log, topic_id, first)
    assert result.records == [] and answers(result) == [refused(ErrorCode.invalid_update_version)]


@pytest.mark.parametrize(
    "isr",
    [
        [1, 2, 4],  # 4 is registered and unfenced, but not a replica of the partition
        [1, 1, 2],
        [2, 3],  # the leader left out
        [],
        [1, -1],
    ],
)
def test_an_isr_that_is_not_distinct_replicas_with_the_leader_is_an_invalid_request(isr: list[int]) -> None:
    rcm, log, topic_id = cluster()
    result = alter(rcm, log, topic_id, ask(log, isr))
    assert result.records == [] and codes(result) == [ErrorCode.invalid_request]


def test_leader_recovery_state_changes_that_are_invalid_requests() -> None:
    rcm, log, topic_id = cluster()
    # RECOVERED never goes back to RECOVERING, not even with the leader alone in the ISR.
    assert codes(alter(rcm, log, topic_id, ask(log, [1], leader_recovery_state=RECOVERING))) == [ErrorCode.invalid_request]
    log.commit([PartitionChangeRecord(partition_id=0, topic_id=topic_id, isr=(1,), leader_recovery_state=RECOVERING)])
    # A recovering leader is the only replica known to hold every record: it may not add others yet.
    assert codes(alter(rcm, log, topic_id, ask(log, [1, 2], leader_recovery_state=RECOVERING))) == [ErrorCode.invalid_request]


def test_an_unknown_leader_recovery_state_fails_the_whole_request() -> None:
    rcm, log, topic_id = cluster()
    result = alter(rcm, log, topic_id, ask(log, [1, 2]), ask(log, [1, 2], leader_recovery_state=2))
    assert result.records == []
    assert result.response == AlterPartitionReply(ErrorCode.unknown_server_error, "Value 2 is not a valid leader recovery state", [])


def test_fenced_shutting_down_and_unregistered_members_are_ineligible() -> None:
    rcm, log, topic_id = cluster()
    fence(rcm, log, 3)  # leaves the ISR: (1, 2)
    assert codes(alter(rcm, log, topic_id, ask(log, [1, 2, 3]))) == [ErrorCode.ineligible_replica]
    log.commit([BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=EPOCHS[2], in_controlled_shutdown=1)])
    assert codes(alter(rcm, log, topic_id, ask(log, [1, 2]))) == [ErrorCode.ineligible_replica]
    log.commit([UnregisterBrokerRecord(broker_id=2, broker_epoch=EPOCHS[2])])
    result = alter(rcm, log, topic_id, ask(log, [1, 2]))
    assert result.records == [] and codes(result) == [ErrorCode.ineligible_replica]


def test_a_member_at_another_broker_epoch_is_ineligible() -> None:
    """A follower that restarted since the leader saw it caught up has not necessarily kept its log (KIP-903)."""
    rcm, log, topic_id = cluster()
    log.commit(alter(rcm, log, topic_id, ask(log, [1, 2])).records)
    stale = ask(log, [1, 2, 3], new_isr=(IsrMember(1, EPOCHS[1]), IsrMember(2, EPOCHS[2]), IsrMember(3, EPOCHS[3] - 1)))
    assert codes(alter(rcm, log, topic_id, stale)) == [ErrorCode.ineligible_replica]


# --- a leader that may no longer lead ----------------------------------------------------------


def test_a_leader_whose_directory_is_offline_loses_leadership_with_its_isr_change() -> None:
    rcm, log, topic_id = cluster()
    log.commit([PartitionChangeRecord(partition_id=0, topic_id=topic_id, directories=(LOST_DIR, directory(2), directory(3)))])
    result = alter(rcm, log, topic_id, ask(log, [1, 2]))
    # Written and refused at once, as Kafka: the requester learns the new leader from the metadata.
    assert result.records == [PartitionChangeRecord(partition_id=0, topic_id=topic_id, isr=(1, 2), leader=2)]
    assert answers(result) == [refused(ErrorCode.new_leader_elected)]


@pytest.mark.parametrize(("unclean", "leader"), [("false", -1), ("true", 2)])
def test_with_no_other_clean_leader_the_topic_s_unclean_election_setting_decides(unclean: str, leader: int) -> None:
    rcm, log, topic_id = cluster(**{"unclean.leader.election.enable": unclean})
    log.commit([PartitionChangeRecord(partition_id=0, topic_id=topic_id, directories=(LOST_DIR, directory(2), directory(3)))])
    result = alter(rcm, log, topic_id, ask(log, [1]))
    assert answers(result) == [refused(ErrorCode.new_leader_elected)]
    [record] = result.records
    assert isinstance(record, PartitionChangeRecord) and record.leader == leader
    log.commit(result.records)
    assert part(log, "t").leader == leader
