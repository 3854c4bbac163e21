"""A log's producer snapshot loads as Kafka's loadFromSnapshot does: producers idle past
producer.id.expiration.ms (by their last batch's timestamp) are left out, unless they have a
transaction open; producers found by replaying the log after the snapshot are all kept.

Seen when kbroker took over a Kafka 4.4 data directory (tests/integration/test_kafka_dir_takeover.py):
Kafka forgot a producer whose batches carried day-old CreateTimes and appended its retry as new,
where kbroker had kept it and answered the retry as a duplicate.
"""

from __future__ import annotations

from pathlib import Path

from protocol.records import TRANSACTIONAL_MASK
from storage.log_config import LogConfig
from storage.unified_log import UnifiedLog
from tests.unit.batch_factory import FakeClock, make_batch

EXPIRATION_MS = 60_000
IDLE, TRANSACTIONAL, REPLAYED = 1000, 2000, 3000


def open_log(directory: Path, clock: FakeClock, *, clean: bool) -> UnifiedLog:
    return UnifiedLog.open(
        directory, LogConfig(), topic_id=None, recovery_point=0, log_start_offset=0, had_clean_shutdown=clean, now_ms=clock,
        producer_id_expiration_ms=EXPIRATION_MS,
    )  # fmt: skip


def append(plog: UnifiedLog, producer_id: int, timestamp: int, *, transactional: bool = False) -> None:
    batch = make_batch([b"v"], timestamps=[timestamp], producer_id=producer_id, producer_epoch=0, base_sequence=0, attributes=TRANSACTIONAL_MASK if transactional else 0)
    plog.append_as_leader(memoryview(batch), 0)


def test_a_snapshots_idle_producers_are_not_loaded_but_open_transactions_and_replayed_ones_are(tmp_path: Path) -> None:
    clock = FakeClock()
    directory = tmp_path / "t-0"
    plog = open_log(directory, clock, clean=True)
    append(plog, IDLE, clock.now)
    append(plog, TRANSACTIONAL, clock.now, transactional=True)
    plog.close()  # a snapshot of both at offset 2

    clock.advance(EXPIRATION_MS - 1)
    plog = open_log(directory, clock, clean=True)
    assert {e.producer_id for e in plog.producer_state.active_producers()} == {IDLE, TRANSACTIONAL}
    append(plog, REPLAYED, clock.now - EXPIRATION_MS)  # already idle long enough, but past the snapshot
    plog.close()
    (directory / f"{3:020d}.snapshot").unlink()  # its state is found by replaying offset 2 from snapshot 2

    clock.advance(1)
    plog = open_log(directory, clock, clean=True)
    assert {e.producer_id for e in plog.producer_state.active_producers()} == {TRANSACTIONAL, REPLAYED}
    plog.close()
