"""Eligible leader replicas (KIP-966): PartitionChangeBuilder's election order (ISR, then ELR once the ISR
is empty, then the last known leader, then unclean), the ELR kept while the ISR is below
min.insync.replicas, and the controller taking brokers that restarted uncleanly out of it."""

from __future__ import annotations

import random
import uuid
from pathlib import Path
from typing import Collection

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.controller.cluster_control_manager import BrokerRegistrationRequest, ClusterControlManager
from broker.controller.configuration_control_manager import ConfigurationControlManager
from broker.controller.controller_logic import cluster_bootstrap_records
from broker.controller.feature_control_manager import BROKER_SUPPORTED_FEATURES, NEW_CLUSTER_FEATURES, FeatureControlManager
from broker.controller.partition_change_builder import RECOVERED, RECOVERING, Election, PartitionChangeBuilder
from broker.controller.replica_placer import StripedReplicaPlacer
from broker.controller.replication_control_manager import ReplicationControlManager, eligible_leader_replicas_enabled
from broker.metadata.metadata_image import MIGRATING_DIR, NO_LEADER, UNASSIGNED_DIR, PartitionRegistration
from broker.metadata.metadata_records import PartitionChangeRecord
from storage.log_config import LogConfig
from storage.log_manager import CLEAN_SHUTDOWN_FILE, LogManager
from tests.unit.control_manager_images import Log
from tests.unit.test_cluster_control_manager import Controller

TOPIC = uuid.UUID(int=0x70)


def partition(replicas: tuple[int, ...], isr: tuple[int, ...], leader: int, **kw: object) -> PartitionRegistration:
    return PartitionRegistration(
        replicas=replicas, isr=isr, leader=leader, leader_epoch=5, partition_epoch=9, directories=(MIGRATING_DIR,) * len(replicas), **kw  # type: ignore[arg-type]
    )


def builder(p: PartitionRegistration, alive: Collection[int], *, min_isr: int = 2, elr: bool = True) -> PartitionChangeBuilder:
    return PartitionChangeBuilder(p, TOPIC, 0, lambda b: b in alive, lambda b: UNASSIGNED_DIR, min_isr=min_isr, eligible_leader_replicas_enabled=elr)


def change(**kw: object) -> PartitionChangeRecord:
    return PartitionChangeRecord(partition_id=0, topic_id=TOPIC, **kw)  # type: ignore[arg-type]


# --- the ELR follows the ISR -----------------------------------------------------------------


def test_replicas_leaving_an_isr_below_min_isr_join_the_elr() -> None:
    p = partition((1, 2, 3), (1, 2, 3), 1)
    # Down to min.insync.replicas: the high watermark still moves, so the replica that left may lack records.
    assert builder(p, {1, 3}).set_target_isr([1, 3]).build() == change(isr=(1, 3))
    p = partition((1, 2, 3), (1, 3), 1)
    assert builder(p, {1}).set_target_isr([1]).build() == change(isr=(1,), eligible_leader_replicas=(3,))
    # Straight from three to one: both leave while the ISR is below the minimum.
    p = partition((1, 2, 3), (1, 2, 3), 1)
    assert builder(p, {1}).set_target_isr([1]).build() == change(isr=(1,), eligible_leader_replicas=(2, 3))


def test_an_isr_back_at_min_isr_clears_the_elr_and_one_still_below_keeps_the_others() -> None:
    p = partition((1, 2, 3), (1,), 1, elr=(2, 3))
    assert builder(p, {1, 2, 3}).set_target_isr([1, 2]).build() == change(isr=(1, 2), eligible_leader_replicas=())
    assert builder(p, {1, 2, 3}, min_isr=3).set_target_isr([1, 2]).build() == change(isr=(1, 2), eligible_leader_replicas=(3,))


def test_the_last_isr_member_leaves_and_the_partition_remembers_its_last_leader() -> None:
    p = partition((1, 2, 3), (1,), 1, elr=(2,))
    record = builder(p, set()).set_target_isr([]).build()
    assert record == change(isr=(), leader=NO_LEADER, eligible_leader_replicas=(1, 2), last_known_elr=(1,))


