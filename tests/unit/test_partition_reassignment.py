"""Partition reassignment (KIP-455) on the controller: the replica sets of a move, its completion
by AlterPartition, cancellation, listing and Kafka's error codes, on images built from encoded
records; then the same through QuorumController and the controller listener's wire answers."""

from __future__ import annotations

import datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from broker.controller.configuration_control_manager import ConfigurationControlManager
from broker.controller.controller_apis import ControllerApis
from broker.controller.controller_result import ControllerResult
from broker.controller.feature_control_manager import ELIGIBLE_LEADER_REPLICAS_FEATURE, ELIGIBLE_LEADER_REPLICAS_LEVEL
from broker.controller.partition_change_builder import Election
from broker.controller.partition_reassignment import CompletedReassignment, PartitionReassignmentReplicas, PartitionReassignmentRevert
from broker.controller.reassignment_control_manager import (
    NO_REASSIGNMENT_IN_PROGRESS_MESSAGE,
    OngoingPartitionReassignment,
    OngoingTopicReassignment,
    ReassignablePartition,
    ReassignablePartitionResult,
    ReassignableTopic,
    ReassignmentControlManager,
)
from broker.controller.replication_control_manager import AlterPartitionReply, AlterPartitionTopic, IsrMember, PartitionIsrChange, ReplicationControlManager
from broker.handlers.forwarding import error_response
from broker.metadata.metadata_image import PartitionRegistration
from broker.metadata.metadata_records import FeatureLevelRecord, PartitionChangeRecord
from protocol.api_keys import ApiKey, request_schema
from protocol.entities import build, nested
from protocol.messages import encode_body
from tests.unit.control_manager_images import Log, cluster_log
from tests.unit.preferred_leaders_fakes import single
from tests.unit.quorum_controller_fakes import CLUSTER_ID, Clock, FakeQuorum, Node, run
from tests.unit.test_alter_partition import alter, ask, cluster
from tests.unit.test_quorum_controller import live_brokers, topic
from tests.unit.test_replication_control_manager import assign, fence, manager, part


def reassignments(*, unclean: bool = False) -> ReassignmentControlManager:
    return ReassignmentControlManager(ConfigurationControlManager(unclean_leader_election_enable=unclean))


def move(mgr: ReassignmentControlManager, log: Log, replicas: list[int] | None, name: str = "t", index: int = 0) -> list[ReassignablePartitionResult]:
    """Reassign one partition (None cancels); the records are committed."""
    result = mgr.alter_partition_reassignments(log.image, [ReassignableTopic(name, (ReassignablePartition(index, None if replicas is None else tuple(replicas)),))])
    log.commit(result.records)
    return [p for t in result.response for p in t.partitions]


def ask_u(log: Log, isr: list[int]) -> PartitionIsrChange:
    """An AlterPartition of topic u's partition 0 from its current state."""
    u = part(log, "u")
    return ask(log, isr, leader_epoch=u.leader_epoch, partition_epoch=u.partition_epoch)


def state(p: PartitionRegistration) -> tuple[Any, ...]:
    return p.replicas, p.isr, p.leader, p.adding_replicas, p.removing_replicas


# --- the replica sets -----------------------------------------------------------------------


def test_the_replica_sets_of_a_move() -> None:
    r = PartitionReassignmentReplicas.of([1, 2, 3], [2, 3, 4])
    assert r == PartitionReassignmentReplicas(removing=(1,), adding=(4,), replicas=(2, 3, 4, 1))
    assert r.original_replicas() == (2, 3, 1)
    assert r.maybe_complete([1, 2, 3]) is None  # 4 not in sync yet
    assert r.maybe_complete([2, 1, 3, 4]) == CompletedReassignment(replicas=(2, 3, 4), isr=(2, 3, 4))
    assert r.maybe_complete([1, 4]) is None
    # A reordering has nothing to add or remove: it is no move at all.
    assert not PartitionReassignmentReplicas.of([1, 2, 3], [3, 1, 2]).in_progress
    # Only removing: done once some replica that stays is in sync.
    shrink = PartitionReassignmentReplicas.of([1, 2, 3], [1])
    assert shrink.maybe_complete([2, 3]) is None
    assert shrink.maybe_complete([3, 1]) == CompletedReassignment(replicas=(1,), isr=(1,))


