"""The Raft core under simulated faults: a seeded campaign over tests/unit/raft_simulation.py.

Each seed picks its scenario (seed % len(SCENARIOS)), the quorum's size, the timeouts and the faults, and
runs a few virtual seconds of faults then the healed quorum until it commits again. The
campaign is split by scenario so a failure names it. A failing seed prints itself with the
command that replays it alone:

    RAFT_SIM_SEED=1234 .venv/bin/python -m pytest tests/unit/test_raft_simulation.py -k replay

``RAFT_SIM_SEEDS`` sets the campaign's size (1,000 by default; ``make chaos`` runs 100,000),
``RAFT_SIM_FIRST_SEED`` where it starts, ``RAFT_SIM_WINDOW_MS`` how long the faults last in each
seed (1,500 virtual ms by default) and ``RAFT_SIM_TRACE`` how many events a failure shows.
"""

from __future__ import annotations

import os

import pytest

from raft.quorum_state_store import ElectionState, MemoryQuorumStateStore
from raft.voter_set import VoterSet
from tests.seed_campaign import first_failure, run_campaign
from tests.unit.raft_simulation import DEFAULT_WINDOW_MS, SCENARIO_NAMES, SCENARIOS, Simulation, SimulationFailure, Stats

SEEDS = int(os.environ.get("RAFT_SIM_SEEDS", "1000"))
FIRST_SEED = int(os.environ.get("RAFT_SIM_FIRST_SEED", "0"))
TRACE = int(os.environ.get("RAFT_SIM_TRACE", "80"))
WINDOW_MS = int(os.environ.get("RAFT_SIM_WINDOW_MS", str(DEFAULT_WINDOW_MS)))
# Generous for a busy machine: a seed of the default window takes about 25 ms; a long campaign gets what it needs.
CAMPAIGN_TIMEOUT_S = max(300, SEEDS // len(SCENARIOS) * WINDOW_MS // 4000)


def _run(seed: int) -> Stats:
    return Simulation(seed, window_ms=WINDOW_MS, trace_length=TRACE).run()


@pytest.mark.timeout(CAMPAIGN_TIMEOUT_S)
@pytest.mark.parametrize("scenario", SCENARIO_NAMES)
def test_campaign(scenario: str) -> None:
    index = SCENARIO_NAMES.index(scenario)
    seeds = [s for s in range(FIRST_SEED, FIRST_SEED + SEEDS) if s % len(SCENARIOS) == index]
    totals = run_campaign(seeds, _run, Stats(), SimulationFailure, lambda f: f.message.splitlines()[0])
    _check_coverage(scenario, totals, len(seeds))


def _check_coverage(scenario: str, totals: Stats, seeds: int) -> None:
    """The campaign did what it says: a harness that stopped injecting faults would pass vacuously."""
    if seeds < 20:
        return
    assert totals.elections >= seeds, totals
    assert totals.committed_offsets > 10 * seeds, totals
    assert totals.serialized > 0, totals
    kind = next(s for s in SCENARIOS if s.name == scenario)
    if kind.crash:
        assert totals.crashes >= seeds // 2, totals
    if kind.wipe:
        assert totals.wipes >= seeds // 2, totals
    if kind.snapshot_heavy:
        assert totals.snapshot_fetches > 0 and totals.snapshots_loaded > 0, totals
    if kind.reconfig:
        assert totals.voter_changes > 0 and totals.kraft_upgrades > 0, totals


@pytest.mark.skipif("RAFT_SIM_SEED" not in os.environ, reason="set RAFT_SIM_SEED to replay one seed of the campaign")
def test_replay() -> None:
    _run(int(os.environ["RAFT_SIM_SEED"]))


def test_a_seed_runs_the_same_every_time() -> None:
    for seed in (3, 6, 7):
        first, second = Simulation(seed), Simulation(seed)
        assert first.run() == second.run()
        assert first.trace() == second.trace()


def _first_failure(seeds: range) -> SimulationFailure:
    return first_failure(seeds, _run, SimulationFailure)


def test_it_notices_a_vote_answered_before_it_is_durable(monkeypatch: pytest.MonkeyPatch) -> None:
    """A store that loses the vote part of a write: the answer left with nothing durable behind it."""
    original = MemoryQuorumStateStore.write_election_state

    def forgetful(self: MemoryQuorumStateStore, state: ElectionState) -> None:
        original(self, ElectionState(state.epoch, state.leader_id) if state.leader_id is None else state)

    monkeypatch.setattr(MemoryQuorumStateStore, "write_election_state", forgetful)
    failure = _first_failure(range(0, 40))
    assert "granted its vote" in failure.message, failure


def test_it_notices_commits_without_a_majority(monkeypatch: pytest.MonkeyPatch) -> None:
    """A quorum that thinks one vote is a majority elects two leaders and commits what others never saw."""
    monkeypatch.setattr(VoterSet, "majority_size", lambda self: 1)
    failure = _first_failure(range(0, 40))
    assert any(
        words in failure.message for words in ("two leaders", "majority of voters", "committed before", "was committed in epoch", "committed twice")
    ), failure


def test_a_failure_names_the_command_that_reruns_it() -> None:
    failure = SimulationFailure(1234, "crash", "something broke", ["   10 start node 0"])
    text = str(failure)
    assert "RAFT_SIM_SEED=1234 .venv/bin/python -m pytest tests/unit/test_raft_simulation.py -k replay" in text
    assert "scenario crash" in text and "something broke" in text
