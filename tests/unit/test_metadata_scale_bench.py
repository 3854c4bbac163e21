"""The sans-IO helpers of benchmarks/metadata_scale.py: what it reads of /proc and of its nodes' logs."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from benchmarks.metadata_scale import NEW_BROKER_MILESTONES, cpu_ticks, event_time, rss_bytes, timeline, topic_plan


@given(st.integers(min_value=0, max_value=10**6), st.integers(min_value=1, max_value=5000))
def test_topic_plan_adds_up_and_stays_under_the_limit(partitions: int, per_topic: int) -> None:
    plan = topic_plan(partitions, per_topic)
    assert sum(plan) == partitions
    assert all(0 < count <= per_topic for count in plan)


def test_cpu_ticks_reads_utime_and_stime_past_a_command_name_with_spaces_and_parentheses() -> None:
    line = "4242 (python (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 1234 567 0 0 20 0 9 0 100 2000000 5000 18446744073709551615"
    assert cpu_ticks(line) == 1234 + 567


def test_rss_bytes_from_proc_status() -> None:
    assert rss_bytes("Name:\tpython\nVmPeak:\t  200 kB\nVmRSS:\t  1536 kB\nThreads:\t9\n") == 1536 * 1024
    assert rss_bytes("Name:\tzombie\n") == 0


def test_timeline_takes_the_first_of_each_milestone_relative_to_launch() -> None:
    def at(second: float, name: str) -> dict[str, str]:
        return {"event": name, "timestamp": f"2026-01-01T00:00:{second:09.6f}Z"}

    launched = event_time(at(1.0, "x"))
    events = [
        {"event": "raw", "line": "not json"},
        at(2.5, "log_manager.started"),
        at(3.0, "raft.snapshot_loaded"),
        at(3.25, "broker.unfenced"),
        at(9.0, "broker.unfenced"),
    ]
    assert timeline(events, launched) == {NEW_BROKER_MILESTONES[0]: 1.5, "raft.snapshot_loaded": 2.0, "broker.unfenced": 2.25}
