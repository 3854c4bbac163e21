"""A failed log dir (Kafka's LogDirFailureChannel): an I/O error takes the dir offline once, every
request on its partitions answers KAFKA_STORAGE_ERROR, nothing more is written to it, and the node
halts when it has no live log dir left. ENOSPC is injected in the syscalls the storage uses."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from structlog.testing import capture_logs
from kio.schema.errors import ErrorCode

import raft.file_snapshots
import storage.abstract_index
import storage.checkpoints
import storage.log_segment
from broker.config import BrokerConfig
from broker.handlers.cluster import DescribeLogDirsHandler
from broker.handlers.describe_producers import DescribeProducersHandler
from broker.handlers.list_offsets import ListOffsetsHandler
from broker.handlers.offset_for_leader_epoch import OffsetForLeaderEpochHandler
from broker.kafka_apis import RequestContext
from broker.log_dir_failure_handler import LogDirFailureHandler, decide
from broker.metadata.metadata_cache import BrokerEndpoint, MetadataCache
from broker.metadata.metadata_loader import MetadataLoader
from broker.metadata.metadata_records import MetadataRecord, TopicRecord
from broker.metadata.snapshot_generator import SnapshotGenerator
from broker.network import ClientInfo, CloseConnection
from broker.raft_manager import KafkaRaftManager, MetadataRecordSerde
from protocol.api_keys import ApiKey, request_schema
from protocol.entities import build, nested
from protocol.headers import RequestHeader
from raft.kafka_metadata_log import KafkaMetadataLog, MetadataLogConfig, metadata_log_dir
from raft.file_snapshots import list_snapshot_paths
from raft.kafka_raft_client import SnapshotWriter
from raft.raft_config import RaftConfig
from raft.records import Batch
from raft.replicated_log import OffsetAndEpoch
from storage.errors import KafkaStorageError
from storage.log_config import LogConfig
from storage.log_dir_failure_channel import LogDirFailureChannel, maybe_handle_io_exception
from storage.log_manager import CLEAN_SHUTDOWN_FILE, LogManager
from storage.unified_log import UnifiedLog
from tests.unit.batch_factory import FakeClock, make_batch
from tests.unit.test_log_cleaner import TS as CLEANER_TS
from tests.unit.test_log_cleaner import manager_with as cleaner_manager_with
from tests.unit.test_log_cleaner import produce as cleaner_produce
from tests.unit.test_replica_manager_delta import ME, A, Node, partition


def enospc(*_args: Any, **_kwargs: Any) -> Any:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Call it to make segment, index and checkpoint writes fail with ENOSPC, as on a full filesystem."""

    def fill() -> None:
        monkeypatch.setattr(storage.log_segment.os, "pwrite", enospc)
        monkeypatch.setattr(storage.abstract_index.os, "pwrite", enospc)
        monkeypatch.setattr(storage.checkpoints.os, "fsync", enospc)

    return fill


def batch() -> memoryview:
    return memoryview(bytearray(make_batch([b"v" * 100])))


# -- the channel ------------------------------------------------------------------------------------------


def test_a_dir_goes_offline_once_and_its_listener_hears_it_once(tmp_path: Path) -> None:
    channel = LogDirFailureChannel()
    heard: list[Path] = []
    channel.listener = heard.append
    cause = OSError(errno.ENOSPC, "No space left on device")
    results = []
    threads = [threading.Thread(target=lambda: results.append(channel.maybe_add_offline_log_dir(tmp_path, "full", cause))) for _ in range(8)]
    with capture_logs() as logged:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert sorted(results) == [False] * 7 + [True]
    assert heard == [tmp_path] and channel.offline_log_dirs == [tmp_path]
    assert channel.has_offline_log_dir(tmp_path) and not channel.has_offline_log_dir(tmp_path / "other")
    assert logged == [{"event": "log_dir.offline", "log_level": "error", "dir": str(tmp_path), "error": "full", "cause": "ENOSPC: No space left on device"}]


