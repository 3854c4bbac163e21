"""What Kafka's Selector counts per network processor (its socket-server-metrics), kept by a
listener's SocketServer and its connections (broker/network.py) as plain integers.

Kafka's Selector is shared with the clients and named from a client's side, so on a broker
``request-total`` counts the answers sent and ``response-total`` the requests read. The fields
here say what they count; broker/metrics/socket_server_metrics.py gives them Kafka's names.

The two connection rates are Kafka's ``Rate`` (metrics.sample.window.ms=30000,
metrics.num.samples=2): computed from windows recorded when connections open and close, which
is rare enough for it; the byte and request counters stay bare additions on the hot path and
Prometheus derives their rates with ``rate()``.
"""

from __future__ import annotations

import time

SAMPLE_WINDOW_MS = 30_000  # Kafka's metrics.sample.window.ms default
NUM_SAMPLES = 2  # Kafka's metrics.num.samples default


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class WindowedRate:
    """Kafka's Rate over a SampledStat of counts: the events of the samples not yet expired, per
    second of the time they cover (at least ``samples - 1`` whole windows, as Kafka's
    Rate.windowSize, so a burst just after start is not divided by a few milliseconds)."""

    __slots__ = ("_window_ms", "_samples", "_starts", "_counts", "_current")

    def __init__(self, now_ms: int, window_ms: int = SAMPLE_WINDOW_MS, samples: int = NUM_SAMPLES) -> None:
        self._window_ms = window_ms
        self._samples = samples
        # Kafka makes the samples as they are needed: the first one now.
        self._starts = [now_ms]
        self._counts = [0]
        self._current = 0

    def record(self, now_ms: int) -> None:
        i = self._current
        if now_ms - self._starts[i] >= self._window_ms:  # the current sample is complete: advance
            i = self._current = (i + 1) % self._samples
            if i == len(self._starts):
                self._starts.append(now_ms)
                self._counts.append(0)
            else:
                self._starts[i], self._counts[i] = now_ms, 0
        self._counts[i] += 1

    def rate(self, now_ms: int) -> float:
        """Events per second (Kafka's SampledStat.measure after purgeObsoleteSamples)."""
        expire_ms = self._samples * self._window_ms
        for i, start in enumerate(self._starts):
            if now_ms - start >= expire_ms:
                self._starts[i], self._counts[i] = now_ms, 0
        elapsed_ms = now_ms - min(self._starts)
        full_windows = elapsed_ms // self._window_ms
        if full_windows < self._samples - 1:
            elapsed_ms += (self._samples - 1 - full_windows) * self._window_ms
        return sum(self._counts) / (elapsed_ms / 1000.0)


class SelectorStats:
    """One listener's network processor: kbroker has one, the event loop."""

    __slots__ = ("connections_created", "connections_closed", "bytes_read", "bytes_written", "requests_read", "answers_sent", "creation_rate", "close_rate")

    def __init__(self, now_ms: int | None = None) -> None:
        start = monotonic_ms() if now_ms is None else now_ms
        self.connections_created = 0
        self.connections_closed = 0
        self.bytes_read = 0  # incoming-byte-total
        self.bytes_written = 0  # outgoing-byte-total
        self.requests_read = 0  # response-total (a request frame read whole)
        self.answers_sent = 0  # request-total (an answer whose last byte the socket took)
        self.creation_rate = WindowedRate(start)
        self.close_rate = WindowedRate(start)

    def connection_created(self, now_ms: int | None = None) -> None:
        self.connections_created += 1
        self.creation_rate.record(monotonic_ms() if now_ms is None else now_ms)

    def connection_closed(self, now_ms: int | None = None) -> None:
        self.connections_closed += 1
        self.close_rate.record(monotonic_ms() if now_ms is None else now_ms)


__all__ = ["NUM_SAMPLES", "SAMPLE_WINDOW_MS", "SelectorStats", "WindowedRate", "monotonic_ms"]
