"""The queue checks of tests/chaos/checker.py over hand-made histories: a clean one passes, and
each anomaly is found by its check and by no other."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chaos.checker import check_queue, queue_history
from tests.chaos.history import History, Op, load

W = "queue"


def clean() -> History:
    """Two producers' writes to two partitions, a consumer that rebalanced once, the final drain."""
    h = History(clock=iter(range(10_000)).__next__)
    for proc, p, o, v in [("queue.a#0", 0, 0, "a-0"), ("queue.b#0", 1, 0, "b-0"), ("queue.a#1", 0, 1, "a-1"), ("queue.b#1", 1, 1, "b-1")]:
        h.invoke(proc, "send", [None, None, v])
        h.ok(proc, "send", [p, o, v])
    h.invoke("queue.a#2", "send", [None, None, "a-2"])
    h.info("queue.a#2", "send", [None, None, "a-2"])  # indeterminate: written, as it turns out
    poll(h, "queue.c0.0", [[0, 0, "a-0"], [1, 0, "b-0"]])
    # A new session may start over from the committed offsets.
    poll(h, "queue.c0.1", [[0, 0, "a-0"], [0, 1, "a-1"], [1, 1, "b-1"]])
    drain(h, 0, [[0, 0, "a-0"], [0, 1, "a-1"], [0, 2, "a-2"]])
    drain(h, 1, [[1, 0, "b-0"], [1, 1, "b-1"]])
    return h


def poll(h: History, process: str, records: list[Any]) -> None:
    h.invoke(process, "poll")
    h.ok(process, "poll", records)


def drain(h: History, partition: int, records: list[Any], end: int | None = None) -> None:
    h.invoke("queue.drain", "drain", partition)
    h.ok("queue.drain", "drain", {"partition": partition, "end": len(records) if end is None else end, "records": records})


def counts(ops: list[Op]) -> dict[str, int]:
    return {v.check: v.count for v in check_queue(W, queue_history(ops, "queue."))}


def anomalies(ops: list[Op]) -> dict[str, int]:
    return {check: n for check, n in counts(ops).items() if n}


def replace_ok(h: History, f: str, match: Any, value: Any) -> list[Op]:
    """The history with the ok op of ``f`` whose value is ``match`` given ``value`` instead."""
    return [Op(o.index, o.time, o.process, o.type, o.f, value) if o.type == "ok" and o.f == f and o.value == match else o for o in h.ops]


def test_a_clean_history_is_valid_and_every_check_saw_something() -> None:
    verdicts = check_queue(W, queue_history(clean().ops, "queue."))
    assert [v.count for v in verdicts] == [0] * 6
    assert {v.check for v in verdicts} == {"lost", "unseen", "duplicated", "inconsistent-offsets", "nonmonotonic-poll", "drain-gaps"}
    stats = {v.check: v.stats for v in verdicts}
    assert stats["lost"] == {"acknowledged": 4, "without offset": 0, "read": 5}
    assert stats["nonmonotonic-poll"] == {"sessions": 2}


def test_an_acknowledged_write_never_read_while_a_later_offset_was_is_lost_and_unseen() -> None:
    h = clean()
    ops = replace_ok(h, "drain", {"partition": 0, "end": 3, "records": [[0, 0, "a-0"], [0, 1, "a-1"], [0, 2, "a-2"]]},
                     {"partition": 0, "end": 3, "records": [[0, 0, "a-0"], [0, 2, "a-2"]]})
    ops = [o for o in ops if not (o.f == "poll" and o.process == "queue.c0.1")]
    # a-1, acknowledged at offset 1, is gone from under a-2 at offset 2.
    assert anomalies(ops) == {"lost": 1, "unseen": 1, "drain-gaps": 1}
    [verdict] = [v for v in check_queue(W, queue_history(ops, "queue.")) if v.check == "lost"]
    assert verdict.examples == [(0, 1, "a-1")]


