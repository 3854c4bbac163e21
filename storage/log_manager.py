"""LogManager: every partition log of a log dir, its checkpoint files and the clean-shutdown marker."""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import structlog

from storage.checkpoints import CheckpointError, fsync_dir, read_offset_checkpoint, write_offset_checkpoint
from storage.cleaner_checkpoint import CleanerCheckpoint
from storage.local_log import parse_topic_partition
from storage.unified_log import UnifiedLog, wall_clock_ms
from storage.log_cleaner import CleanerConfig, LogCleaner, RunOnOwner, describe_cleaning
from storage.log_config import LONG_MAX, LogConfig
from storage.log_dir_failure_channel import LogDirFailureChannel, maybe_handle_io_exception
from storage.meta_properties import check_startup, directories_of
from storage.partition_metadata import PartitionMetadataFile, flush_partition_metadata

log = structlog.get_logger(__name__)

CLUSTER_METADATA_PARTITION = ("__cluster_metadata", 0)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"
DELETE_DIR_SUFFIX = "-delete"


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
        log_dir: Path,
        default_config: LogConfig,
        now_ms: Callable[[], int] = wall_clock_ms,
        failure_channel: LogDirFailureChannel | None = None,
    ) -> None:
        self.log_dir = log_dir
        self.default_config = default_config
        self.failure_channel = failure_channel if failure_channel is not None else LogDirFailureChannel()
        self._now_ms = now_ms
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
        self._written_recovery_points: dict[tuple[str, int], int] | None = None
        self._written_log_start_offsets: dict[tuple[str, int], int] | None = None
        self._written_high_watermarks: dict[tuple[str, int], int] | None = None
        self.cleaner: LogCleaner | None = None

    @property
    def log_dirs(self) -> list[Path]:
        return [self.log_dir]

    @property
    def live_log_dirs(self) -> list[Path]:
        return [d for d in self.log_dirs if not self.failure_channel.has_offline_log_dir(d)]

    # -- startup ------------------------------------------------------------------------------------------

    def startup(self) -> None:
        # Kafka's loadLogs: an I/O error while loading (a segment, an index, an epoch checkpoint) takes the
        # dir offline, logged once with the dir and the cause, and the node halts with no dir left.
        with maybe_handle_io_exception(self.failure_channel, self.log_dir, f"Error while loading log dir {self.log_dir}"):
            self._load_logs()

    def _load_logs(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        marker = self.log_dir / CLEAN_SHUTDOWN_FILE
        self.had_clean_shutdown = marker.exists()
        self.clean_shutdown_broker_epoch = _marker_broker_epoch(marker) if self.had_clean_shutdown else -1
        if not self.had_clean_shutdown:
            log.info("log_manager.recovering", log_dir=str(self.log_dir), reason="no clean shutdown file")
        started = time.monotonic()
        recovery_points = self._read_checkpoint(RECOVERY_POINT_CHECKPOINT)
        start_offsets = self._read_checkpoint(LOG_START_OFFSET_CHECKPOINT)
        high_watermarks = self._read_checkpoint(HIGH_WATERMARK_CHECKPOINT)
        for directory in sorted(self.log_dir.iterdir()):
            if not directory.is_dir():
                continue
            if directory.name.endswith(DELETE_DIR_SUFFIX):
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
            plog = UnifiedLog.open(
                directory,
                self.default_config,
                topic_id=None,
                recovery_point=recovery_points.get(key, 0),
                log_start_offset=start_offsets.get(key, 0),
                had_clean_shutdown=self.had_clean_shutdown,
                now_ms=self._now_ms,
                listener=self,
                failure_channel=self.failure_channel,
            )
            plog.update_high_watermark(high_watermarks.get(key, 0))
            self.logs[key] = plog
            self.on_config_changed(plog)
        # Removed only once every log is loaded: a crash while loading must recover again.
        marker.unlink(missing_ok=True)
        log.info(
            "log_manager.started",
            logs=len(self.logs),
            clean_shutdown=self.had_clean_shutdown,
            log_dir=str(self.log_dir),
            seconds=round(time.monotonic() - started, 3),
        )

    def _read_checkpoint(self, name: str) -> dict[tuple[str, int], int]:
        try:
            return read_offset_checkpoint(self.log_dir / name)
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
        directories = [self.log_dir] if metadata_log_dir is None else directories_of([self.log_dir], metadata_log_dir)
        return check_startup(directories, node_id, cluster_id, may_format=may_format)

    # -- logs -----------------------------------------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> UnifiedLog | None:
        return self.logs.get((topic, partition))

    def all_logs(self) -> list[UnifiedLog]:
        return list(self.logs.values())

    def all_log_items(self) -> list[tuple[tuple[str, int], UnifiedLog]]:
        return list(self.logs.items())

    def get_or_create_log(self, topic: str, partition: int, config: LogConfig, topic_id: uuid.UUID | None) -> UnifiedLog:
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
        with maybe_handle_io_exception(self.failure_channel, self.log_dir, f"Error while creating log for {topic}-{partition} in dir {self.log_dir}"):
            plog = UnifiedLog.open(
                self.log_dir / f"{topic}-{partition}",
                config,
                topic_id=topic_id,
                recovery_point=0,
                log_start_offset=0,
                had_clean_shutdown=True,
                now_ms=self._now_ms,
                listener=self,
                failure_channel=self.failure_channel,
            )
        self.logs[key] = plog
        self.on_config_changed(plog)
        if plog.partition_metadata_file.dirty:
            self._unflushed_metadata.append(plog.partition_metadata_file)
        return plog

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
        plog = self.logs.pop((topic, partition), None)
        if plog is None:
            return
        # Its folder is gone: nothing left to flush, and close_handlers releases its .deleted segments.
        self._rolled.discard(plog)
        self._with_pending_deletes.discard(plog)
        self._with_flush_ms.discard(plog)
        plog.partition_metadata_file.discard()
        target = plog.dir.with_name(f"{plog.dir.name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")
        with maybe_handle_io_exception(self.failure_channel, self.log_dir, f"Error while deleting log for {topic}-{partition} in dir {self.log_dir}"):
            os.rename(plog.dir, target)
        self._dirs_to_remove.append(target)
        self._logs_to_close.append((self._now_ms() + plog.config.file_delete_delay_ms, plog))
        if self.cleaner is not None:
            self.cleaner.forget((topic, partition))
        log.debug("log_manager.log_deleted", topic=topic, partition=partition)

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
            log.info("log_manager.deleted_logs_removed", logs=len(deleted.dirs), log_dir=str(self.log_dir))

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
            self.cleaner = LogCleaner(self, config, run_on_owner, self._now_ms)
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
                checkpoint = CleanerCheckpoint(self.log_dir).read().get((name, partition))
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
        """fsync them (safe from any thread); a failed write takes the dir offline, as Kafka's PartitionMetadataFile.maybeFlush."""
        with maybe_handle_io_exception(self.failure_channel, self.log_dir, f"Error while writing partition metadata in dir {self.log_dir}"):
            flush_partition_metadata(files)

    def _flush_rolled_segments(self) -> None:
        for plog in list(self._rolled):
            plog.flush_rolled_segments()
            # Forgotten only once flushed: a failed fsync is tried again at the next run.
            self._rolled.discard(plog)

    def checkpoint_recovery_points(self) -> None:
        self._flush_rolled_segments()
        offsets = {k: v.recovery_point for k, v in self.logs.items()}
        # The last write was fsynced: writing the same content again would add nothing.
        if offsets != self._written_recovery_points:
            self._write_checkpoint(RECOVERY_POINT_CHECKPOINT, offsets, "recovery offsets")
            self._written_recovery_points = offsets

    def checkpoint_log_start_offsets(self) -> None:
        offsets = {k: v.log_start_offset for k, v in self.logs.items()}
        if offsets != self._written_log_start_offsets:
            self._write_checkpoint(LOG_START_OFFSET_CHECKPOINT, offsets, "log start offsets")
            self._written_log_start_offsets = offsets

    def checkpoint_high_watermarks(self) -> None:
        """Kafka's replication-offset-checkpoint: a restarted replica starts from the high
        watermark it last knew, never from its log end (records past it may not be committed)."""
        offsets = {k: v.high_watermark for k, v in self.logs.items()}
        if offsets != self._written_high_watermarks:
            self._write_checkpoint(HIGH_WATERMARK_CHECKPOINT, offsets, "high watermarks")
            self._written_high_watermarks = offsets

    def _write_checkpoint(self, name: str, offsets: dict[tuple[str, int], int], what: str) -> None:
        # Kafka's OffsetCheckpointFile.write: a failed write takes the dir offline.
        with maybe_handle_io_exception(self.failure_channel, self.log_dir, f"Error while writing {what} checkpoint in dir {self.log_dir}"):
            write_offset_checkpoint(self.log_dir / name, offsets)

    # -- shutdown -----------------------------------------------------------------------------------------

    def shutdown(self, broker_epoch: int = -1) -> None:
        """Flush and close every log, write both checkpoints, then the clean-shutdown marker."""
        self.stop_cleaner()
        if not self.live_log_dirs:
            # Kafka shuts down only the live dirs: an offline one may end in a torn write, and
            # its next start must recover it, so it gets no checkpoint and no clean-shutdown marker.
            for plog in self.logs.values():
                plog.close_handlers()
            log.warning("log_manager.stopped_offline", log_dir=str(self.log_dir), logs=len(self.logs))
            return
        for plog in self.logs.values():
            plog.flush()
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        self.checkpoint_high_watermarks()
        for plog in self.logs.values():
            plog.close()
        for _, plog in self._logs_to_close:
            plog.close_handlers()
        self._logs_to_close = []
        marker = self.log_dir / CLEAN_SHUTDOWN_FILE
        with open(marker, "w") as f:
            f.write(json.dumps({"version": 0, "brokerEpoch": broker_epoch}))
            f.flush()
            os.fsync(f.fileno())
        fsync_dir(self.log_dir)
        log.info("log_manager.stopped", logs=len(self.logs))


def _marker_broker_epoch(marker: Path) -> int:
    """Kafka's CleanShutdownFileHandler.read: the marker's brokerEpoch, -1 when it has none or cannot be read."""
    try:
        epoch = json.loads(marker.read_text()).get("brokerEpoch")
    except (OSError, ValueError, AttributeError):
        return -1
    return epoch if isinstance(epoch, int) else -1
