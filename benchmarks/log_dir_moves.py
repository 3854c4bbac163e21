"""Replicas moving between the log dirs of their node (JBOD), kbroker beside Apache Kafka 4.4.

    python -m benchmarks.log_dir_moves [--targets kbroker,kafka] [--runs 2] [--json FILE]

tests/cluster/test_several_log_dirs.py's scenario (``log_dir_moves``) as is, on three combined
nodes with two log dirs each (log.dirs=data,data2; the metadata log in data): kbroker's cluster of
tests/cluster, or Kafka's from benchmarks/apache_kafka.py with the same ids and dirs. One RF=3
partition led by node 1, min.insync.replicas 2, an idempotent acks=all producer; node 2 (a
follower) and then node 1 (the leader) move their replica to their other dir with
AlterReplicaLogDirs, each copy held at 100 kB/s (replica.alter.log.dirs.io.max.bytes.per.second,
the cluster-wide default) until kafka-log-dirs has shown the future replica, then let go at
100 MB/s (the node's own value); then node 1 is stopped (SIGTERM) and started again.

Reported per run: records acknowledged, read back, lost, duplicated; each move's seconds from
AlterReplicaLogDirs (the hold and the tool's run included) and from the faster rate to the replica
in its new dir alone; the future replica's bytes and offsetLag while held; ISR shrinks, leader
changes and directory assignments the controller committed while the moves ran (its metadata log,
read with kbroker's decoder on both), and how long before the swap on disk the assignment named
the new dir (negative: after); and after node 1's restart, whether its replica is in the dir it
moved to (on disk and in kafka-log-dirs) and byte for byte node 2's. Then Kafka 4.4's
kafka-log-dirs --describe before, during and after each move, with the dirs written as roles
(home: where the node's replica was created, away: its other dir) and sizes and lags as <bytes>
and <lag>, and where the two targets' outputs differ.

Every run starts its own cluster; runs are sequential, so one's start-up does not slow another's
figures.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from benchmarks.apache_kafka import KafkaReferenceCluster, fetch_jars
from broker.controller.partition_change_builder import LOST_DIR
from broker.metadata.metadata_image import MIGRATING_DIR, UNASSIGNED_DIR, PartitionRegistration
from tests.cluster.cluster import KafkaCluster
from tests.cluster.test_several_log_dirs import LogDirMoves, log_dir_moves, replica_dirs

TARGETS = ("kbroker", "kafka")
NODES = (1, 2, 3)


@dataclass
class MovesRun:
    target: str
    run: int
    failure: str = ""  # the scenario's exception, where it stopped
    acked: int = 0
    read: int = 0
    lost: int = 0
    duplicated: int = 0
    producer_errors: int = 0
    move_s: dict[int, float] = field(default_factory=dict)  # node -> AlterReplicaLogDirs to the replica in its new dir alone
    released_move_s: dict[int, float] = field(default_factory=dict)  # node -> the faster rate to the same
    assigned_ahead_s: dict[int, float] = field(default_factory=dict)  # node -> how long before that the controller named the new dir (< 0: after)
    copying: dict[int, str] = field(default_factory=dict)  # node -> the future replica while held back: its bytes of the current's, its offsetLag
    leader_and_isr_after: dict[int, str] = field(default_factory=dict)  # node -> Metadata's leader/ISR after its move
    isr_shrinks: int = 0
    leader_changes: int = 0
    directory_changes: int = 0  # committed changes to the partition's directory assignment while the moves ran
    assignments: list[str] = field(default_factory=list)  # each of them: node:dir, the dirs written as roles
    assigned_to_new_dir: dict[int, bool] = field(default_factory=dict)
    in_new_dir_after_restart: bool = False  # on disk, alone
    described_in_new_dir_after_restart: bool = False  # kafka-log-dirs
    same_bytes_as_node_2: bool = False
    views: dict[str, str] = field(default_factory=dict)  # kafka-log-dirs --describe, masked


def masked(described: str, topic: str, roles: dict[str, str]) -> str:
    """kafka-log-dirs' output with each dir written as its role, sizes and lags as placeholders,
    brokers and dirs in order."""
    lines = described.strip().splitlines()
    listing = json.loads(lines[-1])
    for broker in listing["brokers"]:
        for d in broker["logDirs"]:
            d["logDir"] = roles.get(d["logDir"], d["logDir"])
            for p in d["partitions"]:
                p["partition"] = p["partition"].replace(topic, "<topic>")
                p["size"] = "<bytes>" if p["size"] > 0 else p["size"]
                p["offsetLag"] = "<lag>" if p["offsetLag"] > 0 else p["offsetLag"]
        broker["logDirs"].sort(key=lambda d: d["logDir"])
    listing["brokers"].sort(key=lambda b: b["broker"])
    return "\n".join([*lines[:-1], json.dumps(listing)])


RESERVED_DIRS = {MIGRATING_DIR: "migrating", UNASSIGNED_DIR: "unassigned", LOST_DIR: "lost"}


def assignment_changes(committed: list[PartitionRegistration], names: dict[uuid.UUID, str]) -> list[str]:
    """The directory assignment first, then each change the controller committed: node:dir for the replicas it names anew."""
    if not committed:
        return []

    def named(p: PartitionRegistration, changed: Callable[[int], bool]) -> str:
        return " ".join(f"{n}:{names.get(d, RESERVED_DIRS.get(d, str(d)))}" for i, (n, d) in enumerate(zip(p.replicas, p.directories)) if changed(i))

    out = [f"at first {named(committed[0], lambda i: True)}"]
    for a, b in zip(committed, committed[1:]):
        if a.directories != b.directories:
            out.append(named(b, lambda i: i >= len(a.directories) or a.directories[i] != b.directories[i]))
    return out


def held_back(described: str, topic: str, node: int) -> str:
    """``node``'s future replica of ``topic``-0 in kafka-log-dirs' listing: "<its bytes>/<the current's> B, lag <offsetLag>"."""
    [broker] = [b for b in json.loads(described.splitlines()[-1])["brokers"] if b["broker"] == node]
    replicas = {p["isFuture"]: p for d in broker["logDirs"] for p in d["partitions"] if p["partition"] == f"{topic}-0"}
    if True not in replicas or False not in replicas:
        return "no future replica"
    return f"{replicas[True]['size']}/{replicas[False]['size']} B, lag {replicas[True]['offsetLag']}"


def summary(target: str, run: int, seen: LogDirMoves, dirs: dict[int, tuple[Path, Path]]) -> MovesRun:
    homes = {n: Path(d) for n, [(d, _)] in replica_dirs(seen.before, seen.topic).items()}
    roles = {str(d): f"<node{n} {'home' if d == homes[n] else 'away'}>" for n, node_dirs in dirs.items() for d in node_dirs}
    acked, read = set(seen.acked), set(seen.records)
    values = [v for _, _, v in seen.records]
    pairs = list(zip(seen.committed, seen.committed[1:]))
    final = seen.committed[-1] if seen.committed else None
    result = MovesRun(
        target,
        run,
        acked=len(seen.acked),
        read=len(seen.records),
        lost=len(acked - read),
        duplicated=len(values) - len(set(values)),
        producer_errors=len(seen.errors),
        isr_shrinks=sum(1 for a, b in pairs if not set(a.isr) <= set(b.isr)),
        leader_changes=sum(1 for a, b in pairs if a.leader != b.leader),
        directory_changes=sum(1 for a, b in pairs if a.directories != b.directories),
        assignments=assignment_changes(seen.committed, {i: roles[str(d)].strip("<>").split()[1] for ids in seen.directory_ids.values() for d, i in ids.items()}),
        in_new_dir_after_restart=seen.restarted_in_place,
        described_in_new_dir_after_restart=bool(seen.after_restart)
        and replica_dirs(seen.after_restart, seen.topic)[1] == [(str(seen.restarted_home), False)],
        same_bytes_as_node_2=seen.same_bytes_as_node_2,
    )
    result.views["before the moves"] = masked(seen.before, seen.topic, roles)
    for move in seen.moves:
        result.move_s[move.node] = round(move.seconds, 2)
        result.released_move_s[move.node] = round(move.released_seconds, 2)
        result.assigned_ahead_s[move.node] = round(move.assigned_ahead_seconds, 2)
        result.leader_and_isr_after[move.node] = f"{move.state_after[0]}/{','.join(map(str, move.state_after[1]))}"
        if final is not None and final.directories:
            result.assigned_to_new_dir[move.node] = final.directories[final.replicas.index(move.node)] == seen.directory_ids[move.node][move.away]
        result.copying[move.node] = held_back(move.while_copying, seen.topic, move.node)
        result.views[f"node {move.node} copying"] = masked(move.while_copying, seen.topic, roles)
        result.views[f"node {move.node} moved"] = masked(move.after, seen.topic, roles)
    if seen.after_restart:
        result.views["node 1 restarted"] = masked(seen.after_restart, seen.topic, roles)
    return result


def moves_run(target: str, run: int, root: Path, lib: Path) -> MovesRun:
    dirs = {n: (root / f"node{n}" / "data", root / f"node{n}" / "data2") for n in NODES}
    overrides = {n: {"log.dirs": f"{a},{b}"} for n, (a, b) in dirs.items()}
    cluster: Any = (
        KafkaCluster(root, node_overrides=overrides) if target == "kbroker" else KafkaReferenceCluster(root, lib, nodes=len(NODES), node_overrides=overrides)
    )
    try:
        cluster.start()
        seen = log_dir_moves(cluster, dirs, lib)
    except Exception as e:  # a run that stops is reported with what stopped it, and the others go on
        return MovesRun(target, run, failure=f"{type(e).__name__}: {e}"[:500])
    finally:
        cluster.close()
    return summary(target, run, seen, dirs)


def yes(value: bool) -> str:
    return "yes" if value else "no"


def report(runs: list[MovesRun]) -> str:
    out = [
        "| target | run | acked | read | lost | duplicated | node 2's move | node 1's move | after the faster rate (2 / 1) "
        "| new dir assigned ahead of the swap (2 / 1) | leader/ISR after each | ISR shrinks | leader changes | dir assignments (committed, new dir) | node 1 restarted: in its new dir | same bytes as node 2 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        if r.failure:
            out.append(f"| {r.target} | {r.run} | failed: {r.failure} |")
            continue
        assigned = "/".join(yes(r.assigned_to_new_dir.get(n, False)) for n in (2, 1))
        out.append(
            f"| {r.target} | {r.run} | {r.acked} | {r.read} | {r.lost} | {r.duplicated} | {r.move_s.get(2, 0):.1f} s | {r.move_s.get(1, 0):.1f} s "
            f"| {r.released_move_s.get(2, 0):.2f} s / {r.released_move_s.get(1, 0):.2f} s "
            f"| {r.assigned_ahead_s.get(2, 0):+.2f} s / {r.assigned_ahead_s.get(1, 0):+.2f} s | {' '.join(r.leader_and_isr_after.values())} "
            f"| {r.isr_shrinks} | {r.leader_changes} | {r.directory_changes}, {assigned} "
            f"| {yes(r.in_new_dir_after_restart)} (disk), {yes(r.described_in_new_dir_after_restart)} (kafka-log-dirs) | {yes(r.same_bytes_as_node_2)} |"
        )
    out.append("\nThe controller's directory assignments of the partition while the moves ran (home: where the node's replica was created):")
    out += [f"  {r.target:8} run {r.run}: {' -> '.join(r.assignments)}" for r in runs if not r.failure]
    out.append("\nEach future replica as kafka-log-dirs showed it while its copy was held at 100 kB/s (its bytes/the current's, offsetLag):")
    out += [f"  {r.target:8} run {r.run}: node 2 {r.copying.get(2, '-')}; node 1 {r.copying.get(1, '-')}" for r in runs if not r.failure]
    first = {t: next((r for r in runs if r.target == t and not r.failure), None) for t in TARGETS}
    shown = [r for r in first.values() if r is not None]
    if shown:
        out.append("\nkafka-log-dirs --describe --topic-list <topic>, the first run of each target:")
        for view in shown[0].views:
            texts = {r.target: r.views.get(view, "(none)") for r in shown}
            out.append(f"\n{view}:")
            if len(set(texts.values())) == 1:
                out.append(f"  both: {texts[shown[0].target].splitlines()[-1]}")
                continue
            for target, text in texts.items():
                for line in text.splitlines():
                    out.append(f"  {target:8} {line}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.log_dir_moves", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", default=",".join(TARGETS), help="comma-separated: kbroker, kafka")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--json", type=Path, help="also write every run here")
    args = parser.parse_args(argv)
    targets = [t for t in args.targets.split(",") if t]
    unknown = set(targets) - set(TARGETS)
    if unknown:
        parser.error(f"unknown targets {sorted(unknown)}")
    lib = fetch_jars()  # kafka-log-dirs runs against both
    runs: list[MovesRun] = []
    with tempfile.TemporaryDirectory(prefix="log-dir-moves-") as tmp:
        for run in range(args.runs):
            for target in targets:
                runs.append(moves_run(target, run, Path(tmp) / f"{target}-{run}", lib))
                print(report(runs[-1:]).split("\n\n")[0], flush=True)
    print("\n" + report(runs))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in runs], indent=2))
    return 0 if not any(r.failure for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
