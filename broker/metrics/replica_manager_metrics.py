"""kafka.server ReplicaManager: this broker's replicas, read from the ReplicaManager when Prometheus
scrapes (O(partitions) then, nothing on the produce path); the ISR changes are counted by the
ReplicaManager as it asks for them.

``kafka_server_replicamanager_partitioncount``, ``..._leadercount``, ``..._underreplicatedpartitions``,
``..._underminisrpartitioncount``, ``..._atminisrpartitioncount``, ``..._offlinereplicacount``,
``..._isrshrinks_total``, ``..._isrexpands_total``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from broker.replica_manager import ReplicaManager


class ReplicaManagerCounts:
    __slots__ = ("partitions", "leaders", "under_replicated", "under_min_isr", "at_min_isr", "offline")

    def __init__(self) -> None:
        self.partitions = self.leaders = self.under_replicated = self.under_min_isr = self.at_min_isr = self.offline = 0


def replica_counts(rm: ReplicaManager) -> ReplicaManagerCounts:
    counts = ReplicaManagerCounts()
    channel = rm.log_manager.failure_channel
    offline_dirs = set(channel.offline_log_dirs)
    for partition in rm.partitions.values():
        counts.partitions += 1
        if offline_dirs and getattr(partition.log, "parent_dir", None) in offline_dirs:
            counts.offline += 1
            continue
        if not partition.is_leader:
            continue
        counts.leaders += 1
        isr, replicas = len(partition.isr), len(partition.replicas)
        if isr < replicas:
            counts.under_replicated += 1
        min_isr = partition.log.config.min_insync_replicas
        if isr < min_isr:
            counts.under_min_isr += 1
        elif isr == min_isr:
            counts.at_min_isr += 1
    return counts


class ReplicaManagerMetricsCollector:
    def __init__(self, replica_manager: ReplicaManager) -> None:
        self._rm = replica_manager

    def collect(self) -> Iterator[Metric]:
        rm = self._rm
        counts = replica_counts(rm)
        prefix = "kafka_server_replicamanager_"
        for name, kafka_name, value, doc in (
            ("partitioncount", "PartitionCount", counts.partitions, "Replicas hosted on this broker."),
            ("leadercount", "LeaderCount", counts.leaders, "Partitions this broker leads."),
            ("underreplicatedpartitions", "UnderReplicatedPartitions", counts.under_replicated, "Led partitions whose ISR is smaller than their replicas."),
            ("underminisrpartitioncount", "UnderMinIsrPartitionCount", counts.under_min_isr, "Led partitions whose ISR is below min.insync.replicas."),
            ("atminisrpartitioncount", "AtMinIsrPartitionCount", counts.at_min_isr, "Led partitions whose ISR is exactly min.insync.replicas."),
            ("offlinereplicacount", "OfflineReplicaCount", counts.offline, "Replicas in an offline log dir."),
        ):
            yield GaugeMetricFamily(prefix + name, f"kafka.server:type=ReplicaManager,name={kafka_name}: {doc}", value=value)
        yield CounterMetricFamily(prefix + "isrshrinks", "kafka.server:type=ReplicaManager,name=IsrShrinksPerSec: ISR shrinks this leader asked for.", value=rm.isr_shrinks)
        yield CounterMetricFamily(prefix + "isrexpands", "kafka.server:type=ReplicaManager,name=IsrExpandsPerSec: ISR expansions this leader asked for.", value=rm.isr_expands)


__all__ = ["ReplicaManagerCounts", "ReplicaManagerMetricsCollector", "replica_counts"]
