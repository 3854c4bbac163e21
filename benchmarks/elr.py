"""A leaderless partition's way back, kbroker beside Apache Kafka 4.4, on the same steps.

    python -m benchmarks.elr [--scenario elr|unclean|both] [--target kbroker|kafka|both] [--trials 1] [--json FILE]

``elr``: KIP-966's last replica standing, tests/cluster/test_eligible_leaders.py's scenario
(``last_replica_standing``) as is: one controller-only node and three broker-only nodes (Kafka's
from benchmarks/apache_kafka.py with the same roles, ids and settings), RF 3, min.insync.replicas
2, an idempotent acks=all producer; both followers shut down cleanly, the leader is killed, the
follower that took the ISR below the minimum restarts. Reported per run: the leader chosen, the
records acknowledged and read back, whether any election was unclean (a RECOVERING leader in the
controller's metadata log, read with kbroker's decoder on both), the restarted broker's times to
started, elected (committed) and named leader by its Metadata, and Kafka 4.4's kafka-topics
--describe after each step a broker was up for (its Elr: and LastKnownElr:), with broker ids
written as roles (L the killed leader, F the first follower, E the eligible one).

``unclean``: tests/cluster/test_replication_faults.py's ``lose_the_last_isr_member`` (three
combined nodes, every inter-broker link behind a proxy; Kafka's through tests/chaos/kafka_bench.py's
KafkaChaosCluster): the last ISR member dies while the two other replicas, cut off from its data,
are back. kafka-configs then sets unclean.leader.election.enable=true on the topic, and the
partition is watched for WINDOW_S: once with unclean.leader.election.interval.ms at Kafka's
default (5 minutes), once at INTERVAL_MS. Reported: when a leader appeared after the change, and,
where none did, what kafka-leader-election --election-type unclean then did.

Every run starts its own cluster; runs are sequential, so one's start-up does not slow another's
figures.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from benchmarks.apache_kafka import KafkaReferenceCluster, fetch_jars
from broker.controller.partition_change_builder import RECOVERING
from broker.metadata.metadata_image import PartitionRegistration
from tests.chaos.kafka_bench import KafkaChaosCluster
from tests.cluster.cluster import KafkaCluster
from tests.cluster.test_eligible_leaders import OVERRIDES, STEPS, LastReplicaStanding, last_replica_standing
from tests.cluster.test_replication import partition_state
from tests.cluster.test_replication_faults import LAG_MS, SESSION_MS, lose_the_last_isr_member
from tests.kafka_tools import kafka_tool

TOPICS = "org.apache.kafka.tools.TopicCommand"
CONFIGS = "org.apache.kafka.tools.ConfigCommand"
LEADER_ELECTION = "org.apache.kafka.tools.LeaderElectionCommand"
WINDOW_S = 20.0
INTERVAL_MS = 5000
KAFKA_DEFAULT_INTERVAL_MS = 300000
POLL_S = 0.2
# As tests/cluster/test_replication_faults.py's cluster, but for the interval.
UNCLEAN_OVERRIDES = {
    "broker.session.timeout.ms": str(SESSION_MS),
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": str(LAG_MS),
    "replica.socket.timeout.ms": "5000",
}


@dataclass
class ElrRun:
    target: str
    leader_chosen: str  # a role: E (the ELR member) is what KIP-966 promises
    acked: int
    read: int
    acked_lost: int
    duplicated: int
    unclean: bool
    started_after_s: float
    elected_after_s: float
    served_after_s: float
    states: dict[str, str] = field(default_factory=dict)
    describes: dict[str, str] = field(default_factory=dict)


@dataclass
class UncleanRun:
    target: str
    interval_ms: int
    leader_after_s: float | None  # after kafka-configs returned; None: not within WINDOW_S
    leader_election: str = ""  # kafka-leader-election's output, where it was needed
    leader_after_election_s: float | None = None
    describes: dict[str, str] = field(default_factory=dict)


def roles_of(seen: LastReplicaStanding) -> Callable[[int], str]:
    names = {seen.leader: "L", seen.first: "F", seen.eligible: "E"}
    return lambda broker: names.get(broker, str(broker))


def state_line(p: PartitionRegistration, role: Callable[[int], str]) -> str:
    def ids(brokers: tuple[int, ...]) -> str:
        return ",".join(sorted(role(b) for b in brokers))

    leader = "none" if p.leader < 0 else role(p.leader)
    recovering = " RECOVERING" if p.leader_recovery_state == RECOVERING else ""
    return f"Leader: {leader}{recovering} Isr: {ids(p.isr)} Elr: {ids(p.elr)} LastKnownElr: {ids(p.last_known_elr)}"


def describe_lines(lib: Path, bootstrap: str, topic: str) -> str:
    """kafka-topics --describe's partition lines, tabs as single spaces."""
    out = kafka_tool(lib, TOPICS, "--bootstrap-server", bootstrap, "--describe", "--topic", topic)
    lines = [" ".join(line.split()) for line in (out.stdout + out.stderr).splitlines() if "Partition:" in line]
    return "\n".join(lines) or (out.stdout + out.stderr).strip()


