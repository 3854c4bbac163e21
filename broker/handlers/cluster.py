"""DescribeCluster and DescribeLogDirs."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

import structlog
from kio.schema.errors import ErrorCode

from broker.config import BrokerConfig
from broker.auth_helper import AuthHelper
from broker.kafka_apis import RequestContext
from broker.metadata.metadata_cache import MetadataCache
from broker.replica_manager import ReplicaManager
from broker.security.standard_acl import AclOperation, ResourceType, CLUSTER_NAME
from protocol.api_keys import ApiKey, response_schema
from protocol.entities import build, nested

log = structlog.get_logger(__name__)

AUTHORIZED_OPERATIONS_UNKNOWN = -2147483648
ENDPOINT_TYPE_BROKERS = 1
ENDPOINT_TYPE_CONTROLLERS = 2


class DescribeClusterHandler:
    def __init__(self, metadata: MetadataCache, auth: AuthHelper | None = None) -> None:
        self._metadata = metadata
        self._auth = auth or AuthHelper(None)

    def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.DESCRIBE_CLUSTER, ctx.version)
        broker_cls = nested(schema, "DescribeClusterBroker")
        endpoint_type = int(getattr(request, "endpoint_type", ENDPOINT_TYPE_BROKERS))
        if endpoint_type != ENDPOINT_TYPE_BROKERS:
            # As Kafka's computeDescribeClusterResponse: only the error and its message are set.
            if endpoint_type == ENDPOINT_TYPE_CONTROLLERS:
                code, message = ErrorCode.mismatched_endpoint_type, "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type CONTROLLER"
            else:
                code, message = ErrorCode.unsupported_endpoint_type, f"Unsupported endpoint type {endpoint_type}"
            return build(
                schema,
                throttle_time=0,
                error_code=code,
                error_message=message,
                endpoint_type=ENDPOINT_TYPE_BROKERS,
                cluster_id="",
                controller_id=-1,
                brokers=(),
                cluster_authorized_operations=AUTHORIZED_OPERATIONS_UNKNOWN,
            )
        brokers = tuple(
            build(broker_cls, broker_id=node_id, host=host, port=port, rack=rack, is_fenced=fenced)
            for node_id, host, port, rack, fenced in self._brokers(ctx.client.listener, getattr(request, "include_fenced_brokers", False))
        )
        return build(
            schema,
            throttle_time=0,
            error_code=0,
            error_message=None,
            endpoint_type=endpoint_type,
            cluster_id=self._metadata.cluster_id,
            controller_id=self._metadata.controller_id,
            brokers=brokers,
            cluster_authorized_operations=self._operations(ctx, request),
        )

    def _brokers(self, listener: str | None, include_fenced: bool) -> list[tuple[int, str, int, str | None, bool]]:
        """The unfenced brokers at their endpoint on ``listener``; with v2's IncludeFencedBrokers
        (KIP-1073) the fenced ones too, flagged IsFenced, all by id as Kafka lists them."""
        if not include_fenced:
            return [(b.node_id, b.host, b.port, b.rack, False) for b in self._metadata.alive_brokers(listener)]
        name = listener or self._metadata.listener_name
        return [
            (broker_id, e.host, e.port, registration.rack, registration.fenced)
            for broker_id, registration in sorted(self._metadata.image.brokers.items())
            for e in registration.endpoints
            if e.name == name
        ]

    def _operations(self, ctx: RequestContext, request) -> int:  # type: ignore[no-untyped-def]
        """KIP-430, as Kafka's computeDescribeClusterResponse: 0 without DESCRIBE on the cluster."""
        if not request.include_cluster_authorized_operations:
            return AUTHORIZED_OPERATIONS_UNKNOWN
        if not self._auth.authorize_cluster(ctx, AclOperation.DESCRIBE):
            return 0
        return self._auth.authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)


class DescribeLogDirsHandler:
    """DescribeLogDirs: every dir of log.dirs, in that order, with its replicas and their sizes (a
    replica moving there as IsFuture, with how far it is behind), its
    total and usable bytes and (v5, KIP-1066) whether it is cordoned; an offline dir is named with
    KAFKA_STORAGE_ERROR and nothing more, as Kafka's describeLogDirs answers."""

    def __init__(
        self,
        replica_manager: ReplicaManager,
        config: BrokerConfig,
        auth: AuthHelper | None = None,
        is_cordoned: Callable[[Path], bool] = lambda log_dir: False,
    ) -> None:
        self._auth = auth or AuthHelper(None)
        self._rm = replica_manager
        self._config = config
        # KIP-1066: the dir is in cordoned.log.dirs now and metadata.version is 4.3-IV0 or later.
        self._is_cordoned = is_cordoned

    def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.DESCRIBE_LOG_DIRS, ctx.version)
        result_cls = nested(schema, "DescribeLogDirsResult")
        topic_cls = nested(schema, "DescribeLogDirsTopic")
        part_cls = nested(schema, "DescribeLogDirsPartition")
        if not self._auth.authorize_cluster(ctx, AclOperation.DESCRIBE):
            return build(schema, throttle_time=0, error_code=ErrorCode.cluster_authorization_failed, results=())
        wanted: set[tuple[str, int]] | None = None
        if request.topics is not None:
            wanted = {(t.topic, p) for t in request.topics for p in t.partitions}
        channel = self._rm.log_manager.failure_channel
        results = []
        for log_dir in self._rm.log_manager.log_dirs:
            if channel.has_offline_log_dir(log_dir):
                # Its partitions' sizes are memory no longer backed by readable files.
                results.append(build(result_cls, error_code=ErrorCode.kafka_storage_error, log_dir=str(log_dir.resolve()), topics=()))
                continue
            by_topic: dict[str, list[object]] = {}
            for (topic, index), partition in sorted(self._rm.partitions.items()):
                if partition.log.parent_dir != log_dir or (wanted is not None and (topic, index) not in wanted):
                    continue
                by_topic.setdefault(topic, []).append(
                    build(part_cls, partition_index=index, partition_size=partition.size_in_bytes, offset_lag=0, is_future_key=False)
                )
            for (topic, index), future in sorted(self._rm.log_manager.future_logs.items()):
                current = self._rm.log_manager.get_log(topic, index)
                if future.parent_dir != log_dir or current is None or (wanted is not None and (topic, index) not in wanted):
                    continue
                # Kafka's getLogEndOffsetLag for a future replica: how far it is behind the current one.
                lag = max(current.log_end_offset - future.log_end_offset, 0)
                by_topic.setdefault(topic, []).append(build(part_cls, partition_index=index, partition_size=future.size_in_bytes, offset_lag=lag, is_future_key=True))
            try:
                usage = shutil.disk_usage(log_dir)
            except OSError as e:
                # Kafka's describeLogDirs: any other failure of a dir is UNKNOWN_SERVER_ERROR for it alone.
                log.warning("describe_log_dirs.failed", log_dir=str(log_dir), error=str(e))
                results.append(build(result_cls, error_code=ErrorCode.unknown_server_error, log_dir=str(log_dir.resolve()), topics=()))
                continue
            results.append(
                build(
                    result_cls,
                    error_code=0,
                    log_dir=str(log_dir.resolve()),
                    topics=tuple(build(topic_cls, name=name, partitions=tuple(parts)) for name, parts in by_topic.items()),
                    total_bytes=usage.total,
                    usable_bytes=usage.free,
                    is_cordoned=self._is_cordoned(log_dir),
                )
            )
        return build(schema, throttle_time=0, error_code=0, results=tuple(results))
