"""kafka.server socket-server-metrics per listener (Kafka's Selector metrics of its network
processors), and kbroker's own pair of counters of record bytes sent to clients: zero-copy with
``os.sendfile``, or copied through Python (a TLS listener encrypts them). Read when Prometheus
scrapes.

kbroker has one network "processor", the event loop: every series is labelled
``networkProcessor="0"``, as the JMX exporter labels Kafka's
``kafka.server:type=socket-server-metrics,listener=L,networkProcessor=N`` attributes:
``kafka_server_socket_server_metrics_connection_count{listener="PLAINTEXT",networkProcessor="0"}``,
``..._connection_creation_total``, ``..._connection_creation_rate`` and so on.

Kafka's Selector is named from a client's side: on a broker its ``request-total`` counts the
answers sent and ``response-total`` the requests read. The names here are Kafka's, so a
dashboard built on Kafka reads the same numbers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from broker.metrics.selector_stats import SelectorStats, monotonic_ms

if TYPE_CHECKING:
    from broker.network import SocketServer, TransferMetrics

PREFIX = "kafka_server_socket_server_metrics_"
MBEAN = "kafka.server:type=socket-server-metrics,listener=L,networkProcessor=N"
LABELS = ["listener", "networkProcessor"]
PROCESSOR = "0"

# (Kafka's attribute without -total, the SelectorStats field, help)
TOTALS = (
    ("connection-creation", "connections_created", "connections accepted"),
    ("connection-close", "connections_closed", "connections closed"),
    ("incoming-byte", "bytes_read", "bytes read from the sockets"),
    ("outgoing-byte", "bytes_written", "bytes written to the sockets"),
    ("request", "answers_sent", "answers sent whole (Kafka's Selector counts its sends as requests)"),
    ("response", "requests_read", "requests read whole (Kafka's Selector counts its receives as responses)"),
)
# (Kafka's attribute, the SelectorStats WindowedRate, help)
RATES = (
    ("connection-creation-rate", "creation_rate", "connections accepted per second"),
    ("connection-close-rate", "close_rate", "connections closed per second"),
)


def _name(attribute: str) -> str:
    return PREFIX + attribute.replace("-", "_")


class SocketServerMetricsCollector:
    def __init__(self, servers: Callable[[], Iterable[SocketServer]], transfer: TransferMetrics | None = None, now_ms: Callable[[], int] = monotonic_ms) -> None:
        self._servers = servers
        self._transfer = transfer
        self._now_ms = now_ms

    def collect(self) -> Iterator[Metric]:
        counts: dict[str, int] = {}
        stats: dict[str, list[SelectorStats]] = {}
        for server in self._servers():
            counts[server.listener] = counts.get(server.listener, 0) + sum(1 for conn in server.connections if not conn.closed)
            stats.setdefault(server.listener, []).append(server.stats)
        family = GaugeMetricFamily(_name("connection-count"), f"{MBEAN} connection-count: open connections.", labels=LABELS)
        for listener, count in sorted(counts.items()):
            family.add_metric([listener, PROCESSOR], count)
        yield family
        for attribute, field, doc in TOTALS:
            counter = CounterMetricFamily(_name(attribute), f"{MBEAN} {attribute}-total: {doc}.", labels=LABELS)
            for listener, of_listener in sorted(stats.items()):
                counter.add_metric([listener, PROCESSOR], sum(getattr(s, field) for s in of_listener))
            yield counter
        now = self._now_ms()
        for attribute, field, doc in RATES:
            gauge = GaugeMetricFamily(_name(attribute), f"{MBEAN} {attribute}: {doc}, over the last 30 to 60 s.", labels=LABELS)
            for listener, of_listener in sorted(stats.items()):
                gauge.add_metric([listener, PROCESSOR], sum(getattr(s, field).rate(now) for s in of_listener))
            yield gauge
        if self._transfer is not None:
            yield CounterMetricFamily(
                "kbroker_network_sendfile_bytes", "kbroker: record bytes sent to clients with os.sendfile (zero copy).", value=self._transfer.sendfile_bytes
            )
            yield CounterMetricFamily(
                "kbroker_network_copied_bytes", "kbroker: record bytes sent to clients through Python (TLS listeners).", value=self._transfer.copied_bytes
            )


__all__ = ["SocketServerMetricsCollector"]
