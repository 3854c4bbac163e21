"""TransactionIndex: Kafka's 34-byte entries, lazy file, search, truncation, recovery of a torn tail."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from storage.transaction_index import ENTRY_SIZE, AbortedTxn, TransactionIndex


def test_file_is_created_by_the_first_entry_in_kafkas_layout(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    index = TransactionIndex(path, 0)
    assert index.entries == [] and not path.exists()
    index.append(AbortedTxn(7, 10, 20, 21))
    data = path.read_bytes()
    assert len(data) == ENTRY_SIZE == 34
    assert struct.unpack(">hqqqq", data) == (0, 7, 10, 20, 21)
    assert TransactionIndex(path, 0).entries == [AbortedTxn(7, 10, 20, 21)]


def test_entries_must_follow_each_other(tmp_path: Path) -> None:
    index = TransactionIndex(tmp_path / "x.txnindex", 0)
    index.append(AbortedTxn(1, 0, 5, 6))
    with pytest.raises(ValueError):
        index.append(AbortedTxn(2, 1, 5, 6))


def test_collect_aborted_overlapping_the_range_and_completeness(tmp_path: Path) -> None:
    index = TransactionIndex(tmp_path / "x.txnindex", 0)
    index.append(AbortedTxn(1, 0, 5, 6))
    index.append(AbortedTxn(2, 8, 12, 13))
    index.append(AbortedTxn(3, 20, 30, 31))
    result = index.collect_aborted(6, 15)
    assert [t.producer_id for t in result.aborted] == [2] and result.complete
    result = index.collect_aborted(0, 100)
    assert [t.producer_id for t in result.aborted] == [1, 2, 3] and not result.complete


def test_truncate_to_drops_entries_whose_marker_is_cut(tmp_path: Path) -> None:
    path = tmp_path / "x.txnindex"
    index = TransactionIndex(path, 0)
    index.append(AbortedTxn(1, 0, 5, 6))
    index.append(AbortedTxn(2, 8, 12, 13))
    index.truncate_to(12)
    assert index.entries == [AbortedTxn(1, 0, 5, 6)] and path.stat().st_size == ENTRY_SIZE
    index.truncate_to(3)
    assert index.entries == [] and not path.exists()


def test_torn_last_entry_is_dropped_on_load(tmp_path: Path) -> None:
    path = tmp_path / "x.txnindex"
    index = TransactionIndex(path, 0)
    index.append(AbortedTxn(1, 0, 5, 6))
    with open(path, "ab") as f:
        f.write(b"\x00" * 10)
    reloaded = TransactionIndex(path, 0)
    assert reloaded.entries == [AbortedTxn(1, 0, 5, 6)] and path.stat().st_size == ENTRY_SIZE


def test_rename(tmp_path: Path) -> None:
    index = TransactionIndex(tmp_path / "a.txnindex", 0)
    index.rename_to(tmp_path / "b.txnindex")  # no file yet: only the name moves
    index.append(AbortedTxn(1, 0, 5, 6))
    index.rename_to(tmp_path / "c.txnindex")
    assert [p.name for p in tmp_path.iterdir()] == ["c.txnindex"]
