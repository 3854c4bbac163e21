"""ClientQuotaManager: produce and fetch byte-rate quotas by user and client id, sans-IO.

Kafka's ClientQuotaManager with its default quota callback:
- A request counts against the most specific quota configured for its (user, client id), in
  Kafka's order: user and client id, user and default client id, user, default user and client
  id, default user and default client id, default user, client id, default client id. Every
  client that resolves to the same quota entity shares one rate: a user's quota holds all of that
  user's clients together.
- The rate is Kafka's Rate over a SampledStat: ``quota.window.num`` samples (11) of
  ``quota.window.size.seconds`` (1), the elapsed window counted as at least samples - 1 windows.
- A value is recorded first; if the rate is then above the quota, the throttle time is the time
  the rate needs to come back to it with nothing more recorded:
  ``(rate - quota) / quota * window``, rounded to the millisecond.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from broker.metadata.metadata_image import QuotaEntity

PRODUCE = "producer_byte_rate"
FETCH = "consumer_byte_rate"
USER, CLIENT_ID = "user", "client-id"

# (user part, client id part) of each candidate, most specific first: True is the request's own
# name, None the default entity, and absent (False) not part of the entity at all.
_PRECEDENCE: tuple[tuple[bool | None, bool | None], ...] = (
    (True, True),
    (True, None),
    (True, False),
    (None, True),
    (None, None),
    (None, False),
    (False, True),
    (False, None),
)


@dataclass(slots=True)
class SampledRate:
    """Kafka's Rate of a Sum over ``samples`` windows of ``window_ms``."""

    samples: int = 11
    window_ms: int = 1000
    _windows: deque[list[float]] = field(default_factory=deque)  # [start ms, sum]

    def record(self, value: float, now_ms: int) -> None:
        self._purge(now_ms)
        if not self._windows or now_ms - self._windows[-1][0] >= self.window_ms:
            self._windows.append([now_ms, 0.0])
            if len(self._windows) > self.samples:
                self._windows.popleft()
        self._windows[-1][1] += value

    def measure(self, now_ms: int) -> float:
        """Per second."""
        self._purge(now_ms)
        return sum(w[1] for w in self._windows) * 1000.0 / self.window_size(now_ms)

    def window_size(self, now_ms: int) -> int:
        oldest = self._windows[0][0] if self._windows else now_ms
        elapsed = now_ms - oldest
        full = int(elapsed // self.window_ms)
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return max(int(elapsed), 1)

    def _purge(self, now_ms: int) -> None:
        # A window is obsolete once the whole span of samples has passed since it began.
        expire_before = now_ms - self.samples * self.window_ms
        while self._windows and self._windows[0][0] + self.window_ms <= expire_before:
            self._windows.popleft()


class ClientQuotaManager:
    """``quotas``: the client quotas of the metadata image as it is now."""

    def __init__(self, key: str, quotas: Callable[[], Mapping[QuotaEntity, Mapping[str, float]]], samples: int = 11, window_s: int = 1) -> None:
        self.key = key
        self._current = quotas
        self._samples = samples
        self._window_ms = window_s * 1000
        self._quotas: Mapping[QuotaEntity, Mapping[str, float]] = {}
        self._rates: dict[QuotaEntity, SampledRate] = {}
        self._enabled = False

    @property
    def enabled(self) -> bool:
        """Whether any client has this quota: without one nothing is recorded, as in Kafka."""
        quotas = self._current()
        if quotas is not self._quotas:
            # A new image: the rates of the entities that keep a quota go on.
            self._quotas = quotas
            self._enabled = any(self.key in values for values in quotas.values())
            self._rates = {entity: rate for entity, rate in self._rates.items() if self.key in quotas.get(entity, {})}
        return self._enabled

    def quota_entity(self, user: str, client_id: str) -> tuple[QuotaEntity, float] | None:
        """The most specific entity with this manager's quota for (user, client id), and its quota."""
        if not self.enabled:
            return None
        for user_part, client_part in _PRECEDENCE:
            parts: list[tuple[str, str | None]] = []
            if client_part is not False:
                parts.append((CLIENT_ID, client_id if client_part else None))
            if user_part is not False:
                parts.append((USER, user if user_part else None))
            values = self._quotas.get(tuple(parts))
            if values is not None and self.key in values:
                return tuple(parts), values[self.key]
        return None

    def record(self, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Record ``value`` for the client; the throttle time in ms (0: within its quota)."""
        found = self.quota_entity(user, client_id)
        if found is None:
            return 0
        entity, bound = found
        rate = self._rates.get(entity)
        if rate is None:
            rate = self._rates[entity] = SampledRate(self._samples, self._window_ms)
        rate.record(value, now_ms)
        measured = rate.measure(now_ms)
        if measured <= bound:
            return 0
        return round((measured - bound) / bound * rate.window_size(now_ms))

    def unrecord(self, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Take back what a fetch answered empty (throttled) would have sent, as Kafka does."""
        found = self.quota_entity(user, client_id)
        if found is not None and (rate := self._rates.get(found[0])) is not None:
            rate.record(-value, now_ms)

    def max_value_in_window(self, user: str, client_id: str) -> float | None:
        """The most one request may take without being throttled for sure (Kafka's
        getMaxValueInQuotaWindow): a fetch's size is capped to it. None: no quota."""
        found = self.quota_entity(user, client_id)
        return None if found is None else found[1] * (self._samples - 1) * self._window_ms / 1000


def user_name(principal: str) -> str:
    """The user a quota is looked up by: a KafkaPrincipal's name (``User:alice`` is alice)."""
    return principal.split(":", 1)[1] if ":" in principal else principal
