"""The chaos campaign: a cluster, its workloads, the nemesis schedule, then heal, drain and check.

    python -m tests.chaos.campaign --faults 100 --topology combined-3 --out DIR [--profile default] [--target kafka]

A topology is ``combined-N`` (N broker+controller nodes) or ``separate-C+B`` (C controllers, B
brokers); every inter-node link, controller and inter-broker, goes through a cuttable proxy.
The schedule holds ``--faults`` faults of each kind, drawn in an order seeded by ``--seed``
(default CHAOS_SEED, else random; always printed, so a run can be replayed). Between fault
windows the cluster recovers: links healed, nodes resumed and restarted, every workload
partition's ISR full again, and every producer acknowledged again. After the last window the
clients stop, every node is killed at once and restarted, and the workloads drain. The cluster's
and the clients' timeouts, and so the faults' hold times, come from a profile
(tests/chaos/profile.py): ``fast`` (the default) or ``default``, the slower one.

``--target kafka`` runs the same campaign against Apache Kafka 4.4 itself (tests/chaos/kafka_bench.py;
combined-N topologies only, its jars fetched once into ~/.cache/kbroker-bench), as a control: an
anomaly Kafka shows too is the checker's or a client's, not kbroker's.

The output directory gets history.jsonl (every operation), verdicts.json (one per check, with
counts and examples; for duplicates, who wrote each copy, from the batch headers on the nodes'
disks: tests/chaos/duplicate_origins.py), timeline.png and clients/ (librdkafka's debug log of each confluent-kafka
client, see tests/chaos/producers.py); a summary is printed.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from benchmarks.apache_kafka import fetch_jars
from tests.chaos.history import NEMESIS, History
from tests.chaos.kafka_bench import ChaosCluster, KafkaChaosCluster
from tests.chaos.log_dir_fault import FullDisk
from tests.chaos.native_stacks import dump_native_stacks
from tests.chaos.nemesis import KINDS, Env, await_full_isr, crash_all, recover, run_window, schedule, warm_up_every_node
from tests.chaos.probes import Observer
from tests.chaos.client_logs import CLIENT_LOGS_ENV
from tests.chaos.profile import PROFILES, Profile
from tests.chaos.timeline import draw
from tests.chaos.workload import Verdict, Workload
from tests.chaos.workloads.groups import GroupsWorkload
from tests.chaos.workloads.queue import QueueWorkload
from tests.chaos.workloads.transactions import TransactionsWorkload
from tests.cluster.cluster import KafkaCluster

# The workloads a campaign can run, by name (--workloads), their group members' sessions from the
# profile. The transaction loops process about 12 inputs per window each: the long campaign of seed
# 756070550 (100 faults of each kind) had processed its 2,000 per loop after about 200 of its 859 windows
# and tested no transaction after, so the input grows with the schedule.
WORKLOADS: dict[str, Callable[[Profile, int], Workload]] = {
    "queue": lambda profile, faults: QueueWorkload(session_timeout_ms=profile.member_session_ms),
    "transactions": lambda profile, faults: TransactionsWorkload(inputs_per_partition=max(2000, 200 * faults)),
    "groups": lambda profile, faults: GroupsWorkload(session_timeout_ms=profile.member_session_ms),
}
TARGETS = ("kbroker", "kafka")
DISK_MB = 256
# Acknowledgements every producer must get after a window's recovery before the next fault: the
# proof that the clients, not only the cluster, came back.
PROGRESS = 20
PROGRESS_TIMEOUT_S = 60.0
# The counts are in-process counters: polled this often, the wait ends within a few hundredths of
# a second of the last acknowledgement, not up to a tenth later in each of about ninety windows.
PROGRESS_POLL_S = 0.02
# With the profile's timeouts (how soon a dead or cut-off broker is fenced and its partitions move,
# how soon a healed follower fetches again).
CLUSTER_OVERRIDES = {
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    # Leadership returns to the preferred replicas soon after a restart, so leader kills rotate.
    "leader.imbalance.check.interval.seconds": "2",
    "group.initial.rebalance.delay.ms": "0",
    # A transaction whose producer died mid-way is aborted soon, and its partitions' LSO moves.
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    # A node killed with -9 re-validates its active segments on start, as Kafka does; with the 1 GiB
    # default those grow for the whole campaign and each restart takes longer than the last.
    "log.segment.bytes": str(8 << 20),
    # Every restart replays the metadata log from the latest snapshot; with the 20 MiB default there
    # was none after 70 minutes of faults, and each start replayed more (140,000 records, 4-7 s).
    "metadata.log.max.record.bytes.between.snapshots": str(1 << 20),
}


@dataclass
class Topology:
    combined: int = 3
    controllers: int = 0
    brokers: int = 0

    @classmethod
    def parse(cls, text: str) -> "Topology":
        kind, _, sizes = text.partition("-")
        if kind == "combined":
            return cls(combined=int(sizes))
        if kind == "separate":
            controllers, _, brokers = sizes.partition("+")
            return cls(combined=0, controllers=int(controllers), brokers=int(brokers))
        raise ValueError(f"topology {text!r}: combined-N or separate-C+B")

    def __str__(self) -> str:
        return f"combined-{self.combined}" if self.combined else f"separate-{self.controllers}+{self.brokers}"


@dataclass
class Campaign:
    topology: Topology
    faults_per_kind: int
    seed: int
    out: Path
    kinds: tuple[str, ...] = KINDS
    mixed: float = 0.3
    profile: Profile = PROFILES["fast"]
    target: str = "kbroker"


@dataclass
class Result:
    verdicts: list[Verdict]
    windows: list[tuple[str, ...]]
    counts: dict[str, int]  # faults run, per kind
    elapsed_s: float
    stalls: int
    crashes: list[dict[str, Any]]  # nodes found dead that no fault had stopped
    client_failures: list[str]
    out: Path
    # Per workload whose check found duplicates: who wrote each copy (tests/chaos/duplicate_origins.py).
    duplicate_origins: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return all(v.valid for v in self.verdicts)


def make_cluster(root: Path, topology: Topology, profile: Profile, target: str = "kbroker") -> ChaosCluster:
    if target == "kafka":
        if not topology.combined:
            raise ValueError(f"--target kafka runs combined-N topologies only, not {topology}")
        # The same properties as kbroker's: Kafka has every one of them, under the same name.
        return KafkaChaosCluster(root, fetch_jars(), size=topology.combined, overrides={**CLUSTER_OVERRIDES, **profile.overrides()})
    return KafkaCluster(
        root,
        combined=topology.combined,
        controllers=topology.controllers,
        brokers=topology.brokers,
        overrides={**CLUSTER_OVERRIDES, **profile.overrides()},
        proxy_inter_broker=True,
    )


@dataclass
class Bench:
    """A started cluster, and the broker whose log dir is a tmpfs the disk-full fault fills (None
    where the machine refused the mount)."""

    cluster: ChaosCluster
    disk: FullDisk | None = None
    disk_node: int | None = None

    @classmethod
    def start(cls, root: Path, topology: Topology, with_disk: bool, profile: Profile, target: str = "kbroker") -> "Bench":
        bench = cls(make_cluster(root, topology, profile, target))
        if with_disk:
            node = bench.cluster.brokers[-1]
            disk = FullDisk(node.data_dir, DISK_MB)
            # Mounted before the node's storage is formatted.
            if disk.mount():
                bench.disk, bench.disk_node = disk, node.node_id
        try:
            bench.cluster.start()
        except BaseException:
            bench.close()
            raise
        return bench

    def close(self) -> None:
        self.cluster.close()
        if self.disk is not None:
            self.disk.unmount()


def topics(w: Workload) -> dict[str, int]:
    return dict(getattr(w, "topics", {}))


def progress(workloads: list[Workload]) -> dict[str, int]:
    return {name: n for w in workloads if hasattr(w, "progress") for name, n in w.progress().items()}


def failures(workloads: list[Workload]) -> list[str]:
    return [f for w in workloads if hasattr(w, "failures") for f in w.failures()]


def await_progress(env: Env, workloads: list[Workload], what: str) -> None:
    """Until every client counted by a workload's ``progress`` has moved ``PROGRESS`` further; a
    stall is recorded, not raised."""
    targets = {name: n + PROGRESS for name, n in progress(workloads).items()}
    deadline = time.monotonic() + PROGRESS_TIMEOUT_S
    now = dict(targets)
    while time.monotonic() < deadline:
        now = progress(workloads)
        if all(now[name] >= t for name, t in targets.items()):
            return
        time.sleep(PROGRESS_POLL_S)
    stalled = {name: now[name] for name, t in targets.items() if now[name] < t}
    env.history.info(NEMESIS, "stalled", {"after": what, "producers": stalled})


class CampaignStopped(KeyboardInterrupt):
    """A signal ended the schedule early; the campaign heals, drains and checks what ran."""


def run(campaign: Campaign, bench: Bench, workloads: list[Workload], history: History) -> Result:
    try:
        return _run(campaign, bench, workloads, history)
    except BaseException:
        # Whatever stopped the campaign (no drain, a second Ctrl-C while the workloads stop), the
        # history so far is what is left to look at.
        campaign.out.mkdir(parents=True, exist_ok=True)
        history.dump(campaign.out / "history.jsonl")
        print(f"chaos campaign: stopped by {sys.exc_info()[1]!r}; history in {campaign.out}", flush=True)
        raise


def _run(campaign: Campaign, bench: Bench, workloads: list[Workload], history: History) -> Result:
    started = time.monotonic()
    cluster = bench.cluster
    rng = random.Random(campaign.seed)
    aimed = {t: n for w in workloads for t, n in topics(w).items()}
    kinds = tuple(k for k in campaign.kinds if k != "disk-full" or bench.disk is not None)
    profile = campaign.profile
    env = Env(cluster, history, aimed, rng, profile.session_s, profile.pause_s, bench.disk, bench.disk_node)
    windows = schedule(rng, kinds, campaign.faults_per_kind, campaign.mixed)
    print(f"chaos campaign: seed {campaign.seed} (CHAOS_SEED), {campaign.target}, {campaign.topology}, profile {profile.name}, {len(windows)} windows, {campaign.faults_per_kind} faults of each of {', '.join(kinds)}", flush=True)
    for w in workloads:
        w.setup(cluster.bootstrap)
    warm_up_every_node(env)
    await_full_isr(env)
    observer = Observer(cluster, history, aimed)
    observer.start()
    everyone = ",".join(b.bootstrap for b in cluster.brokers)
    for w in workloads:
        w.start(history, lambda: everyone)
    ran: list[tuple[str, ...]] = []
    error: BaseException | None = None
    try:
        await_progress(env, workloads, "start")
        for i, window in enumerate(windows, 1):
            run_window(env, window, time.sleep)
            ran.append(window)
            recover(env, window)
            await_progress(env, workloads, "+".join(window))
            print(f"  window {i}/{len(windows)} {'+'.join(window)} done at {history.now():.0f}s", flush=True)
    except BaseException as e:  # the history so far is still checked and written
        error = e
    finally:
        # A client thread that does not stop fails the run (as a client failure, with its stack)
        # but leaves the history checkable: its open operation counts as of unknown outcome.
        stuck: list[str] = []
        for w in workloads:
            try:
                w.stop()
            except AssertionError as e:
                stuck.append(str(e))
                print(f"chaos campaign: {e}", flush=True)
        if stuck:
            print(f"chaos campaign: {dump_native_stacks(campaign.out / 'native-stacks.txt')}", flush=True)
        observer.stop()
    try:
        recover(env)
        crash_all(env)
        for w in workloads:
            w.drain(history, cluster.bootstrap)
    except BaseException:
        print(f"chaos campaign: the cluster did not recover for the drain{f' after {error!r}' if error else ''}", flush=True)
        raise
    ops = history.ops
    verdicts = [v for w in workloads for v in w.check(ops)]
    duplicated = {v.workload for v in verdicts if v.check == "duplicated" and not v.valid}
    origins = {
        w.name: w.duplicate_origins(ops, [node.data_dir for node in cluster.nodes.values()])
        for w in workloads
        if w.name in duplicated and hasattr(w, "duplicate_origins")
    }
    counts = {k: sum(window.count(k) for window in ran) for k in kinds}
    result = Result(
        verdicts, ran, counts, time.monotonic() - started,
        stalls=sum(1 for op in ops if op.process == NEMESIS and op.f == "stalled"),
        crashes=[op.value for op in ops if op.process == NEMESIS and op.f == "crashed"],
        client_failures=failures(workloads) + stuck,
        out=campaign.out,
        duplicate_origins=origins,
    )
    if isinstance(error, CampaignStopped):
        print(f"chaos campaign: {error.args[0]} after {len(ran)} of {len(windows)} windows; healed, drained and checked", flush=True)
    write(result, history, campaign, workloads)
    if error is not None and not isinstance(error, CampaignStopped):
        raise error
    return result


def write(result: Result, history: History, campaign: Campaign, workloads: list[Workload]) -> None:
    campaign.out.mkdir(parents=True, exist_ok=True)
    history.dump(campaign.out / "history.jsonl")
    (campaign.out / "verdicts.json").write_text(
        json.dumps(
            {
                "seed": campaign.seed,
                "target": campaign.target,
                "topology": str(campaign.topology),
                "profile": campaign.profile.name,
                "faults": result.counts,
                "windows": ["+".join(w) for w in result.windows],
                "elapsed_s": round(result.elapsed_s, 1),
                "stalls": result.stalls,
                "crashes": result.crashes,
                "client_failures": result.client_failures,
                "verdicts": [asdict(v) for v in result.verdicts],
                "duplicate_origins": result.duplicate_origins,
            },
            indent=1,
            default=str,
        )
    )
    draw(history.ops, campaign.out / "timeline.png", title=f"{campaign.topology}, seed {campaign.seed}")
    print(summary(result, workloads), flush=True)


def summary(result: Result, workloads: list[Workload]) -> str:
    lines = [f"chaos campaign: {len(result.windows)} windows in {result.elapsed_s:.0f}s, faults {result.counts}"]
    lines += [f"  {w.describe()}" for w in workloads if hasattr(w, "describe")]
    for v in result.verdicts:
        lines.append(f"  {v.workload}/{v.check}: {'ok' if v.valid else 'INVALID'} {v.count} {v.stats}" + (f" e.g. {v.examples}" if v.examples else ""))
        if v.check == "duplicated" and v.workload in result.duplicate_origins:
            lines.append(f"    the copies were written under: {result.duplicate_origins[v.workload]['kinds']}")
    if result.stalls:
        lines.append(f"  {result.stalls} times a producer did not recover within {PROGRESS_TIMEOUT_S:.0f}s (nemesis 'stalled' ops)")
    lines += [f"  node {c['node']} exited by itself with {c['exit']} (after {'+'.join(c['after'])}), restarted" for c in result.crashes]
    lines += [f"  client failed: {f}" for f in result.client_failures]
    lines.append(f"  output: {result.out}")
    return "\n".join(lines)


def seed_from_env() -> int:
    return int(os.environ["CHAOS_SEED"]) if os.environ.get("CHAOS_SEED") else random.SystemRandom().randrange(2**31)


def stop_gracefully(signum: int, frame: object) -> None:
    raise CampaignStopped(signal.Signals(signum).name)


def main() -> None:
    # kafka-python and aiokafka log every connection a fault breaks: the history says it all.
    logging.basicConfig(level=logging.CRITICAL)
    # The first SIGINT or SIGTERM (`timeout`, a CI runner) ends the schedule; the campaign still
    # heals, drains and checks. SIGINT is set too because a shell starts background jobs with it ignored.
    signal.signal(signal.SIGINT, stop_gracefully)
    signal.signal(signal.SIGTERM, stop_gracefully)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--faults", type=int, default=int(os.environ.get("CHAOS_FAULTS", "100")), help="faults of each kind")
    parser.add_argument("--topology", default="combined-3")
    parser.add_argument("--seed", type=int, default=seed_from_env())
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated fault kinds")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated, of {', '.join(WORKLOADS)}")
    parser.add_argument("--mixed", type=float, default=0.3, help="share of windows with a second, overlapping fault")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="fast", help="the cluster's and clients' timeouts (tests/chaos/profile.py)")
    parser.add_argument("--out", type=Path, default=Path("chaos-out"))
    parser.add_argument("--target", choices=TARGETS, default="kbroker", help="kbroker, or Apache Kafka 4.4 as the control (tests/chaos/kafka_bench.py)")
    args = parser.parse_args()
    os.environ.setdefault(CLIENT_LOGS_ENV, str(args.out.resolve() / "clients"))
    topology = Topology.parse(args.topology)
    kinds = tuple(args.kinds.split(","))
    unknown = set(kinds) - set(KINDS)
    if unknown:
        parser.error(f"unknown fault kinds {sorted(unknown)}; known: {', '.join(KINDS)}")
    unknown_workloads = set(args.workloads.split(",")) - set(WORKLOADS)
    if unknown_workloads:
        parser.error(f"unknown workloads {sorted(unknown_workloads)}; known: {', '.join(WORKLOADS)}")
    if args.target == "kafka" and not topology.combined:
        parser.error(f"--target kafka runs combined-N topologies only, not {topology}")
    profile = PROFILES[args.profile]
    campaign = Campaign(topology, args.faults, args.seed, args.out.resolve(), kinds, args.mixed, profile, args.target)
    bench = Bench.start(campaign.out / "cluster", topology, with_disk="disk-full" in kinds, profile=profile, target=args.target)
    try:
        result = run(campaign, bench, [WORKLOADS[name](profile, args.faults) for name in args.workloads.split(",")], History())
    finally:
        if isinstance(bench.cluster, KafkaChaosCluster) and (uncut := bench.cluster.unproxied_clients()):
            print(f"chaos campaign: Kafka clients that no link carried, so no fault cut: {sorted(uncut)}", flush=True)
        bench.close()
    raise SystemExit(0 if result.valid and not result.client_failures else 1)


if __name__ == "__main__":
    main()
