"""Kafka's ExpiringErrorCache (org.apache.kafka.server): the last creation error of each topic, kept
for a time to live, sans-IO (the caller gives the time).

The group coordinator keeps the errors of the streams groups' internal topics it failed to create
here: a later heartbeat of the group tells the member about them, and a topic is not asked for
again while its error is kept. At most ``max_size`` topics are kept: past it (and past their time),
the one that expires first goes, as Kafka's priority queue drops it.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field

# DefaultAutoTopicCreationManager's DEFAULT_TOPIC_ERROR_CACHE_CAPACITY.
DEFAULT_CAPACITY = 1000


@dataclass(order=True, frozen=True, slots=True)
class _Entry:
    expiration_ms: int
    seq: int  # orders entries that expire together
    topic: str = field(compare=False)
    error: str = field(compare=False)


class ExpiringErrorCache:
    def __init__(self, max_size: int = DEFAULT_CAPACITY) -> None:
        self._max_size = max_size
        self._by_topic: dict[str, _Entry] = {}
        self._expiry: list[_Entry] = []
        self._seq = itertools.count()

    def put(self, topic: str, error: str, ttl_ms: int, now_ms: int) -> None:
        entry = _Entry(now_ms + ttl_ms, next(self._seq), topic, error)
        self._by_topic[topic] = entry
        heapq.heappush(self._expiry, entry)
        while self._expiry and (self._expiry[0].expiration_ms <= now_ms or len(self._by_topic) > self._max_size):
            gone = heapq.heappop(self._expiry)
            # A topic put again has a newer entry: the older one only leaves the queue.
            if self._by_topic.get(gone.topic) is gone:
                del self._by_topic[gone.topic]

    def has_error(self, topic: str, now_ms: int) -> bool:
        entry = self._by_topic.get(topic)
        return entry is not None and entry.expiration_ms > now_ms

    def errors_for_topics(self, topics: Iterable[str], now_ms: int) -> dict[str, str]:
        """The unexpired errors of these topics, in their order."""
        return {t: e.error for t in topics if (e := self._by_topic.get(t)) is not None and e.expiration_ms > now_ms}

    def clear(self) -> None:
        self._by_topic.clear()
        self._expiry.clear()
