"""kafka.network RequestMetrics: requests, their times and sizes, per API, from each request's own timestamps.

A connection (broker/network.py) gives each request a ``RequestTiming`` when metrics are on and
stamps it as the request moves on; kbroker has no request queue and no handler threads, so
Kafka's times read here as:

- RequestQueueTimeMs: from the read of the request's bytes to its dispatch (a request read
  behind a produce still waiting for acks=all, or behind a throttle, waits here);
- LocalTimeMs: the handler's synchronous part (decode, append or read, and encode if it answers at once);
- RemoteTimeMs: from there until the answer is ready (acks=all replication, a fetch's long poll,
  a coordinator's write, a forward to the controller);
- ThrottleTimeMs: the throttle time the answer holds the client for;
- ResponseQueueTimeMs: from ready to taken for sending (answers go out in request order);
- ResponseSendTimeMs: from taken until the socket took its last byte;
- TotalTimeMs: from the read to the last byte sent;
- RequestBytes: the request's size, its header left out (Kafka's ``sizeOfBodyInBytes``).

Each is a Kafka histogram (broker/metrics/histogram.py); RequestsPerSec counts finished requests
per version, ErrorsPerSec the error codes of the answers (broker/metrics/request_errors.py). Fetch is counted under Fetch and under FetchConsumer or FetchFollower, as Kafka does.
A request a controller unwraps from an Envelope is counted as Kafka 4.4 counts it: all of it
(RequestsPerSec in its own version, the times, RequestBytes its own body's size, ErrorsPerSec its
answer's codes) under its own name, nothing under Envelope; an Envelope refused before its inner
request is handled is counted under Envelope.
Prometheus names, as the JMX exporter gives them:
``kafka_network_requestmetrics_requests_total{request="Produce",version="9"}``,
``kafka_network_requestmetrics_totaltimems{request="Produce",quantile="0.99"}`` (and ``_count``, ``_sum``),
``kafka_network_requestmetrics_errors_total{request="Produce",error="NONE"}``.
"""

from __future__ import annotations

from time import perf_counter
from typing import Any, Iterator

from prometheus_client.core import Metric

from broker.metrics.histogram import MASK, RESERVOIR, add_summary_values, quantiles
from broker.metrics.request_errors import ErrorCounts, error_name
from protocol.api_keys import ApiKey

FETCH = int(ApiKey.FETCH)
ENVELOPE = int(ApiKey.ENVELOPE)
MAX_VERSION = 64
CONSUMER_FETCH = "FetchConsumer"
FOLLOWER_FETCH = "FetchFollower"

# (attribute, Kafka's histogram name, help), in the order of RequestMetrics.record's tuple.
HISTOGRAMS = (
    ("request_queue", "RequestQueueTimeMs", "From the request's read to its dispatch."),
    ("local", "LocalTimeMs", "The handler's synchronous work."),
    ("remote", "RemoteTimeMs", "From the handler's return to the answer being ready (replication, long poll, coordinator writes)."),
    ("throttle", "ThrottleTimeMs", "Time the answer holds the client for a quota."),
    ("response_queue", "ResponseQueueTimeMs", "From ready to taken for sending (answers go out in request order)."),
    ("response_send", "ResponseSendTimeMs", "From taken for sending to the last byte taken by the socket."),
    ("total", "TotalTimeMs", "From the read of the request to the last byte of its answer."),
    ("request_bytes", "RequestBytes", "The request's size in bytes, its header left out."),
)


def request_name(key: int) -> str:
    """Kafka's ApiKeys name: PRODUCE -> Produce, LIST_OFFSETS -> ListOffsets."""
    try:
        return "".join(part.capitalize() for part in ApiKey(key).name.split("_"))
    except ValueError:
        return f"ApiKey{key}"


