"""Fetch with isolation_level=READ_COMMITTED, decoded the way a client decodes it (kio)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from broker.fetch_session import FetchSessionCache
from broker.handlers.fetch import FetchHandler
from broker.metadata.metadata_cache import BrokerEndpoint, MetadataCache
from broker.network import TransferMetrics
from tests.unit.partitions import sole_leader
from broker.replica_manager import ReplicaManager
from protocol.control_records import build_control_batch
from protocol.record_batch import TRANSACTIONAL_MASK, iter_headers
from broker.metadata.metadata_image import MetadataImage
from storage.producer_state_manager import AppendOrigin
from storage.log_manager import LogManager
from tests.unit.batch_factory import make_batch
from tests.unit.test_fetch_handler import TOPIC, context, decode, open_log, request


def fetch(handler: FetchHandler, isolation: int) -> Any:
    chunks = handler(context(), request(1 << 20)._replace(isolation_level=isolation))
    assert isinstance(chunks, list)
    (topic,) = decode(chunks).responses
    (partition,) = topic.partitions
    return partition


def test_read_committed_stops_at_the_lso_and_lists_aborted_transactions(tmp_path: Path) -> None:
    rm = ReplicaManager(1, cast(LogManager, None), dict)
    partition = sole_leader(TOPIC, 0, open_log(tmp_path / f"{TOPIC}-0"))
    rm.partitions[(TOPIC, 0)] = partition
    metadata = MetadataCache(1, "cluster", BrokerEndpoint(1, "127.0.0.1", 9092), MetadataImage())
    handler = FetchHandler(rm, metadata, FetchSessionCache(10), TransferMetrics(), 50 * 1024 * 1024)

    def txn_batch(pid: int, seq: int) -> None:
        batch = make_batch([b"a", b"b"], producer_id=pid, producer_epoch=0, base_sequence=seq, attributes=TRANSACTIONAL_MASK)
        partition.append_records_to_leader(memoryview(batch))

    def end(pid: int, commit: bool) -> None:
        partition.append_records_to_leader(memoryview(bytearray(build_control_batch(pid, 0, 0, commit, 1_700_000_000_000))), AppendOrigin.COORDINATOR)

    txn_batch(1, 0)  # 0-1, aborted below
    end(1, commit=False)  # 2
    txn_batch(2, 0)  # 3-4, still open
    committed = fetch(handler, 1)
    assert committed.high_watermark == 5 and committed.last_stable_offset == 3
    assert [(a.producer_id, a.first_offset) for a in committed.aborted_transactions] == [(1, 0)]
    assert [h.last_offset for h in iter_headers(bytes(committed.records))] == [1, 2]
    uncommitted = fetch(handler, 0)
    assert uncommitted.aborted_transactions is None
    assert [h.last_offset for h in iter_headers(bytes(uncommitted.records))] == [1, 2, 4]
    end(2, commit=True)  # 5
    committed = fetch(handler, 1)
    assert committed.last_stable_offset == 6
    assert [h.last_offset for h in iter_headers(bytes(committed.records))] == [1, 2, 4, 5]
