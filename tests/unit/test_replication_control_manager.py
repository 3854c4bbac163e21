"""ReplicationControlManager on multi-broker images: placement over live brokers, and
leadership and ISR following brokers that are fenced, shut down and unfenced."""

from __future__ import annotations

import itertools
import random
import uuid

from broker.controller.configuration_control_manager import UNCLEAN_LEADER_ELECTION_ENABLE, ConfigurationControlManager
from broker.controller.controller_result import ControllerResult
from broker.controller.partition_change_builder import RECOVERING, Election
from broker.controller.replica_placer import StripedReplicaPlacer
from broker.controller.replication_control_manager import CreatableTopic, ReplicationControlManager
from broker.metadata.metadata_image import NO_LEADER, TOPIC_RESOURCE, PartitionRegistration
from broker.metadata.metadata_records import (
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    FenceBrokerRecord,
    PartitionChangeRecord,
    PartitionRecord,
    UnfenceBrokerRecord,
)
from tests.unit.control_manager_images import Log, cluster_log


def manager(*, unclean: bool = False, seed: int = 1) -> ReplicationControlManager:
    ids = (uuid.UUID(int=0x100 + i) for i in itertools.count())
    return ReplicationControlManager(
        configuration=ConfigurationControlManager(unclean_leader_election_enable=unclean),
        placer=StripedReplicaPlacer(random.Random(seed)),
        new_topic_id=ids.__next__,
    )


def create(rcm: ReplicationControlManager, log: Log, name: str, partitions: int, rf: int, **configs: str) -> list[tuple[int, str | None]]:
    result = rcm.create_topics(
        log.image,
        [CreatableTopic(name, partitions, rf, None, dict(configs))],
        validate_only=False,
        default_partitions=1,
        default_replication_factor=1,
        validate_config=lambda c: None,
    )
    log.commit(result.records)
    return [(r.error_code, r.error_message) for r in result.response]


def assign(rcm: ReplicationControlManager, log: Log, name: str, *replicas: list[int], **configs: str) -> list[tuple[int, str | None]]:
    topic = CreatableTopic(name, -1, -1, dict(enumerate(replicas)), dict(configs))
    result = rcm.create_topics(log.image, [topic], validate_only=False, default_partitions=1, default_replication_factor=1, validate_config=lambda c: None)
    log.commit(result.records)
    return [(r.error_code, r.error_message) for r in result.response]


def part(log: Log, name: str, partition: int = 0) -> PartitionRegistration:
    return log.image.topics[name].partitions[partition]


def fence(rcm: ReplicationControlManager, log: Log, *brokers: int) -> list[PartitionChangeRecord]:
    changes = rcm.handle_brokers_fenced(log.image, brokers)
    log.commit([*changes, *(FenceBrokerRecord(id=b, epoch=log.image.brokers[b].epoch) for b in brokers)])
    return changes


def unfence(rcm: ReplicationControlManager, log: Log, broker: int) -> list[PartitionChangeRecord]:
    changes = rcm.handle_broker_unfenced(log.image, broker)
    log.commit([UnfenceBrokerRecord(id=broker, epoch=log.image.brokers[broker].epoch), *changes])
    return changes


# --- placement over the registered brokers ---------------------------------------


