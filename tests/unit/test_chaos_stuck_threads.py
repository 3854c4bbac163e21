"""A workload whose client threads do not stop says where each is blocked (stuck_threads)."""

from __future__ import annotations

import threading

from tests.chaos.workload import stuck_threads


def blocked_in_a_client_call(release: threading.Event) -> None:
    release.wait(30)


def test_a_thread_that_does_not_stop_is_named_with_the_call_it_is_blocked_in() -> None:
    release = threading.Event()
    stuck = threading.Thread(target=blocked_in_a_client_call, args=(release,), name="transactions-1", daemon=True)
    done = threading.Thread(target=lambda: None, name="transactions-0")
    stuck.start()
    done.start()
    done.join()
    try:
        report = stuck_threads([done, stuck])
        assert report.startswith("transactions-1:\n")
        assert "blocked_in_a_client_call" in report and "release.wait(30)" in report
        assert "transactions-0" not in report
    finally:
        release.set()
        stuck.join(5)
    assert stuck_threads([done, stuck]) == ""
