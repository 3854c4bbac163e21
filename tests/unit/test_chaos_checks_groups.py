"""The groups checker over hand-made histories: each anomaly found, a clean history valid."""

from __future__ import annotations

from typing import Any

from tests.chaos.checks_groups import check
from tests.chaos.history import History, Op

LOG = {p: [f"v{p}-{o}" for o in range(10)] for p in (0, 1)}


class Scenario:
    """A history of the groups workload: sessions polling and committing, then the drain."""

    def __init__(self) -> None:
        self.history = History(clock=iter(range(10_000)).__next__)

    def assign(self, session: str, partitions: list[int]) -> None:
        self.history.invoke(f"groups-{session}", "assign")
        self.history.ok(f"groups-{session}", "assign", {"session": session, "partitions": partitions})

    def poll(self, session: str, partition: int, offsets: range | list[int], value: str | None = None) -> None:
        records = [[partition, o, value or LOG[partition][o]] for o in offsets]
        self.history.invoke(f"groups-{session}", "poll", {"session": session})
        self.history.ok(f"groups-{session}", "poll", {"session": session, "records": records})

    def commit(self, session: str, offsets: dict[int, int], outcome: str = "ok", at: float | None = None) -> None:
        value: dict[str, Any] = {"session": session, "offsets": {str(p): o for p, o in offsets.items()}}
        if at is not None:
            value["at"] = at
        self.history.invoke(f"groups-{session}", "commit", value)
        if outcome != "pending":
            self.history.record(f"groups-{session}", outcome, "commit", value)  # type: ignore[arg-type]

    def drain(self, offsets: dict[int, int]) -> list[Op]:
        self.history.invoke("groups-drain", "committed-offsets")
        self.history.ok("groups-drain", "committed-offsets", {"offsets": {str(p): o for p, o in offsets.items()}})
        records = [[p, o, v] for p, values in LOG.items() for o, v in enumerate(values)]
        self.history.invoke("groups-drain", "read")
        self.history.ok("groups-drain", "read", {"records": records, "ends": {str(p): len(v) for p, v in LOG.items()}})
        return self.history.ops


def anomalies(ops: list[Op]) -> dict[str, Any]:
    return {v.check: v.examples for v in check(ops) if v.count}


def test_a_clean_history_through_a_rebalance_and_a_kill_is_valid() -> None:
    s = Scenario()
    s.assign("1", [0, 1])
    s.poll("1", 0, range(0, 4))
    s.commit("1", {0: 4})
    s.poll("1", 1, range(0, 3))
    s.commit("1", {1: 3}, "fail")  # a rebalance: the commit is refused
    s.poll("1", 0, range(4, 6))
    s.commit("1", {0: 6}, "pending")  # killed while committing
    s.history.info("groups-1", "kill", {"session": "1"})
    s.assign("2", [0, 1])
    # Session 2 starts where the group committed: partition 0 at 4 or 6, partition 1 at 0.
    s.poll("2", 0, range(4, 10))
    s.poll("2", 1, range(0, 10))
    s.commit("2", {0: 10, 1: 10})
    # After a new assignment a session starts over from the committed offset.
    s.assign("2", [0])
    s.poll("2", 0, range(8, 10))
    s.commit("2", {0: 10})
    assert not anomalies(s.drain({0: 10, 1: 10}))


def test_a_successful_commit_below_an_earlier_one_is_a_regression() -> None:
    s = Scenario()
    s.assign("1", [0])
    s.poll("1", 0, range(0, 6))
    s.commit("1", {0: 6})
    s.assign("2", [0])
    s.poll("2", 0, range(2, 4))
    s.commit("2", {0: 4})
    found = anomalies(s.drain({0: 6}))
    assert found["offset-regression"] == [{"partition": 0, "from": 6, "to": 4, "sessions": ["1", "2"]}]


def test_a_final_committed_offset_below_the_last_successful_commit_is_a_regression() -> None:
    s = Scenario()
    s.assign("1", [0])
    s.poll("1", 0, range(0, 6))
    s.commit("1", {0: 6})
    found = anomalies(s.drain({0: 3}))
    assert found["offset-regression"] == [{"partition": 0, "from": 6, "to": 3, "sessions": ["1", "final"]}]