def test_maybe_handle_io_exception_turns_an_os_error_into_kafka_storage_error(tmp_path: Path) -> None:
    channel = LogDirFailureChannel()
    with maybe_handle_io_exception(channel, tmp_path, "fine"):
        pass
    assert not channel.offline_log_dirs
    with pytest.raises(KafkaStorageError) as failed, maybe_handle_io_exception(channel, tmp_path, "Error while writing x"):
        enospc()
    assert failed.value.error_code == ErrorCode.kafka_storage_error and "ENOSPC" in str(failed.value)
    # Offline now: the body does not even run.
    ran = []
    with pytest.raises(KafkaStorageError, match="already offline"), maybe_handle_io_exception(channel, tmp_path, "again"):
        ran.append(1)
    assert not ran


# -- UnifiedLog --------------------------------------------------------------------------------------------


def test_an_append_that_meets_a_full_disk_takes_the_dir_offline_and_leaves_the_log_as_it_was(tmp_path: Path, full_disk: Callable[[], None]) -> None:
    channel = LogDirFailureChannel()
    plog = UnifiedLog.open(tmp_path / "t-0", LogConfig(), topic_id=None, recovery_point=0, log_start_offset=0, had_clean_shutdown=True, now_ms=FakeClock(), failure_channel=channel)
    plog.append_as_leader(batch(), 0)
    size = plog.active_segment.size
    full_disk()
    with pytest.raises(KafkaStorageError, match="Error while appending records to t-0"):
        plog.append_as_leader(batch(), 0)
    assert channel.offline_log_dirs == [tmp_path]
    assert plog.log_end_offset == 1 and plog.active_segment.size == size == os.path.getsize(plog.active_segment.log_path)
    # Every later operation fails fast, before any I/O: reads, follower appends, flushes, truncation, rolls.
    for operation in (
        lambda: plog.read(0, 1 << 20, None, True),
        lambda: plog.append_as_follower(bytes(make_batch([b"w"], base_offset=1))),
        plog.flush,
        lambda: plog.truncate_to(0),
        plog.roll,
        lambda: plog.fetch_offset_by_timestamp(0),
    ):
        with pytest.raises(KafkaStorageError, match="already offline"):
            operation()
    assert plog.log_end_offset == 1 and os.path.getsize(plog.active_segment.log_path) == size
    plog.close_handlers()


def test_a_roll_that_meets_a_full_disk_takes_the_dir_offline(tmp_path: Path, full_disk: Callable[[], None]) -> None:
    channel = LogDirFailureChannel()
    plog = UnifiedLog.open(tmp_path / "t-0", LogConfig(), topic_id=None, recovery_point=0, log_start_offset=0, had_clean_shutdown=True, now_ms=FakeClock(), failure_channel=channel)
    for _ in range(300):
        plog.append_as_leader(batch(), 0)  # enough for an index entry, which the roll writes out
    full_disk()
    with pytest.raises(KafkaStorageError, match="rolling a segment"):
        plog.roll()
    assert channel.offline_log_dirs == [tmp_path]
    plog.close_handlers()


def test_the_metadata_log_reports_to_the_channel_with_its_dir(tmp_path: Path, full_disk: Callable[[], None]) -> None:
    channel = LogDirFailureChannel()
    metadata_log = KafkaMetadataLog.open(metadata_log_dir(tmp_path), failure_channel=channel)
    full_disk()
    with pytest.raises(KafkaStorageError):
        metadata_log.append_as_leader(bytes(make_batch([b"record"])), 1)
    assert channel.offline_log_dirs == [tmp_path]


