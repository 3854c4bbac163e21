"""UnsentIsrUpdates: the latest change per partition waits, a request's answer settles what it names."""

from __future__ import annotations

from replication.unsent_isr_updates import IsrUpdateAnswer, UnsentIsrUpdates
from tests.unit.test_alter_partition_manager import StubPartition, intent


def test_a_change_asked_while_the_request_was_out_stays_for_the_next_one() -> None:
    unsent: UnsentIsrUpdates[StubPartition] = UnsentIsrUpdates()
    p0 = StubPartition(0)
    unsent.submit(p0, intent((0, 1)))
    batch = unsent.batch()
    unsent.submit(p0, intent((0, 1, 2)))  # asked since: the answer to the first must not drop it
    settled, unanswered = unsent.settle(batch, {p0.key: IsrUpdateAnswer(0, (0, 1), 3, 9)}, 0)
    assert not unanswered and p0.succeeded == [(0, 1)] and settled[0].high_watermark_moved
    assert unsent.batch() == {p0.key: (p0, intent((0, 1, 2)))}


def test_each_named_partition_is_settled_and_the_others_wait() -> None:
    unsent: UnsentIsrUpdates[StubPartition] = UnsentIsrUpdates()
    p0, p1, p2 = StubPartition(0), StubPartition(1), StubPartition(2)
    for p in (p0, p1, p2):
        unsent.submit(p, intent((0, 1, 2)))
    batch = unsent.batch()
    settled, unanswered = unsent.settle(batch, {p0.key: IsrUpdateAnswer(95), p1.key: IsrUpdateAnswer(0, (0, 1, 2), 3, 9)}, 0)
    assert unanswered
    assert p0.failed == [95] and p1.succeeded == [(0, 1, 2)] and not p2.failed and not p2.succeeded
    assert [(s.partition.key, s.high_watermark_moved) for s in settled] == [(p0.key, False), (p1.key, True)]
    assert list(unsent.batch()) == [p2.key]