def test_min_isr_of_one_empties_the_isr_into_the_elr() -> None:
    p = partition((1, 2), (1,), 1)
    assert builder(p, set(), min_isr=1).set_target_isr([]).build() == change(isr=(), leader=NO_LEADER, eligible_leader_replicas=(1,), last_known_elr=(1,))


# --- the election order ----------------------------------------------------------------------


def test_the_isr_comes_before_the_elr() -> None:
    p = partition((1, 2, 3), (2,), NO_LEADER, elr=(1, 3))
    assert builder(p, {1, 2, 3}).build() == change(leader=2)


def test_once_the_isr_is_empty_an_elr_member_leads_cleanly_and_is_the_isr() -> None:
    p = partition((1, 2, 3), (), NO_LEADER, elr=(1, 2, 3), last_known_elr=(1,))
    record = builder(p, {3, 2}).build()
    assert record == change(leader=2, isr=(2,), eligible_leader_replicas=(1, 3), last_known_elr=())
    after = p.merge(record)
    assert (after.leader_recovery_state, after.leader_epoch) == (RECOVERED, 6)


def test_the_leader_lost_with_the_isr_goes_to_a_live_elr_member_at_once() -> None:
    p = partition((1, 2, 3), (1,), 1, elr=(2, 3))
    assert builder(p, {3}).set_target_isr([]).build() == change(leader=3, isr=(3,), eligible_leader_replicas=(1, 2))


def test_no_live_isr_or_elr_member_and_unclean_off_leaves_the_partition_offline() -> None:
    p = partition((1, 2, 3), (), NO_LEADER, elr=(1, 2), last_known_elr=(1,))
    assert builder(p, {3}).build() is None


def test_the_last_known_leader_leads_once_isr_and_elr_are_empty_as_an_unclean_election() -> None:
    p = partition((1, 2, 3), (), NO_LEADER, last_known_elr=(1,))
    assert builder(p, {1, 3}).build() == change(leader=1, isr=(1,), leader_recovery_state=RECOVERING, last_known_elr=())
    assert builder(p, {3}).build() is None  # KAFKA-19522: never a last known leader that may not lead
    assert builder(partition((1, 2, 3), (), NO_LEADER, elr=(2,), last_known_elr=(1,)), {1, 3}).build() is None  # the ELR still counts
    assert builder(p, {1, 3}, elr=False).build() is None  # only with the feature on


def test_an_unclean_election_comes_last_and_clears_the_elr() -> None:
    p = partition((1, 2, 3), (), NO_LEADER, elr=(2,), last_known_elr=(1,))
    assert builder(p, {2, 3}).set_election(Election.UNCLEAN).build() == change(leader=2, isr=(2,), eligible_leader_replicas=(), last_known_elr=())
    record = builder(p, {3}).set_election(Election.UNCLEAN).build()
    assert record == change(leader=3, isr=(3,), leader_recovery_state=RECOVERING, eligible_leader_replicas=(), last_known_elr=())


def test_a_preferred_election_may_pick_an_elr_member_when_the_isr_is_empty() -> None:
    p = partition((1, 2, 3), (), NO_LEADER, elr=(2, 3))
    assert builder(p, {1, 2, 3}).set_election(Election.PREFERRED).build() == change(leader=2, isr=(2,), eligible_leader_replicas=(3,))


def test_replicas_that_restarted_uncleanly_leave_the_elr() -> None:
    p = partition((1, 2, 3), (), NO_LEADER, elr=(1, 2), last_known_elr=(1,))
    assert builder(p, set()).set_unclean_shutdown_replicas([2]).build() == change(eligible_leader_replicas=(1,))
    p = partition((1, 2, 3), (1,), 1, elr=(2, 3))
    record = builder(p, {2}).set_target_isr([]).set_unclean_shutdown_replicas([1]).build()
    assert record == change(leader=2, isr=(2,), eligible_leader_replicas=(3,))


# --- invariants ------------------------------------------------------------------------------