def test_topics_are_placed_on_unfenced_brokers_across_racks() -> None:
    log = cluster_log(1, 2, 3, 4, 5, 6, racks={1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"})
    rcm = manager()
    assert create(rcm, log, "t", 12, 3) == [(0, None)]
    parts = log.image.topics["t"].partitions.values()
    assert all(len({(b + 1) // 2 for b in p.replicas}) == 3 for p in parts)  # one replica per rack
    assert all(p.isr == p.replicas and p.leader == p.replicas[0] for p in parts)
    leaders = [p.leader for p in parts]
    assert {leaders.count(b) for b in range(1, 7)} == {2}


def test_fenced_and_shutting_down_brokers() -> None:
    log = cluster_log(1, 2, 3, 4, fenced=(4,))
    log.commit([BrokerRegistrationChangeRecord(broker_id=3, broker_epoch=0, in_controlled_shutdown=1)])
    rcm = manager()
    # Usable: 1 and 2 unfenced, 4 fenced (a replica only when needed, never leader or in the ISR); 3 not at all.
    assert create(rcm, log, "two", 6, 2) == [(0, None)]
    assert all(set(p.replicas) == {1, 2} for p in log.image.topics["two"].partitions.values())
    assert create(rcm, log, "three", 4, 3) == [(0, None)]
    for p in log.image.topics["three"].partitions.values():
        assert set(p.replicas) == {1, 2, 4} and p.replicas[0] != 4 and set(p.isr) == {1, 2} and p.leader == p.isr[0]
    assert create(rcm, log, "four", 1, 4) == [
        (38, "Unable to replicate the partition 4 time(s): The target replication factor of 4 cannot be reached because only 3 broker(s) are registered or some brokers have all their log directories cordoned.")
    ]
    # Manual assignments may name any registered broker, but need one active replica.
    assert assign(rcm, log, "m", [4, 3, 1]) == [(0, None)]
    assert (part(log, "m").isr, part(log, "m").leader) == ((1,), 1)
    assert assign(rcm, log, "n", [1], [4, 3]) == [
        (39, "The manual partition assignment includes a partition with 2 replica(s), but this is not consistent with previous partitions, which have 1 replica(s).")
    ]
    assert assign(rcm, log, "n", [4, 3]) == [
        (39, "All brokers specified in the manual partition assignment for partition 0 are fenced or in controlled shutdown.")
    ]
    assert assign(rcm, log, "n", [9]) == [(39, "The manual partition assignment includes broker 9, but no such broker is registered.")]


def test_create_partitions_places_with_the_topics_replication_factor() -> None:
    log = cluster_log(1, 2, 3, 4, 5)
    rcm = manager()
    create(rcm, log, "t", 2, 3)
    result = rcm.create_partitions(log.image, [("t", 7, None)], validate_only=False)
    assert [r.error_code for r in result.response] == [0]
    log.commit(result.records)
    parts = log.image.topics["t"].partitions
    assert sorted(parts) == list(range(7)) and all(len(set(p.replicas)) == 3 for p in parts.values())
    result = rcm.create_partitions(log.image, [("t", 8, [[1, 2, 3]])], validate_only=False)
    assert [r.error_code for r in result.response] == [0] and isinstance(result.records[0], PartitionRecord)


# --- leadership follows liveness ---------------------------------------------------


def test_fencing_the_leader_elects_the_next_isr_member_in_replica_order() -> None:
    log = cluster_log(1, 2, 3, 4, 5)
    rcm = manager()
    assign(rcm, log, "t", [1, 2, 3], [2, 3, 1], [4, 5, 1])
    changes = fence(rcm, log, 1)
    assert len(changes) == 3  # every partition with 1 in its ISR
    assert (part(log, "t", 0).leader, part(log, "t", 0).isr, part(log, "t", 0).leader_epoch) == (2, (2, 3), 1)
    # A follower leaving only shrinks the ISR: same leader, same leader epoch, new partition epoch.
    assert (part(log, "t", 1).leader, part(log, "t", 1).isr, part(log, "t", 1).leader_epoch, part(log, "t", 1).partition_epoch) == (2, (2, 3), 0, 1)
    assert (part(log, "t", 2).leader, part(log, "t", 2).isr) == (4, (4, 5))


def test_fenced_and_shutting_down_replicas_are_skipped() -> None:
    log = cluster_log(1, 2, 3, 4, 5)
    rcm = manager()
    assign(rcm, log, "t", [1, 2, 3, 4])
    log.commit([BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=0, in_controlled_shutdown=1)])
    fence(rcm, log, 3)
    changes = fence(rcm, log, 1)
    assert changes == [PartitionChangeRecord(partition_id=0, topic_id=log.image.topics["t"].topic_id, isr=(2, 4), leader=4)]


def test_several_brokers_fenced_together_make_one_record_per_partition() -> None:
    log = cluster_log(1, 2, 3, 4, 5)
    rcm = manager()
    assign(rcm, log, "t", [1, 2, 3], [2, 1, 5], [3, 4, 5])
    changes = fence(rcm, log, 1, 2)
    assert [c.partition_id for c in changes] == [0, 1]
    assert [(part(log, "t", p).leader, part(log, "t", p).isr) for p in range(3)] == [(3, (3,)), (5, (5,)), (3, (3, 4, 5))]


def test_the_last_isr_member_stays_and_rf1_goes_offline_then_comes_back() -> None:
    log = cluster_log(1, 2, 3)
    rcm = manager()
    assign(rcm, log, "one", [2])
    assign(rcm, log, "two", [1, 2])
    fence(rcm, log, 1)
    assert (part(log, "two").leader, part(log, "two").isr) == (2, (2,))
    fence(rcm, log, 2)
    assert (part(log, "one").leader, part(log, "one").isr, part(log, "one").leader_epoch) == (NO_LEADER, (2,), 1)
    assert (part(log, "two").leader, part(log, "two").isr) == (NO_LEADER, (2,))
    # 1 comes back first: not in the ISR, so "two" stays offline (no unclean election).
    assert unfence(rcm, log, 1) == []
    assert part(log, "two").leader == NO_LEADER
    unfence(rcm, log, 2)
    assert (part(log, "one").leader, part(log, "one").leader_epoch) == (2, 2)
    assert (part(log, "two").leader, part(log, "two").isr) == (2, (2,))


def test_unclean_leader_election_from_the_topic_config_or_the_default() -> None:
    log = cluster_log(1, 2, 3)
    strict, lenient = manager(), manager(unclean=True)
    assign(strict, log, "t", [1, 2, 3])
    fence(strict, log, 2)
    fence(strict, log, 3)
    assert part(log, "t").isr == (1,)
    no = strict.handle_broker_fenced(log.image, 1)
    yes = lenient.handle_broker_fenced(log.image, 1)
    topic_id = log.image.topics["t"].topic_id
    assert no == [PartitionChangeRecord(partition_id=0, topic_id=topic_id, leader=NO_LEADER)]
    assert yes == no  # 2 and 3 are fenced: nobody to elect, even uncleanly; the ISR keeps 1
    unfence(strict, log, 3)
    log.commit([ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="t", name=UNCLEAN_LEADER_ELECTION_ENABLE, value="true")])
    changes = strict.handle_broker_fenced(log.image, 1)
    assert changes == [PartitionChangeRecord(partition_id=0, topic_id=topic_id, leader=3, isr=(3,), leader_recovery_state=RECOVERING)]
    log.commit([*changes, FenceBrokerRecord(id=1, epoch=0)])
    assert (part(log, "t").leader, part(log, "t").leader_recovery_state) == (3, RECOVERING)


def test_a_leaderless_partition_gets_an_unclean_leader_once_its_topic_allows_one() -> None:
    log = cluster_log(1, 2, 3)
    rcm = manager()
    assign(rcm, log, "t", [1, 2, 3])
    fence(rcm, log, 2)
    fence(rcm, log, 3)
    fence(rcm, log, 1)
    unfence(rcm, log, 2)
    unfence(rcm, log, 3)
    assert (part(log, "t").leader, part(log, "t").isr) == (NO_LEADER, (1,))
    # Unclean election off: 1 alone holds every acknowledged record.
    assert rcm.maybe_elect_unclean_leaders(log.image) == ControllerResult([], False)
    log.commit([ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="t", name=UNCLEAN_LEADER_ELECTION_ENABLE, value="true")])
    elected = rcm.maybe_elect_unclean_leaders(log.image)
    topic_id = log.image.topics["t"].topic_id
    assert elected == ControllerResult([PartitionChangeRecord(partition_id=0, topic_id=topic_id, leader=2, isr=(2,), leader_recovery_state=RECOVERING)], False)


def test_controlled_shutdown_moves_leadership_away() -> None:
    log = cluster_log(1, 2, 3)
    rcm = manager()
    assign(rcm, log, "t", [1, 2, 3], [2, 1, 3])
    assign(rcm, log, "solo", [1])
    assert rcm.has_leaderships(log.image, 1)
    changes = rcm.handle_broker_in_controlled_shutdown(log.image, 1)
    log.commit([BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=0, in_controlled_shutdown=1), *changes])
    assert [(part(log, "t", p).leader, part(log, "t", p).isr) for p in range(2)] == [(2, (2, 3)), (2, (2, 3))]
    assert (part(log, "solo").leader, part(log, "solo").isr) == (NO_LEADER, (1,))
    assert not rcm.has_leaderships(log.image, 1)


def test_elect_leaders() -> None:
    log = cluster_log(1, 2, 3)
    rcm = manager()
    assign(rcm, log, "t", [1, 2, 3], [2, 3, 1])
    fence(rcm, log, 1)
    unfence(rcm, log, 1)
    assert part(log, "t", 0).leader == 2
    result = rcm.elect_leaders(log.image, Election.PREFERRED, [("t", 0), ("t", 1), ("t", 9), ("nope", 0)])
    assert [(r.partition, r.error_code, r.error_message) for r in result.response] == [
        (0, 80, "The preferred leader was not available."),  # 1 is not back in the ISR yet
        (1, 84, "Leader election not needed for topic partition."),
        (9, 3, "No such partition as t-9"),
        (0, 3, "No such topic as nope"),
    ]
    log.commit([PartitionChangeRecord(partition_id=0, topic_id=log.image.topics["t"].topic_id, isr=(2, 3, 1))])
    result = rcm.elect_leaders(log.image, Election.PREFERRED, None)
    assert [(r.partition, r.error_code) for r in result.response] == [(0, 0)]  # partition 1 needs none: left out
    log.commit(result.records)
    assert part(log, "t", 0).leader == 1
