"""LogManager: every partition log in a log dir, their checkpoints and the clean-shutdown marker."""

from __future__ import annotations

import base64
import shutil
import uuid
from pathlib import Path
from typing import Callable

import structlog

from storage.checkpoints import read_offset_checkpoint, write_offset_checkpoint
from storage.log import Log, parse_topic_partition, wall_clock_ms
from storage.log_config import LogConfig

log = structlog.get_logger()

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
META_PROPERTIES = "meta.properties"


class LogManager:
    def __init__(self, log_dir: Path, default_config: LogConfig, now_ms: Callable[[], int] = wall_clock_ms) -> None:
        self.log_dir = log_dir
        self.default_config = default_config
        self._now_ms = now_ms
        self.logs: dict[tuple[str, int], Log] = {}
        self.had_clean_shutdown = False

    def startup(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        marker = self.log_dir / CLEAN_SHUTDOWN_FILE
        self.had_clean_shutdown = marker.exists()
        recovery_points = read_offset_checkpoint(self.log_dir / RECOVERY_POINT_CHECKPOINT)
        start_offsets = read_offset_checkpoint(self.log_dir / LOG_START_OFFSET_CHECKPOINT)
        for directory in sorted(self.log_dir.iterdir()):
            if not directory.is_dir():
                continue
            if directory.name.endswith("-delete"):
                shutil.rmtree(directory, ignore_errors=True)
                continue
            try:
                key = parse_topic_partition(directory)
            except ValueError:
                continue
            self.logs[key] = Log.open(
                directory,
                self.default_config,
                topic_id=None,
                recovery_point=recovery_points.get(key, 0),
                log_start_offset=start_offsets.get(key, 0),
                had_clean_shutdown=self.had_clean_shutdown,
                now_ms=self._now_ms,
            )
        # Removed only once every log is loaded: a crash during loading must recover again.
        marker.unlink(missing_ok=True)
        log.info("log_manager.started", logs=len(self.logs), clean_shutdown=self.had_clean_shutdown, log_dir=str(self.log_dir))

    def ensure_meta_properties(self, node_id: int, cluster_id: str | None) -> str:
        """Kafka's `meta.properties`; a fresh dir is formatted with a new (or the given) cluster id."""
        path = self.log_dir / META_PROPERTIES
        if path.exists():
            props = dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line and not line.startswith("#"))
            stored = props.get("cluster.id")
            if stored and cluster_id and stored != cluster_id:
                raise ValueError(f"cluster.id {cluster_id} does not match {stored} in {path}")
            if int(props.get("node.id", node_id)) != node_id:
                raise ValueError(f"node.id {node_id} does not match {props.get('node.id')} in {path}")
            if stored:
                return stored
        cluster_id = cluster_id or base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        directory_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        path.write_text(f"#\nversion=1\ncluster.id={cluster_id}\nnode.id={node_id}\ndirectory.id={directory_id}\n")
        return cluster_id

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self.logs.get((topic, partition))

    def get_or_create_log(self, topic: str, partition: int, config: LogConfig, topic_id: uuid.UUID | None) -> Log:
        existing = self.logs.get((topic, partition))
        if existing is not None:
            if topic_id is not None and existing.topic_id is not None and existing.topic_id != topic_id:
                # A log left over from an earlier topic of the same name.
                self.delete_log(topic, partition)
            else:
                existing.update_config(config)
                return existing
        plog = Log.open(
            self.log_dir / f"{topic}-{partition}",
            config,
            topic_id=topic_id,
            recovery_point=0,
            log_start_offset=0,
            had_clean_shutdown=True,
            now_ms=self._now_ms,
        )
        self.logs[(topic, partition)] = plog
        return plog

    def all_logs(self) -> list[Log]:
        return list(self.logs.values())

    def delete_log(self, topic: str, partition: int) -> None:
        plog = self.logs.pop((topic, partition), None)
        if plog is None:
            return
        plog.close()
        target = plog.dir.with_name(f"{plog.dir.name}.{uuid.uuid4().hex}-delete")
        plog.dir.rename(target)
        shutil.rmtree(target, ignore_errors=True)

    def cleanup_logs(self) -> int:
        return sum(plog.delete_old_segments() for plog in self.logs.values() if plog.config.deletes)

    def delete_pending_segments(self) -> None:
        for plog in self.logs.values():
            plog.delete_pending_segments()

    def flush_dirty_logs(self) -> None:
        now = self._now_ms()
        for plog in self.logs.values():
            if plog.unflushed_messages and now - plog.last_flush_ms >= plog.config.flush_ms:
                plog.flush()

    def checkpoint_recovery_points(self) -> None:
        write_offset_checkpoint(self.log_dir / RECOVERY_POINT_CHECKPOINT, {k: v.recovery_point for k, v in self.logs.items()})

    def checkpoint_log_start_offsets(self) -> None:
        write_offset_checkpoint(self.log_dir / LOG_START_OFFSET_CHECKPOINT, {k: v.log_start_offset for k, v in self.logs.items()})

    def shutdown(self) -> None:
        for plog in self.logs.values():
            plog.flush()
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        for plog in self.logs.values():
            plog.close()
        (self.log_dir / CLEAN_SHUTDOWN_FILE).write_text("")
        log.info("log_manager.stopped", logs=len(self.logs))
