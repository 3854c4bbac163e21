"""ClientQuotaManager and its rate, against Kafka's rules: Rate's window (at least samples - 1
windows), the throttle time that brings the rate back to the quota, the quota entity precedence
of Kafka's default quota callback, and a fetch taken back when it is answered empty."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from broker.client_quota_manager import FETCH, PRODUCE, ClientQuotaManager, SampledRate, user_name


def manager(quotas: dict, key: str = PRODUCE, samples: int = 11) -> ClientQuotaManager:  # type: ignore[type-arg]
    return ClientQuotaManager(key, lambda: quotas, samples=samples)


def test_the_window_counts_at_least_samples_minus_one_windows() -> None:
    rate = SampledRate(samples=11, window_ms=1000)
    rate.record(10_000, 0)
    # 10 s assumed though only the first window has begun: Kafka's guard against a huge early rate.
    assert rate.window_size(0) == 10_000
    assert rate.measure(0) == 1000.0
    assert rate.window_size(500) == 10_500


def test_old_windows_are_forgotten() -> None:
    rate = SampledRate(samples=3, window_ms=1000)
    rate.record(3000, 0)
    rate.record(3000, 1000)
    rate.record(3000, 2000)
    assert rate.measure(2500) == 9000 * 1000 / 2500
    # Three windows later the first two are gone.
    rate.record(0, 5000)
    assert rate.measure(5000) < 9000 * 1000 / 5000


def test_the_throttle_time_brings_the_rate_back_to_the_quota() -> None:
    quotas = {(("client-id", "c"),): {PRODUCE: 1000.0}}
    m = manager(quotas)
    assert m.record("alice", "c", 10_000, 0) == 0  # 10,000 bytes over the assumed 10 s: exactly the quota
    throttle = m.record("alice", "c", 5_000, 0)
    # 15,000 bytes over 10 s is 1,500/s: (1500 - 1000) / 1000 * 10 s.
    assert throttle == 5_000
    # Waited out, the same rate is back within the quota.
    assert 15_000 * 1000 / (10_000 + throttle) == 1000.0


def test_kafkas_quota_entity_precedence() -> None:
    quotas = {
        (("client-id", None),): {PRODUCE: 1.0},
        (("client-id", "c"),): {PRODUCE: 2.0},
        (("user", None),): {PRODUCE: 3.0},
        (("client-id", None), ("user", None)): {PRODUCE: 4.0},
        (("client-id", "c"), ("user", None)): {PRODUCE: 5.0},
        (("user", "alice"),): {PRODUCE: 6.0},
        (("client-id", None), ("user", "alice")): {PRODUCE: 7.0},
        (("client-id", "c"), ("user", "alice")): {PRODUCE: 8.0},
    }
    order = [
        (("client-id", "c"), ("user", "alice")),
        (("client-id", None), ("user", "alice")),
        (("user", "alice"),),
        (("client-id", "c"), ("user", None)),
        (("client-id", None), ("user", None)),
        (("user", None),),
        (("client-id", "c"),),
        (("client-id", None),),
    ]
    remaining = dict(quotas)
    for expected in order:
        found = manager(remaining).quota_entity("alice", "c")
        assert found is not None and found[0] == expected
        del remaining[expected]
    assert manager(remaining).quota_entity("alice", "c") is None


def test_one_user_quota_holds_all_of_its_clients_together() -> None:
    m = manager({(("user", "alice"),): {PRODUCE: 1000.0}})
    assert m.record("alice", "one", 10_000, 0) == 0
    assert m.record("alice", "two", 1_000, 0) > 0
    assert m.record("bob", "one", 1_000_000, 0) == 0


def test_a_quota_of_the_other_kind_does_not_throttle() -> None:
    m = manager({(("client-id", "c"),): {FETCH: 1.0}})
    assert not m.enabled
    assert m.record("alice", "c", 10**9, 0) == 0


def test_a_throttled_fetch_is_taken_back() -> None:
    m = manager({(("client-id", "c"),): {FETCH: 1000.0}}, key=FETCH)
    assert m.record("u", "c", 9_000, 0) == 0
    assert m.record("u", "c", 5_000, 0) > 0
    m.unrecord("u", "c", 5_000, 0)
    assert m.record("u", "c", 1_000, 0) == 0  # 10,000 over 10 s: the quota, not above it
    assert m.max_value_in_window("u", "c") == 1000.0 * 10


def test_a_new_image_keeps_the_rates_of_entities_that_keep_their_quota() -> None:
    quotas = {(("client-id", "c"),): {PRODUCE: 1000.0}}
    holder = {"q": quotas}
    m = ClientQuotaManager(PRODUCE, lambda: holder["q"])
    m.record("u", "c", 10_000, 0)
    holder["q"] = {(("client-id", "c"),): {PRODUCE: 1000.0}, (("client-id", "d"),): {PRODUCE: 5.0}}
    assert m.record("u", "c", 1_000, 0) > 0
    holder["q"] = {}
    assert not m.enabled and m.record("u", "c", 10**9, 0) == 0


@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 200)), min_size=1, max_size=300))
def test_throttling_as_told_keeps_the_long_run_rate_at_the_quota(sends: list[tuple[int, int]]) -> None:
    """A client whose requests are small beside the quota (as a producer's batches are) and who
    waits out every throttle it is given never sends more than the quota over the time it ran
    and the window, plus one request. (A single request of many seconds' worth of quota can
    do better, in Kafka too: it is forgotten when its sample expires.)"""
    quota = 1000.0
    m = manager({(("client-id", "c"),): {PRODUCE: quota}}, samples=11)
    now = 0
    total = 0
    for size, pause in sends:
        now += pause
        total += size
        now += m.record("u", "c", size, now)
    largest = max(size for size, _ in sends)
    assert total <= quota * (now + 11_000) / 1000 + largest


def test_user_name_is_the_principals_name() -> None:
    assert user_name("User:alice") == "alice"
    assert user_name("User:ANONYMOUS") == "ANONYMOUS"