@given(
    st.lists(st.integers(0, 7), min_size=1, max_size=5, unique=True),
    st.lists(st.integers(0, 7), min_size=1, max_size=5, unique=True),
    st.lists(st.integers(0, 7), max_size=8, unique=True),
)
def test_a_move_completes_exactly_when_every_target_replica_is_in_sync(current: list[int], target: list[int], isr: list[int]) -> None:
    r = PartitionReassignmentReplicas.of(current, target)
    assert set(r.replicas) == set(current) | set(target) and len(r.replicas) == len(set(r.replicas))
    assert r.original_replicas() == tuple(b for b in r.replicas if b in current)
    isr = [b for b in isr if b in r.replicas]  # an ISR is always among the replicas
    done = r.maybe_complete(isr)
    if not r.in_progress:
        assert done is None
    elif set(target) <= set(isr):
        assert done == CompletedReassignment(tuple(target), tuple(b for b in isr if b in target))
    else:
        assert done is None


def test_a_revert_keeps_the_original_replicas_and_their_isr() -> None:
    moving = PartitionRegistration(replicas=(4, 5, 1, 2), isr=(1, 4, 2), leader=1, leader_epoch=0, partition_epoch=1, removing_replicas=(1, 2), adding_replicas=(4, 5))
    assert PartitionReassignmentRevert.of(moving) == PartitionReassignmentRevert(replicas=(1, 2), isr=(1, 2), unclean=False)
    only_new_in_sync = PartitionRegistration(replicas=(4, 1), isr=(4,), leader=4, leader_epoch=1, partition_epoch=2, removing_replicas=(1,), adding_replicas=(4,))
    assert PartitionReassignmentRevert.of(only_new_in_sync) == PartitionReassignmentRevert(replicas=(1,), isr=(1,), unclean=True)


# --- AlterPartitionReassignments over an image ---------------------------------------------


def test_a_move_starts_with_the_union_and_completes_when_the_added_replica_joins_the_isr() -> None:
    rcm, log, topic_id = cluster()
    mgr = reassignments()
    assert move(mgr, log, [2, 3, 4]) == [ReassignablePartitionResult(0, ErrorCode.none)]
    p = part(log, "t")
    assert state(p) == ((2, 3, 4, 1), (1, 2, 3), 1, (4,), (1,))
    assert p.leader_epoch == 0 and p.partition_epoch == 1  # adding a replica does not move the leader epoch
    assert mgr.list_partition_reassignments(log.image, None) == [OngoingTopicReassignment("t", [OngoingPartitionReassignment(0, (2, 3, 4, 1), (4,), (1,))])]

    # The leader (1, being removed) brings 4 into the ISR: the move completes in that record,
    # and leadership leaves 1, which is answered NEW_LEADER_ELECTED.
    result = alter(rcm, log, topic_id, ask(log, [1, 2, 3, 4]))
    [record] = result.records
    assert record == PartitionChangeRecord(
        partition_id=0, topic_id=topic_id, isr=(2, 3, 4), leader=2, replicas=(2, 3, 4), directories=record.directories, removing_replicas=(), adding_replicas=()
    )
    assert [p.error_code for t in result.response.topics for p in t.partitions] == [ErrorCode.new_leader_elected]
    log.commit(result.records)
    p = part(log, "t")
    assert state(p) == ((2, 3, 4), (2, 3, 4), 2, (), ())
    assert (p.leader_epoch, p.partition_epoch) == (1, 2)
    assert mgr.list_partition_reassignments(log.image, None) == []


def test_a_move_that_keeps_the_leader_bumps_its_epoch_when_a_replica_leaves() -> None:
    rcm, log, topic_id = cluster()
    mgr = reassignments()
    move(mgr, log, [1, 2, 4])
    result = alter(rcm, log, topic_id, ask(log, [1, 2, 3, 4]))
    [record] = result.records
    assert (record.leader, record.replicas, record.isr) == (1, (1, 2, 4), (1, 2, 4))  # leader set: a new leader epoch fences 3
    assert [p.error_code for t in result.response.topics for p in t.partitions] == [ErrorCode.none]
    log.commit(result.records)
    assert state(part(log, "t")) == ((1, 2, 4), (1, 2, 4), 1, (), ())


