"""The whole cluster under simulated faults: a seeded campaign over tests/simulation/cluster_simulation.py.

Each seed picks its scenario (seed % len(SCENARIOS)), the cluster's size, the timeouts and the
faults, runs a few virtual seconds of faults, then the healed cluster until every partition has
its whole ISR and an acks=all record acknowledged again. A failing seed prints itself with the
command that replays it alone:

    CLUSTER_SIM_SEED=1234 .venv/bin/python -m pytest tests/simulation -k replay

``CLUSTER_SIM_SEEDS`` sets the campaign's size (CI_SEEDS by default; ``make chaos`` runs many
more), ``CLUSTER_SIM_FIRST_SEED`` where it starts, ``CLUSTER_SIM_WINDOW_MS`` how long the faults
last in each seed and ``CLUSTER_SIM_TRACE`` how many events a failure shows.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import pytest

from broker import partition as partition_module
from broker.transaction import transaction_marker_channel_manager as marker_channel
from broker.metadata import snapshot_generator
from broker.metadata.metadata_image import MetadataImage, PartitionRegistration
from broker.metadata.metadata_records import FeatureLevelRecord, MetadataRecord, PartitionChangeRecord, RegisterBrokerRecord
from replication.partition_state import PartitionLeaderState
from storage.producer_state_manager import AppendOrigin, ProducerAppendInfo, ProducerStateEntry, ProducerStateManager
from tests.seed_campaign import first_failure, run_campaign
from tests.simulation.cluster_simulation import DEFAULT_WINDOW_MS, SCENARIO_NAMES, SCENARIOS, Simulation, SimulationFailure, Stats
from tests.simulation.invariants import Invariants
from tests.simulation import sim_broker
from tests.simulation.sim_broker import SimNode
from tests.simulation.sim_replica import FetchRequest, SimPartition

# About 100 ms of CPU a seed (a seed with transactions about twice one without). CI runs 2,000:
# the first half here, the second in test_cluster_simulation_second_half.py, so that the suite's
# two workers share them (about 100 s of one core each); the rest of this file takes 15 s.
CI_SEEDS = 2000
SEEDS = int(os.environ.get("CLUSTER_SIM_SEEDS", str(CI_SEEDS)))
FIRST_SEED = int(os.environ.get("CLUSTER_SIM_FIRST_SEED", "0"))
TRACE = int(os.environ.get("CLUSTER_SIM_TRACE", "60"))
WINDOW_MS = int(os.environ.get("CLUSTER_SIM_WINDOW_MS", str(DEFAULT_WINDOW_MS)))
# Generous for a busy machine; a long campaign gets what it needs.
CAMPAIGN_TIMEOUT_S = max(300, SEEDS // len(SCENARIOS) // 2)
FIRST_HALF = range(FIRST_SEED, FIRST_SEED + SEEDS // 2)
SECOND_HALF = range(FIRST_SEED + SEEDS // 2, FIRST_SEED + SEEDS)


def _run(seed: int) -> Stats:
    return Simulation(seed, window_ms=WINDOW_MS, trace_length=TRACE).run()


def run_scenario(scenario: str, seeds: range) -> None:
    """The seeds of ``seeds`` that pick ``scenario``, each checked after every event."""
    index = SCENARIO_NAMES.index(scenario)
    chosen = [s for s in seeds if s % len(SCENARIOS) == index]
    totals = run_campaign(chosen, _run, Stats(), SimulationFailure, lambda f: f"{f.invariant}: {f.message.splitlines()[0]}")
    _check_coverage(scenario, totals, len(chosen))


@pytest.mark.timeout(CAMPAIGN_TIMEOUT_S)
@pytest.mark.parametrize("scenario", SCENARIO_NAMES)
def test_campaign(scenario: str) -> None:
    run_scenario(scenario, FIRST_HALF)


def _check_coverage(scenario: str, totals: Stats, seeds: int) -> None:
    """The campaign did what it says: a harness that stopped injecting faults would pass vacuously."""
    if seeds < 20:
        return
    assert totals.raft_elections >= seeds and totals.partition_elections >= seeds, totals
    assert totals.acked_all > 10 * seeds and totals.metadata_records > 10 * seeds, totals
    assert totals.offset_commits > seeds and totals.coordinator_loads >= seeds, totals
    # About half the seeds write metadata snapshots; where faults leave nodes behind, some load one.
    assert totals.snapshots_written >= seeds // 2, totals
    # About half the seeds run idempotent producers; under faults they retry, leaders find some
    # retries already written, and delivery timeouts bump epochs.
    assert totals.idempotent_acked > 5 * seeds, totals
    # About half the seeds delete records while the faults last; under faults some followers come
    # back below their leader's log start and start over there.
    assert totals.records_deleted > seeds // 4, totals
    # About half the seeds run transactional producers: most transactions commit, some abort (a
    # quarter by choice), and coordinators move with the leaders of __transaction_state. (Under
    # chaos about one seed in two commits one: 62 to 66 of 125, as the schedule moves.)
    assert totals.txn_committed > seeds // 3 and totals.txn_aborted > seeds // 8 and totals.txn_markers > seeds, totals
    assert totals.txn_coordinator_loads >= seeds // 2, totals
    kind = next(s for s in SCENARIOS if s.name == scenario)
    if scenario != "steady":
        assert totals.snapshots_loaded > 0, totals
        assert totals.idempotent_retries > seeds and totals.duplicates_answered > 0 and totals.idempotent_epoch_bumps > 0, totals
        assert totals.out_of_range_restarts > 0, totals
    if kind.kill or kind.power:
        assert totals.crashes >= seeds // 2, totals
    if kind.kill:
        assert totals.controlled_shutdowns_approved > 0, totals
    if kind.power:
        assert totals.lossy_crashes >= seeds // 2 and totals.truncations > 0, totals
    if kind.isolate or kind.split:
        assert totals.isolations >= seeds // 2, totals
    if kind.pause:
        assert totals.pauses >= seeds // 2, totals


@pytest.mark.skipif("CLUSTER_SIM_SEED" not in os.environ, reason="set CLUSTER_SIM_SEED to replay one seed of the campaign")
def test_replay() -> None:
    _run(int(os.environ["CLUSTER_SIM_SEED"]))


def test_a_seed_runs_the_same_every_time() -> None:
    for seed in (5, 7, 13):
        first, second = Simulation(seed), Simulation(seed)
        assert first.run() == second.run()
        assert first.trace() == second.trace()


def _first_failure(seeds: range) -> SimulationFailure:
    return first_failure(seeds, _run, SimulationFailure)


def test_it_notices_a_follower_that_does_not_truncate(monkeypatch: pytest.MonkeyPatch) -> None:
    """A follower that fetches without its last fetched epoch (no KIP-320 check, so no truncation): it
    appends the new leader's records after those of the old epoch it should have cut."""
    original = sim_broker.fetch_request

    def without_epoch(partition: SimPartition, node_id: int, broker_epoch: int) -> FetchRequest:
        return replace(original(partition, node_id, broker_epoch), last_fetched_epoch=-1)

    monkeypatch.setattr(sim_broker, "fetch_request", without_epoch)
    failure = _first_failure(range(0, 800))
    assert failure.invariant == "a follower never keeps data past a divergence point", failure
    assert f"CLUSTER_SIM_SEED={failure.seed} " in str(failure)


