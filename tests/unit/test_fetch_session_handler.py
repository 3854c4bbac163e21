"""The follower's side of KIP-227 fetch sessions, step by step as Kafka's FetchSessionHandlerTest."""

from __future__ import annotations

import uuid
from collections import OrderedDict

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from broker.fetch_session import CachedPartition, FetchSessionCache
from replication.fetch_session_handler import INITIAL_EPOCH, INVALID_SESSION_ID, FetchMetadata, FetchSessionHandler, PartitionData

T1 = uuid.uuid4()
T2 = uuid.uuid4()
A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)


def data(offset: int, topic_id: uuid.UUID = T1, leader_epoch: int = 1, last_fetched_epoch: int = 1) -> PartitionData:
    return PartitionData(topic_id, offset, 0, 1 << 20, leader_epoch, last_fetched_epoch)


def open_session(handler: FetchSessionHandler, wanted: dict, session_id: int = 77) -> None:
    request = handler.build(wanted)
    assert request.metadata.is_full
    assert handler.handle_response(ErrorCode.none, session_id, list(wanted))


def test_first_fetch_is_full_and_opens_the_session() -> None:
    handler = FetchSessionHandler()
    request = handler.build({A0: data(0), B0: data(5, T2)})
    assert request.metadata == FetchMetadata(INVALID_SESSION_ID, INITIAL_EPOCH)
    assert list(request.to_send) == [A0, B0] and request.to_forget == []
    assert handler.handle_response(ErrorCode.none, 77, [A0, B0])
    assert handler.metadata == FetchMetadata(77, 1)


def test_incremental_fetch_sends_only_changed_and_added_partitions() -> None:
    handler = FetchSessionHandler()
    open_session(handler, {A0: data(0), A1: data(3)})
    request = handler.build({A0: data(10), A1: data(3), B0: data(0, T2)})
    assert request.metadata == FetchMetadata(77, 1)
    assert request.to_send == {A0: data(10), B0: data(0, T2)}
    assert set(request.session_partitions) == {A0, A1, B0}
    # The answer may leave out partitions with nothing new.
    assert handler.handle_response(ErrorCode.none, 77, [A0])
    assert handler.metadata == FetchMetadata(77, 2)
    assert handler.build({A0: data(10), A1: data(3), B0: data(0, T2)}).to_send == {}


def test_epoch_or_leader_change_resends_a_partition() -> None:
    handler = FetchSessionHandler()
    open_session(handler, {A0: data(0)})
    assert handler.build({A0: data(0, leader_epoch=2)}).to_send == {A0: data(0, leader_epoch=2)}
    assert handler.handle_response(ErrorCode.none, 77, [])
    assert handler.build({A0: data(0, leader_epoch=2, last_fetched_epoch=2)}).to_send == {A0: data(0, leader_epoch=2, last_fetched_epoch=2)}


def test_removed_partitions_are_forgotten() -> None:
    handler = FetchSessionHandler()
    open_session(handler, {A0: data(0), B0: data(0, T2)})
    request = handler.build({A0: data(0)})
    assert request.to_send == {} and request.to_forget == [(T2, B0)]
    assert set(request.session_partitions) == {A0}


def test_recreated_topic_forgets_the_old_id_and_sends_the_new() -> None:
    handler = FetchSessionHandler()
    open_session(handler, {A0: data(4)})
    new_id = uuid.uuid4()
    request = handler.build({A0: data(0, new_id)})
    assert request.to_forget == [(T1, A0)] and request.to_send == {A0: data(0, new_id)}


def test_session_id_not_found_starts_from_scratch() -> None:
    handler = FetchSessionHandler()
    open_session(handler, {A0: data(0)})
    handler.build({A0: data(1)})
    assert not handler.handle_response(ErrorCode.fetch_session_id_not_found, 0, [])
    assert handler.metadata == FetchMetadata(INVALID_SESSION_ID, INITIAL_EPOCH)
    request = handler.build({A0: data(1)})
    assert request.metadata.is_full and request.to_send == {A0: data(1)}


def test_invalid_epoch_closes_the_session_in_the_next_full_fetch() -> None:
    handler = FetchSessionHandler()
    open_session(handler, {A0: data(0), A1: data(0)})
    handler.build({A0: data(1), A1: data(0)})
    assert not handler.handle_response(ErrorCode.invalid_fetch_session_epoch, 0, [])
    request = handler.build({A0: data(1), A1: data(0)})
    # Same session id with the initial epoch: the leader drops it and opens another.
    assert request.metadata == FetchMetadata(77, INITIAL_EPOCH)
    assert list(request.to_send) == [A0, A1]
    assert handler.handle_response(ErrorCode.none, 78, [A0, A1])
    assert handler.metadata == FetchMetadata(78, 1)