def test_a_move_the_isr_already_allows_completes_at_once() -> None:
    _, log, _ = cluster()
    mgr = reassignments()
    move(mgr, log, [3, 2, 1])  # a reordering
    assert state(part(log, "t")) == ((3, 2, 1), (1, 2, 3), 1, (), ())
    move(mgr, log, [3, 2])  # a shrink: 3 and 2 are in sync
    p = part(log, "t")
    assert state(p) == ((3, 2), (2, 3), 3, (), ())
    assert p.leader_epoch == 1


def test_cancel_reverts_to_the_original_replicas() -> None:
    rcm, log, topic_id = cluster()
    mgr = reassignments()
    move(mgr, log, [2, 3, 4])
    assert move(mgr, log, None) == [ReassignablePartitionResult(0, ErrorCode.none)]
    p = part(log, "t")
    assert state(p) == ((2, 3, 1), (1, 2, 3), 1, (), ())
    assert p.leader_epoch == 1  # 4 leaves the replicas: fenced by a new leader epoch
    assert move(mgr, log, None) == [ReassignablePartitionResult(0, ErrorCode.no_reassignment_in_progress, NO_REASSIGNMENT_IN_PROGRESS_MESSAGE)]
    # An added replica that joined the ISR before the cancel leaves it again.
    assign(rcm, log, "u", [1, 2])
    move(mgr, log, [3, 4], name="u")
    u = log.image.topics["u"].topic_id
    log.commit(alter(rcm, log, u, ask_u(log, [1, 2, 3])).records)
    assert state(part(log, "u")) == ((3, 4, 1, 2), (1, 2, 3), 1, (3, 4), (1, 2))
    move(mgr, log, None, name="u")
    assert state(part(log, "u")) == ((1, 2), (1, 2), 1, (), ())


def test_a_new_target_replaces_the_move_in_progress() -> None:
    _, log, _ = cluster()
    mgr = reassignments()
    move(mgr, log, [2, 3, 4])
    move(mgr, log, [1, 2, 4])  # the union counts as the current replicas: 3 is removed, nothing is added
    assert state(part(log, "t")) == ((1, 2, 4, 3), (1, 2, 3), 1, (4,), (3,))


def test_a_new_target_keeping_the_whole_union_removes_nothing() -> None:
    rcm, log, topic_id = cluster()
    mgr = reassignments()
    move(mgr, log, [2, 3, 4])
    move(mgr, log, [1, 2, 3, 4])  # 4 is still being added; 1 is no longer being removed
    assert state(part(log, "t")) == ((1, 2, 3, 4), (1, 2, 3), 1, (4,), ())
    log.commit(alter(rcm, log, topic_id, ask(log, [1, 2, 3, 4])).records)
    assert state(part(log, "t")) == ((1, 2, 3, 4), (1, 2, 3, 4), 1, (), ())


def test_a_shrink_below_min_insync_replicas_leaves_no_removed_replica_eligible() -> None:
    _, log, _ = cluster(**{"min.insync.replicas": "2"})
    log.commit([FeatureLevelRecord(name=ELIGIBLE_LEADER_REPLICAS_FEATURE, feature_level=ELIGIBLE_LEADER_REPLICAS_LEVEL)])
    move(reassignments(), log, [1])
    p = part(log, "t")
    assert state(p) == ((1,), (1,), 1, (), ()) and p.elr == ()


def test_errors_are_kafkas() -> None:
    _, log, _ = cluster()
    mgr = reassignments()
    result = mgr.alter_partition_reassignments(
        log.image,
        [
            ReassignableTopic("nope", (ReassignablePartition(0, (1,)),)),
            ReassignableTopic(
                "t",
                (
                    ReassignablePartition(7, (1,)),
                    ReassignablePartition(0, ()),
                    ReassignablePartition(0, (1, 9)),
                    ReassignablePartition(0, (1, 2, 1)),
                    ReassignablePartition(0, None),
                ),
            ),
        ],
    )
    assert result.records == []
    assert [(t.name, [(p.partition_index, p.error_code, p.error_message) for p in t.partitions]) for t in result.response] == [
        ("nope", [(0, ErrorCode.unknown_topic_or_partition, "Unable to find a topic named nope.")]),
        (
            "t",
            [
                (7, ErrorCode.unknown_topic_or_partition, "Unable to find partition t:7."),
                (0, ErrorCode.invalid_replica_assignment, "The manual partition assignment includes an empty replica list."),
                (0, ErrorCode.invalid_replica_assignment, "The manual partition assignment includes broker 9, but no such broker is registered."),
                (0, ErrorCode.invalid_replica_assignment, "The manual partition assignment includes the broker 1 more than once."),
                (0, ErrorCode.no_reassignment_in_progress, NO_REASSIGNMENT_IN_PROGRESS_MESSAGE),
            ],
        ),
    ]


