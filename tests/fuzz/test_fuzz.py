"""The short fuzz runs of the suite; `make fuzz` is the long one (tests/fuzz/__main__.py).

Each run takes its seed from FUZZ_SEED, or a fresh random one; the seed is in every failure
message, and FUZZ_SEED=<seed> FUZZ_FRAME=<index> replays a single frame in-process.
FUZZ_INPROCESS_FRAMES, FUZZ_NETWORK_FRAMES and FUZZ_CONTROLLER_FRAMES size the runs.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from protocol.api_keys import KNOWN_APIS
from protocol.messages import decode_request
from tests.fuzz.corpus import corpus
from tests.fuzz.inprocess import check_frame, run_in_process
from tests.fuzz.mutate import Mutator
from tests.fuzz.outcomes import Outcomes
from tests.fuzz.session import fuzz_broker

SEED = int(os.environ.get("FUZZ_SEED", random.randrange(2**31)))
INPROCESS_FRAMES = int(os.environ.get("FUZZ_INPROCESS_FRAMES", 30_000))
NETWORK_FRAMES = int(os.environ.get("FUZZ_NETWORK_FRAMES", 3_000))
CONTROLLER_FRAMES = int(os.environ.get("FUZZ_CONTROLLER_FRAMES", 1_000))
# Bounds on the wall time, whatever the machine: a run stops early rather than overrun.
INPROCESS_DEADLINE_S = 15.0
NETWORK_DEADLINE_S = 15.0
CONTROLLER_DEADLINE_S = 6.0


@pytest.fixture(autouse=True)
def _print_seed() -> None:
    # Shown with the output of a failing test, whatever failed.
    print(f"FUZZ_SEED={SEED} replays this run")


def test_every_valid_request_decodes_as_built() -> None:
    """The generator is right: each valid request of every API version decodes to the entity it was built from."""
    built = corpus(SEED)
    assert {(r.api_key, r.version) for r in built.requests} == {(k, v) for k, r in KNOWN_APIS.items() for v in range(r.min_version, r.max_version + 1)}
    for request in built.requests:
        decoded = decode_request(request.api_key, request.version, bytearray(request.body), 0)
        if request.api_key not in (0, 1):  # Produce and Fetch have their own request classes
            assert decoded == request.entity, f"FUZZ_SEED={SEED}: api {request.api_key} v{request.version}"


@pytest.mark.skipif("FUZZ_FRAME" not in os.environ, reason="FUZZ_FRAME replays one frame")
def test_replay_one_frame() -> None:
    index = int(os.environ["FUZZ_FRAME"])
    result = Outcomes()
    check_frame(SEED, index, corpus(SEED).mutant(index), result)
    print(result.report(f"FUZZ_SEED={SEED} FUZZ_FRAME={index}", 0.0))
    assert not result.failures, result.failures[0].replay()


def test_decoders_in_process() -> None:
    started = time.monotonic()
    result = run_in_process(SEED, INPROCESS_FRAMES, INPROCESS_DEADLINE_S)
    report = result.report(f"in-process, FUZZ_SEED={SEED}", time.monotonic() - started)
    print(report)
    assert not result.failures, report
    assert result.counts["decoded"] and result.counts["decode error"], report
    assert set(result.mutations) == set(Mutator(random.Random(0)).names), report


def test_broker_over_the_network(tmp_path: Path) -> None:
    result, seconds = fuzz_broker(tmp_path, SEED, NETWORK_FRAMES, NETWORK_DEADLINE_S)
    report = result.report(f"network, FUZZ_SEED={SEED}", seconds)
    print(report)
    assert not result.failures and not result.tracebacks, report
    assert result.counts["connection closed"] and result.counts["answered"] + result.counts["error response"], report


def test_controller_listener_over_the_network(tmp_path: Path) -> None:
    """The Raft APIs, registrations and heartbeats, on a combined node's controller listener."""
    result, seconds = fuzz_broker(tmp_path, SEED, CONTROLLER_FRAMES, CONTROLLER_DEADLINE_S, controller_listener=True)
    report = result.report(f"controller listener, FUZZ_SEED={SEED}", seconds)
    print(report)
    assert not result.failures and not result.tracebacks, report
    assert result.counts["connection closed"] and result.counts["answered"] + result.counts["error response"], report