def test_it_notices_followers_that_keep_no_producer_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replicas that track the idempotent producers only for what they appended as leader (not for
    what they replicated, nor across a truncation): after a failover, the new leader takes a
    producer's retry of a batch it already holds as a new batch and writes it twice, or, having
    appended later batches of the producer as leader, refuses the retry out of order."""
    original = ProducerStateManager.update

    def leader_only(self: ProducerStateManager, info: ProducerAppendInfo) -> None:
        if info.origin is not AppendOrigin.REPLICATION:
            original(self, info)

    monkeypatch.setattr(ProducerStateManager, "update", leader_only)
    # Where transactions run, their markers trip over the missing state first.
    failure = first_failure([s for s in range(0, 900) if not Simulation(s).params.transactional_producers], _run, SimulationFailure)
    assert failure.invariant in ("no idempotent record is written twice", "a leader never refuses a batch it holds"), failure


def test_it_notices_a_coordinator_that_writes_the_wrong_marker(monkeypatch: pytest.MonkeyPatch) -> None:
    """A transaction coordinator whose WriteTxnMarkers to other brokers says ABORT for a commit:
    a committed transaction's records on a partition another broker leads are dropped there."""
    original = marker_channel.write_txn_markers_request

    def flipped(entry: marker_channel.TxnMarkerEntry, partitions: Any) -> Any:
        return original(replace(entry, commit=False), partitions)

    monkeypatch.setattr(marker_channel, "write_txn_markers_request", flipped)
    failure = _first_failure(range(0, 400))
    assert failure.invariant == "after healing, every committed transaction's records are visible to read_committed and no aborted one is", failure
    assert "committed transaction" in failure.message, failure