def test_a_cancel_that_needs_an_unclean_election_is_refused_unless_allowed() -> None:
    rcm, log, _ = cluster()
    mgr = reassignments()
    assign(rcm, log, "u", [1])
    move(mgr, log, [3, 4], name="u")
    log.commit(alter(rcm, log, log.image.topics["u"].topic_id, ask_u(log, [1, 3])).records)
    fence(rcm, log, 1)
    # Only an added replica is in sync: going back to 1 alone would be an unclean election.
    assert state(part(log, "u")) == ((3, 4, 1), (3,), 3, (3, 4), (1,))
    [refused] = move(mgr, log, None, name="u")
    assert (refused.error_code, refused.error_message) == (
        ErrorCode.invalid_replica_assignment,
        "Unable to revert partition assignment for u:0 because it would require an unclean leader election.",
    )
    assert move(reassignments(unclean=True), log, None, name="u") == [ReassignablePartitionResult(0, ErrorCode.none)]
    assert state(part(log, "u")) == ((1,), (1,), -1, (), ())  # 1 is fenced: no leader until it is back


def test_listing_names_only_moving_partitions_of_known_topics() -> None:
    rcm, log, _ = cluster()
    mgr = reassignments()
    move(mgr, log, [2, 3, 4])
    ongoing = [OngoingTopicReassignment("t", [OngoingPartitionReassignment(0, (2, 3, 4, 1), (4,), (1,))])]
    assert mgr.list_partition_reassignments(log.image, [("t", [0, 5]), ("nope", [0])]) == ongoing
    assert mgr.list_partition_reassignments(log.image, [("t", [1])]) == []


def test_leadership_changes_keep_the_move() -> None:
    rcm, log, _ = cluster()
    mgr = reassignments()
    move(mgr, log, [2, 3, 4])
    changes = rcm.handle_brokers_fenced(log.image, [1])
    log.commit(changes)
    p = part(log, "t")
    assert (p.leader, p.isr, p.adding_replicas, p.removing_replicas) == (2, (2, 3), (4,), (1,))


# --- QuorumController and the controller listener ---------------------------------------------


def alter_request(topics: dict[str, dict[int, list[int] | None]], version: int = 0, allow_replication_factor_change: bool = True) -> Any:
    schema = request_schema(ApiKey.ALTER_PARTITION_REASSIGNMENTS, version)
    topic_cls, partition_cls = nested(schema, "ReassignableTopic"), nested(schema, "ReassignablePartition")
    return build(
        schema,
        timeout=datetime.timedelta(seconds=60),
        allow_replication_factor_change=allow_replication_factor_change,
        topics=tuple(
            build(topic_cls, name=name, partitions=tuple(build(partition_cls, partition_index=i, replicas=None if r is None else tuple(r)) for i, r in parts.items()))
            for name, parts in topics.items()
        ),
    )


def list_request(topics: dict[str, list[int]] | None) -> Any:
    schema = request_schema(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0)
    topic_cls = nested(schema, "ListPartitionReassignmentsTopics")
    listed = None if topics is None else tuple(build(topic_cls, name=n, partition_indexes=tuple(p)) for n, p in topics.items())
    return build(schema, timeout=datetime.timedelta(seconds=60), topics=listed)


async def listener_with_topic() -> tuple[ControllerApis, list[int], int]:
    """The active controller's listener, brokers 1-4, topic t (RF 3): (listener, t-0's replicas, a broker not among them)."""
    quorum, node, _ = single()
    quorum.elect(1)
    await live_brokers(node, 1, 2, 3, 4)
    [created] = await node.controller.create_topics([topic("t", 1)], validate_only=False)
    assert created.error_code == 0
    current = list(node.loader.image.topics["t"].partitions[0].replicas)
    return ControllerApis(node.controller, node.config, CLUSTER_ID, node.raft), current, next(b for b in (1, 2, 3, 4) if b not in current)


