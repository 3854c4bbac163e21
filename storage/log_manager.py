"""LogManager: every partition log of every log dir, each dir's checkpoint files and clean-shutdown marker.

Every entry of ``log.dirs`` is a log dir (Kafka's JBOD): logs are found in any of them at start-up,
a new log goes to the live, uncordoned dir holding the fewest (Kafka's nextLogDirs), and each dir
keeps its own recovery-point, log-start-offset and high-watermark checkpoints and its own
clean-shutdown marker, covering the logs it holds. A dir whose meta.properties cannot be read, or
whose I/O fails, goes offline on its own (the LogDirFailureChannel): the others keep serving.

A replica moving to another dir of the node (AlterReplicaLogDirs) has a future log there,
``<topic>-<partition>.<unique id>-future``, which the ReplicaAlterLogDirsManager fills and then swaps
in for the current log (``replace_current_with_future``); the cleaner leaves the partition alone meanwhile.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

import structlog

from storage.checkpoints import CheckpointError, fsync_dir, read_offset_checkpoint, write_offset_checkpoint
from storage.cleaner_checkpoint import CleanerCheckpoint
from storage.errors import KafkaStorageError
from storage.local_log import FUTURE_DIR_SUFFIX, parse_topic_partition
from storage.unified_log import UnifiedLog, wall_clock_ms
from storage.log_cleaner import CleanerConfig, LogCleaner, RunOnOwner, describe_cleaning
from storage.log_config import LONG_MAX, LogConfig
from storage.log_dir_failure_channel import LogDirFailureChannel, maybe_handle_io_exception
from storage.meta_properties import MetaPropertiesError, check_startup, directories_of, parse_kafka_uuid, read_meta_properties
from storage.partition_metadata import PartitionMetadataFile, flush_partition_metadata
from storage.producer_state_manager import DEFAULT_PRODUCER_ID_EXPIRATION_MS

log = structlog.get_logger(__name__)

CLUSTER_METADATA_PARTITION = ("__cluster_metadata", 0)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"
DELETE_DIR_SUFFIX = "-delete"
RESERVED_DIRECTORY_IDS = 100  # Kafka's DirectoryId: UNASSIGNED, LOST, MIGRATING and the rest of the first 100
CHECKPOINT_FILES = (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, HIGH_WATERMARK_CHECKPOINT)


@dataclass(frozen=True, slots=True)
class DeletedLogs:
    """Deleted logs' work for a background thread: folders to remove, logs to close."""

    dirs: tuple[Path, ...] = ()
    logs: tuple[UnifiedLog, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.dirs or self.logs)


