"""ShareSessionCache: the share session rules of Kafka 4.4's SharePartitionManager.newContext and
acknowledgeSessionUpdate, and sessions going with their connection."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from broker.share.share_session_cache import (
    FINAL_EPOCH,
    ShareSessionCache,
    ShareSessionError,
    ShareSessionKey,
    TopicIdPartition,
    next_epoch,
)

T = uuid.uuid4()
P0, P1, P2 = (TopicIdPartition(T, p) for p in range(3))


def error_of(call) -> ErrorCode:  # type: ignore[no-untyped-def]
    with pytest.raises(ShareSessionError) as caught:
        call()
    return caught.value.error_code


def test_epoch_zero_opens_a_session_with_the_requested_partitions() -> None:
    cache = ShareSessionCache(10)
    context = cache.new_context("g", "m", 0, [P0, P1], [], False, "c1")
    assert context.full and not context.final and context.partitions == (P0, P1)
    session = cache.get(ShareSessionKey("g", "m"))
    assert session is not None and session.epoch == 1 and len(cache) == 1 and cache.total_partitions() == 2


def test_following_requests_add_and_forget_partitions_at_the_next_epoch() -> None:
    cache = ShareSessionCache(10)
    cache.new_context("g", "m", 0, [P0, P1], [], False, "c1")
    context = cache.new_context("g", "m", 1, [P2], [P0], True, "c1")
    assert not context.full and context.partitions == (P1, P2)
    assert cache.new_context("g", "m", 2, [], [], False, "c1").partitions == (P1, P2)
    assert cache.get(ShareSessionKey("g", "m")).epoch == 3  # type: ignore[union-attr]


def test_wrong_or_missing_sessions_are_kafkas_errors() -> None:
    cache = ShareSessionCache(10)
    assert error_of(lambda: cache.new_context("g", "m", 1, [P0], [], False, "c1")) == ErrorCode.share_session_not_found
    assert error_of(lambda: cache.new_context("g", "m", FINAL_EPOCH, [], [], True, "c1")) == ErrorCode.share_session_not_found
    # An opening request cannot acknowledge: it holds no records yet.
    assert error_of(lambda: cache.new_context("g", "m", 0, [P0], [], True, "c1")) == ErrorCode.invalid_request
    cache.new_context("g", "m", 0, [P0], [], False, "c1")
    assert error_of(lambda: cache.new_context("g", "m", 2, [], [], False, "c1")) == ErrorCode.invalid_share_session_epoch
    # A refused epoch leaves the session where it was.
    assert cache.new_context("g", "m", 1, [], [], False, "c1").partitions == (P0,)


def test_a_final_request_fetches_nothing_and_reopening_replaces_the_session() -> None:
    cache = ShareSessionCache(10)
    cache.new_context("g", "m", 0, [P0], [], False, "c1")
    final = cache.new_context("g", "m", FINAL_EPOCH, [P1], [], True, "c1")
    assert final.final and final.partitions == ()
    # The final context leaves removal to after the acknowledgements (the handler removes it).
    assert cache.get(ShareSessionKey("g", "m")) is not None
    cache.new_context("g", "m", 0, [P1], [], False, "c2")
    session = cache.get(ShareSessionKey("g", "m"))
    assert session is not None and list(session.partitions) == [P1] and session.epoch == 1 and len(cache) == 1


def test_the_session_limit_is_share_session_limit_reached() -> None:
    cache = ShareSessionCache(1)
    cache.new_context("g", "m1", 0, [P0], [], False, "c1")
    assert error_of(lambda: cache.new_context("g", "m2", 0, [P0], [], False, "c2")) == ErrorCode.share_session_limit_reached
    # The member that holds the only session may open it again.
    cache.new_context("g", "m1", 0, [P1], [], False, "c1")


def test_share_acknowledge_moves_the_epoch_and_never_opens() -> None:
    cache = ShareSessionCache(10)
    assert error_of(lambda: cache.acknowledge_session_update("g", "m", 0)) == ErrorCode.invalid_share_session_epoch
    assert error_of(lambda: cache.acknowledge_session_update("g", "m", 1)) == ErrorCode.share_session_not_found
    cache.new_context("g", "m", 0, [P0], [], False, "c1")
    assert error_of(lambda: cache.acknowledge_session_update("g", "m", 2)) == ErrorCode.invalid_share_session_epoch
    cache.acknowledge_session_update("g", "m", 1)
    cache.new_context("g", "m", 2, [], [], False, "c1")
    cache.acknowledge_session_update("g", "m", FINAL_EPOCH)
    assert cache.get(ShareSessionKey("g", "m")).epoch == 3  # type: ignore[union-attr]


def test_sessions_go_with_their_connection() -> None:
    cache = ShareSessionCache(10)
    cache.new_context("g", "m1", 0, [P0], [], False, "c1")
    cache.new_context("g", "m2", 0, [P0], [], False, "c1")
    cache.new_context("g", "m3", 0, [P0], [], False, "c2")
    closed = cache.connection_closed("c1")
    assert sorted(s.key.member_id for s in closed) == ["m1", "m2"]
    assert cache.connection_closed("c1") == []
    assert [s.key.member_id for s in cache] == ["m3"]
    # A session reopened on another connection belongs to that one.
    cache.new_context("g", "m3", 0, [P0], [], False, "c3")
    assert cache.connection_closed("c2") == []
    assert [s.key.member_id for s in cache.connection_closed("c3")] == ["m3"]


def test_epochs_wrap_to_one() -> None:
    assert next_epoch(0) == 1 and next_epoch(2**31 - 1) == 1 and next_epoch(-1) == FINAL_EPOCH


def test_a_following_request_answers_for_news_and_new_partitions_only() -> None:
    cache = ShareSessionCache(10)
    full = cache.new_context("g", "m", 0, [P0], [], False, "c1")
    assert full.answers_for(P0, False, ErrorCode.none)
    following = cache.new_context("g", "m", 1, [P0, P1], [], False, "c1")
    assert following.added == frozenset({P1})
    assert following.answers_for(P1, False, ErrorCode.none)
    assert not following.answers_for(P0, False, ErrorCode.none)
    assert following.answers_for(P0, True, ErrorCode.none)
    assert following.answers_for(P0, False, ErrorCode.not_leader_or_follower)
