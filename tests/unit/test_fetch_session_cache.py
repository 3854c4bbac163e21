"""The serving side of fetch sessions: what incremental fetches remember, and who may evict whom."""

from __future__ import annotations

from collections import OrderedDict

from kio.schema.errors import ErrorCode

from broker.fetch_session import EVICTION_MS, CachedPartition, FetchSessionCache

A0, A1 = ("a", 0), ("a", 1)


def parts(*keys: tuple[str, int], offset: int = 0) -> OrderedDict[tuple[str, int], CachedPartition]:
    return OrderedDict((k, CachedPartition(offset, 1 << 20, 3, 3, 0)) for k in keys)


def open_session(cache: FetchSessionCache, size: int, privileged: bool, now_ms: int) -> int:
    keys = [("t", i) for i in range(size)]
    context = cache.new_context(0, 0, parts(*keys), [], privileged, now_ms)
    return context.session_id


def test_incremental_fetch_remembers_epochs_and_positions_of_unnamed_partitions() -> None:
    cache = FetchSessionCache(10)
    full = cache.new_context(0, 0, parts(A0, A1), [], True, 0)
    assert full.session_id and not full.incremental
    changed = OrderedDict({A0: CachedPartition(50, 1 << 20, 4, 4, 10)})
    context = cache.new_context(full.session_id, 1, changed, [], True, 1)
    assert context.incremental and list(context.partitions) == [A0, A1]
    a0 = context.partitions[A0]
    assert (a0.fetch_offset, a0.current_leader_epoch, a0.last_fetched_epoch, a0.fetcher_log_start_offset) == (50, 4, 4, 10)
    a1 = context.partitions[A1]
    assert (a1.fetch_offset, a1.current_leader_epoch, a1.last_fetched_epoch) == (0, 3, 3)


def test_forgotten_partitions_leave_the_session() -> None:
    cache = FetchSessionCache(10)
    full = cache.new_context(0, 0, parts(A0, A1), [], True, 0)
    context = cache.new_context(full.session_id, 1, OrderedDict(), [A1], True, 1)
    assert list(context.partitions) == [A0]


def test_wrong_epoch_and_unknown_session() -> None:
    cache = FetchSessionCache(10)
    full = cache.new_context(0, 0, parts(A0), [], True, 0)
    assert cache.new_context(full.session_id, 5, OrderedDict(), [], True, 1).error == ErrorCode.invalid_fetch_session_epoch
    assert cache.new_context(full.session_id + 1, 1, OrderedDict(), [], True, 1).error == ErrorCode.fetch_session_id_not_found


def test_initial_epoch_with_a_session_id_replaces_that_session() -> None:
    cache = FetchSessionCache(10)
    first = cache.new_context(0, 0, parts(A0), [], True, 0).session_id
    second = cache.new_context(first, 0, parts(A0), [], True, 1).session_id
    assert second != first and len(cache) == 1


def test_consumer_cannot_evict_a_young_follower_session() -> None:
    cache = FetchSessionCache(1)
    open_session(cache, 1, privileged=True, now_ms=0)
    assert open_session(cache, 100, privileged=False, now_ms=1000) == 0
    assert len(cache) == 1


def test_follower_evicts_a_consumer_session() -> None:
    cache = FetchSessionCache(1)
    consumer = open_session(cache, 100, privileged=False, now_ms=0)
    follower = open_session(cache, 1, privileged=True, now_ms=1000)
    assert follower != 0
    assert cache.new_context(consumer, 1, OrderedDict(), [], False, 1001).error == ErrorCode.fetch_session_id_not_found


def test_young_consumer_sessions_are_safe_from_consumers() -> None:
    cache = FetchSessionCache(1)
    open_session(cache, 1, privileged=False, now_ms=0)
    assert open_session(cache, 5, privileged=False, now_ms=1000) == 0


def test_old_sessions_go_to_larger_ones_and_stale_ones_to_anyone() -> None:
    cache = FetchSessionCache(2)
    small = open_session(cache, 1, privileged=False, now_ms=0)
    large = open_session(cache, 10, privileged=False, now_ms=0)
    later = EVICTION_MS + 1
    # Both in use, both old enough: a smaller new session does not displace them, a larger one takes the smallest.
    for session_id in (small, large):
        cache.new_context(session_id, 1, OrderedDict(), [], False, later)
    assert open_session(cache, 0, privileged=False, now_ms=later) == 0
    assert open_session(cache, 5, privileged=False, now_ms=later) != 0
    assert cache.new_context(small, 2, OrderedDict(), [], False, later).error == ErrorCode.fetch_session_id_not_found
    # Unused for longer than the eviction time: evicted by even the smallest new session.
    assert open_session(cache, 0, privileged=False, now_ms=later + EVICTION_MS + 1) != 0


def test_the_counts_kafka_reports_sessions_partitions_and_evictions() -> None:
    """NumIncrementalFetchSessions, NumIncrementalFetchPartitionsCached, IncrementalFetchSessionEvictionsPerSec."""
    cache = FetchSessionCache(2)
    consumer = open_session(cache, 3, privileged=False, now_ms=0)
    follower = open_session(cache, 2, privileged=True, now_ms=0)
    assert (len(cache), cache.partitions_cached, cache.evictions) == (2, 5, 0)
    cache.new_context(follower, 1, parts(A0), [("t", 0)], True, 1)
    assert cache.partitions_cached == 5
    # A follower takes a young consumer's slot; a session closed by its client is no eviction.
    open_session(cache, 4, privileged=True, now_ms=2)
    assert (len(cache), cache.partitions_cached, cache.evictions) == (2, 6, 1)
    cache.new_context(follower, -1, OrderedDict(), [], True, 3)
    assert (len(cache), cache.partitions_cached, cache.evictions) == (1, 4, 1)
    assert cache.new_context(consumer, 1, OrderedDict(), [], False, 3).error == ErrorCode.fetch_session_id_not_found


def test_needs_response_for_divergence_and_after_an_error() -> None:
    cached = CachedPartition(0, 100)
    assert cached.needs_response(10, 10, 0, False, 0)
    assert not cached.needs_response(10, 10, 0, False, 0)
    assert cached.needs_response(10, 10, 0, False, 0, diverging=True)
    assert cached.needs_response(-1, -1, -1, False, ErrorCode.not_leader_or_follower)
    # The error reset the cached high watermark: the same offsets are news again.
    assert cached.needs_response(10, 10, 0, False, 0)
