"""ControllerMutationQuotaManager: the ``controller_mutation_rate`` quota (KIP-599), sans-IO.

Kafka's ControllerMutationQuotaManager: partitions created or deleted per second by CreateTopics,
CreatePartitions and DeleteTopics, for the quota entity of the client's (user, client id) in
Kafka's precedence. The rate is a token bucket, not a sampled Rate: it holds at most a burst of
``quota * samples * window`` tokens, refills at the quota, and each mutation takes as many tokens
as partitions. Each request gets its own view of the entity's bucket:
- strict (CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+): a topic is refused with
  THROTTLING_QUOTA_EXCEEDED once the bucket is below zero; a topic taken while it is not takes all
  its partitions even if that drives the bucket below zero (a request is never refused when the
  bucket is full, however many partitions it asks for);
- permissive (older versions, which have no such error): every topic is taken and the client is
  throttled afterwards for the time the bucket needs to come back to zero.
The answer's throttle time is the time to get back to zero, as measured when the quota was
violated, less the time since.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from broker.client_quota_manager import ClientQuotaManager
from broker.metadata.metadata_image import QuotaEntity
from protocol.api_keys import ApiKey

MUTATION = "controller_mutation_rate"
# ControllerApis' strictSinceVersion: the first version whose answers may carry THROTTLING_QUOTA_EXCEEDED.
STRICT_SINCE: dict[ApiKey, int] = {ApiKey.CREATE_TOPICS: 6, ApiKey.CREATE_PARTITIONS: 3, ApiKey.DELETE_TOPICS: 5}
_MAX_THROTTLE_MS = 2**31 - 1  # the answers' throttle_time_ms is an int32


@dataclass(slots=True)
class TokenBucket:
    """Kafka's TokenBucket stat: tokens (partitions) that refill at ``quota`` per second up to ``burst``."""

    tokens: float
    last_ms: int

    def refill(self, quota: float, burst: float, now_ms: int) -> float:
        self.tokens = min(burst, self.tokens + quota * max(now_ms - self.last_ms, 0) / 1000)
        self.last_ms = now_ms
        return self.tokens

    def take(self, permits: float, quota: float, burst: float, now_ms: int) -> float:
        self.tokens = min(burst, self.refill(quota, burst, now_ms) - permits)
        return self.tokens


def _time_to_zero_ms(tokens: float, quota: float) -> int:
    """Kafka's ControllerMutationQuotaManager.throttleTimeMs: how long the bucket needs to refill to zero."""
    if quota <= 0:
        return _MAX_THROTTLE_MS
    return min(round(-tokens / quota * 1000), _MAX_THROTTLE_MS)


class ControllerMutationQuota:
    """One request's view of its quota entity's bucket (Kafka's Strict- or PermissiveControllerMutationQuota)."""

    def __init__(self, bucket: TokenBucket, quota: float, burst: float, strict: bool) -> None:
        self._bucket = bucket
        self._quota = quota
        self._burst = burst
        self.strict = strict
        self._throttle_ms = 0
        self._recorded_ms = 0

    def record(self, permits: float, now_ms: int) -> bool:
        """Take ``permits`` partitions; False when a strict quota refuses them (nothing taken)."""
        if self.strict:
            tokens = self._bucket.refill(self._quota, self._burst, now_ms)
            if tokens < 0:
                self._violated(tokens, now_ms)
                return False
            self._bucket.take(permits, self._quota, self._burst, now_ms)
            return True
        tokens = self._bucket.take(permits, self._quota, self._burst, now_ms)
        if tokens < 0:
            self._violated(tokens, now_ms)
        return True

    def unrecord(self, permits: float, now_ms: int) -> None:
        """Give back what a mutation the controller then refused took: only mutations made count."""
        self._bucket.take(-permits, self._quota, self._burst, now_ms)

    def throttle_time_ms(self, now_ms: int) -> int:
        """The answer's throttle time: the wait measured at the last violation, less the time since."""
        return max(0, self._throttle_ms - (now_ms - self._recorded_ms))

    def _violated(self, tokens: float, now_ms: int) -> None:
        self._throttle_ms = _time_to_zero_ms(tokens, self._quota)
        self._recorded_ms = now_ms


class UnboundedControllerMutationQuota(ControllerMutationQuota):
    """No quota for this client: everything is taken, nothing is throttled."""

    def __init__(self) -> None:
        super().__init__(TokenBucket(0.0, 0), 0.0, 0.0, strict=False)

    def record(self, permits: float, now_ms: int) -> bool:
        return True

    def unrecord(self, permits: float, now_ms: int) -> None:
        pass


UNBOUNDED = UnboundedControllerMutationQuota()


class ControllerMutationQuotaManager:
    """``quotas``: the client quotas of the metadata image as it is now. ``samples`` and
    ``window_s`` are Kafka's controller.quota.window.num and controller.quota.window.size.seconds."""

    def __init__(self, quotas: Callable[[], Mapping[QuotaEntity, Mapping[str, float]]], samples: int = 11, window_s: int = 1) -> None:
        self._lookup = ClientQuotaManager(MUTATION, quotas, samples, window_s)
        self._burst_s = samples * window_s
        # One bucket per entity that ever had a quota, kept across quota changes as Kafka keeps its sensor.
        self._buckets: dict[QuotaEntity, TokenBucket] = {}

    def new_quota(self, user: str, client_id: str, api_key: ApiKey, version: int, now_ms: int) -> ControllerMutationQuota:
        """Kafka's newQuotaFor: strict from the API's ``STRICT_SINCE`` version, permissive before."""
        found = self._lookup.quota_entity(user, client_id)
        if found is None:
            return UNBOUNDED
        entity, quota = found
        burst = quota * self._burst_s
        bucket = self._buckets.get(entity)
        if bucket is None:
            bucket = self._buckets[entity] = TokenBucket(burst, now_ms)
        return ControllerMutationQuota(bucket, quota, burst, strict=version >= STRICT_SINCE[api_key])