def test_the_controller_listener_alters_and_lists() -> None:
    async def scenario() -> None:
        apis, current, spare = await listener_with_topic()
        target = [spare, *current[1:]]
        response = await apis.handle(alter_request({"t": {0: target}, "nope": {0: None}}))
        encode_body(response)
        assert response.error_code == ErrorCode.none
        assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in response.responses] == [
            ("t", [(0, ErrorCode.none)]),
            ("nope", [(0, ErrorCode.unknown_topic_or_partition)]),
        ]
        listed = await apis.handle(list_request(None))
        encode_body(listed)
        assert [(t.name, [(p.partition_index, list(p.replicas), list(p.adding_replicas), list(p.removing_replicas)) for p in t.partitions]) for t in listed.topics] == [
            ("t", [(0, [*target, current[0]], [spare], [current[0]])])
        ]
        cancelled = await apis.handle(alter_request({"t": {0: None}}))
        assert [p.error_code for t in cancelled.responses for p in t.partitions] == [ErrorCode.none]
        assert (await apis.handle(list_request({"t": [0]}))).topics == ()

    run(scenario())


def test_v1_without_replication_factor_changes() -> None:
    async def scenario() -> None:
        apis, current, spare = await listener_with_topic()
        refused = await apis.handle(alter_request({"t": {0: current[:2]}}, version=1, allow_replication_factor_change=False))
        encode_body(refused)
        assert refused.allow_replication_factor_change is False
        assert [(p.error_code, p.error_message) for t in refused.responses for p in t.partitions] == [
            (ErrorCode.invalid_replication_factor, "The replication factor is changed from 3 to 2")
        ]
        moved = await apis.handle(alter_request({"t": {0: [spare, *current[1:]]}}, version=1, allow_replication_factor_change=False))
        assert [p.error_code for t in moved.responses for p in t.partitions] == [ErrorCode.none]
        # A move in progress counts the replicas it is heading for (3), not its union (4).
        again = await apis.handle(alter_request({"t": {0: [spare]}}, version=1, allow_replication_factor_change=False))
        assert [p.error_message for t in again.responses for p in t.partitions] == ["The replication factor is changed from 3 to 1"]

    run(scenario())


def test_not_controller_while_inactive() -> None:
    async def scenario() -> None:
        quorum = FakeQuorum()
        nodes = {n: Node(quorum, n, Clock()) for n in (1, 2)}
        apis = ControllerApis(nodes[1].controller, nodes[1].config, CLUSTER_ID, nodes[1].raft)
        quorum.elect(2)
        altered = await apis.handle(alter_request({"t": {0: [1], 1: None}}))
        encode_body(altered)
        assert altered.error_code == ErrorCode.not_controller
        assert [p.error_code for t in altered.responses for p in t.partitions] == [ErrorCode.not_controller] * 2
        listed = await apis.handle(list_request({"t": [0]}))
        encode_body(listed)
        assert listed.error_code == ErrorCode.not_controller and [p.partition_index for t in listed.topics for p in t.partitions] == [0]

    run(scenario())


def test_the_forwarding_timeout_answer() -> None:
    answer = error_response(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, alter_request({"t": {0: [1]}}), ErrorCode.request_timed_out, "no controller")
    encode_body(answer)
    assert [(p.error_code, p.error_message) for t in answer.responses for p in t.partitions] == [(ErrorCode.request_timed_out, "no controller")]
    listed = error_response(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, list_request(None), ErrorCode.request_timed_out, "no controller")
    encode_body(listed)
    assert listed.error_code == ErrorCode.request_timed_out and listed.topics == ()



def isr_change(rcm: ReplicationControlManager, log: Log, name: str, isr: list[int]) -> ControllerResult[AlterPartitionReply]:
    """The partition leader's AlterPartition for partition 0 of ``name``, members' epochs unchecked."""
    info = log.image.topics[name]
    p = info.partitions[0]
    change = PartitionIsrChange(0, p.leader_epoch, tuple(IsrMember(b) for b in isr), 0, p.partition_epoch)
    return rcm.alter_partition(log.image, p.leader, log.image.brokers[p.leader].epoch, [AlterPartitionTopic(info.topic_id, (change,))])