class LogManager:
    def __init__(
        self,
        log_dirs: Path | Sequence[Path],
        default_config: LogConfig,
        now_ms: Callable[[], int] = wall_clock_ms,
        failure_channel: LogDirFailureChannel | None = None,
    ) -> None:
        self.log_dirs: list[Path] = [log_dirs] if isinstance(log_dirs, Path) else list(log_dirs)
        # meta.properties' directory.id of each dir that had one readable at start-up.
        self.directory_ids: dict[Path, uuid.UUID] = {}
        # cordoned.log.dirs as they are now (KIP-1066): new logs go elsewhere while another dir is live.
        self.cordoned_log_dirs: Callable[[], Iterable[Path]] = tuple
        self.default_config = default_config
        self.failure_channel = failure_channel if failure_channel is not None else LogDirFailureChannel()
        self._now_ms = now_ms
        # producer.id.expiration.ms for the logs it opens (their snapshots' idle producers are not loaded).
        self.producer_id_expiration_ms = DEFAULT_PRODUCER_ID_EXPIRATION_MS
        self.logs: dict[tuple[str, int], UnifiedLog] = {}
        self.had_clean_shutdown = False
        # The broker epoch the clean-shutdown marker holds (-1: none): BrokerRegistration's PreviousBrokerEpoch (KIP-966).
        self.clean_shutdown_broker_epoch = -1
        # Deleted logs whose fds stay open for file.delete.delay.ms: a sendfile may still use them.
        self._logs_to_close: list[tuple[int, UnifiedLog]] = []
        # The renamed folders of deleted logs, not removed yet (see take_deleted_logs).
        self._dirs_to_remove: list[Path] = []
        # What the periodic jobs have to visit, kept up to date by the logs (LogListener), so
        # that an idle node with 10,000 partitions does no work per partition every second.
        self._rolled: set[UnifiedLog] = set()  # rolled segments not fsynced yet
        self._with_pending_deletes: set[UnifiedLog] = set()  # .deleted segments waiting for file.delete.delay.ms
        self._with_flush_ms: set[UnifiedLog] = set()  # a finite flush.ms (Kafka's default is never)
        self._unflushed_metadata: list[PartitionMetadataFile] = []  # partition.metadata of new logs
        # The content of the checkpoint files as last written: an unchanged one is not rewritten.
        self._written: dict[tuple[str, Path], dict[tuple[str, int], int]] = {}
        self._clean_shutdown_epochs: dict[Path, int] = {}
        # Logs loaded or created since take_new_logs, on a node of several dirs: the controller is to
        # hear which dir holds each (AssignmentsManager).
        self._new_logs: set[tuple[str, int]] = set()
        # Replicas moving to another dir: the log being filled there (Kafka's futureLogs).
        self.future_logs: dict[tuple[str, int], UnifiedLog] = {}
        # AlterReplicaLogDirs' destination for a replica not created here yet (Kafka's preferredLogDirs).
        self.preferred_log_dirs: dict[tuple[str, int], Path] = {}
        self.cleaner: LogCleaner | None = None

    @property
    def log_dir(self) -> Path:
        """The first of log.dirs (BrokerConfig.data_dir)."""
        return self.log_dirs[0]

    @property
    def live_log_dirs(self) -> list[Path]:
        return [d for d in self.log_dirs if not self.failure_channel.has_offline_log_dir(d)]

    def directory_id(self, log_dir: Path) -> uuid.UUID | None:
        return self.directory_ids.get(log_dir)

    def dir_of_directory_id(self, directory_id: uuid.UUID) -> Path | None:
        return next((d for d, i in self.directory_ids.items() if i == directory_id), None)

    # -- startup ------------------------------------------------------------------------------------------

    def startup(self) -> None:
        """Kafka's loadLogs, dir by dir: an I/O error while loading one (a segment, an index, an epoch
        checkpoint) takes that dir offline, logged once with the dir and the cause; the others load.
        With several dirs, a dir whose meta.properties cannot be read is offline from the start (the
        start-up check let it through: Kafka's errorLogDirs). The node halts with no dir left."""
        self.had_clean_shutdown = True
        self._clean_shutdown_epochs = {}
        self._deleted_at_startup: set[tuple[str, int]] = set()
        for log_dir in self.log_dirs:
            if not self._load_directory_id(log_dir) and len(self.log_dirs) > 1:
                continue
            message = f"Error while loading log dir {log_dir}"
            try:
                with maybe_handle_io_exception(self.failure_channel, log_dir, message):
                    self._load_logs(log_dir)
            except KafkaStorageError as e:
                # A malformed leader-epoch-checkpoint or partition.metadata is an IOException in
                # Kafka's readers, which takes the dir offline: its logs must not go unserved in a
                # dir that still counts as live (new empty logs would be created beside them).
                self.failure_channel.maybe_add_offline_log_dir(log_dir, message, OSError(str(e)))
                self._forget_logs_in(log_dir)
                if not self.live_log_dirs:
                    raise
        # With a dir offline, a missing current log may be in it: the future log stays a future one.
        if len(self.live_log_dirs) == len(self.log_dirs):
            for key in [key for key in self.future_logs if key not in self.logs and key in self._deleted_at_startup]:
                self._promote_lone_future(key)
        self.clean_shutdown_broker_epoch = self._broker_epoch_for_clean_shutdown()

    def _load_directory_id(self, log_dir: Path) -> bool:
        """Whether the dir's meta.properties could be read; one that cannot takes the dir offline, on a
        node of several dirs (a node's only dir was checked before, and a test's may have none)."""
        try:
            meta = read_meta_properties(log_dir)
            if meta is None:
                raise MetaPropertiesError(f"no meta.properties in {log_dir}")
        except MetaPropertiesError as e:
            if len(self.log_dirs) > 1:
                self.failure_channel.maybe_add_offline_log_dir(log_dir, f"Error while reading meta.properties in dir {log_dir}", OSError(errno.EIO, str(e)))
            return False
        if meta.directory_id:
            self.directory_ids[log_dir] = parse_kafka_uuid(meta.directory_id)
        return True

    def _broker_epoch_for_clean_shutdown(self) -> int:
        """Kafka's readBrokerEpochFromCleanShutdownFiles: the epoch every dir's marker holds, -1 when a
        dir is offline, has no marker, or the markers disagree."""
        epochs = {self._clean_shutdown_epochs.get(d, -1) for d in self.log_dirs}
        if len(epochs) != 1 or len(self.live_log_dirs) < len(self.log_dirs):
            return -1
        return epochs.pop()

    def _load_logs(self, log_dir: Path) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        marker = log_dir / CLEAN_SHUTDOWN_FILE
        had_clean_shutdown = marker.exists()
        self.had_clean_shutdown = self.had_clean_shutdown and had_clean_shutdown
        if had_clean_shutdown:
            self._clean_shutdown_epochs[log_dir] = _marker_broker_epoch(marker)
        else:
            log.info("log_manager.recovering", log_dir=str(log_dir), reason="no clean shutdown file")
        started = time.monotonic()
        recovery_points = self._read_checkpoint(log_dir, RECOVERY_POINT_CHECKPOINT)
        start_offsets = self._read_checkpoint(log_dir, LOG_START_OFFSET_CHECKPOINT)
        high_watermarks = self._read_checkpoint(log_dir, HIGH_WATERMARK_CHECKPOINT)
        loaded = 0
        for directory in sorted(log_dir.iterdir()):
            if not directory.is_dir():
                continue
            if directory.name.endswith(DELETE_DIR_SUFFIX):
                deleted = _deleted_topic_partition(directory.name)
                if deleted is not None:
                    self._deleted_at_startup.add(deleted)
                log.info("log_manager.deleted_log_removed", dir=directory.name)
                shutil.rmtree(directory, ignore_errors=True)
                continue
            try:
                key = parse_topic_partition(directory)
            except ValueError:
                continue
            if key == CLUSTER_METADATA_PARTITION:
                # The Raft log: opened by the metadata quorum, outside retention and the cleaner.
                continue
            is_future = directory.name.endswith(FUTURE_DIR_SUFFIX)
            logs = self.future_logs if is_future else self.logs
            other = logs.get(key)
            if other is not None:
                # Kafka's loadLog: the same partition in two dirs is a corrupted JBOD, not a choice to make.
                raise RuntimeError(f"Duplicate log directories for {key[0]}-{key[1]} are found in both {other.dir} and {directory}.")
            plog = UnifiedLog.open(
                directory,
                self.default_config,
                topic_id=None,
                recovery_point=recovery_points.get(key, 0),
                log_start_offset=start_offsets.get(key, 0),
                had_clean_shutdown=had_clean_shutdown,
                now_ms=self._now_ms,
                listener=self,
                failure_channel=self.failure_channel,
                producer_id_expiration_ms=self.producer_id_expiration_ms,
            )
            plog.update_high_watermark(high_watermarks.get(key, 0))
            logs[key] = plog
            loaded += 1
            if is_future:
                log.info("log_manager.future_log_loaded", topic=key[0], partition=key[1], log_dir=str(log_dir), log_end_offset=plog.log_end_offset)
                continue
            self.on_config_changed(plog)
            if len(self.log_dirs) > 1:
                self._new_logs.add(key)
        # Removed only once every log is loaded: a crash while loading must recover again.
        marker.unlink(missing_ok=True)
        log.info(
            "log_manager.started",
            logs=loaded,
            clean_shutdown=had_clean_shutdown,
            log_dir=str(log_dir),
            seconds=round(time.monotonic() - started, 3),
        )

    def _forget_logs_in(self, log_dir: Path) -> list[UnifiedLog]:
        """Kafka's LogManager.handleLogDirFailure: the logs of an offline dir are no longer the node's
        (their fds closed); the replicas keep theirs, which fail with KAFKA_STORAGE_ERROR."""
        for key, future in [(key, f) for key, f in self.future_logs.items() if f.parent_dir == log_dir]:
            # Kafka drops the move with the dir: the replica stays where it is.
            del self.future_logs[key]
            future.close_handlers()
        lost = [(key, plog) for key, plog in self.logs.items() if plog.parent_dir == log_dir]
        for key, plog in lost:
            del self.logs[key]
            self._rolled.discard(plog)
            self._with_pending_deletes.discard(plog)
            self._with_flush_ms.discard(plog)
            plog.close_handlers()
        return [plog for _, plog in lost]

    def handle_log_dir_failure(self, log_dir: Path) -> list[tuple[str, int]]:
        """The dir went offline at run time: forget its logs; the partitions they held."""
        keys = [key for key, plog in self.logs.items() if plog.parent_dir == log_dir]
        self._forget_logs_in(log_dir)
        for name in CHECKPOINT_FILES:
            self._written.pop((name, log_dir), None)
        log.warning("log_manager.log_dir_offline", log_dir=str(log_dir), logs=len(keys), live_log_dirs=[str(d) for d in self.live_log_dirs])
        return keys

    def _read_checkpoint(self, log_dir: Path, name: str) -> dict[tuple[str, int], int]:
        try:
            return read_offset_checkpoint(log_dir / name)
        except (CheckpointError, OSError) as e:
            # Kafka resets to 0 here: every log is then recovered (or starts) from its first segment.
            log.warning("log_manager.checkpoint_unreadable", file=name, error=str(e))
            return {}

    def ensure_meta_properties(
        self, node_id: int, cluster_id: str | None = None, *, may_format: bool = True, metadata_log_dir: Path | None = None
    ) -> str:
        """Kafka's start-up check of `meta.properties` in this log dir (and the metadata log dir): formatted
        for this node and, when ``cluster_id`` is given, that cluster. Returns the cluster id.

        ``may_format`` is for the zero-config node only: it formats what is not formatted yet. Raises
        MetaPropertiesError, whose one line says which file disagrees and how.
        """
        directories = self.log_dirs if metadata_log_dir is None else directories_of(self.log_dirs, metadata_log_dir)
        return check_startup(directories, node_id, cluster_id, may_format=may_format)

    # -- logs -----------------------------------------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> UnifiedLog | None:
        return self.logs.get((topic, partition))

    def all_logs(self) -> list[UnifiedLog]:
        return list(self.logs.values())

    def all_log_items(self) -> list[tuple[tuple[str, int], UnifiedLog]]:
        return list(self.logs.items())

    def get_or_create_log(
        self, topic: str, partition: int, config: LogConfig, topic_id: uuid.UUID | None, target_dir: uuid.UUID | None = None
    ) -> UnifiedLog:
        """The partition's log, created when it has none: in ``target_dir`` (the directory id the
        metadata assigns this replica) when that dir is live here, else in ``next_log_dirs``' first
        dir that takes it."""
        key = (topic, partition)
        existing = self.logs.get(key)
        if existing is not None:
            if existing.topic_id is None and topic_id is not None:
                # Its partition.metadata was never written (a crash right after creation).
                existing.assign_topic_id(topic_id)
                self._unflushed_metadata.append(existing.partition_metadata_file)
            if topic_id is None or existing.topic_id == topic_id:
                existing.update_config(config)
                return existing
            # Left over from an earlier topic of the same name, deleted while we were away.
            log.warning("log_manager.stale_log_replaced", topic=topic, partition=partition, old_topic_id=str(existing.topic_id), topic_id=str(topic_id))
            self.delete_log(topic, partition)
        plog = self._create_log(topic, partition, config, topic_id, target_dir, self.preferred_log_dirs.pop(key, None))
        self._install(key, plog)
        if plog.partition_metadata_file.dirty:
            self._unflushed_metadata.append(plog.partition_metadata_file)
        return plog

    def is_offline_directory(self, directory_id: uuid.UUID | None) -> bool:
        """Whether the metadata puts a replica in a dir of this node that is not online (one that went
        offline, or whose meta.properties could not be read): its data is there, and a new empty log
        elsewhere would hide it, and clash with it once the dir is back. A node of one dir has no elsewhere."""
        if directory_id is None or directory_id.int < RESERVED_DIRECTORY_IDS or len(self.log_dirs) == 1:
            return False
        return self.dir_of_directory_id(directory_id) not in self.live_log_dirs

    def next_log_dirs(self) -> list[Path]:
        """Kafka's nextLogDirs: the live dirs by how many logs they hold, fewest first (ties in
        log.dirs order), cordoned ones left out; the first live dir when all are cordoned."""
        live = self.live_log_dirs
        if len(live) <= 1:
            return live
        counts = dict.fromkeys(live, 0)
        for plog in self.logs.values():
            if plog.parent_dir in counts:
                counts[plog.parent_dir] += 1
        cordoned = {d.resolve() for d in self.cordoned_log_dirs()}
        candidates = [d for d in live if d.resolve() not in cordoned]
        if not candidates:
            return live[:1]
        return sorted(candidates, key=counts.__getitem__)

    def _create_log(
        self, topic: str, partition: int, config: LogConfig, topic_id: uuid.UUID | None, target_dir: uuid.UUID | None, preferred: Path | None = None
    ) -> UnifiedLog:
        """Kafka's getOrCreateLog: in the dir an AlterReplicaLogDirs named before the replica came
        here, else the one the metadata assigns, else the first of ``next_log_dirs`` that takes it."""
        if preferred is None and self.is_offline_directory(target_dir):
            raise KafkaStorageError(f"Can not create log for {topic}-{partition} because its log directory {target_dir} is offline")
        target = preferred if preferred is not None else self.dir_of_directory_id(target_dir) if target_dir is not None else None
        dirs = [target] if target is not None else self.next_log_dirs()
        if not dirs:
            dirs = self.log_dirs[:1]  # offline: answers that it is, as any other I/O on it
        failed: KafkaStorageError | None = None
        for log_dir in dirs:
            try:
                with maybe_handle_io_exception(self.failure_channel, log_dir, f"Error while creating log for {topic}-{partition} in dir {log_dir}"):
                    return self._open_log(log_dir / f"{topic}-{partition}", config, topic_id, 0, 0)
            except KafkaStorageError as e:
                # Kafka's createLogDirectory: that dir is offline now; the next one may take the log.
                if len(dirs) == 1:
                    raise
                failed = e
        raise KafkaStorageError(f"No log directories available. Tried {', '.join(map(str, dirs))}") from failed

    def _install(self, key: tuple[str, int], plog: UnifiedLog) -> None:
        """``plog`` is the partition's log from now on; the controller is to hear its dir."""
        self.logs[key] = plog
        if len(self.log_dirs) > 1:
            self._new_logs.add(key)
        self.on_config_changed(plog)

    def _open_log(self, directory: Path, config: LogConfig, topic_id: uuid.UUID | None, recovery_point: int, log_start_offset: int) -> UnifiedLog:
        """A log created here, or one closed cleanly just now (a future log renamed)."""
        return UnifiedLog.open(
            directory,
            config,
            topic_id=topic_id,
            recovery_point=recovery_point,
            log_start_offset=log_start_offset,
            had_clean_shutdown=True,
            now_ms=self._now_ms,
            listener=self,
            failure_channel=self.failure_channel,
            producer_id_expiration_ms=self.producer_id_expiration_ms,
        )

    def take_new_logs(self) -> set[tuple[str, int]]:
        """The logs loaded or created since the last call (only on a node of several dirs)."""
        keys, self._new_logs = self._new_logs, set()
        return keys

    def update_config(self, topic: str, partition: int, config: LogConfig) -> None:
        plog = self.logs.get((topic, partition))
        if plog is not None:
            plog.update_config(config)

    def delete_log(self, topic: str, partition: int) -> None:
        """Kafka's asyncDelete: rename the folder to `<topic>-<partition>.<uuid>-delete` now, so
        that a partition of the same name created next starts in a fresh one, and leave the rest
        to ``take_deleted_logs``: removing the files of a topic of thousands of partitions takes
        seconds of syscalls, too long for the caller's thread (the event loop).
        """
        self.preferred_log_dirs.pop((topic, partition), None)
        self.remove_future_log(topic, partition)
        plog = self.logs.pop((topic, partition), None)
        if plog is None:
            return
        self._rename_for_deletion(plog)
        if self.cleaner is not None:
            self.cleaner.forget((topic, partition))
        log.debug("log_manager.log_deleted", topic=topic, partition=partition)

    def _rename_for_deletion(self, plog: UnifiedLog) -> None:
        """Kafka's renameDir to ``<name>.<uuid>-delete``: removed by ``take_deleted_logs``' caller, its
        fds closed after file.delete.delay.ms."""
        # Its folder is gone: nothing left to flush, and close_handlers releases its .deleted segments.
        self._rolled.discard(plog)
        self._with_pending_deletes.discard(plog)
        self._with_flush_ms.discard(plog)
        plog.partition_metadata_file.discard()
        name = parse_topic_partition(plog.dir)
        target = plog.dir.with_name(f"{name[0]}-{name[1]}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")
        with maybe_handle_io_exception(self.failure_channel, plog.parent_dir, f"Error while deleting log for {name[0]}-{name[1]} in dir {plog.parent_dir}"):
            os.rename(plog.dir, target)
        self._dirs_to_remove.append(target)
        self._logs_to_close.append((self._now_ms() + plog.config.file_delete_delay_ms, plog))

    # -- moving a replica between log dirs ----------------------------------------------------------------

    def maybe_update_preferred_log_dir(self, topic: str, partition: int, log_dir: Path) -> None:
        """Kafka's maybeUpdatePreferredLogDir: where the replica's log is to be created (or moved)."""
        self.preferred_log_dirs[(topic, partition)] = log_dir

    def get_or_create_future_log(self, topic: str, partition: int, log_dir: Path) -> UnifiedLog | None:
        """Kafka's maybeCreateFutureReplica: the future log of the replica in ``log_dir``, created empty
        at the current log's start when there is none there. A future log in another dir is removed
        first (the move goes elsewhere now); a ``log_dir`` holding the current log cancels the move
        (None). The cleaner leaves the partition alone while it has a future log."""
        key = (topic, partition)
        self.preferred_log_dirs.pop(key, None)
        current = self.logs[key]
        future = self.future_logs.get(key)
        if future is not None and future.parent_dir == log_dir:
            return future
        self.remove_future_log(topic, partition)
        if current.parent_dir == log_dir:
            return None
        directory = log_dir / f"{topic}-{partition}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}"
        with maybe_handle_io_exception(self.failure_channel, log_dir, f"Error while creating future log for {topic}-{partition} in dir {log_dir}"):
            future = self._open_log(directory, current.config, current.topic_id, current.log_start_offset, current.log_start_offset)
        self.future_logs[key] = future
        if future.partition_metadata_file.dirty:
            self._unflushed_metadata.append(future.partition_metadata_file)
        log.info("log_manager.future_log_created", topic=topic, partition=partition, log_dir=str(log_dir), from_log_dir=str(current.parent_dir))
        return future

    def remove_future_log(self, topic: str, partition: int) -> None:
        """Kafka's removeFutureLocalReplica: the move is given up, its copy deleted."""
        future = self.future_logs.pop((topic, partition), None)
        if future is not None:
            self._rename_for_deletion(future)
            log.info("log_manager.future_log_removed", topic=topic, partition=partition, log_dir=str(future.parent_dir))

    def replace_current_with_future(self, topic: str, partition: int) -> UnifiedLog:
        """Kafka's replaceCurrentWithFutureLog, once the future log holds all the current one does (the
        caller checks, with no append in between): the current log is renamed ``-delete``, the future
        one takes the partition's name in its dir and is the partition's log from now on, and the
        checkpoints of both dirs say so. A crash between the two renames leaves a lone future log,
        which start-up promotes (``_promote_lone_future``)."""
        key = (topic, partition)
        current, future = self.logs[key], self.future_logs.pop(key)
        for entry in current.leader_epoch_cache.entries:
            # Epochs the current log marked with no record after them (a leadership taken at its end).
            if entry.epoch > future.leader_epoch_cache.latest_epoch:
                future.leader_epoch_cache.assign(entry.epoch, entry.start_offset)
        with maybe_handle_io_exception(self.failure_channel, future.parent_dir, f"Error while closing future log for {topic}-{partition} in dir {future.parent_dir}"):
            future.flush()
            future.close()
        self._rolled.discard(future)
        self._with_pending_deletes.discard(future)
        self._rename_for_deletion(current)
        plog = self._open_renamed_future(key, future)
        plog.update_high_watermark(current.high_watermark)
        self._install(key, plog)
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        self.checkpoint_high_watermarks()
        log.info("log_manager.future_log_swapped_in", topic=topic, partition=partition, log_dir=str(plog.parent_dir), from_log_dir=str(current.parent_dir))
        return plog

    def _open_renamed_future(self, key: tuple[str, int], future: UnifiedLog) -> UnifiedLog:
        """The closed ``future`` log under the partition's name, opened again (its files' paths change)."""
        directory = future.dir
        target = directory.with_name(f"{key[0]}-{key[1]}")
        with maybe_handle_io_exception(self.failure_channel, directory.parent, f"Error while renaming future log for {key[0]}-{key[1]} in dir {directory.parent}"):
            os.rename(directory, target)
            fsync_dir(directory.parent)
            return self._open_log(target, future.config, None, future.recovery_point, future.log_start_offset)

    def _promote_lone_future(self, key: tuple[str, int]) -> None:
        """A future log whose current log is gone: the node died inside ``replace_current_with_future``,
        after the current log was renamed ``-delete`` and had caught up with it. It is the log now."""
        future = self.future_logs.pop(key)
        future.close()
        plog = self._open_renamed_future(key, future)
        plog.update_high_watermark(future.high_watermark)
        self._install(key, plog)
        log.warning("log_manager.future_log_promoted", topic=key[0], partition=key[1], log_dir=str(plog.parent_dir))

    def take_deleted_logs(self) -> DeletedLogs:
        """What ``finish_deleting_logs`` is to do now: every renamed folder (the files go at once),
        and the deleted logs whose file.delete.delay.ms has passed (their fds stay open until then,
        so that an fd number is never reused under an in-flight sendfile)."""
        now = self._now_ms()
        due = tuple(plog for deadline, plog in self._logs_to_close if deadline <= now)
        self._logs_to_close = [(deadline, plog) for deadline, plog in self._logs_to_close if deadline > now]
        dirs, self._dirs_to_remove = tuple(self._dirs_to_remove), []
        return DeletedLogs(dirs, due)

    def finish_deleting_logs(self, deleted: DeletedLogs) -> None:
        """Remove the folders and close the logs ``take_deleted_logs`` gave; safe from any thread
        (nothing else holds them any more). A folder left by a crash is removed at the next startup."""
        for plog in deleted.logs:
            plog.close_handlers()
        for directory in deleted.dirs:
            shutil.rmtree(directory, ignore_errors=True)
        if deleted.dirs:
            log.info("log_manager.deleted_logs_removed", logs=len(deleted.dirs))

    # -- LogListener: what the logs tell the periodic jobs ---------------------------------------------

    def on_roll(self, plog: UnifiedLog) -> None:
        self._rolled.add(plog)

    def on_segments_scheduled_for_deletion(self, plog: UnifiedLog) -> None:
        self._with_pending_deletes.add(plog)

    def on_config_changed(self, plog: UnifiedLog) -> None:
        if plog.config.flush_ms < LONG_MAX:
            self._with_flush_ms.add(plog)
        else:
            self._with_flush_ms.discard(plog)

    # -- background work ----------------------------------------------------------------------------------

    def start_cleaner(self, config: CleanerConfig, run_on_owner: RunOnOwner) -> None:
        """Start the log cleaner threads (log.cleaner.enable); ``run_on_owner`` runs a function where the logs live."""
        if config.enable and self.cleaner is None:
            self.cleaner = LogCleaner(CleanableLogs(self), config, run_on_owner, self._now_ms)
            self.cleaner.startup()

    def describe_cleaning(self, topic: str) -> dict[int, dict[str, object]]:
        """For each compacted partition of ``topic`` here: its dirty ratio and its last cleaning."""
        out: dict[int, dict[str, object]] = {}
        for (name, partition), plog in sorted(self.logs.items()):
            if name != topic or not plog.config.compacts:
                continue
            if self.cleaner is not None:
                out[partition] = self.cleaner.describe((name, partition), plog)
            else:
                checkpoint = CleanerCheckpoint(plog.parent_dir).read().get((name, partition))
                out[partition] = describe_cleaning(plog, checkpoint, None, self._now_ms())
        return out

    def stop_cleaner(self) -> None:
        """Stop the cleaner threads; the owner must keep serving ``run_on_owner`` until this returns."""
        if self.cleaner is not None:
            self.cleaner.shutdown()

    def cleanup_logs(self) -> int:
        """Retention over every log (time and size where cleanup.policy has delete, log start always).

        A log whose only segment is empty has nothing any of them could delete, and is skipped.
        """
        return sum(plog.delete_old_segments() for plog in self.logs.values() if len(plog.segments) > 1 or plog.active_segment.size > 0)

    def delete_pending_segments(self) -> int:
        now = self._now_ms()
        deleted = 0
        for plog in list(self._with_pending_deletes):
            deleted += plog.delete_pending_segments(now)
            if not plog.pending_deletes:
                self._with_pending_deletes.discard(plog)
        return deleted

    def remove_expired_producers(self, expiration_ms: int) -> int:
        """Forget producers idle for producer.id.expiration.ms (Kafka's PeriodicProducerExpirationCheck)."""
        now = self._now_ms()
        return sum(plog.remove_expired_producers(now, expiration_ms) for plog in self.logs.values() if plog.producer_state.producers)

    def flush_dirty_logs(self) -> None:
        """Flush rolled segments, and whole logs whose flush.ms has passed since their last flush."""
        self._flush_rolled_segments()
        now = self._now_ms()
        for plog in self._with_flush_ms:
            if now - plog.last_flush_ms >= plog.config.flush_ms:
                plog.flush()

    def take_unflushed_partition_metadata(self) -> list[PartitionMetadataFile]:
        """The partition.metadata files of logs created since the last call, for
        ``flush_partition_metadata`` off the event loop."""
        files, self._unflushed_metadata = self._unflushed_metadata, []
        return files

    def flush_partition_metadata(self, files: list[PartitionMetadataFile]) -> None:
        """fsync them (safe from any thread); a failed write takes its dir offline, as Kafka's PartitionMetadataFile.maybeFlush."""
        by_dir: dict[Path, list[PartitionMetadataFile]] = {}
        for f in files:
            by_dir.setdefault(f.path.parent.parent, []).append(f)
        for log_dir, in_dir in by_dir.items():
            with maybe_handle_io_exception(self.failure_channel, log_dir, f"Error while writing partition metadata in dir {log_dir}"):
                flush_partition_metadata(in_dir)

    def _flush_rolled_segments(self) -> None:
        for plog in list(self._rolled):
            plog.flush_rolled_segments()
            # Forgotten only once flushed: a failed fsync is tried again at the next run.
            self._rolled.discard(plog)

    def checkpoint_recovery_points(self) -> None:
        self._flush_rolled_segments()
        self._checkpoint(RECOVERY_POINT_CHECKPOINT, lambda plog: plog.recovery_point, "recovery offsets")

    def checkpoint_log_start_offsets(self) -> None:
        self._checkpoint(LOG_START_OFFSET_CHECKPOINT, lambda plog: plog.log_start_offset, "log start offsets")

    def checkpoint_high_watermarks(self) -> None:
        """Kafka's replication-offset-checkpoint: a restarted replica starts from the high
        watermark it last knew, never from its log end (records past it may not be committed)."""
        self._checkpoint(HIGH_WATERMARK_CHECKPOINT, lambda plog: plog.high_watermark, "high watermarks")

    def _checkpoint(self, name: str, offset: Callable[[UnifiedLog], int], what: str) -> None:
        """One file per live dir, of the logs it holds; an unchanged one is not rewritten (the last
        write was fsynced). A failed write takes only that dir offline, as Kafka's OffsetCheckpointFile.write."""
        by_dir: dict[Path, dict[tuple[str, int], int]] = {d: {} for d in self.live_log_dirs}
        # A future log is in another dir than its current one: each dir's file names the partition once.
        for key, plog in [*self.logs.items(), *self.future_logs.items()]:
            offsets = by_dir.get(plog.parent_dir)
            if offsets is not None:
                offsets[key] = offset(plog)
        for log_dir, offsets in by_dir.items():
            if offsets == self._written.get((name, log_dir)):
                continue
            try:
                with maybe_handle_io_exception(self.failure_channel, log_dir, f"Error while writing {what} checkpoint in dir {log_dir}"):
                    write_offset_checkpoint(log_dir / name, offsets)
            except KafkaStorageError:
                if len(by_dir) == 1:
                    raise
                continue
            self._written[(name, log_dir)] = offsets

    # -- shutdown -----------------------------------------------------------------------------------------

    def shutdown(self, broker_epoch: int = -1) -> None:
        """Flush and close every log, write the checkpoints, then each live dir's clean-shutdown marker."""
        self.stop_cleaner()
        live = self.live_log_dirs
        if not live:
            # Kafka shuts down only the live dirs: an offline one may end in a torn write, and
            # its next start must recover it, so it gets no checkpoint and no clean-shutdown marker.
            for plog in [*self.logs.values(), *self.future_logs.values()]:
                plog.close_handlers()
            log.warning("log_manager.stopped_offline", log_dirs=[str(d) for d in self.log_dirs], logs=len(self.logs))
            return
        for plog in [*self.logs.values(), *self.future_logs.values()]:
            plog.flush()
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        self.checkpoint_high_watermarks()
        for plog in [*self.logs.values(), *self.future_logs.values()]:
            plog.close()
        for _, plog in self._logs_to_close:
            plog.close_handlers()
        self._logs_to_close = []
        for log_dir in self.live_log_dirs:
            marker = log_dir / CLEAN_SHUTDOWN_FILE
            with open(marker, "w") as f:
                f.write(json.dumps({"version": 0, "brokerEpoch": broker_epoch}))
                f.flush()
                os.fsync(f.fileno())
            fsync_dir(log_dir)
        log.info("log_manager.stopped", logs=len(self.logs))