def test_commits_are_ordered_by_when_their_sessions_began_them_not_by_when_they_were_recorded() -> None:
    s = Scenario()
    s.assign("1", [0])
    s.poll("1", 0, range(0, 6))
    s.assign("2", [0])
    s.poll("2", 0, range(6, 8))
    # Session 1's commit reached the history after session 2's, though it began first.
    s.commit("2", {0: 8}, at=2.0)
    s.commit("1", {0: 6}, at=1.0)
    assert "offset-regression" not in anomalies(s.drain({0: 8}))


def test_failed_and_unknown_commits_do_not_count_as_regressions() -> None:
    s = Scenario()
    s.assign("1", [0])
    s.poll("1", 0, range(0, 8))
    s.commit("1", {0: 8}, "fail")
    s.commit("1", {0: 8}, "info")
    s.assign("2", [0])
    s.poll("2", 0, range(0, 3))
    s.commit("2", {0: 3})
    assert not anomalies(s.drain({0: 3}))


def test_a_commit_past_what_the_group_was_delivered_is_found() -> None:
    s = Scenario()
    s.assign("1", [0])
    s.poll("1", 0, range(0, 3))
    s.commit("1", {0: 5})
    found = anomalies(s.drain({0: 5}))
    assert found["commit-past-delivered"][0] == {"partition": 0, "committed": 5, "never delivered": 3, "session": "1"}


def test_records_delivered_only_after_the_commit_do_not_excuse_it() -> None:
    s = Scenario()
    s.assign("1", [0])
    s.poll("1", 0, range(0, 3))
    s.commit("1", {0: 5})
    s.poll("1", 0, range(3, 5))
    found = anomalies(s.drain({0: 5}))
    assert [a["session"] for a in found["commit-past-delivered"]] == ["1"]


def test_a_commit_past_the_high_watermark_is_found() -> None:
    s = Scenario()
    s.assign("1", [1])
    s.poll("1", 1, range(0, 10))
    found = anomalies(s.drain({1: 12}))
    assert found["commit-past-end"] == [{"partition": 1, "committed": 12, "high watermark": 10, "session": "final"}]


def test_offsets_going_backwards_or_skipping_within_a_session_are_found() -> None:
    s = Scenario()
    s.assign("1", [0])
    s.poll("1", 0, [0, 1, 2, 1])
    s.poll("1", 0, [5])
    found = anomalies(s.drain({}))
    assert found["session-order"] == [{"session": "1", "partition": 0, "after": 2, "got": 1}, {"session": "1", "partition": 0, "after": 1, "got": 5}]
    assert found["session-duplicate"] == [{"session": "1", "partition": 0, "offset": 1}]


def test_a_delivered_record_not_in_the_log_is_a_phantom() -> None:
    s = Scenario()
    s.assign("1", [0])
    s.poll("1", 0, [0])
    s.poll("1", 0, [1], value="truncated")
    found = anomalies(s.drain({}))
    assert found["phantom-delivery"] == [{"session": "1", "record": [0, 1, "truncated"], "in the log": LOG[0][1]}]


def test_a_history_without_its_drain_is_invalid() -> None:
    s = Scenario()
    s.assign("1", [0])
    [verdict] = check(s.history.ops)
    assert (verdict.check, verdict.valid) == ("drained", False)


def test_an_assignment_restarted_from_the_log_start_below_the_commit_is_one_reset_not_regressions() -> None:
    """Apache Kafka's zombie leader (control seeds 5 and 6): a fetch past a stale leader's log end
    is answered OFFSET_OUT_OF_RANGE, auto.offset.reset=earliest starts the session at 0, and each
    of its commits is below the group's last. One reset; its commits start the progress over."""
    s = Scenario()
    s.assign("1", [0])
    s.poll("1", 0, range(0, 6))
    s.commit("1", {0: 6})
    s.assign("2", [0])
    s.poll("2", 0, range(0, 3))
    s.commit("2", {0: 3})
    s.poll("2", 0, range(3, 10))
    s.commit("2", {0: 10})
    found = anomalies(s.drain({0: 10}))
    assert found == {"offset-reset": [{"session": "2", "partition": 0, "committed": 6, "started at": 0}]}