def test_a_new_move_that_removes_replicas_being_added() -> None:
    """Kafka's testReassignPartitionsHandlesNewReassignmentThatRemovesPreviouslyAddingReplicas."""
    log = cluster_log(0, 1, 2, 3, 4, 5)
    rcm, mgr = manager(), reassignments()
    assign(rcm, log, "topic-1", [0, 1])
    move(mgr, log, [2, 3], name="topic-1")
    ongoing = mgr.list_partition_reassignments(log.image, None)
    assert ongoing == [OngoingTopicReassignment("topic-1", [OngoingPartitionReassignment(0, (2, 3, 0, 1), (2, 3), (0, 1))])]
    added = isr_change(rcm, log, "topic-1", [0, 1, 2])
    assert [(p.error_code, p.isr) for t in added.response.topics for p in t.partitions] == [(ErrorCode.none, (0, 1, 2))]
    log.commit(added.records)
    elected = rcm.elect_leaders(log.image, Election.PREFERRED, [("topic-1", 0)])
    assert [r.error_code for r in elected.response] == [ErrorCode.none]
    log.commit(elected.records)
    assert part(log, "topic-1").leader == 2
    move(mgr, log, [4, 5], name="topic-1")
    ongoing = mgr.list_partition_reassignments(log.image, None)
    assert ongoing == [OngoingTopicReassignment("topic-1", [OngoingPartitionReassignment(0, (4, 5, 0, 1, 2, 3), (4, 5), (0, 1, 2, 3))])]
    assert part(log, "topic-1").leader == 2
    done = isr_change(rcm, log, "topic-1", [0, 1, 2, 3, 4, 5])
    assert [p.error_code for t in done.response.topics for p in t.partitions] == [ErrorCode.new_leader_elected]
    log.commit(done.records)
    assert part(log, "topic-1").leader == 4
    assert mgr.list_partition_reassignments(log.image, None) == []


@settings(max_examples=150, deadline=None)
@given(st.data(), st.booleans())
def test_any_sequence_of_moves_cancels_and_isr_changes_keeps_the_partition_consistent(data: st.DataObject, elr: bool) -> None:
    """Moves, cancels and the leader's ISR changes in any order, with eligible leader replicas
    on or off: the registration stays well-formed, a move is in progress exactly until its whole
    target is in sync, and a move that completes leaves exactly its target as the replicas."""
    rcm, log, _ = cluster(**{"min.insync.replicas": "2"})
    if elr:
        log.commit([FeatureLevelRecord(name=ELIGIBLE_LEADER_REPLICAS_FEATURE, feature_level=ELIGIBLE_LEADER_REPLICAS_LEVEL)])
    mgr = reassignments()
    target: list[int] | None = None  # the last move's target, None once cancelled
    for _ in range(data.draw(st.integers(1, 10))):
        p = part(log, "t")
        action = data.draw(st.sampled_from(["move", "cancel", "expand", "shrink"]))
        if action == "move":
            target = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=4, unique=True))
            assert [r.error_code for r in move(mgr, log, target)] == [ErrorCode.none]
        elif action == "cancel":
            [r] = move(mgr, log, None)
            assert r.error_code in (ErrorCode.none, ErrorCode.no_reassignment_in_progress, ErrorCode.invalid_replica_assignment)
            if r.error_code == ErrorCode.none:
                target = None
        else:
            outside = [b for b in p.replicas if b not in p.isr]
            inside = [b for b in p.isr if b != p.leader]
            pool = outside if action == "expand" else inside
            if not pool:
                continue
            chosen = data.draw(st.sampled_from(pool))
            isr = [*p.isr, chosen] if action == "expand" else [b for b in p.isr if b != chosen]
            log.commit(isr_change(rcm, log, "t", isr).records)
        p = part(log, "t")
        assert len(set(p.replicas)) == len(p.replicas) and set(p.isr) <= set(p.replicas)
        assert set(p.adding_replicas) <= set(p.replicas) and set(p.removing_replicas) <= set(p.replicas)
        assert not set(p.adding_replicas) & set(p.removing_replicas)
        assert not set(p.elr) & set(p.isr) and set(p.elr) <= set(p.replicas)
        assert p.leader in p.isr  # every broker is live: a partition always has a leader
        moving = bool(p.adding_replicas or p.removing_replicas)
        if moving:
            assert target is not None and set(p.replicas) - set(p.removing_replicas) == set(target)
            assert not set(target) <= set(p.isr), "a move whose whole target is in sync is done"
        elif target is not None:
            assert list(p.replicas) == target
