"""kafka.server DelayedOperationPurgatory: the produce (acks=all) and fetch (long poll) operations waiting.

``kafka_server_delayedoperationpurgatory_purgatorysize{delayedOperation="Produce"}``: watcher
entries (an operation waits on each of its partitions, as Kafka counts them);
``..._numdelayedoperations{delayedOperation="Fetch"}``: the operations themselves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from broker.delayed_operations import Purgatory
    from broker.replica_manager import ReplicaManager


def purgatory_sizes(purgatory: Purgatory) -> tuple[int, int]:
    """(watcher entries, distinct waiting operations)."""
    watchers = purgatory._watchers  # noqa: SLF001 - read only, on the loop
    size = 0
    operations: set[int] = set()
    for waiting in watchers.values():
        size += len(waiting)
        operations.update(id(f) for f in waiting if not f.done())
    return size, len(operations)


class DelayedOperationMetricsCollector:
    def __init__(self, replica_manager: ReplicaManager) -> None:
        self._rm = replica_manager

    def collect(self) -> Iterator[Metric]:
        size = GaugeMetricFamily(
            "kafka_server_delayedoperationpurgatory_purgatorysize",
            "kafka.server:type=DelayedOperationPurgatory,name=PurgatorySize: watches of waiting operations (one per partition).",
            labels=["delayedOperation"],
        )
        number = GaugeMetricFamily(
            "kafka_server_delayedoperationpurgatory_numdelayedoperations",
            "kafka.server:type=DelayedOperationPurgatory,name=NumDelayedOperations: operations waiting.",
            labels=["delayedOperation"],
        )
        for name, purgatory in (("Produce", self._rm.produce_purgatory), ("Fetch", self._rm.fetch_purgatory)):
            watches, operations = purgatory_sizes(purgatory)
            size.add_metric([name], watches)
            number.add_metric([name], operations)
        yield size
        yield number


__all__ = ["DelayedOperationMetricsCollector", "purgatory_sizes"]
