"""The transactions checker over hand-made histories: each anomaly found, a clean history valid."""

from __future__ import annotations

from typing import Any

from tests.chaos.checks_transactions import check
from tests.chaos.history import History, Op

INPUTS = [[0, o, f"in-{o}"] for o in range(6)]


class Scenario:
    """A history of the transactions workload, built op by op."""

    def __init__(self) -> None:
        self.history = History(clock=iter(range(10_000)).__next__)
        self.n = 0

    def txn(self, first: int, last: int, outcome: str, process: str = "transactions-0", offsets: dict[str, int] | None = None) -> list[str]:
        """A transaction over inputs ``first``..``last`` of partition 0 ending as ``outcome``; its outputs."""
        self.n += 1
        txn_id = f"t{self.n}"
        inputs = INPUTS[first : last + 1]
        outputs = [f"{txn_id}/{p}/{o}" for p, o, _ in inputs]
        value = {"id": txn_id, "inputs": inputs, "outputs": outputs, "offsets": offsets or {"0": last + 1}, "commit": outcome != "fail"}
        self.history.invoke(process, "txn", value)
        if outcome != "pending":
            self.history.record(process, outcome, "txn", {"id": txn_id})  # type: ignore[arg-type]
        return outputs

    def drain(self, committed: list[str], uncommitted: list[str] | None = None, offsets: dict[str, int] | None = None) -> list[Op]:
        """The final reads: read_uncommitted's values at offsets 0, 1, ...; read_committed's at the
        same offsets, a value read_uncommitted lacks or read twice past them."""
        uncommitted = committed if uncommitted is None else uncommitted
        at = {v: o for o, v in enumerate(uncommitted)}
        beyond = iter(range(len(uncommitted), 10_000))
        reads = {
            "read_committed": [[0, at.pop(v) if v in at else next(beyond), v] for v in committed],
            "read_uncommitted": [[0, o, v] for o, v in enumerate(uncommitted)],
        }
        for isolation, records in reads.items():
            self.history.invoke("transactions-drain", "read", {"isolation": isolation})
            self.history.ok("transactions-drain", "read", {"isolation": isolation, "records": records})
        self.history.invoke("transactions-drain", "committed-offsets")
        self.history.ok("transactions-drain", "committed-offsets", {"offsets": offsets if offsets is not None else {}})
        return self.history.ops


def counts(ops: list[Op]) -> dict[str, int]:
    return {v.check: v.count for v in check(ops)}


def anomalies(ops: list[Op]) -> dict[str, Any]:
    return {v.check: v.examples for v in check(ops) if v.count}


def test_a_clean_history_with_commits_aborts_and_unknown_outcomes_is_valid() -> None:
    s = Scenario()
    a = s.txn(0, 1, "ok")
    aborted = s.txn(2, 3, "fail")
    b = s.txn(2, 3, "info")  # turned out committed
    unknown_aborted = s.txn(4, 5, "info")  # turned out aborted
    c = s.txn(4, 5, "ok")
    ops = s.drain(a + b + c, uncommitted=a + aborted + b + unknown_aborted + c, offsets={"0": 6})
    assert not anomalies(ops)
    stats = check(ops)[0].stats
    assert (stats["committed"], stats["aborted"], stats["unknown"], stats["visible"]) == (2, 1, 2, 3)
    assert stats["aborted seen by read_uncommitted"] == len(aborted)


def test_read_committed_showing_an_aborted_transaction_is_an_aborted_read() -> None:
    s = Scenario()
    a = s.txn(0, 1, "ok")
    aborted = s.txn(2, 3, "fail")
    b = s.txn(2, 3, "ok")
    found = anomalies(s.drain(a + aborted + b, offsets={"0": 4}))
    assert found["aborted-read"] == [{"txn": "t2", "value": v} for v in aborted]
    # The aborted transaction's inputs were also processed by t3: twice, as read_committed shows.
    assert found["double-processed"][0] == {"input": [0, 2], "txns": ["t2", "t3"]}


def test_a_committed_transaction_missing_from_read_committed_is_a_lost_write() -> None:
    s = Scenario()
    a = s.txn(0, 1, "ok")
    b = s.txn(2, 3, "ok")
    found = anomalies(s.drain(a + b[:1], uncommitted=a + b, offsets={"0": 4}))
    assert found["lost-write"] == [{"txn": "t2", "value": b[1]}]
    assert set(found) == {"lost-write"}


def test_an_output_read_twice_is_a_duplicate() -> None:
    s = Scenario()
    a = s.txn(0, 1, "ok")
    assert anomalies(s.drain(a + a[1:], offsets={"0": 2}))["duplicate-read"] == [(a[1], 2)]