def test_a_metadata_snapshot_that_fails_to_write_takes_the_metadata_log_dir_offline_and_halts_the_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data_dir, metadata_dir = tmp_path / "data", tmp_path / "metadata"
    channel = LogDirFailureChannel()
    metadata_log = KafkaMetadataLog.open(metadata_log_dir(metadata_dir), failure_channel=channel)

    class Raft:
        """What KafkaRaftClient.create_snapshot hands the generator, on the real metadata log."""

        def create_snapshot(self, snapshot_id: OffsetAndEpoch, last_contained_log_time_ms: int) -> SnapshotWriter[MetadataRecord] | None:
            raw = metadata_log.create_new_snapshot_unchecked(snapshot_id)
            return None if raw is None else SnapshotWriter(raw, MetadataRecordSerde(), last_contained_log_time_ms, 1 << 20)

    halted: list[str] = []

    async def run() -> None:
        LogDirFailureHandler(channel, asyncio.get_running_loop(), log_dirs=[data_dir], metadata_dir=metadata_dir, on_halt=halted.append).install()
        generator = SnapshotGenerator(Raft(), max_bytes_since_last_snapshot=1, max_time_since_last_snapshot_ms=0, now_ms=lambda: 0)
        loader = MetadataLoader()
        loader.install_publisher(generator)
        monkeypatch.setattr(raft.file_snapshots.os, "fsync", enospc)  # the freeze's fsync
        for offset in (0, 1):
            batch: Batch[MetadataRecord] = Batch(offset, offset, 3, 5000, 100, [TopicRecord(name=f"t{offset}", topic_id=uuid.UUID(int=offset + 1))])
            generator.handle_commit(batch)
            loader.handle_commit(batch)  # the second snapshot fails fast: the dir is offline
        await asyncio.sleep(0)
        assert generator.snapshots_written == 0

    with capture_logs() as logged:
        asyncio.run(run())
    assert channel.offline_log_dirs == [metadata_dir]
    assert halted == [f"Shutdown broker because the metadata log dir {metadata_dir} has failed"]
    errors = [e for e in logged if e["log_level"] == "error"]
    assert [e["event"] for e in errors] == ["log_dir.offline", "metadata.snapshot_failed"] and not [e for e in logged if "exc_info" in e]
    assert errors[0]["error"] == f"Error while freezing snapshot 00000000000000000001-0000000003 of __cluster_metadata-0 in dir {metadata_dir}"
    assert list_snapshot_paths(metadata_log.dir) == []


# -- LogManager and ReplicaManager ---------------------------------------------------------------------------


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = Node(tmp_path)
    n.commit(TopicRecord(name="a", topic_id=A), partition(0, (1, 2)), partition(1, (2, 1)))
    yield n
    n.log_manager.shutdown()


def test_a_full_log_dir_answers_kafka_storage_error_to_produce_fetch_and_list_offsets(node: Node, full_disk: Callable[[], None]) -> None:
    assert node.produce("a", 0) == 0
    full_disk()
    assert node.produce("a", 0) == ErrorCode.kafka_storage_error
    channel = node.log_manager.failure_channel
    assert channel.offline_log_dirs == [node.log_manager.log_dir] and node.log_manager.live_log_dirs == []
    assert node.fetch("a", 0) == ErrorCode.kafka_storage_error
    leader = node.rm.get_partition("a", 0)
    assert leader is not None
    with pytest.raises(KafkaStorageError):
        leader.fetch_offset_for_timestamp(0, 0, -1)
    # A follower's append from its fetcher fails the same way.
    follower = node.rm.get_replica("a", 1)
    assert follower is not None
    with pytest.raises(KafkaStorageError):
        follower.append_records_as_follower(memoryview(make_batch([b"w"])), 1, 0)


def entity(api_key: ApiKey, version: int, nested_name: str | None = None, /, **fields: Any) -> Any:
    """A request (``nested_name`` None) or one of its nested entities, as kio reads it off the wire."""
    schema = request_schema(api_key, version)
    return build(schema if nested_name is None else nested(schema, nested_name), **fields)


def context(api_key: ApiKey, version: int) -> RequestContext:
    return RequestContext(RequestHeader(api_key, version, 7, "test", 0), ClientInfo("c", "test", "127.0.0.1"))


