"""BrokerSessionLease: whether the controller may have fenced this broker by now.

The active controller fences a broker that sent no heartbeat for ``broker.session.timeout.ms``
and moves its leaderships; the broker learns of that only from the metadata log, which a broker
cut off from the controller does not get. Until then it still believes it leads its partitions:
a zombie. A zombie leader answers a consumer's fetch past its log end OFFSET_OUT_OF_RANGE, which
sends the consumer to its auto.offset.reset although the new leader has that offset (soak seed
1484106251); outside the lease the broker answers NOT_LEADER_OR_FOLLOWER instead.

A zombie group coordinator also answers OffsetFetch from memory, stale offsets included, and a
read_committed consumer that rewinds to them processes its input twice (soak seeds 57861548,
483707690 and 1867237364); outside the lease a stable fetch waits for the session, then answers
NOT_COORDINATOR. (Answering it UNSTABLE_OFFSET_COMMIT at once was tried and taken back:
librdkafka's assignment path, given that answer after its retries, started the partition at no
offset and reset it to earliest, soak seed 314609839.)

The lease says, from this broker's side, whether a fence could have happened: it runs from the
moment the last heartbeat the controller accepted, with the broker unfenced, was *sent*, since
the controller counts the session from its arrival, which is no earlier. A heartbeat may be
accepted by a controller that has lost its quorum and does not know it yet; such a Raft leader
resigns within 1.5 fetch timeouts of last hearing from a majority, while its successor is
elected no sooner than one fetch timeout after that and then gives every broker a fresh session.
So the lease is shorter than the session by half a fetch timeout, and ends before any fence.
"""

from __future__ import annotations


class BrokerSessionLease:
    def __init__(self, session_timeout_ms: int, quorum_fetch_timeout_ms: int) -> None:
        # Never shorter than half the session: a configuration with a fetch timeout over the
        # session would otherwise leave no lease at all.
        self.lease_s = max(session_timeout_ms - quorum_fetch_timeout_ms // 2, session_timeout_ms // 2) / 1000
        self._sent_at: float | None = None

    def renewed(self, sent_at: float) -> None:
        """The controller accepted a heartbeat sent at ``sent_at`` (loop time), the broker unfenced."""
        if self._sent_at is None or sent_at > self._sent_at:
            self._sent_at = sent_at

    def revoked(self) -> None:
        """The controller says this broker is fenced, or forgot its epoch."""
        self._sent_at = None

    def holds(self, now: float) -> bool:
        return self._sent_at is not None and now < self._sent_at + self.lease_s
