"""The clients' own metrics, as they pushed them (KIP-714 PushTelemetry), on the broker they push to.

ClientMetricsManager keeps each client instance's latest push; a scrape turns every data point
into a gauge named after the OpenTelemetry metric: ``org.apache.kafka.`` is dropped, the rest
made a Prometheus name, ``kafka_client_`` put in front
(``org.apache.kafka.producer.record.queue.time.max`` -> ``kafka_client_producer_record_queue_time_max``).
Labels: ``client_instance_id``, ``client_id``, ``client_software_name``,
``client_software_version``, and the point's own attributes (``topic``, ``node_id``...). A
histogram's or summary's value is its sum, with ``_count`` beside it. An expired client
instance (no push for max(60 s, 3 push intervals)) disappears.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Callable, Iterator

from prometheus_client.core import Metric

if TYPE_CHECKING:
    from broker.client_metrics_manager import ClientMetricsManager

PREFIX = "kafka_client_"
_NOT_NAME = re.compile(r"[^a-zA-Z0-9_]")
# Labels this collector sets itself: a point attribute of the same name is prefixed.
OWN_LABELS = ("client_instance_id", "client_id", "client_software_name", "client_software_version")


def prometheus_name(otel_name: str) -> str:
    name = otel_name.removeprefix("org.apache.kafka.")
    return PREFIX + _NOT_NAME.sub("_", name).strip("_").lower()


def label_name(attribute: str) -> str:
    name = _NOT_NAME.sub("_", attribute)
    if not name or name[0].isdigit() or name.startswith("__"):
        name = "a_" + name
    return "attr_" + name if name in OWN_LABELS else name


class ClientTelemetryCollector:
    def __init__(self, manager: ClientMetricsManager, now_ms: Callable[[], int]) -> None:
        self._manager = manager
        self._now_ms = now_ms

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()  # a repeated series would fail the whole scrape
        for push in self._manager.latest_pushes(self._now_ms()):
            client = push.client
            own = {
                "client_instance_id": str(push.client_instance_id),
                "client_id": client.client_id or "",
                "client_software_name": client.software_name or "",
                "client_software_version": client.software_version or "",
            }
            for point in push.points:
                name = prometheus_name(point.name)
                family = families.get(name)
                if family is None:
                    family = families[name] = Metric(name, f"Client metric {point.name} (KIP-714 push).", "gauge" if point.count is None else "untyped")
                labels = {**own, **{label_name(k): v for k, v in point.attributes}}
                series = (name, tuple(sorted(labels.items())))
                if series in seen:
                    continue
                seen.add(series)
                family.add_sample(name, labels, float(point.value))
                if point.count is not None:
                    family.add_sample(name + "_count", labels, float(point.count))
        yield from families.values()


__all__ = ["ClientTelemetryCollector", "label_name", "prometheus_name"]
