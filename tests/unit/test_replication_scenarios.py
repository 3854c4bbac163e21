"""The truncation scenarios of KIP-101, KIP-279 and KIP-320, step by step, on real logs.

Each replica is a broker Partition over a storage UnifiedLog in its own folder. A follower "fetches"
by asking the leader's Partition exactly what the leader's Fetch handler asks
(read_for_follower), and applies the answer as the replica fetcher does: DivergingEpoch
truncates, records are appended as they are. Crashes reopen the log from disk. The question
each scenario answers: is a record the leader acknowledged (the high watermark passed it) still
on the partition after the failovers, and do the replicas end identical?
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

from broker.metadata.metadata_image import PartitionRegistration
from broker.partition import NO_EPOCH, Partition, ReplicationSettings
from protocol.records import iter_records
from replication.follower_fetch_state import EpochEndOffset
from storage.fetch_data_info import FileRegion
from storage.unified_log import UnifiedLog
from storage.log_config import LogConfig
from tests.unit.batch_factory import make_batch

TOPIC = "t"
TOPIC_ID = uuid.UUID(int=7)


def now() -> int:
    return time.time_ns() // 1_000_000


class Replica:
    def __init__(self, root: Path, broker_id: int) -> None:
        self.broker_id = broker_id
        self.dir = root / f"broker{broker_id}" / f"{TOPIC}-0"
        self.partition = self._open()

    def _open(self) -> Partition:
        log = UnifiedLog.open(self.dir, LogConfig(), topic_id=TOPIC_ID, recovery_point=0, log_start_offset=0, had_clean_shutdown=False)
        return Partition(TOPIC, 0, TOPIC_ID, log, ReplicationSettings(self.broker_id, 30000, lambda: 1, lambda _b: True))

    def crash(self) -> None:
        """Lose the process, keep what reached the file (the tests append without fsync, but a
        page cache survives a process crash): the log is reloaded and recovered from disk."""
        self.partition.log.close_handlers()
        self.partition = self._open()

    def lead(self, epoch: int, replicas: tuple[int, ...], isr: tuple[int, ...]) -> None:
        self.partition.make_leader(PartitionRegistration(replicas=replicas, isr=isr, leader=self.broker_id, leader_epoch=epoch, partition_epoch=epoch), now())

    def follow(self, leader: int, epoch: int, replicas: tuple[int, ...], isr: tuple[int, ...]) -> None:
        self.partition.make_follower(PartitionRegistration(replicas=replicas, isr=isr, leader=leader, leader_epoch=epoch, partition_epoch=epoch))

    def append(self, *values: bytes) -> None:
        self.partition.append_records_to_leader(memoryview(bytearray(make_batch(list(values)))))

    def values(self) -> list[bytes]:
        """Every record's value in offset order, read back through the log's batches."""
        out = []
        for _header, batch in self.partition.log.batches(0):
            out.extend(_values(bytes(batch)))
        return out

    @property
    def end(self) -> int:
        return self.partition.log.log_end_offset

    @property
    def high_watermark(self) -> int:
        return self.partition.high_watermark


def _values(batch: bytes) -> list[bytes]:
    return [bytes(r.value) for r in iter_records(batch) if r.value is not None]


def fetch(follower: Replica, leader: Replica, answer_lost: bool = False) -> None:
    """One replica fetch round trip: the leader's answer applied by the follower, unless it is lost
    on the way (the leader has still seen the fetch)."""
    plog = follower.partition.log
    read, _ = leader.partition.read_for_follower(
        follower.broker_id, 1, plog.log_end_offset, plog.leader_epoch_cache.latest_epoch, plog.log_start_offset, leader.partition.leader_epoch, 1 << 20, now()
    )
    if answer_lost:
        return
    if read.diverging_epoch is not None:
        follower.partition.truncate_on_divergence(EpochEndOffset(*read.diverging_epoch))
        return
    data = b"".join(_region_bytes(r) for r in read.info.regions)
    if data:
        follower.partition.append_records_as_follower(data, read.high_watermark, read.log_start_offset)
    else:
        follower.partition.take_leader_offsets(read.high_watermark, read.log_start_offset)


def _region_bytes(region: FileRegion) -> bytes:
    return os.pread(region.fd, region.length, region.position)


def catch_up(follower: Replica, leader: Replica, rounds: int = 4) -> None:
    for _ in range(rounds):
        fetch(follower, leader)


def test_kip_101_a_restarted_follower_keeps_what_its_high_watermark_had_not_reached(tmp_path: Path) -> None:
    """KIP-101's first case: B copied m1 and m2 but its high watermark still said 1 when it
    restarted. Truncating to it (pre-KIP-101 Kafka) lost m2, acknowledged to the producer, once
    A died and B led. Here B keeps its log; m2 survives."""
    a, b = Replica(tmp_path, 1), Replica(tmp_path, 2)
    a.lead(0, (1, 2), (1, 2))
    b.follow(1, 0, (1, 2), (1, 2))
    a.append(b"m1")
    a.append(b"m2")
    fetch(b, a)  # B holds m1, m2
    fetch(b, a, answer_lost=True)  # A learns B holds both: the high watermark passes m2 (acknowledged)
    assert a.high_watermark == 2 and b.high_watermark == 0
    b.crash()
    # A dies; B is elected from the ISR.
    b.lead(1, (1, 2), (2,))
    assert b.values() == [b"m1", b"m2"]
    # A returns and follows: nothing to truncate, both agree.
    a.crash()
    a.follow(2, 1, (1, 2), (2,))
    catch_up(a, b)
    assert a.values() == b.values() == [b"m1", b"m2"]


def test_kip_101_diverged_logs_after_a_double_crash_converge_on_the_new_leader(tmp_path: Path) -> None:
    """KIP-101's second case: A wrote m2 that B never got; both crash; B comes back first and
    leads epoch 1, writing m3 at offset 1. A's m2 (never acknowledged: the high watermark was 1)
    must go, and A must end with B's log, not a mix of both at the same offsets."""
    a, b = Replica(tmp_path, 1), Replica(tmp_path, 2)
    a.lead(0, (1, 2), (1, 2))
    b.follow(1, 0, (1, 2), (1, 2))
    a.append(b"m1")
    catch_up(b, a)
    a.append(b"m2")  # only on A
    assert a.high_watermark == 1
    a.crash()
    b.crash()
    b.lead(1, (1, 2), (2,))
    b.append(b"m3")
    a.follow(2, 1, (1, 2), (2,))
    catch_up(a, b)
    assert a.values() == b.values() == [b"m1", b"m3"]


