"""LeaderEpochCache: Kafka's leader-epoch-checkpoint file and OffsetForLeaderEpoch answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.errors import KafkaStorageError
from storage.leader_epoch_cache import LeaderEpochCache


def test_assign_persists_only_news(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    cache = LeaderEpochCache(path)
    assert cache.latest_epoch == -1 and not path.exists()
    cache.assign(1, 0)
    cache.assign(1, 5)  # same epoch, later offset: nothing new
    cache.assign(3, 10)
    assert not path.exists()  # written by the log's next flush, not on the append path
    cache.flush()
    assert path.read_text() == "0\n2\n1 0\n3 10\n"
    assert LeaderEpochCache(path).entries == [(1, 0), (3, 10)]
    assert cache.latest_epoch == 3
    with pytest.raises(ValueError):
        cache.assign(-1, 4)


def test_assign_drops_entries_that_break_monotonicity(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path / "leader-epoch-checkpoint")
    cache.assign(1, 0)
    cache.assign(2, 10)
    cache.assign(3, 20)
    cache.assign(2, 15)  # a lower epoch: later entries go
    assert cache.entries == [(1, 0), (2, 15)]
    cache.assign(4, 12)  # an earlier start offset: entries starting at or after it go
    assert cache.entries == [(1, 0), (4, 12)]
    cache.assign(4, 8)  # the same epoch starting earlier replaces it
    assert cache.entries == [(1, 0), (4, 8)]


def test_end_offset_for(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path / "leader-epoch-checkpoint")
    assert cache.end_offset_for(0, 100) == (-1, -1)
    cache.assign(2, 10)
    cache.assign(4, 30)
    cache.assign(7, 50)
    assert cache.end_offset_for(7, 90) == (7, 90)  # the current epoch ends at the log end
    assert cache.end_offset_for(4, 90) == (4, 50)
    assert cache.end_offset_for(5, 90) == (4, 50)  # unknown epoch: the largest one below it
    assert cache.end_offset_for(2, 90) == (2, 30)
    assert cache.end_offset_for(1, 90) == (1, 10)  # below every epoch: the first start offset
    assert cache.end_offset_for(8, 90) == (-1, -1)
    assert cache.end_offset_for(-1, 90) == (-1, -1)


def test_epoch_for_offset(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path / "leader-epoch-checkpoint")
    assert cache.epoch_for_offset(5) == -1
    cache.assign(2, 10)
    cache.assign(4, 30)
    assert cache.epoch_for_offset(5) == -1
    assert cache.epoch_for_offset(10) == 2
    assert cache.epoch_for_offset(29) == 2
    assert cache.epoch_for_offset(30) == 4
    assert cache.epoch_for_offset(1000) == 4


def test_truncation(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    cache = LeaderEpochCache(path)
    for epoch, start in ((1, 0), (2, 10), (3, 20), (5, 40)):
        cache.assign(epoch, start)
    cache.truncate_from_end(20)
    assert cache.entries == [(1, 0), (2, 10)]
    cache.truncate_from_end(100)
    assert cache.entries == [(1, 0), (2, 10)]
    cache.truncate_from_start(12)
    assert cache.entries == [(2, 12)]
    cache.truncate_from_start(5)
    assert cache.entries == [(2, 12)]
    assert LeaderEpochCache(path).entries == [(2, 12)]
    cache.clear()
    assert path.read_text() == "0\n0\n" and cache.entries == []


def test_malformed_file(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text("0\n3\n1 0\n")
    with pytest.raises(KafkaStorageError):
        LeaderEpochCache(path)
    path.write_text("1\n0\n")
    with pytest.raises(KafkaStorageError):
        LeaderEpochCache(path)
