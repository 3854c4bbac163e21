"""AlterReplicaLogDirs: the log dir each named replica of this broker is to live in.

Kafka 4.4's ReplicaManager.alterReplicaLogDirs decides each partition's error. A replica that
passes its checks moves there (ReplicaAlterLogDirsManager: a future log in that dir, filled and
swapped in); one in that dir already stays, and a move under way elsewhere is given up. The
destination of a replica not on this broker yet is remembered for when its log is created
(REPLICA_NOT_AVAILABLE all the same, as Kafka answers).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterable

import structlog
from kio.schema.errors import ErrorCode

from broker.auth_helper import AuthHelper
from broker.kafka_apis import RequestContext
from broker.metadata.metadata_cache import MetadataCache
from broker.partition import NotLeaderOrFollowerError
from broker.replica_alter_log_dirs_manager import ReplicaAlterLogDirsManager
from broker.replica_manager import ReplicaManager
from broker.security.standard_acl import AclOperation
from protocol.api_keys import ApiKey, response_schema
from protocol.entities import build, nested
from storage.errors import StorageError
from storage.log_dir_failure_channel import LogDirFailureChannel

log = structlog.get_logger(__name__)

# Kafka's limit on a log folder's name, which `<topic>-<partition>.<32 hex>-future` must fit (KAFKA-4893).
MAX_DIR_NAME_LENGTH = 255
FUTURE_DIR_NAME_EXTRA = len(".") + 32 + len("-future")


def partition_dirs(request) -> dict[tuple[str, int], str]:  # type: ignore[no-untyped-def]
    """Kafka's AlterReplicaLogDirsRequest.partitionDirs: a partition named under two dirs takes the last."""
    return {(t.name, int(p)): d.path for d in request.dirs for t in d.topics for p in t.partitions}


def names_log_dir(path: str, log_dir: Path) -> bool:
    """Whether ``path`` is ``log_dir`` as Kafka's isLogDirOnline compares (its absolute path), or as
    DescribeLogDirs names it here (resolved), which is what kafka-reassign-partitions users copy."""
    return os.path.isabs(path) and Path(path) in (log_dir.absolute(), log_dir.resolve())


def destination_dir(path: str, log_dirs: Iterable[Path]) -> Path | None:
    return next((d for d in log_dirs if names_log_dir(path, d)), None)


def alter_replica_log_dir_error(
    topic: str,
    index: int,
    destination: str,
    log_dirs: Iterable[Path],
    failure_channel: LogDirFailureChannel,
    cordoned: Iterable[Path],
    hosted: Callable[[], object],
) -> int:
    """The error Kafka 4.4 answers for moving ``topic``-``index`` to ``destination``, its checks in
    its order. ``hosted`` is ReplicaManager.hosted_partition's lookup (it raises StorageError)."""
    if len(topic) + 1 + len(str(index)) + FUTURE_DIR_NAME_EXTRA > MAX_DIR_NAME_LENGTH:
        return ErrorCode.invalid_topic_exception
    log_dir = destination_dir(destination, log_dirs)
    if log_dir is None:
        return ErrorCode.log_dir_not_found
    if failure_channel.has_offline_log_dir(log_dir):
        return ErrorCode.kafka_storage_error
    if any(names_log_dir(destination, d) for d in cordoned):
        return ErrorCode.invalid_replica_assignment
    try:
        hosted()
    except NotLeaderOrFollowerError:
        # Kafka keeps REPLICA_NOT_AVAILABLE here "for compatibility": the replica is not on this broker (yet).
        return ErrorCode.replica_not_available
    except StorageError as e:
        return e.error_code
    return ErrorCode.none


class AlterReplicaLogDirsHandler:
    def __init__(
        self,
        replica_manager: ReplicaManager,
        metadata: MetadataCache,
        mover: ReplicaAlterLogDirsManager,
        auth: AuthHelper | None = None,
        cordoned_log_dirs: Callable[[], list[Path]] = list,
    ) -> None:
        self._rm = replica_manager
        self._mover = mover
        self._metadata = metadata
        self._auth = auth or AuthHelper(None)
        # cordoned.log.dirs as in effect now (dynamic per broker), for KIP-1066's INVALID_REPLICA_ASSIGNMENT.
        self._cordoned_log_dirs = cordoned_log_dirs

    def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.ALTER_REPLICA_LOG_DIRS, ctx.version)
        topic_cls = nested(schema, "AlterReplicaLogDirTopicResult")
        part_cls = nested(schema, "AlterReplicaLogDirPartitionResult")
        if not self._auth.authorize_cluster(ctx, AclOperation.ALTER):
            # Kafka's getErrorResponse: one result per topic entry of each dir, not merged.
            denied = tuple(
                build(topic_cls, topic_name=t.name, partitions=tuple(build(part_cls, partition_index=p, error_code=ErrorCode.cluster_authorization_failed) for p in t.partitions))
                for d in request.dirs
                for t in d.topics
            )
            return build(schema, throttle_time=0, results=denied)
        by_topic: dict[str, list[object]] = {}
        for (topic, index), destination in partition_dirs(request).items():
            error = self._error(topic, index, destination)
            if error in (ErrorCode.none, ErrorCode.replica_not_available):
                log_dir = destination_dir(destination, self._rm.log_manager.log_dirs)
                assert log_dir is not None
                self._rm.log_manager.maybe_update_preferred_log_dir(topic, index, log_dir)
                if error == ErrorCode.none:
                    try:
                        self._mover.alter(topic, index, log_dir)
                    except StorageError as e:
                        error = e.error_code
            if error:
                log.warning("alter_replica_log_dirs.refused", topic=topic, partition=index, log_dir=destination, error=ErrorCode(error).name)
            by_topic.setdefault(topic, []).append(build(part_cls, partition_index=index, error_code=error))
        results = tuple(build(topic_cls, topic_name=topic, partitions=tuple(parts)) for topic, parts in by_topic.items())
        return build(schema, throttle_time=0, results=results)

    def _error(self, topic: str, index: int, destination: str) -> int:
        log_manager = self._rm.log_manager
        return alter_replica_log_dir_error(
            topic,
            index,
            destination,
            log_manager.log_dirs,
            log_manager.failure_channel,
            self._cordoned_log_dirs(),
            lambda: self._rm.hosted_partition(topic, index, self._metadata.image),
        )