def test_an_acknowledged_write_missing_from_the_tail_of_the_drain_is_unseen_but_not_lost() -> None:
    h = clean()
    ops = replace_ok(h, "drain", {"partition": 1, "end": 2, "records": [[1, 0, "b-0"], [1, 1, "b-1"]]},
                     {"partition": 1, "end": 1, "records": [[1, 0, "b-0"]]})
    ops = [o for o in ops if not (o.f == "poll" and o.process == "queue.c0.1")]
    assert anomalies(ops) == {"unseen": 1}


def test_writes_acknowledged_without_an_offset_claim_no_offset_but_must_still_be_read() -> None:
    """librdkafka acknowledges some retried batches of an idempotent producer with no offset: two
    such writes are not two values at one offset, and one that is never read is still lost."""
    h = clean()
    for proc, v in [("queue.a#3", "a-3"), ("queue.a#4", "a-4")]:
        h.invoke(proc, "send", [None, None, v])
        h.ok(proc, "send", [0, None, v])
    drained = {"partition": 0, "end": 3, "records": [[0, 0, "a-0"], [0, 1, "a-1"], [0, 2, "a-2"]]}
    ops = replace_ok(h, "drain", drained, {**drained, "end": 5, "records": [*drained["records"], [0, 3, "a-3"], [0, 4, "a-4"]]})
    assert anomalies(ops) == {}
    ops = replace_ok(h, "drain", drained, {**drained, "end": 4, "records": [*drained["records"], [0, 3, "a-3"]]})
    assert anomalies(ops) == {"lost": 1, "unseen": 1}
    [verdict] = [v for v in check_queue(W, queue_history(ops, "queue.")) if v.check == "lost"]
    assert verdict.examples == [(0, -1, "a-4")] and verdict.stats["without offset"] == 2


def test_one_value_at_two_offsets_is_a_duplicate() -> None:
    h = clean()
    ops = replace_ok(h, "drain", {"partition": 1, "end": 2, "records": [[1, 0, "b-0"], [1, 1, "b-1"]]},
                     {"partition": 1, "end": 3, "records": [[1, 0, "b-0"], [1, 1, "b-1"], [1, 2, "b-1"]]})
    assert anomalies(ops) == {"duplicated": 1}


def test_two_values_read_at_one_offset_are_inconsistent() -> None:
    h = clean()
    poll(h, "queue.c1.0", [[1, 0, "b-1"]])
    assert anomalies(h.ops) == {"inconsistent-offsets": 1, "duplicated": 1}


def test_offsets_going_backwards_within_a_session_are_nonmonotonic_but_not_across_sessions() -> None:
    h = clean()
    poll(h, "queue.c0.1", [[0, 0, "a-0"]])
    [verdict] = [v for v in check_queue(W, queue_history(h.ops, "queue.")) if v.check == "nonmonotonic-poll"]
    assert verdict.count == 1 and verdict.examples == [("queue.c0.1", 0, 1, 0)]
    assert anomalies(h.ops) == {"nonmonotonic-poll": 1}


def test_a_hole_below_a_partitions_end_in_the_drain_is_a_gap() -> None:
    h = clean()
    ops = replace_ok(h, "drain", {"partition": 1, "end": 2, "records": [[1, 0, "b-0"], [1, 1, "b-1"]]},
                     {"partition": 1, "end": 3, "records": [[1, 0, "b-0"], [1, 1, "b-1"]]})
    assert anomalies(ops) == {"drain-gaps": 1}


def test_other_workloads_and_the_nemesis_are_ignored(tmp_path: pytest.TempPathFactory) -> None:
    h = clean()
    h.info("nemesis", "start-kill", [1])
    h.invoke("txn.p0", "send", [None, None, "a-0"])
    h.ok("txn.p0", "send", [0, 7, "a-0"])
    path = tmp_path / "history.jsonl"  # type: ignore[operator]
    h.dump(path)
    assert anomalies(load(path)) == {}
