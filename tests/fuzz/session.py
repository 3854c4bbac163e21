"""One network fuzz session: a broker process started for it, fuzzed, then checked whole.

At the end the broker must still run, the healthy client must read back exactly what it produced,
the broker must stop cleanly (SIGTERM, exit 0), every partition log must pass the segment check,
a restart (recovery) must give the healthy client its records again, and the broker's log must
hold no error-level line and no traceback.
"""

from __future__ import annotations

import time
from pathlib import Path

from protocol.api_keys import SUPPORTED_APIS
from tests.fuzz.healthy import HealthyClient, Unhealthy
from tests.fuzz.network import NetworkRunner
from tests.fuzz.outcomes import Outcomes
from tests.fuzz.storage_check import partition_log_problems, traceback_events
from tests.integration.conftest import BrokerProcess, retire

HEALTHY_TOPIC = "fuzz-healthy"
# A JoinGroup would otherwise wait group.initial.rebalance.delay.ms (3 s) for its answer.
BROKER_OVERRIDES = {"group.initial.rebalance.delay.ms": "0"}


def fuzz_broker(workdir: Path, seed: int, frames: int, deadline_s: float, burst: int = 64, progress_every: int = 0) -> tuple[Outcomes, float]:
    """The outcomes and the seconds the fuzzing took; raises AssertionError on a broken broker."""
    broker = BrokerProcess(workdir / "data", BROKER_OVERRIDES).start()
    try:
        healthy = HealthyClient("127.0.0.1", broker.port, HEALTHY_TOPIC)
        healthy.create_topic()
        healthy.check("start")
        (started_event,) = broker.events_named("broker.started")
        runner = NetworkRunner("127.0.0.1", broker.port, int(started_event["node_id"]), seed, SUPPORTED_APIS, healthy)
        started = time.monotonic()
        result = runner.run(frames, deadline_s, burst, alive=lambda: broker.running, progress_every=progress_every)
        seconds = time.monotonic() - started
        healthy.check("end")
        if healthy.read_all() != healthy.produced:
            raise Unhealthy(f"seed {seed}: a full read does not return what the healthy client produced")
        healthy.close()
        broker.stop()
        problems = partition_log_problems(broker.data_dir)
        if problems:
            raise AssertionError(f"seed {seed}: partition logs damaged:\n" + "\n".join(problems[:20]))
        broker.start()
        recovered = HealthyClient("127.0.0.1", broker.port, HEALTHY_TOPIC)
        recovered.produced = list(healthy.produced)
        if recovered.read_all() != healthy.produced:
            raise Unhealthy(f"seed {seed}: after a restart a full read does not return what the healthy client produced")
        recovered.close()
        result.tracebacks += traceback_events(broker.log_events())
        return result, seconds
    except BaseException:
        print(f"broker log {broker.log_path}:\n{broker.tail()}")
        raise
    finally:
        retire(broker)