class RequestMetrics:
    """One request name's metrics: its RequestsPerSec per version, its ErrorsPerSec per error code
    and its eight histograms (seven times and the size).

    The histograms share one count and one reservoir (the latest RESERVOIR requests' eight values
    as a tuple): a request costs one tuple and eight additions, not eight histogram updates."""

    __slots__ = ("name", "requests", "errors", "count", "sums", "_ring")

    def __init__(self, name: str) -> None:
        self.name = name
        self.requests = [0] * MAX_VERSION  # per version
        # Added to while answers are built (KafkaApis hands it to handlers as RequestContext.errors).
        self.errors: ErrorCounts = {}
        self.count = 0
        self.sums = [0.0] * len(HISTOGRAMS)
        self._ring: list[tuple[float, ...]] = []

    def record(self, timing: RequestTiming, finished_at: float) -> None:
        version = timing.version
        if 0 <= version < MAX_VERSION:
            self.requests[version] += 1
        read, dispatched, local_done, ready, dequeued = timing.read_at, timing.dispatched_at, timing.local_done_at, timing.ready_at, timing.dequeued_at
        if ready < local_done:  # answered without being dequeued (acks=0): nothing was sent
            ready = dequeued = local_done
        times = (
            max(dispatched - read, 0.0) * 1000.0,
            (local_done - dispatched) * 1000.0,
            (ready - local_done) * 1000.0,
            float(timing.throttle_ms),
            max(dequeued - ready, 0.0) * 1000.0,
            max(finished_at - dequeued, 0.0) * 1000.0,
            (finished_at - read) * 1000.0,
            float(timing.request_bytes),
        )
        sums = self.sums
        sums[0] += times[0]
        sums[1] += times[1]
        sums[2] += times[2]
        sums[3] += times[3]
        sums[4] += times[4]
        sums[5] += times[5]
        sums[6] += times[6]
        sums[7] += times[7]
        ring = self._ring
        if len(ring) < RESERVOIR:
            ring.append(times)
        else:
            ring[self.count & MASK] = times
        self.count += 1

    def quantiles(self, index: int) -> list[tuple[float, float]]:
        """The quantiles of the ``index``-th histogram (in HISTOGRAMS' order) over the reservoir."""
        return quantiles(sorted(t[index] for t in self._ring))


class RequestTiming:
    """The timestamps (perf_counter seconds) of one request, set by its connection, and its size."""

    __slots__ = ("metrics", "also", "version", "request_bytes", "read_at", "dispatched_at", "local_done_at", "ready_at", "dequeued_at", "throttle_ms")

    def __init__(self, metrics: RequestMetrics, version: int, read_at: float, request_bytes: int = 0) -> None:
        self.metrics = metrics
        self.also: RequestMetrics | None = None
        self.version = version
        self.request_bytes = request_bytes
        self.read_at = read_at
        self.dispatched_at = perf_counter()
        self.local_done_at = 0.0
        self.ready_at = 0.0
        self.dequeued_at = 0.0
        self.throttle_ms = 0

    def ready(self, _future: object = None) -> None:
        """The answer is ready (a future's done callback)."""
        self.ready_at = perf_counter()

    def dequeued(self, throttle_ms: int) -> None:
        self.dequeued_at = perf_counter()
        self.throttle_ms = throttle_ms

    def finish(self, finished_at: float) -> None:
        self.metrics.record(self, finished_at)
        if self.also is not None:
            self.also.record(self, finished_at)