def test_it_notices_a_transaction_completed_without_all_its_markers(monkeypatch: pytest.MonkeyPatch) -> None:
    """A marker channel that takes any failure to write a marker (NOT_LEADER_OR_FOLLOWER while the
    partition's leadership moves, a timeout) as no marker needed: the coordinator completes the
    transaction, and the partition that missed its marker keeps it open for ever."""
    monkeypatch.setattr(marker_channel, "NO_MARKER_NEEDED", _Everything())
    failure = _first_failure(range(0, 400))
    assert failure.invariant in ("after healing, every committed transaction's records are visible to read_committed and no aborted one is", "liveness"), failure


class _Everything(frozenset):  # type: ignore[type-arg]
    def __contains__(self, item: object) -> bool:
        return True


def test_it_notices_a_leader_that_does_not_recognise_a_retry(monkeypatch: pytest.MonkeyPatch) -> None:
    """A leader that never finds a retried batch among the producer's last five: it answers the retry
    of a batch it wrote OUT_OF_ORDER_SEQUENCE_NUMBER."""
    monkeypatch.setattr(ProducerStateEntry, "find_duplicate", lambda self, epoch, first_seq, last_seq, transactional: None)
    failure = _first_failure(range(0, 400))
    assert failure.invariant == "a leader never refuses a batch it holds", failure


def test_it_notices_a_follower_that_stays_below_its_leaders_log_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """A follower answered OFFSET_OUT_OF_RANGE (DeleteRecords moved its leader's log start past its
    log end while it was away) that cuts back instead of emptying its log: it fetches below the log
    start again and again, and never rejoins the ISR. (Until 2026-11-28 the real fetcher did not
    rejoin either: it took the answer's -1 for the leader's offsets.)"""
    monkeypatch.setattr(partition_module, "offset_out_of_range_restart", lambda log_start, end, log_end: (log_start, False))
    failure = _first_failure(range(0, 400))
    assert failure.invariant == "liveness", failure


def test_it_notices_a_high_watermark_that_goes_down(monkeypatch: pytest.MonkeyPatch) -> None:
    """A leader that steps its high watermark back once it passed 20."""
    original = PartitionLeaderState.maybe_increment_high_watermark

    def stumbling(self: PartitionLeaderState, leader_end_offset: int, now_ms: int, is_eligible: object) -> bool:
        moved = original(self, leader_end_offset, now_ms, is_eligible)  # type: ignore[arg-type]
        if self.high_watermark > 20 and not moved:
            self.high_watermark -= 1
            return True
        return moved

    monkeypatch.setattr(PartitionLeaderState, "maybe_increment_high_watermark", stumbling)
    failure = _first_failure(range(0, 40))
    assert failure.invariant == "high watermarks never go down within a leader epoch", failure