def test_kip_279_a_fast_double_failover_unwinds_one_epoch_at_a_time(tmp_path: Path) -> None:
    """KIP-279: three replicas whose logs diverged over two quick leader changes. A led epoch 0
    and wrote m2 alone; B led epoch 1 and wrote m3 that C got; C leads epoch 2. A must lose m2
    and take m3 and what follows."""
    a, b, c = Replica(tmp_path, 1), Replica(tmp_path, 2), Replica(tmp_path, 3)
    replicas = (1, 2, 3)
    a.lead(0, replicas, replicas)
    b.follow(1, 0, replicas, replicas)
    c.follow(1, 0, replicas, replicas)
    a.append(b"m1")
    catch_up(b, a)
    catch_up(c, a)
    a.append(b"m2")  # A alone
    b.lead(1, replicas, (2, 3))
    c.follow(2, 1, replicas, (2, 3))
    b.append(b"m3")
    catch_up(c, b)
    b.append(b"m4")  # B alone
    c.lead(2, replicas, (3,))
    c.append(b"m5")
    a.follow(3, 2, replicas, (3,))
    b.follow(3, 2, replicas, (3,))
    catch_up(a, c, rounds=6)
    catch_up(b, c, rounds=6)
    assert a.values() == b.values() == c.values() == [b"m1", b"m3", b"m5"]


def test_kip_320_a_follower_that_missed_an_epoch_truncates_to_the_leaders_end_of_it(tmp_path: Path) -> None:
    """KIP-320: A's log has epoch 0 records past where the new leader's epoch 0 ended; fetching
    with LastFetchedEpoch 0 gets DivergingEpoch (0, end) and cuts exactly there, keeping the rest."""
    a, b = Replica(tmp_path, 1), Replica(tmp_path, 2)
    a.lead(0, (1, 2), (1, 2))
    b.follow(1, 0, (1, 2), (1, 2))
    for value in (b"m1", b"m2", b"m3"):
        a.append(value)
    catch_up(b, a)
    a.append(b"m4")
    a.append(b"m5")  # past B
    b.lead(1, (1, 2), (2,))
    a.follow(2, 1, (1, 2), (2,))
    read, _ = b.partition.read_for_follower(1, 1, a.end, 0, 0, 1, 1 << 20, now())
    assert read.diverging_epoch == (0, 3)
    catch_up(a, b)
    assert a.end == b.end == 3 and a.values() == [b"m1", b"m2", b"m3"]