class RequestChannelMetrics:
    """Kafka's RequestChannel.Metrics: the RequestMetrics of every request name of a node."""

    def __init__(self) -> None:
        self._by_key: list[RequestMetrics | None] = [None] * 128
        self.fetch_consumer = RequestMetrics(CONSUMER_FETCH)
        self.fetch_follower = RequestMetrics(FOLLOWER_FETCH)
        # Set by KafkaApis while it dispatches a Fetch: from a replica or from a consumer.
        self._follower_fetch = False
        # Set by the EnvelopeHandler while it dispatches an Envelope it unwrapped: the inner
        # request's metrics, version and body size.
        self._forwarded: tuple[RequestMetrics, int, int] | None = None

    def for_key(self, key: int) -> RequestMetrics:
        metrics = self._by_key[key] if 0 <= key < len(self._by_key) else None
        if metrics is None:
            metrics = RequestMetrics(request_name(key))
            if 0 <= key < len(self._by_key):
                self._by_key[key] = metrics
        return metrics

    def start(self, key: int, version: int, read_at: float, request_bytes: int = 0) -> RequestTiming:
        """A request of ``request_bytes`` (its header left out) is being dispatched now."""
        return RequestTiming(self.for_key(key), version, read_at, request_bytes)

    def note_fetch(self, request: Any) -> None:
        """A Fetch was decoded: a follower's (replica id >= 0) or a consumer's."""
        replica_id = getattr(request, "replica_id", None)
        if replica_id is None:
            state = getattr(request, "replica_state", None)
            replica_id = getattr(state, "replica_id", -1) if state is not None else -1
        self._follower_fetch = replica_id >= 0

    def note_forwarded(self, key: int, version: int, request_bytes: int) -> ErrorCounts:
        """An Envelope being dispatched carries a request of ``key`` at ``version``, its body
        ``request_bytes`` long; its answer's error codes go in the ErrorCounts returned.

        Kafka's EnvelopeUtils makes the inner request a RequestChannel.Request of its own (the
        Envelope's start and dequeue times, its own header and body) and only that one is
        answered: RequestChannel.sendResponse counts the inner answer's errorCounts() under the
        inner name, and Request.updateRequestMetrics takes the inner header's name and version."""
        metrics = self.for_key(key)
        self._forwarded = (metrics, version, request_bytes)
        return metrics.errors

    def dispatched(self, timing: RequestTiming, key: int, answered: bool) -> None:
        """The handler returned; ``answered``: with its answer (else a future, or nothing for acks=0)."""
        now = timing.local_done_at = perf_counter()
        if answered:
            timing.ready_at = now
        if key == FETCH:
            timing.also = self.fetch_follower if self._follower_fetch else self.fetch_consumer
        elif key == ENVELOPE and self._forwarded is not None:
            timing.metrics, timing.version, timing.request_bytes = self._forwarded
            self._forwarded = None

    def by_key(self) -> list[RequestMetrics]:
        """The metrics of each API seen, without FetchConsumer and FetchFollower."""
        return [m for m in self._by_key if m is not None]

    def all(self) -> list[RequestMetrics]:
        return [*self.by_key(), self.fetch_consumer, self.fetch_follower]


class RequestMetricsCollector:
    def __init__(self, channel: RequestChannelMetrics) -> None:
        self._channel = channel

    def collect(self) -> Iterator[Metric]:
        errors = Metric(
            "kafka_network_requestmetrics_errors",
            "kafka.network:type=RequestMetrics,name=ErrorsPerSec: error codes of the answers (NONE included), per request and error.",
            "counter",
        )
        # Kafka counts a Fetch's errors under Fetch only, never FetchConsumer/FetchFollower.
        for m in self._channel.by_key():
            # Codes Kafka does not know all read UNKNOWN_SERVER_ERROR: one series for them.
            by_name: dict[str, int] = {}
            for code, count in sorted(m.errors.items()):
                name = error_name(code)
                by_name[name] = by_name.get(name, 0) + count
            for name, count in by_name.items():
                errors.add_sample(errors.name + "_total", {"request": m.name, "error": name}, float(count))
        yield errors
        metrics = [m for m in self._channel.all() if m.count]
        requests = Metric(
            "kafka_network_requestmetrics_requests", "kafka.network:type=RequestMetrics,name=RequestsPerSec: requests answered, per request and version.", "counter"
        )
        for m in metrics:
            for version, count in enumerate(m.requests):
                if count:
                    requests.add_sample(requests.name + "_total", {"request": m.name, "version": str(version)}, float(count))
        yield requests
        for index, (_, kafka_name, doc) in enumerate(HISTOGRAMS):
            family = Metric("kafka_network_requestmetrics_" + kafka_name.lower(), f"kafka.network:type=RequestMetrics,name={kafka_name}: {doc}", "summary")
            for m in metrics:
                add_summary_values(family, {"request": m.name}, m.count, m.sums[index], m.quantiles(index))
            yield family


__all__ = ["HISTOGRAMS", "RequestChannelMetrics", "RequestMetrics", "RequestMetricsCollector", "RequestTiming", "request_name"]