def test_it_notices_acknowledged_records_lost_by_a_broker_that_serves_before_it_is_unfenced(monkeypatch: pytest.MonkeyPatch) -> None:
    """A restarted broker that lost unflushed writes and serves at once, as leader of the epoch it had
    before the crash: its followers truncate to its shorter log. The listeners that open only once
    the controller has unfenced it (after its new registration took it out of every ISR) prevent it."""
    original = SimNode._reset

    def eager(self: SimNode) -> None:
        original(self)
        self.serving = True

    monkeypatch.setattr(SimNode, "_reset", eager)
    failure = _first_failure(range(5, 800, len(SCENARIOS)))
    assert failure.invariant == "no record acknowledged with acks=all is lost", failure


@pytest.mark.parametrize("seed", [305, 2057, 2137])
def test_the_seeds_that_found_a_leader_dropping_its_isr_change_in_flight(seed: int) -> None:
    """With message loss and delay, a partition leader forgot an ISR expansion the controller was
    committing (305: the retry of an applied request refused with INVALID_UPDATE_VERSION, found
    again in place of 433 once the simulation wrote metadata snapshots; 2057, 2137:
    the metadata record of its previous change arriving after that change's answer), and its high
    watermark passed the replica being added: electing that replica would have lost acknowledged records. replication/partition_state.py now keeps the change
    in flight until its own answer, a newer registration, or a refusal that says it was not applied.
    These seeds failed with the old rules (found as the first of the lossy seeds that did). Since
    the simulation's idempotent producers (2026-11-28), which run in all three, they run otherwise
    and no longer reach that state: tests/unit/test_partition_leader_state.py pins the rules, and
    these stay as three more lossy seeds until they are found again."""
    Simulation(seed).run()


def test_a_failure_names_the_seed_the_invariant_and_the_command_that_reruns_it() -> None:
    failure = SimulationFailure(1234, "power", "at most one leader per partition epoch", "brokers 1 and 2 both led", ["   10 start node 0 #1"])
    text = str(failure)
    assert "CLUSTER_SIM_SEED=1234 .venv/bin/python -m pytest tests/simulation -k replay" in text
    assert "scenario power" in text and "at most one leader per partition epoch" in text and "start node 0" in text


def test_it_notices_two_leaders_in_one_partition_epoch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registrations that keep the leader epoch when the leader changes: two brokers lead the same epoch."""
    original = PartitionRegistration.merge

    def no_new_epoch(self: PartitionRegistration, change: PartitionChangeRecord) -> PartitionRegistration:
        merged = original(self, change)
        return replace(merged, leader_epoch=self.leader_epoch)

    monkeypatch.setattr(PartitionRegistration, "merge", no_new_epoch)
    failure = _first_failure(range(2, 400, len(SCENARIOS)))  # leaders isolated: elections
    assert failure.invariant == "at most one leader per partition epoch", failure


def test_it_notices_a_metadata_snapshot_that_misses_a_record(monkeypatch: pytest.MonkeyPatch) -> None:
    """A SnapshotGenerator whose image leaves out the last broker registration: the node that loads it
    has an image other than the committed history's."""
    original = snapshot_generator.image_records

    def forgetful(image: MetadataImage) -> list[MetadataRecord]:
        records = original(image)
        registrations = [i for i, r in enumerate(records) if isinstance(r, RegisterBrokerRecord)]
        return [r for i, r in enumerate(records) if not registrations or i != registrations[-1]]

    monkeypatch.setattr(snapshot_generator, "image_records", forgetful)
    failure = _first_failure(range(0, 400))
    assert failure.invariant == "a metadata snapshot holds the committed history", failure


def test_it_notices_nodes_that_apply_different_metadata() -> None:
    seen: list[tuple[str, str]] = []
    invariants = Invariants(lambda invariant, detail: seen.append((invariant, detail)))
    invariants.metadata_committed(0, 0, None)
    invariants.metadata_committed(0, 1, FeatureLevelRecord(name="metadata.version", feature_level=25))
    invariants.metadata_committed(1, 0, None)
    invariants.metadata_committed(1, 1, FeatureLevelRecord(name="metadata.version", feature_level=24))
    assert [i for i, _ in seen] == ["committed metadata identical on every node"]