class CleanableLogs:
    """The logs as the cleaner sees them: a partition moving to another dir is left out (Kafka's
    abortAndPauseCleaning until the move is done or given up); a cleaning begun before it started
    is dropped at the swap, as the cleaner drops one of a log replaced meanwhile."""

    def __init__(self, log_manager: LogManager) -> None:
        self._log_manager = log_manager
        self.log_dirs = log_manager.log_dirs

    def get_log(self, topic: str, partition: int) -> UnifiedLog | None:
        return self._log_manager.get_log(topic, partition)

    def all_log_items(self) -> list[tuple[tuple[str, int], UnifiedLog]]:
        moving = self._log_manager.future_logs
        return [(key, plog) for key, plog in self._log_manager.logs.items() if key not in moving]


def _deleted_topic_partition(name: str) -> tuple[str, int] | None:
    """The partition of a ``<topic>-<partition>.<uuid>-delete`` folder."""
    try:
        return parse_topic_partition(Path(name[: -len(DELETE_DIR_SUFFIX)].rpartition(".")[0]))
    except ValueError:
        return None


def _marker_broker_epoch(marker: Path) -> int:
    """Kafka's CleanShutdownFileHandler.read: the marker's brokerEpoch, -1 when it has none or cannot be read."""
    try:
        epoch = json.loads(marker.read_text()).get("brokerEpoch")
    except (OSError, ValueError, AttributeError):
        return -1
    return epoch if isinstance(epoch, int) else -1
