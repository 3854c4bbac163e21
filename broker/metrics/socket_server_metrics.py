"""kafka.server socket-server-metrics connection-count per listener, and kbroker's own pair of
counters of record bytes sent to clients: zero-copy with ``os.sendfile``, or copied through Python
(a TLS listener encrypts them). Read when Prometheus scrapes.

``kafka_server_socket_server_metrics_connection_count{listener="PLAINTEXT",networkProcessor="0"}``
(kbroker has one network "processor": the event loop), ``kbroker_network_sendfile_bytes_total``,
``kbroker_network_copied_bytes_total``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from broker.network import SocketServer, TransferMetrics


class SocketServerMetricsCollector:
    def __init__(self, servers: Callable[[], Iterable[SocketServer]], transfer: TransferMetrics | None = None) -> None:
        self._servers = servers
        self._transfer = transfer

    def collect(self) -> Iterator[Metric]:
        counts: dict[str, int] = {}
        for server in self._servers():
            counts[server.listener] = counts.get(server.listener, 0) + sum(1 for conn in server.connections if not conn.closed)
        family = GaugeMetricFamily(
            "kafka_server_socket_server_metrics_connection_count",
            "kafka.server:type=socket-server-metrics,listener=L,networkProcessor=N connection-count: open connections.",
            labels=["listener", "networkProcessor"],
        )
        for listener, count in sorted(counts.items()):
            family.add_metric([listener, "0"], count)
        yield family
        if self._transfer is not None:
            yield CounterMetricFamily(
                "kbroker_network_sendfile_bytes", "kbroker: record bytes sent to clients with os.sendfile (zero copy).", value=self._transfer.sendfile_bytes
            )
            yield CounterMetricFamily(
                "kbroker_network_copied_bytes", "kbroker: record bytes sent to clients through Python (TLS listeners).", value=self._transfer.copied_bytes
            )


__all__ = ["SocketServerMetricsCollector"]
