"""The state of in-flight records: Kafka's ``InFlightState`` and ``InFlightBatch``
(``org.apache.kafka.server.share.fetch``).

A batch keeps one ``InFlightState`` for all its offsets until an acknowledgement, a partial
acquisition or a timeout touches only some of them; only then does it split into one state
per offset (``split``), as Kafka's ``maybeInitializeOffsetStateUpdate`` does. Ranges that
share a state therefore cost one object, however many records they hold.
"""

from __future__ import annotations

from collections.abc import Iterator

from broker.share.record_state import RecordState

# Kafka's EMPTY_MEMBER_ID: the holder of records nobody has acquired.
EMPTY_MEMBER_ID = ""
# No acquisition lock.
NO_LOCK = 0

StateSnapshot = tuple[RecordState, int, str, int, int]


class InFlightState:
    """State, delivery count, holder and acquisition lock of one record or one whole batch."""

    __slots__ = ("delivery_count", "lock_deadline_ms", "lock_token", "member_id", "state")

    def __init__(
        self,
        state: RecordState,
        delivery_count: int,
        member_id: str = EMPTY_MEMBER_ID,
        lock_token: int = NO_LOCK,
        lock_deadline_ms: int = -1,
    ) -> None:
        self.state = state
        self.delivery_count = delivery_count
        self.member_id = member_id
        # The token names the acquisition that set the lock, so that an expiry scheduled for
        # an earlier acquisition of the same records is recognised as stale.
        self.lock_token = lock_token
        self.lock_deadline_ms = lock_deadline_ms

    def copy(self) -> InFlightState:
        return InFlightState(
            self.state, self.delivery_count, self.member_id, self.lock_token, self.lock_deadline_ms
        )

    def snapshot(self) -> StateSnapshot:
        return (self.state, self.delivery_count, self.member_id, self.lock_token, self.lock_deadline_ms)

    def restore(self, saved: StateSnapshot) -> None:
        self.state, self.delivery_count, self.member_id, self.lock_token, self.lock_deadline_ms = saved

    def try_update(
        self,
        new_state: RecordState,
        *,
        increase_delivery_count: bool,
        max_delivery_count: int,
        member_id: str,
        dlq: bool = False,
    ) -> bool:
        """Kafka's ``tryUpdateState``: False when the transition is not allowed.

        A record going back to AVAILABLE that was already delivered ``max_delivery_count``
        times is archived instead (ARCHIVING, to be written to the group's dead-letter queue
        first, with ``dlq``); an archived record keeps its delivery count.
        """
        if new_state is RecordState.AVAILABLE and self.delivery_count >= max_delivery_count:
            new_state = RecordState.ARCHIVING if dlq else RecordState.ARCHIVED
        if not self.state.can_transition_to(new_state):
            return False
        self.state = new_state
        if new_state is not RecordState.ARCHIVED and increase_delivery_count:
            self.delivery_count += 1
        self.member_id = member_id
        if new_state is not RecordState.ACQUIRED:
            self.lock_token = NO_LOCK
            self.lock_deadline_ms = -1
        return True

    def archive(self) -> None:
        """Archive a record whatever its state (Kafka's ``archive``): the log no longer serves it
        (compacted away, or data of an aborted transaction)."""
        self.state = RecordState.ARCHIVED
        self.member_id = EMPTY_MEMBER_ID
        self.lock_token = NO_LOCK
        self.lock_deadline_ms = -1

    def __repr__(self) -> str:
        return (
            f"InFlightState({self.state.name}, count={self.delivery_count}, "
            f"member={self.member_id!r}, deadline={self.lock_deadline_ms})"
        )


class InFlightBatch:
    """Records ``first_offset..last_offset`` (inclusive) fetched together."""

    __slots__ = ("first_offset", "last_offset", "offset_states", "state")

    def __init__(self, first_offset: int, last_offset: int, state: InFlightState) -> None:
        self.first_offset = first_offset
        self.last_offset = last_offset
        # The batch-wide state; meaningless once ``offset_states`` exists.
        self.state = state
        self.offset_states: dict[int, InFlightState] | None = None

    def split(self) -> dict[int, InFlightState]:
        """Track every offset on its own from now on (a no-op when already split)."""
        if self.offset_states is None:
            base = self.state
            self.offset_states = {
                offset: base.copy() for offset in range(self.first_offset, self.last_offset + 1)
            }
        return self.offset_states

    def states_in(self, first: int, last: int) -> Iterator[tuple[int, InFlightState]]:
        """The per-offset states within ``first..last``; the batch must be split."""
        assert self.offset_states is not None
        states = self.offset_states
        for offset in range(max(first, self.first_offset), min(last, self.last_offset) + 1):
            yield offset, states[offset]

    def __repr__(self) -> str:
        detail = self.state if self.offset_states is None else f"{len(self.offset_states)} offsets"
        return f"InFlightBatch({self.first_offset}-{self.last_offset}, {detail})"