def test_network_error_closes_existing_and_attempts_new() -> None:
    handler = FetchSessionHandler()
    open_session(handler, {A0: data(0)})
    handler.build({A0: data(1)})
    handler.handle_error()
    assert handler.metadata == FetchMetadata(77, INITIAL_EPOCH)
    assert handler.build({A0: data(1)}).metadata.is_full


def test_full_answer_missing_a_partition_is_refused() -> None:
    handler = FetchSessionHandler()
    handler.build({A0: data(0), A1: data(0)})
    assert not handler.handle_response(ErrorCode.none, 77, [A0])
    assert handler.metadata == FetchMetadata(INVALID_SESSION_ID, INITIAL_EPOCH)


def test_incremental_answer_with_an_unknown_partition_is_refused() -> None:
    handler = FetchSessionHandler()
    open_session(handler, {A0: data(0)})
    handler.build({A0: data(1)})
    assert not handler.handle_response(ErrorCode.none, 77, [A0, B0])
    assert handler.metadata == FetchMetadata(77, INITIAL_EPOCH)


def test_leader_without_a_session_slot_keeps_fetches_full() -> None:
    handler = FetchSessionHandler()
    handler.build({A0: data(0)})
    assert handler.handle_response(ErrorCode.none, INVALID_SESSION_ID, [A0])
    assert handler.build({A0: data(0)}).metadata.is_full


def test_leader_closing_the_session_in_an_incremental_answer() -> None:
    handler = FetchSessionHandler()
    open_session(handler, {A0: data(0)})
    handler.build({A0: data(1)})
    assert handler.handle_response(ErrorCode.none, INVALID_SESSION_ID, [A0])
    assert handler.metadata == FetchMetadata(INVALID_SESSION_ID, INITIAL_EPOCH)


def test_epoch_wraps_to_one() -> None:
    handler = FetchSessionHandler()
    open_session(handler, {A0: data(0)})
    handler.metadata = FetchMetadata(77, 2**31 - 1)
    handler.build({A0: data(0)})
    assert handler.handle_response(ErrorCode.none, 77, [])
    assert handler.metadata == FetchMetadata(77, 1)


# -- the follower's handler against the leader's cache, under lost requests and restarts ---------

PARTITIONS = [("a", 0), ("a", 1), ("b", 0), ("c", 2)]
IDS = {"a": T1, "b": T2, "c": uuid.uuid4()}
# (partition number -> fetch offset wanted, what happens to the request, which partitions an incremental answer names)
Step = tuple[dict[int, int], str, int]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.dictionaries(st.integers(0, len(PARTITIONS) - 1), st.integers(0, 3), max_size=len(PARTITIONS)),
            st.sampled_from(["answered", "answered", "answered", "lost_before", "lost_after", "leader_restart"]),
            st.integers(0, 2**len(PARTITIONS) - 1),
        ),
        max_size=25,
    )
)
def test_after_every_answered_fetch_the_leader_reads_what_the_follower_wants(steps: list[Step]) -> None:
    handler = FetchSessionHandler()
    cache = FetchSessionCache(4)
    for wanted_offsets, outcome, answered_bits in steps:
        wanted = {PARTITIONS[i]: data(offset, IDS[PARTITIONS[i][0]]) for i, offset in sorted(wanted_offsets.items())}
        request = handler.build(wanted)
        if outcome == "leader_restart":
            cache = FetchSessionCache(4)
        requested = OrderedDict(
            (tp, CachedPartition(p.fetch_offset, p.max_bytes, p.current_leader_epoch, p.last_fetched_epoch, p.log_start_offset))
            for tp, p in request.to_send.items()
        )
        if outcome == "lost_before":
            handler.handle_error()
            continue
        context = cache.new_context(
            request.metadata.session_id, request.metadata.epoch, requested, [tp for _, tp in request.to_forget], True, 0
        )
        if outcome == "lost_after":
            handler.handle_error()
            continue
        if context.error:
            assert not handler.handle_response(context.error, 0, [])
            continue
        if context.incremental:
            answered = [tp for i, tp in enumerate(context.partitions) if answered_bits >> i & 1]
        else:
            answered = list(context.partitions)
        assert handler.handle_response(ErrorCode.none, context.session_id, answered)
        assert set(context.partitions) == set(wanted)
        for tp, cached in context.partitions.items():
            assert (cached.fetch_offset, cached.current_leader_epoch, cached.last_fetched_epoch) == (
                wanted[tp].fetch_offset,
                wanted[tp].current_leader_epoch,
                wanted[tp].last_fetched_epoch,
            )
