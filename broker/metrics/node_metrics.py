"""Which collectors each part of a node registers on the node's exporter (the wiring, in one place)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from broker.metrics.broker_metadata_metrics import BrokerMetadataMetricsCollector
from broker.metrics.broker_topic_metrics import BrokerTopicMetricsCollector
from broker.metrics.client_telemetry_metrics import ClientTelemetryCollector
from broker.metrics.consumer_group_lag import ConsumerGroupLagCollector
from broker.metrics.controller_metrics import ControllerMetricsCollector, QuorumControllerMetricsCollector
from broker.metrics.delayed_operation_metrics import DelayedOperationMetricsCollector
from broker.metrics.fetch_session_metrics import FetchSessionCacheMetricsCollector
from broker.metrics.log_metrics import LogCleanerMetricsCollector, LogManagerMetricsCollector
from broker.metrics.replica_manager_metrics import ReplicaManagerMetricsCollector
from broker.metrics.socket_server_metrics import SocketServerMetricsCollector

if TYPE_CHECKING:
    from broker.broker_server import BrokerServer
    from broker.controller_server import ControllerServer


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def broker_collectors(broker: BrokerServer) -> list[Any]:
    rm = broker.replica_manager
    return [
        BrokerTopicMetricsCollector(rm.topic_stats, lambda: broker.metadata.image.topics),
        ReplicaManagerMetricsCollector(rm),
        DelayedOperationMetricsCollector(rm),
        FetchSessionCacheMetricsCollector(broker.fetch_sessions),
        # The node's transfer counters (sendfile or copied) go with the client listeners.
        SocketServerMetricsCollector(lambda: broker.socket_servers, broker.metrics),
        LogCleanerMetricsCollector(broker.log_manager),
        LogManagerMetricsCollector(lambda: broker.dynamic_config.config, broker.config.log_dir_paths),
        ConsumerGroupLagCollector(broker.group_coordinator, rm),
        ClientTelemetryCollector(broker.client_metrics, _now_ms),
        *([BrokerMetadataMetricsCollector(raft, _now_ms)] if (raft := broker._shared.raft_manager) is not None else []),  # noqa: SLF001
    ]


def controller_collectors(controller: ControllerServer, with_transfer: bool) -> list[Any]:
    """``with_transfer``: a controller-only node also shows the sendfile/copied counters."""
    loader = controller._shared.metadata_loader  # noqa: SLF001 - the node's loader
    return [
        ControllerMetricsCollector(lambda: loader.image, lambda: controller.controller.is_active),
        QuorumControllerMetricsCollector(lambda: controller.controller, _now_ms),
        SocketServerMetricsCollector(lambda: controller.socket_servers, controller._metrics if with_transfer else None),  # noqa: SLF001
    ]


__all__ = ["broker_collectors", "controller_collectors"]
