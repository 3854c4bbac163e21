"""One network fuzz session: a broker process started for it, fuzzed, then checked whole.

At the end the broker must still run, the healthy client must read back exactly what it produced,
the broker must stop cleanly (SIGTERM, exit 0), every partition log must pass the segment check,
a restart (recovery) must give the healthy client its records again, and the broker's log must
hold no error-level line and no traceback.
"""

from __future__ import annotations

import time
from pathlib import Path

from protocol.api_keys import CONTROLLER_APIS, SUPPORTED_APIS
from tests.cluster.cluster import KafkaCluster
from tests.fuzz.healthy import HealthyClient, Unhealthy
from tests.fuzz.network import NetworkRunner
from tests.fuzz.outcomes import Outcomes
from tests.fuzz.storage_check import partition_log_problems, traceback_events
from tests.integration.conftest import BrokerProcess, retire

HEALTHY_TOPIC = "fuzz-healthy"
# A JoinGroup would otherwise wait group.initial.rebalance.delay.ms (3 s) for its answer.
BROKER_OVERRIDES = {"group.initial.rebalance.delay.ms": "0"}


def fuzz_broker(
    workdir: Path, seed: int, frames: int, deadline_s: float, burst: int = 64, progress_every: int = 0, controller_listener: bool = False
) -> tuple[Outcomes, float]:
    """The outcomes and the seconds the fuzzing took; raises AssertionError on a broken broker.

    By default the frames go to the client listener of a zero-config node. With
    ``controller_listener`` the node is a configured combined node (node 1, formatted, with a
    CONTROLLER listener) and the frames go there, with the Raft APIs among them; the healthy
    client still uses the client listener, and the stop-and-recover check is left to the
    client listener's runs.
    """
    cluster = KafkaCluster(workdir, combined=1, overrides=BROKER_OVERRIDES) if controller_listener else None
    broker: BrokerProcess = cluster.nodes[1] if cluster else BrokerProcess(workdir / "data", BROKER_OVERRIDES)
    if cluster:
        cluster.start()
    else:
        broker.start()
    runner: NetworkRunner | None = None
    try:
        healthy = HealthyClient("127.0.0.1", broker.port, HEALTHY_TOPIC)
        healthy.create_topic()
        healthy.check("start")
        (started_event,) = broker.events_named("broker.started")
        target = int(cluster.controller_bootstrap(1).rsplit(":", 1)[1]) if cluster else broker.port
        apis = CONTROLLER_APIS if cluster else SUPPORTED_APIS
        runner = NetworkRunner("127.0.0.1", target, int(started_event["node_id"]), seed, apis, healthy)
        started = time.monotonic()
        result = runner.run(frames, deadline_s, burst, alive=lambda: broker.running, progress_every=progress_every)
        seconds = time.monotonic() - started
        healthy.check("end")
        if healthy.read_all() != healthy.produced:
            raise Unhealthy(f"seed {seed}: a full read does not return what the healthy client produced")
        healthy.close()
        if not cluster:  # the partition logs are the client listener's business
            check_recovery(broker, healthy.produced, seed)
        result.tracebacks += traceback_events(broker.log_events())
        return result, seconds
    except BaseException:
        print(f"broker log {broker.log_path}:\n{broker.tail()}")
        if runner is not None:
            print(runner.result.report(f"until the failure, seed {seed}", 0.0))
        raise
    finally:
        if cluster:
            cluster.close()
        else:
            retire(broker)


def check_recovery(broker: BrokerProcess, produced: list[bytes], seed: int) -> None:
    """A clean stop, intact partition logs, and after a restart (recovery) the healthy client's records."""
    broker.stop()
    problems = partition_log_problems(broker.data_dir)
    if problems:
        raise AssertionError(f"seed {seed}: partition logs damaged:\n" + "\n".join(problems[:20]))
    broker.start()
    recovered = HealthyClient("127.0.0.1", broker.port, HEALTHY_TOPIC)
    recovered.produced = list(produced)
    if recovered.read_all() != produced:
        raise Unhealthy(f"seed {seed}: after a restart a full read does not return what the healthy client produced")
    recovered.close()