def test_a_transaction_of_unknown_outcome_half_visible_is_not_atomic() -> None:
    s = Scenario()
    a = s.txn(0, 2, "info")
    found = anomalies(s.drain(a[:2], uncommitted=a, offsets={"0": 3}))
    assert found["non-atomic"] == [{"txn": "t1", "visible": 2, "written": 3}]


def test_read_uncommitted_must_see_everything_committed() -> None:
    s = Scenario()
    a = s.txn(0, 1, "ok")
    assert anomalies(s.drain(a, uncommitted=a[:1], offsets={"0": 2}))["uncommitted-misses-committed"] == [(0, 1, a[1])]


def test_a_record_nobody_wrote_is_unexpected() -> None:
    s = Scenario()
    a = s.txn(0, 1, "ok")
    found = anomalies(s.drain(a + ["garbage"], offsets={"0": 2}))
    assert found["unexpected-read"] == [{"isolation": "read_committed", "record": (0, 2, "garbage")}, {"isolation": "read_uncommitted", "record": (0, 2, "garbage")}]


def test_two_committed_transactions_over_one_input_process_it_twice() -> None:
    s = Scenario()
    a = s.txn(0, 1, "ok", process="transactions-0")
    b = s.txn(1, 2, "ok", process="transactions-1")
    found = anomalies(s.drain(a + b, offsets={"0": 3}))
    assert found["double-processed"] == [{"input": [0, 1], "txns": ["t1", "t2"]}]


def test_one_loop_rewound_to_a_stale_committed_offset_processes_inputs_twice() -> None:
    """Kafka control seed 8: after an abort, the loop rewound to the committed offset a zombie
    coordinator still held (2, where t2 had committed 4 at the real coordinator) and committed
    inputs 2 and 3 again. The group's final offset is right, so double-processed is the only
    witness; the anomaly is real, not the checker's."""
    s = Scenario()
    a = s.txn(0, 1, "ok")
    b = s.txn(2, 3, "ok")
    s.txn(4, 5, "fail")
    c = s.txn(2, 3, "ok")
    d = s.txn(4, 5, "ok")
    found = anomalies(s.drain(a + b + c + d, offsets={"0": 6}))
    assert found == {"double-processed": [{"input": [0, 2], "txns": ["t2", "t4"]}, {"input": [0, 3], "txns": ["t2", "t4"]}]}


def test_the_offsets_of_an_aborted_transaction_committed_are_found() -> None:
    s = Scenario()
    a = s.txn(0, 1, "ok")
    s.txn(2, 3, "fail")
    found = anomalies(s.drain(a, offsets={"0": 4}))
    assert found["committed-offsets"] == [{"partition": 0, "committed": 4, "last committed txn sent": 2, "sent by": ["t2", "fail"]}]
    # Inputs 2 and 3 are now below the committed offset, and no committed transaction has them.
    assert found["skipped-input"] == [[0, 2], [0, 3]]


def test_an_intermediate_offset_committed_is_found() -> None:
    s = Scenario()
    a = s.txn(0, 3, "ok")
    found = anomalies(s.drain(a, offsets={"0": 2}))
    assert found["committed-offsets"] == [{"partition": 0, "committed": 2, "last committed txn sent": 4, "sent by": None}]


def test_a_history_without_its_drain_is_invalid() -> None:
    s = Scenario()
    s.txn(0, 1, "ok")
    [verdict] = check(s.history.ops)
    assert (verdict.check, verdict.valid) == ("drained", False)


def test_other_workloads_operations_are_ignored() -> None:
    s = Scenario()
    a = s.txn(0, 1, "ok")
    s.history.invoke("groups-1", "txn", {"garbage": True})
    s.history.info("nemesis", "start-kill", {"node": 1})
    assert not anomalies(s.drain(a, offsets={"0": 2}))


def test_a_loop_that_never_committed_is_idle() -> None:
    """Long campaign 1689750076: three loops consumed nothing for 75 minutes and every other
    check, having no transaction to judge, found nothing."""
    s = Scenario()
    a = s.txn(0, 1, "ok", process="transactions-0")
    s.txn(2, 3, "fail", process="transactions-1")
    ops = s.drain(a, offsets={"0": 2})
    [idle] = [v for v in check(ops, loops=3) if v.check == "idle-loops"]
    assert (idle.count, idle.examples) == (2, ["transactions-1", "transactions-2"])
    assert "idle-loops" not in {v.check for v in check(ops)}