def test_a_partition_of_an_offline_dir_answers_kafka_storage_error_to_what_its_leader_answers_from_memory(node: Node) -> None:
    """Kafka's getPartitionOrException (HostedPartition.Offline) and describeLogDirs: between the
    failure and the halt, the leader epochs, producers, high watermark and sizes in memory are no
    longer backed by the log."""
    rm, image = node.rm, node.loader.image
    idempotent = memoryview(bytearray(make_batch([b"v"], producer_id=7, producer_epoch=0, base_sequence=0)))
    assert rm.append_records([("a", 0, idempotent)], image)[("a", 0)].error_code == 0
    metadata = MetadataCache(ME, "cluster", BrokerEndpoint(ME, "127.0.0.1", 9092), image=image)
    epoch, producers, latest = ApiKey.OFFSET_FOR_LEADER_EPOCH, ApiKey.DESCRIBE_PRODUCERS, ApiKey.LIST_OFFSETS
    requests = [
        (
            OffsetForLeaderEpochHandler(rm, metadata),
            epoch,
            4,
            entity(epoch, 4, replica_id=-1, topics=(entity(epoch, 4, "OffsetForLeaderTopic", topic="a", partitions=(entity(epoch, 4, "OffsetForLeaderPartition", partition=0, current_leader_epoch=0, leader_epoch=0),)),)),
        ),
        (DescribeProducersHandler(rm, metadata), producers, 0, entity(producers, 0, topics=(entity(producers, 0, "TopicRequest", name="a", partition_indexes=(0,)),))),
        (
            ListOffsetsHandler(rm, metadata),
            latest,
            7,
            entity(latest, 7, replica_id=-1, isolation_level=0, topics=(entity(latest, 7, "ListOffsetsTopic", name="a", partitions=(entity(latest, 7, "ListOffsetsPartition", partition_index=0, current_leader_epoch=0, timestamp=-1),)),)),
        ),
    ]
    log_dirs = DescribeLogDirsHandler(rm, BrokerConfig(log_dirs=str(node.log_manager.log_dir)))

    def answers() -> list[int]:
        codes = [handler(context(key, version), request).topics[0].partitions[0].error_code for handler, key, version, request in requests]
        # DescribeLogDirs answers per dir, as Kafka's.
        (described,) = log_dirs(context(ApiKey.DESCRIBE_LOG_DIRS, 4), entity(ApiKey.DESCRIBE_LOG_DIRS, 4, topics=None)).results
        return [*codes, described.error_code]

    assert answers() == [0, 0, 0, 0]
    node.log_manager.failure_channel.maybe_add_offline_log_dir(node.log_manager.log_dir, "failed", OSError(errno.EIO, os.strerror(errno.EIO)))
    assert answers() == [ErrorCode.kafka_storage_error] * 4


def test_a_checkpoint_that_meets_a_full_disk_takes_the_dir_offline_and_no_clean_shutdown_is_recorded(tmp_path: Path, full_disk: Callable[[], None]) -> None:
    manager = LogManager(tmp_path, LogConfig(), FakeClock())
    manager.startup()
    plog = manager.get_or_create_log("t", 0, manager.default_config, None)
    plog.append_as_leader(batch(), 0)
    plog.update_high_watermark(1)
    full_disk()
    with pytest.raises(KafkaStorageError, match="high watermarks checkpoint"):
        manager.checkpoint_high_watermarks()
    assert manager.live_log_dirs == []
    with pytest.raises(KafkaStorageError, match="already offline"):
        manager.get_or_create_log("t", 1, manager.default_config, None)
    manager.shutdown()
    # A torn write may be anywhere in it: the next start must recover every log.
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()


# -- the handler -------------------------------------------------------------------------------------------------


def test_the_node_halts_when_no_log_dir_is_left_or_the_metadata_log_dir_fails(tmp_path: Path) -> None:
    data, meta, other = tmp_path / "data", tmp_path / "meta", tmp_path / "other"
    assert "all log dirs in" in str(decide(data, [data], [data], data))
    assert "all log dirs in" in str(decide(data, [data], [data], meta))
    assert "the metadata log dir" in str(decide(meta, [data], [meta], meta))
    assert decide(data, [data, other], [data], meta) is None


