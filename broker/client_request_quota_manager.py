"""ClientRequestQuotaManager: the ``request_percentage`` quota, sans-IO.

Kafka's ClientRequestQuotaManager: the share of request-handling time a (user, client id) quota
entity may use, in percent of one thread, over the same Rate as the byte-rate quotas
(``quota.window.num`` samples of ``quota.window.size.seconds``) and with Kafka's precedence of
entities. A request's time is recorded when it is answered; if the rate is then over the quota
the client is throttled for the time the rate needs to come back to it, at most one window (a
client idle for that long would otherwise wait for time it never used).

What a request's time is here: kbroker has one event loop, so it is the time the loop spent on
the request itself (decoding it and every step of its handler; encoding the answer counts after
the throttle is decided, as Kafka counts its network thread's part of a request), not the time
the request waited (for replication, a long-polling fetch or the controller). Kafka counts the
time of its request-handler (io) thread plus its network thread's part; a percentage here is
therefore of the single loop, which does all of the broker's work.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from broker.client_quota_manager import ClientQuotaManager
from broker.metadata.metadata_image import QuotaEntity
from protocol.api_keys import ApiKey

REQUEST = "request_percentage"
# Kafka's NanosToPercentagePerSecond: a second of one thread is 100 percent.
NANOS_TO_PERCENT = 100.0 / 1e9

_FETCH, _PRODUCE, _WRITE_TXN_MARKERS = int(ApiKey.FETCH), int(ApiKey.PRODUCE), int(ApiKey.WRITE_TXN_MARKERS)


def is_exempt(api_key: int, request: Any, cluster_action: Callable[[], bool]) -> bool:
    """Requests Kafka never throttles for request time: a follower's fetch (answered on the
    exempt path whoever sends it), a produce with acks=0 (no answer to carry a throttle time),
    and WriteTxnMarkers from a principal with CLUSTER_ACTION (the brokers'; anyone else's refusal
    is throttled, as Kafka's handleError throttles a cluster action's authorization failure)."""
    if api_key == _FETCH:
        return bool(request.replica_id >= 0)
    if api_key == _PRODUCE:
        return bool(request.acks == 0)
    if api_key == _WRITE_TXN_MARKERS:
        return cluster_action()
    return False


class ClientRequestQuotaManager:
    """``quotas``: the client quotas of the metadata image as it is now."""

    def __init__(self, quotas: Callable[[], Mapping[QuotaEntity, Mapping[str, float]]], samples: int = 11, window_s: int = 1) -> None:
        self._quota = ClientQuotaManager(REQUEST, quotas, samples, window_s)
        self._max_throttle_ms = window_s * 1000

    @property
    def enabled(self) -> bool:
        """Whether any client has a request quota: without one no request is timed."""
        return self._quota.enabled

    def record(self, user: str, client_id: str, nanos: int, now_ms: int) -> int:
        """Record a request's handling time; the throttle time in ms (0: within the quota)."""
        return min(self._quota.record(user, client_id, nanos * NANOS_TO_PERCENT, now_ms), self._max_throttle_ms)

    def record_no_throttle(self, user: str, client_id: str, nanos: int, now_ms: int) -> None:
        """Time spent on the request after its throttle was decided: it weighs on the next ones."""
        self._quota.record(user, client_id, nanos * NANOS_TO_PERCENT, now_ms)