def as_roles(text: str, role: Callable[[int], str]) -> str:
    """Broker ids in a describe line written as roles (the list after each label)."""
    return re.sub(
        r"(Leader|Replicas|Isr|Elr|LastKnownElr): ([0-9,]*)",
        lambda m: f"{m.group(1)}: {','.join(role(int(b)) for b in m.group(2).split(',') if b)}",
        text,
    )


def elr_run(target: str, root: Path, lib: Path) -> ElrRun:
    cluster: Any = (
        KafkaCluster(root, combined=0, controllers=1, brokers=3, overrides=OVERRIDES)
        if target == "kbroker"
        else KafkaReferenceCluster(root, lib, nodes=0, controllers=1, brokers=3, overrides=OVERRIDES)
    )
    try:
        cluster.start()
        seen = last_replica_standing(cluster, lambda bootstrap, topic: describe_lines(lib, bootstrap, topic))
    finally:
        cluster.close()
    role = roles_of(seen)
    acked, read = set(seen.acked), set(seen.records)
    values = [v for _, _, v in seen.records]
    elected = seen.states["eligible elected"]
    return ElrRun(
        target=target,
        leader_chosen=role(elected.leader),
        acked=len(seen.acked),
        read=len(seen.records),
        acked_lost=len(acked - read),
        duplicated=len(values) - len(set(values)),
        unclean=any(p.leader_recovery_state == RECOVERING for p in seen.history),
        started_after_s=round(seen.started_after_s, 2),
        elected_after_s=round(seen.elected_after_s, 2),
        served_after_s=round(seen.served_after_s, 2),
        states={step: state_line(p, role) for step, p in seen.states.items()},
        describes={step: as_roles(text, role) for step, text in seen.describes.items()},
    )


def leader_within(bootstrap: str, topic: str, window_s: float) -> float | None:
    started = time.monotonic()
    while (waited := time.monotonic() - started) < window_s:
        if partition_state(bootstrap, topic)[0] >= 0:
            return waited
        time.sleep(POLL_S)
    return None


