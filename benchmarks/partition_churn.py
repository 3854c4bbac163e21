"""What creating and deleting one big topic costs the node's other clients.

    python -m benchmarks.partition_churn [--partitions 8192] [--json out.json]

One combined node (a kbroker process on loopback). A probe client, on one long-lived connection,
checks the node over and over (ApiVersions, Metadata, an acks=all Produce at the next offset: the
fuzzer's healthy client) while another creates a topic of ``--partitions`` partitions, waits
until the node leads them all, deletes it and waits until its folders are gone. For each phase:
how long it took, how many probe checks ran and the longest one (what a client of the node
waited at worst), and whether the node was fenced (``broker.fenced`` in its log).
"""

from __future__ import annotations

import argparse
import datetime
import json
import tempfile
import multiprocessing
import time
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event as EventType
from pathlib import Path

from kio.schema.create_topics.v4 import request as create_topics
from kio.schema.delete_topics.v3.request import DeleteTopicsRequest
from kio.schema.errors import ErrorCode

from tests.fuzz.healthy import HealthyClient, Unhealthy
from tests.integration.conftest import BrokerProcess

TOPIC = "churn"
PROBE_TOPIC = "probe"
TIMEOUT_S = 600.0
POLL_S = 0.2
# Before and after each phase: a check still stalled when a phase ends is counted in it.
SETTLE_S = 2.0


@dataclass
class Probe:
    """The probe client's checks as (start, duration) pairs, on the monotonic clock (which is
    the machine's: the probe runs in a process of its own, so that this one's polling of the
    broker's log takes no GIL time from it)."""

    checks: list[tuple[float, float]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @staticmethod
    def run(port: int, stop: EventType, out: Connection) -> None:
        probe = Probe()
        client = HealthyClient("127.0.0.1", port, PROBE_TOPIC)
        client.create_topic()
        try:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    client.check("probe")
                except Unhealthy as e:
                    probe.failures.append(str(e))
                    break
                probe.checks.append((started, time.monotonic() - started))
        finally:
            client.close()
            out.send(probe)

    def longest_within(self, start: float, end: float) -> tuple[int, float]:
        """How many checks overlapped [start, end], and the longest of them."""
        inside = [duration for began, duration in self.checks if began < end and began + duration > start]
        return len(inside), max(inside, default=0.0)


@dataclass(frozen=True)
class Phase:
    name: str
    seconds: float
    checks: int
    longest_check_s: float


def wait_until(predicate: object, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(POLL_S)


def became_leader(broker: BrokerProcess) -> int:
    """Of how many partitions the node became leader, at once or a slice at a time later."""
    events = ("replica_manager.applied_delta", "replica_manager.pending_replicas_created")
    return sum(e.get("became_leader", 0) for e in broker.log_events() if e.get("event") in events)


def request_ignoring_timeout(client: HealthyClient, body: object) -> object | None:
    # The answer comes at the controller's commit; what is measured is the node applying it.
    try:
        return client.request(body)
    except Unhealthy:
        return None


def churn(broker: BrokerProcess, partitions: int) -> list[tuple[str, float, float]]:
    """Create the topic, then delete it: each phase's name, start and end."""
    admin = HealthyClient("127.0.0.1", broker.port, TOPIC)
    phases = []
    try:
        already = became_leader(broker)
        started = time.monotonic()
        topic = create_topics.CreatableTopic(name=TOPIC, num_partitions=partitions, replication_factor=1, assignments=(), configs=())
        answer = request_ignoring_timeout(admin, create_topics.CreateTopicsRequest(topics=(topic,), timeout=datetime.timedelta(seconds=60), validate_only=False))
        if answer is not None and answer.topics[0].error_code != ErrorCode.none:  # type: ignore[attr-defined]
            raise RuntimeError(f"CreateTopics answered {answer.topics[0].error_code!r}")  # type: ignore[attr-defined]
        wait_until(lambda: became_leader(broker) >= already + partitions, "the node did not lead every partition")
        phases.append(("create", started, time.monotonic()))
        time.sleep(SETTLE_S)

        started = time.monotonic()
        admin.close()
        admin = HealthyClient("127.0.0.1", broker.port, TOPIC)  # a timed-out connection is out of step
        request_ignoring_timeout(admin, DeleteTopicsRequest(topic_names=(TOPIC,), timeout=datetime.timedelta(seconds=60)))
        wait_until(lambda: not any(broker.data_dir.glob(f"{TOPIC}-*")), "the deleted topic's folders stayed")
        phases.append(("delete", started, time.monotonic()))
        time.sleep(SETTLE_S)
    finally:
        admin.close()
    return phases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=8192)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kbroker-churn-") as root:
        broker = BrokerProcess(Path(root) / "data").start()
        stop = multiprocessing.Event()
        results, out = multiprocessing.Pipe(duplex=False)
        prober = multiprocessing.Process(target=Probe.run, args=(broker.port, stop, out), daemon=True)
        prober.start()
        try:
            time.sleep(SETTLE_S)
            spans = churn(broker, args.partitions)
        finally:
            stop.set()
            probe: Probe = results.recv()
            prober.join(60)
            fenced = len(broker.events_named("broker.fenced"))
            broker.stop()
    phases = [Phase(name, end - start, *probe.longest_within(start, end)) for name, start, end in spans]
    result = {"partitions": args.partitions, "phases": [asdict(p) for p in phases], "probe_failures": probe.failures, "fenced": fenced}
    for phase in phases:
        print(f"{phase.name:>6}: {phase.seconds:6.1f} s, {phase.checks} probe checks, longest {phase.longest_check_s:.2f} s")
    print(f"probe failures: {probe.failures or 'none'}; broker.fenced events: {fenced}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