@st.composite
def situations(draw: st.DrawFn) -> tuple[PartitionRegistration, frozenset[int], list[int], int, frozenset[int], Election]:
    replicas = tuple(draw(st.permutations(range(1, 6)))[: draw(st.integers(1, 4))])
    isr = tuple(r for r in replicas if draw(st.booleans()))
    elr = tuple(sorted(r for r in replicas if r not in isr and draw(st.booleans())))
    leader = draw(st.sampled_from(isr)) if isr and draw(st.booleans()) else NO_LEADER
    last_known = (draw(st.sampled_from(replicas)),) if leader == NO_LEADER and draw(st.booleans()) else ()
    p = partition(replicas, isr, leader, elr=elr, last_known_elr=last_known)
    alive = frozenset(r for r in range(1, 6) if draw(st.booleans()))
    target = [r for r in replicas if draw(st.booleans())]
    min_isr = draw(st.integers(1, len(replicas)))
    unclean_shutdown = frozenset(r for r in replicas if r not in target and draw(st.booleans()))
    election = draw(st.sampled_from(list(Election)))
    return p, alive, target, min_isr, unclean_shutdown, election


@settings(max_examples=500, deadline=None)
@given(situations())
def test_elections_keep_kip_966s_invariants(situation: tuple[PartitionRegistration, frozenset[int], list[int], int, frozenset[int], Election]) -> None:
    p, alive, target, min_isr, unclean_shutdown, election = situation
    acceptable = alive - unclean_shutdown
    b = builder(p, acceptable, min_isr=min_isr).set_target_isr(target).set_unclean_shutdown_replicas(unclean_shutdown).set_election(election)
    record = b.build()
    after = p if record is None else p.merge(record)
    assert not set(after.isr) & set(after.elr)
    assert set(after.isr) | set(after.elr) <= set(p.replicas)
    assert not set(after.elr) & unclean_shutdown
    if len(after.isr) >= min_isr:
        assert after.elr == ()
    if after.leader != p.leader and after.leader != NO_LEADER:
        assert after.leader in acceptable and after.isr == (after.leader,) or after.leader in after.isr
        clean = after.leader in target or (not target and after.leader in set(p.elr) | set(p.isr))
        # Outside the ISR and the ELR only the last known leader (balanced recovery) or an unclean election picks.
        assert clean or after.leader in p.last_known_elr or election is Election.UNCLEAN
        assert clean or after.leader_recovery_state == RECOVERING
    if record is not None:
        # Applied, the same target changes nothing more: the record is the whole change.
        again = builder(after, acceptable, min_isr=min_isr).set_target_isr(after.isr).set_unclean_shutdown_replicas(unclean_shutdown).set_election(election)
        assert again.build() is None or after.leader == NO_LEADER


# --- the controller: unclean restarts and the last replica standing ---------------------------------

ELR_FEATURES = dict(BROKER_SUPPORTED_FEATURES)  # a broker of this build: every feature a new cluster finalizes


class ElrController(Controller):
    """Controller over a log bootstrapped as a new cluster is (eligible leader replicas on), min.insync.replicas 2."""

    def __init__(self) -> None:
        super().__init__()
        self.log = Log()
        # The controller's min.insync.replicas, 2, is the cluster-wide one the bootstrap pins.
        self.log.commit(cluster_bootstrap_records(features=NEW_CLUSTER_FEATURES, min_insync_replicas=2))
        configuration = ConfigurationControlManager(config_default=lambda _type, key: "2" if key == "min.insync.replicas" else None)
        self.replication = ReplicationControlManager(configuration=configuration, placer=StripedReplicaPlacer(random.Random(5)))
        self.cluster = ClusterControlManager(cluster_id="kbroker-test-cluster", replication=self.replication, features=FeatureControlManager())

    def request(self, broker: int, *, incarnation: uuid.UUID | None = None, **kw: object) -> BrokerRegistrationRequest:
        return super().request(broker, incarnation=incarnation, **{"features": ELR_FEATURES, **kw})

    def restart(self, broker: int, *, clean: bool) -> None:
        """A new incarnation registers (with its last epoch if it shut down cleanly) and is unfenced."""
        previous = self.log.image.brokers[broker].epoch if clean else -1
        self.incarnations[broker] = uuid.uuid4()
        assert self.register(broker, previous_broker_epoch=previous)[0] == 0
        assert not self.heartbeat(broker).is_fenced

    def shut_down(self, broker: int) -> None:
        """A controlled shutdown: the broker leaves the ISRs, then is fenced and told to stop."""
        self.heartbeat(broker, want_shut_down=True)
        assert self.heartbeat(broker, want_shut_down=True).should_shut_down

    def kill(self, broker: int) -> None:
        """SIGKILL: the broker's session runs out and it is fenced."""
        self.now += 60_000
        for other in self.log.image.brokers:
            if other != broker and not self.log.image.brokers[other].fenced:
                self.heartbeat(other)
        self.log.commit(self.cluster.fence_stale_brokers(self.now, self.log.image).records)

    def state(self) -> tuple[int, tuple[int, ...], tuple[int, ...], tuple[int, ...], int]:
        p = self.log.image.topics["t"].partitions[0]
        return p.leader, p.isr, p.elr, p.last_known_elr, p.leader_recovery_state