def unclean_run(target: str, interval_ms: int, root: Path, lib: Path) -> UncleanRun:
    overrides = UNCLEAN_OVERRIDES | {"unclean.leader.election.interval.ms": str(interval_ms)}
    cluster: Any = (
        KafkaCluster(root, combined=3, proxy_inter_broker=True, overrides=overrides)
        if target == "kbroker"
        else KafkaChaosCluster(root, lib, size=3, overrides=overrides)
    )
    try:
        cluster.start()
        topic, _, _, _, survivors = lose_the_last_isr_member(cluster)
        run = UncleanRun(target, interval_ms, None, describes={"leaderless": describe_lines(lib, survivors, topic)})
        enable = kafka_tool(lib, CONFIGS, "--bootstrap-server", survivors, "--alter", "--entity-type", "topics", "--entity-name", topic,
                            "--add-config", "unclean.leader.election.enable=true")  # fmt: skip
        assert enable.returncode == 0, enable.stdout + enable.stderr
        run.leader_after_s = leader_within(survivors, topic, WINDOW_S)
        run.describes["enabled"] = describe_lines(lib, survivors, topic)
        if run.leader_after_s is None:
            election = kafka_tool(lib, LEADER_ELECTION, "--bootstrap-server", survivors, "--election-type", "unclean", "--topic", topic, "--partition", "0")
            run.leader_election = (election.stdout + election.stderr).strip()
            run.leader_after_election_s = leader_within(survivors, topic, WINDOW_S)
            run.describes["elected"] = describe_lines(lib, survivors, topic)
        return run
    finally:
        cluster.close()


def seconds(value: float | None) -> str:
    return "none" if value is None else f"{value:.1f} s"


def report(elr: list[ElrRun], unclean: list[UncleanRun]) -> str:
    out: list[str] = []
    if elr:
        out += ["| run | leader chosen | acked | read | acked lost | duplicated | unclean election | started | elected | named by Metadata |",
                "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for r in elr:
            out.append(
                f"| {r.target} | {r.leader_chosen} | {r.acked} | {r.read} | {r.acked_lost} | {r.duplicated} | {'yes' if r.unclean else 'no'} "
                f"| {r.started_after_s:.1f} s | {r.elected_after_s:.1f} s | {r.served_after_s:.1f} s |"
            )
        for step in STEPS:
            out.append(f"\n{step}:")
            for r in elr:
                out.append(f"  {r.target:8} controller: {r.states.get(step, '-')}")
                out.append(f"  {r.target:8} kafka-topics: {r.describes.get(step, '(no broker running)')}")
    if unclean:
        out += ["", "| run | unclean.leader.election.interval.ms | leader after the config change | kafka-leader-election |", "|---|---|---|---|"]
        for u in unclean:
            election = f"{u.leader_election} (leader {seconds(u.leader_after_election_s)} later)" if u.leader_election else "-"
            out.append(f"| {u.target} | {u.interval_ms} | {seconds(u.leader_after_s)} | {election} |")
        for u in unclean:
            for step, text in u.describes.items():
                out.append(f"  {u.target:8} {u.interval_ms:>6} {step:10} {text}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.elr", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", choices=("elr", "unclean", "both"), default="both")
    parser.add_argument("--target", choices=("kbroker", "kafka", "both"), default="both")
    parser.add_argument("--trials", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write every run here")
    args = parser.parse_args(argv)
    lib = fetch_jars()  # kafka-topics, kafka-configs and kafka-leader-election run against both
    targets = ("kbroker", "kafka") if args.target == "both" else (args.target,)
    elr: list[ElrRun] = []
    unclean: list[UncleanRun] = []
    with tempfile.TemporaryDirectory(prefix="elr-bench-") as tmp:
        for trial in range(args.trials):
            for target in targets:
                if args.scenario in ("elr", "both"):
                    elr.append(elr_run(target, Path(tmp) / f"elr-{target}-{trial}", lib))
                    print(report(elr[-1:], []), flush=True)
                if args.scenario in ("unclean", "both"):
                    for interval in (KAFKA_DEFAULT_INTERVAL_MS, INTERVAL_MS):
                        unclean.append(unclean_run(target, interval, Path(tmp) / f"unclean-{target}-{interval}-{trial}", lib))
                        print(report([], unclean[-1:]), flush=True)
    print("\n" + report(elr, unclean))
    if args.json:
        args.json.write_text(json.dumps({"elr": [asdict(r) for r in elr], "unclean": [asdict(u) for u in unclean]}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
