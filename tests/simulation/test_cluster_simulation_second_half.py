"""The second half of the whole-cluster simulation's seeded campaign (see test_cluster_simulation.py),
in a file of its own so that the suite's other worker runs it."""

from __future__ import annotations

import pytest

from tests.simulation.cluster_simulation import SCENARIO_NAMES
from tests.simulation.test_cluster_simulation import CAMPAIGN_TIMEOUT_S, SECOND_HALF, run_scenario


@pytest.mark.timeout(CAMPAIGN_TIMEOUT_S)
@pytest.mark.parametrize("scenario", SCENARIO_NAMES)
def test_campaign_second_half(scenario: str) -> None:
    run_scenario(scenario, SECOND_HALF)
