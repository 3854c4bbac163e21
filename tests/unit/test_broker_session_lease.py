"""BrokerSessionLease: from the sending of the last heartbeat the controller accepted unfenced, a
session less half a Raft fetch timeout (the longest a deposed controller may still accept one)."""

from __future__ import annotations

from broker.broker_session_lease import BrokerSessionLease


def test_no_lease_before_the_first_accepted_heartbeat() -> None:
    assert not BrokerSessionLease(9000, 2000).holds(0.0)


def test_the_lease_runs_from_the_sending_of_the_heartbeat_for_the_session_less_half_a_fetch_timeout() -> None:
    lease = BrokerSessionLease(9000, 2000)
    assert lease.lease_s == 8.0
    lease.renewed(100.0)
    assert lease.holds(107.999)
    assert not lease.holds(108.0)


def test_an_answer_to_an_older_heartbeat_does_not_shorten_it() -> None:
    lease = BrokerSessionLease(9000, 2000)
    lease.renewed(100.0)
    lease.renewed(99.0)
    assert lease.holds(107.5)


def test_a_fence_or_a_forgotten_epoch_ends_it_at_once() -> None:
    lease = BrokerSessionLease(9000, 2000)
    lease.renewed(100.0)
    lease.revoked()
    assert not lease.holds(100.1)
    lease.renewed(101.0)
    assert lease.holds(101.1)


def test_a_fetch_timeout_longer_than_the_session_still_leaves_half_a_session() -> None:
    # The chaos bench's fast profile: a 1 s session, a 1 s fetch timeout.
    assert BrokerSessionLease(1000, 1000).lease_s == 0.5
    assert BrokerSessionLease(1000, 4000).lease_s == 0.5