def test_a_restarted_replica_replaying_an_old_leadership_keeps_its_later_epochs(tmp_path: Path) -> None:
    """A broker restarting replays the metadata log and may be made leader of an epoch it once led
    before it learns of the later ones. Its log holds those later epochs already: marking the old
    epoch as starting at its log end dropped them from the epoch cache, and the follower then
    truncated, one DivergingEpoch after another, far below what it shared with the leader (in the
    failover campaign, 1,000-1,500 records after every restart)."""
    a, b = Replica(tmp_path, 1), Replica(tmp_path, 2)
    a.lead(0, (1, 2), (1, 2))
    b.follow(1, 0, (1, 2), (1, 2))
    a.append(b"m1")
    catch_up(b, a)
    b.lead(1, (1, 2), (2,))
    b.append(b"m2")
    a.follow(2, 1, (1, 2), (2,))
    catch_up(a, b)
    a.lead(2, (1, 2), (1, 2))  # the preferred replica back
    a.append(b"m3")
    b.follow(1, 2, (1, 2), (1, 2))
    catch_up(b, a)
    epochs = a.partition.log.leader_epoch_cache.entries
    b.crash()
    b.lead(1, (1, 2), (2,))  # replayed: B led epoch 1
    b.follow(1, 2, (1, 2), (1, 2))  # and the record after it
    assert b.partition.log.leader_epoch_cache.entries == epochs
    fetch(b, a)
    assert b.end == a.end == 3, "the follower truncated records it shared with the leader"
    assert b.values() == a.values() == [b"m1", b"m2", b"m3"]


def test_a_follower_whose_last_epoch_was_marked_at_its_log_end_and_never_written_catches_up(tmp_path: Path) -> None:
    """Found by the chaos campaign (tests/chaos, seed 1263367407: a disk-full window, then the
    node's restart replayed an old leadership and lost it within milliseconds). A leader marks its
    epoch at its log end when elected; B lost the leadership before writing anything in it, so
    that epoch is B's last fetched epoch and the leader never had it. The leader answers
    DivergingEpoch with an epoch ending past B's log end, B truncates to its log end, which cut
    nothing and kept the epoch: it fetched, diverged and 'truncated' thousands of times a minute
    and never rejoined the ISR."""
    a, b = Replica(tmp_path, 1), Replica(tmp_path, 2)
    a.lead(0, (1, 2), (1, 2))
    b.follow(1, 0, (1, 2), (1, 2))
    a.append(b"m1")
    catch_up(b, a)
    a.lead(1, (1, 2), (1, 2))
    a.append(b"m2")  # not fetched by B
    b.lead(2, (1, 2), (2,))  # marks epoch 2 at its log end, 1, and writes nothing
    b.follow(1, 3, (1, 2), (1,))
    a.lead(3, (1, 2), (1,))
    a.append(b"m3")
    catch_up(b, a)
    assert b.partition.log.leader_epoch_cache.latest_epoch == 3
    assert b.end == a.end == 3 and b.values() == a.values() == [b"m1", b"m2", b"m3"]


def test_a_fetch_re_read_in_purgatory_does_not_count_as_the_follower_fetching(tmp_path: Path) -> None:
    """Kafka's DelayedFetch reads with updateFetchState false: a follower's long-polling fetch, re-read
    after the controller took the follower out of the ISR, carries offsets as old as the request and
    must not add it back (nor move the high watermark); the follower's next fetch does."""
    a, b = Replica(tmp_path, 1), Replica(tmp_path, 2)
    a.lead(0, (1, 2), (1,))
    b.follow(1, 0, (1, 2), (1,))
    a.append(b"m1")

    def re_read(fetch_offset: int, update_fetch_state: bool) -> tuple[object, object]:
        return a.partition.read_for_follower(2, 1, fetch_offset, NO_EPOCH, 0, 0, 1 << 20, now(), update_fetch_state=update_fetch_state)

    read, outcome = re_read(0, False)
    b.partition.append_records_as_follower(b"".join(_region_bytes(r) for r in read.info.regions), read.high_watermark, read.log_start_offset)
    assert b.end == 1
    _, outcome = re_read(b.end, False)
    assert outcome.alter_isr is None and not outcome.high_watermark_moved
    _, outcome = re_read(b.end, True)
    assert outcome.alter_isr is not None and outcome.alter_isr.isr == (1, 2)
