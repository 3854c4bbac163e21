"""The soak runner's reading of a campaign's verdicts (tests/chaos/soak.py)."""

from tests.chaos.soak import RunOutcome, summary


def verdicts(**counts: int) -> dict:
    return {
        "windows": ["kill-leader", "pause"],
        "stalls": 0,
        "client_failures": [],
        "verdicts": [{"workload": name.split("_")[0], "check": name.split("_")[1], "count": count} for name, count in counts.items()],
    }


def test_a_run_with_every_check_at_zero_passes_in_one_line() -> None:
    outcome = RunOutcome(7, 0, 61.2, verdicts(queue_lost=0, queue_duplicated=0))
    assert outcome.passed
    assert outcome.line("replay") == "seed 7: 2 windows, 61 s, ok"


def test_a_check_that_found_anomalies_fails_the_run_and_names_its_replay() -> None:
    outcome = RunOutcome(8, 1, 300.0, verdicts(queue_lost=0, queue_duplicated=6))
    assert not outcome.passed
    assert outcome.failures == ["queue/duplicated:6"]
    assert outcome.line("python -m tests.chaos.campaign --seed 8").endswith("queue/duplicated:6; replay: python -m tests.chaos.campaign --seed 8")


def test_a_run_without_verdicts_or_with_a_nonzero_exit_fails() -> None:
    assert RunOutcome(9, 1, 5.0, None).failures == ["no verdicts"]
    assert not RunOutcome(10, 1, 5.0, verdicts(queue_lost=0)).passed


def test_stalls_and_client_failures_count_as_failures() -> None:
    v = verdicts(queue_lost=0) | {"stalls": 2, "client_failures": ["aiokafka died"]}
    assert RunOutcome(11, 0, 5.0, v).failures == ["stalls:2", "client:aiokafka died"]


def test_the_closing_line_counts_passed_and_failed_runs() -> None:
    runs = [RunOutcome(1, 0, 1.0, verdicts(queue_lost=0)), RunOutcome(2, 1, 1.0, None)]
    assert summary(runs) == "soak: 1 passed, 1 failed"