def last_replica_standing() -> ElrController:
    """RF 3, min.insync.replicas 2: both followers shut down cleanly (the second into the ELR), then the leader is killed."""
    c = ElrController()
    assert eligible_leader_replicas_enabled(c.log.image)
    c.join(1, 2, 3)
    c.create("t", [1, 2, 3])
    c.shut_down(3)
    assert c.state() == (1, (1, 2), (), (), RECOVERED)
    c.shut_down(2)
    assert c.state() == (1, (1,), (2,), (), RECOVERED)
    c.kill(1)
    assert c.state() == (NO_LEADER, (), (1, 2), (1,), RECOVERED)
    return c


def test_a_clean_restart_of_an_elr_member_makes_it_leader_without_an_unclean_election() -> None:
    c = last_replica_standing()
    c.restart(3, clean=True)  # left while the ISR was at min.insync.replicas: not eligible
    assert c.state() == (NO_LEADER, (), (1, 2), (1,), RECOVERED)
    c.restart(2, clean=True)
    assert c.state() == (2, (2,), (1,), (), RECOVERED)
    c.restart(1, clean=False)  # the killed leader comes back uncleanly: out of the ELR
    assert c.state() == (2, (2,), (), (), RECOVERED)


def test_an_unclean_restart_leaves_the_elr_and_the_last_known_leader_is_the_last_resort() -> None:
    c = last_replica_standing()
    c.restart(2, clean=False)
    assert c.state() == (NO_LEADER, (), (1,), (1,), RECOVERED)
    c.restart(1, clean=False)
    # Nobody is known to hold every committed record any more: the last leader is the best bet, taken as unclean.
    assert c.state() == (1, (1,), (), (), RECOVERING)


def test_a_clean_restart_needs_the_registered_epoch() -> None:
    c = last_replica_standing()
    epoch = c.log.image.brokers[2].epoch
    c.incarnations[2] = uuid.uuid4()
    assert c.register(2, previous_broker_epoch=epoch - 1)[0] == 0  # an older marker: not this registration's shutdown
    assert c.state() == (NO_LEADER, (), (1,), (1,), RECOVERED)


def test_eligible_leader_replicas_are_off_on_a_log_without_the_feature() -> None:
    c = Controller()
    assert not eligible_leader_replicas_enabled(c.log.image)
    c.join(1, 2)
    c.create("t", [1, 2])
    c.heartbeat(2, want_fence=True)
    c.heartbeat(1, want_fence=True)
    p = c.log.image.topics["t"].partitions[0]
    assert (p.leader, p.isr, p.elr) == (NO_LEADER, (1,), ())


# --- the broker's side: its epoch in the clean-shutdown marker -----------------------------------


@pytest.mark.parametrize(
    ("marker", "epoch"),
    [('{"version": 0, "brokerEpoch": 42}', 42), ('{"version": 0}', -1), ("not json", -1), ("[1]", -1), (None, -1)],
)
def test_the_clean_shutdown_marker_gives_the_previous_broker_epoch(tmp_path: Path, marker: str | None, epoch: int) -> None:
    if marker is not None:
        (tmp_path / CLEAN_SHUTDOWN_FILE).write_text(marker)
    manager = LogManager(tmp_path, LogConfig())
    manager.startup()
    assert manager.clean_shutdown_broker_epoch == epoch
    manager.shutdown(7)
    again = LogManager(tmp_path, LogConfig())
    again.startup()
    assert again.had_clean_shutdown and again.clean_shutdown_broker_epoch == 7
    again.startup()  # the marker went at start-up: a crash now would be an unclean restart
    assert not again.had_clean_shutdown and again.clean_shutdown_broker_epoch == -1