def test_the_handler_decides_on_the_loop_whichever_thread_reported(tmp_path: Path) -> None:
    channel = LogDirFailureChannel()
    halted: list[tuple[str, threading.Thread]] = []

    async def run() -> None:
        loop = asyncio.get_running_loop()
        LogDirFailureHandler(channel, loop, log_dirs=[tmp_path], metadata_dir=tmp_path, on_halt=lambda r: halted.append((r, threading.current_thread()))).install()
        await asyncio.to_thread(channel.maybe_add_offline_log_dir, tmp_path, "full", OSError(errno.ENOSPC, "No space left on device"))
        for _ in range(10):
            if halted:
                break
            await asyncio.sleep(0)

    asyncio.run(run())
    assert halted == [(f"Shutdown broker because all log dirs in {tmp_path} have failed", threading.main_thread())]


def raft_manager_on(metadata_dir: Path, channel: LogDirFailureChannel) -> KafkaRaftManager:
    """A KafkaRaftManager not started: its client is set by the test."""
    return KafkaRaftManager(
        node_id=1,
        directory_id=uuid.uuid4(),
        cluster_id="c",
        metadata_dir=metadata_dir,
        raft_config=RaftConfig(),
        voters=None,
        bootstrap_servers=[],
        network=None,  # type: ignore[arg-type]
        log_config=MetadataLogConfig(),
        failure_channel=channel,
    )


def test_an_io_error_in_the_raft_poll_takes_the_metadata_log_dir_offline_without_a_traceback(tmp_path: Path) -> None:
    class FullDiskClient:
        def poll(self, now_ms: int) -> list[object]:
            raise OSError(errno.ENOSPC, "No space left on device")  # the quorum-state file, the log

    channel = LogDirFailureChannel()
    manager = raft_manager_on(tmp_path, channel)
    manager.client = FullDiskClient()  # type: ignore[assignment]
    with capture_logs() as logged:
        asyncio.run(asyncio.wait_for(manager._drive(), 5))
    assert channel.offline_log_dirs == [tmp_path]
    assert [e["event"] for e in logged] == ["log_dir.offline"] and "exc_info" not in logged[0]


def test_an_io_error_answering_a_raft_request_closes_that_connection_and_takes_the_metadata_log_dir_offline(tmp_path: Path) -> None:
    """A Vote or BeginQuorumEpoch writes the quorum-state file: on a full disk that is the metadata
    log dir failing (the node then halts), and the connection is closed with a warning, not a
    handler traceback at error level (seen in the long chaos campaign's disk-full windows)."""

    class FullDiskClient:
        def handle_request(self, handle: int, body: object, now_ms: int, version: int | None) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

    channel = LogDirFailureChannel()
    manager = raft_manager_on(tmp_path, channel)
    manager.client = FullDiskClient()  # type: ignore[assignment]
    with capture_logs() as logged, pytest.raises(CloseConnection, match="metadata log dir is offline"):
        asyncio.run(manager.handle_request(object(), 17))
    assert channel.offline_log_dirs == [tmp_path]
    assert [e["event"] for e in logged] == ["log_dir.offline"] and "exc_info" not in logged[0]
    assert manager._pending == {}


def test_a_cleaning_that_meets_a_full_disk_takes_the_dir_offline_and_leaves_the_segments_alone(tmp_path: Path, full_disk: Callable[[], None]) -> None:
    manager, plog = cleaner_manager_with(tmp_path, FakeClock(CLEANER_TS))
    cleaner_produce(plog, [(b"k%d" % (i % 10), b"v%d" % i) for i in range(300)])
    plog.roll()
    before = {p.name: p.read_bytes() for p in (tmp_path / "t-0").glob("*.log")}
    full_disk()
    assert manager.cleaner is not None
    with capture_logs() as logged:
        assert manager.cleaner.clean_filthiest_log()
    assert manager.failure_channel.offline_log_dirs == [tmp_path]
    assert [e for e in logged if e["log_level"] == "error"] == [
        {"event": "log_dir.offline", "log_level": "error", "dir": str(tmp_path), "error": f"Failed to clean up log for t-0 in dir {tmp_path}", "cause": "ENOSPC: No space left on device"}
    ]
    assert {p.name: p.read_bytes() for p in (tmp_path / "t-0").glob("*.log")} == before
    assert ("t", 0) not in manager.cleaner.checkpoints
