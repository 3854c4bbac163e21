"""A live Apache Kafka 4.4 cluster converted to kbroker one node at a time, and back (issue 36, M3).

    python -m benchmarks.rolling_migration [--runs 2] [--back/--no-back] [--scenario combined|brokers-only] [--kill-step N ...]

One run: three Kafka nodes (``combined``: broker+controller, a static quorum of the three;
``brokers-only``: three Kafka controller-only nodes stay, three broker-only nodes convert). A
topic of 6 partitions, RF 3, min.insync.replicas 2 takes Kafka's VerifiableProducer (acks=all,
idempotent) throughout, a VerifiableConsumer group reads it and commits, and a confluent-kafka
transactional loop commits every 20 records to a second topic of the same shape. Once records
are acknowledged, the group has its partitions and a transaction has committed, each node in turn
gets M1's takeover while the load goes on: SIGTERM (Kafka's controlled shutdown), kbroker
started on that node's own server.properties and log directory (same node id, ports and quorum),
and the step ends once the node is unfenced and every ISR (the two topics, __consumer_offsets,
__transaction_state) is full again. With --back the same is done from kbroker to Kafka.
``--kill-step N`` (as often as wanted) stops the node of step N (1, 2, ... in that order: the steps
to kbroker, then the steps back) with SIGKILL instead: a crash in the middle of the live
conversion, the new process recovering the old one's unclean log directory, and the active
controller refusing the new registration until the old broker session times out.
``--txn-interval`` pauses the transactional loop after each commit
(tests/cluster/test_rolling_migration.py runs a short, light run). Checked
at the end, as benchmarks/mixed_cluster.py checks: every acknowledged record in the log once, the
group read every one and committed to the log end, every committed transaction read by a
read_committed consumer whole and once, no aborted one read.

Per step it prints how long the stop, the start and the wait for full ISRs took, which node
leads the metadata quorum afterwards (and of which kind), the records acknowledged and the
transactions committed during it, and the errors the clients saw meanwhile.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Collection

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.describe_quorum.v2.request import DescribeQuorumRequest, PartitionData, TopicData
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32

from benchmarks.apache_kafka import KafkaNode, KafkaReferenceCluster, fetch_jars
from benchmarks.mixed_cluster import (
    BROKER_SHARED, CONTROLLER_ONLY, QUIET, TIMEOUT_S, TransactionalLoop, VerifiableTool, caught_up, committed_offsets, end_offsets, read_log,
    verifiable_consumer, verifiable_producer,
)  # fmt: skip
from broker import wire_client
from tests.cluster.cluster import ClusterNode, NodeSpec, wait_until
from tests.integration.conftest import retire

PARTITIONS = 6
TOPIC, TXN_TOPIC = "rolling", "rolling-txn"
INTERNAL = ("__consumer_offsets", "__transaction_state")
GROUP, TXN_ID = "rolling-group", "rolling-txn-id"
# Broker sessions of 4 s (CONTROLLER_ONLY) need heartbeats more often than Kafka's 2 s.
OVERRIDES = CONTROLLER_ONLY | BROKER_SHARED | {"broker.heartbeat.interval.ms": "500"}
STEP_TIMEOUT_S = 180.0


@dataclass
class PacedTransactionalLoop(TransactionalLoop):
    """mixed_cluster's transactional loop, pausing ``pause_s`` after each commit: fewer
    transactions, and less of the two small CPUs, for a short run."""

    pause_s: float = 0.0

    def commit(self, producer: Producer, txn: int) -> None:
        super().commit(producer, txn)
        self.stop.wait(self.pause_s)


@dataclass
class Step:
    name: str
    node: int
    stop_s: float  # SIGTERM (or SIGKILL) until the process exited
    start_s: float  # launch until it logged its start
    isr_s: float  # from its start until unfenced with every ISR full
    started_at_ms: int = 0
    ended_at_ms: int = 0
    quorum: str = ""  # leader id, kind and epoch of the metadata quorum once the step ended
    acked: int = 0  # records the producer had acknowledged between the stop and the step's end
    txn_committed: int = 0  # transactions committed meanwhile
    producer_errors: dict = field(default_factory=dict)
    consumer: dict = field(default_factory=dict)
    txn_errors: dict = field(default_factory=dict)


class RollingCluster:
    """A Kafka 4.4 cluster whose broker nodes can each be served by Kafka or by kbroker on the same
    server.properties, log directory and ports."""

    def __init__(self, root: Path, lib: Path, scenario: str) -> None:
        if scenario == "combined":
            self.kafka = KafkaReferenceCluster(root, lib, nodes=3, overrides=OVERRIDES)
        else:
            self.kafka = KafkaReferenceCluster(root, lib, nodes=0, controllers=3, brokers=3, overrides=OVERRIDES)
        self.kbroker = {
            n.node_id: ClusterNode(NodeSpec(n.node_id, n.roles, n.client_port, n.controller_port), n.data_dir, n.config_file) for n in self.kafka.brokers
        }
        self.serving: dict[int, str] = {n.node_id: "kafka" for n in self.kafka.nodes.values()}
        # Client ports never change across a takeover: one bootstrap list for the whole run.
        self.bootstrap = ",".join(n.bootstrap for n in self.kafka.brokers)

    @property
    def converting(self) -> list[int]:
        return list(self.kbroker)

    def start(self) -> None:
        self.kafka.start()

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 10000, **QUIET})

    def create_topics(self) -> None:
        new = [NewTopic(t, PARTITIONS, 3, config={"min.insync.replicas": "2"}) for t in (TOPIC, TXN_TOPIC)]
        admin = self.admin()  # held: a destroyed client fails its futures
        for future in admin.create_topics(new, operation_timeout=30, request_timeout=30).values():
            future.result(timeout=40)

    def fully_replicated(self) -> bool:
        """Every broker unfenced (Metadata lists only those) and every partition of the two topics
        and the internal ones led with all its replicas in sync."""
        meta = self.admin().list_topics(timeout=10)
        if set(meta.brokers) != set(self.converting):
            return False
        partitions = [p for t in (TOPIC, TXN_TOPIC, *INTERNAL) if t in meta.topics for p in meta.topics[t].partitions.values()]
        return len(partitions) == 2 * PARTITIONS + sum(int(OVERRIDES[k]) for k in ("offsets.topic.num.partitions", "transaction.state.log.num.partitions")) and all(
            p.leader >= 0 and sorted(p.isrs) == sorted(p.replicas) for p in partitions
        )

    def quorum(self) -> str:
        """The metadata quorum's leader as its controllers report it: "<id> <kind> e<epoch>"."""
        request = DescribeQuorumRequest(topics=(TopicData(topic_name="__cluster_metadata", partitions=(PartitionData(partition_index=i32(0)),)),))
        for node in self.kafka.controllers:
            try:
                answer = wire_client.request(node.controller_bootstrap, request, client_id="rolling-migration")
            except OSError:
                continue
            partition = answer.topics[0].partitions[0] if answer.error_code == ErrorCode.none and answer.topics else None
            if partition is not None and partition.error_code == ErrorCode.none and partition.leader_id >= 0:
                return f"{partition.leader_id} {self.serving[partition.leader_id]} e{partition.leader_epoch}"
        return "?"

    def convert(self, node_id: int, to: str, load_alive: Callable[[], None], kill: bool = False) -> Step:
        """Stop what serves ``node_id`` (SIGTERM, or SIGKILL with ``kill``) and start ``to`` on its directory."""
        kafka, kbroker = self.kafka.nodes[node_id], self.kbroker[node_id]
        old: KafkaNode | ClusterNode = kafka if to == "kbroker" else kbroker
        new: KafkaNode | ClusterNode = kbroker if to == "kbroker" else kafka
        began = time.monotonic()
        began_ms = int(time.time() * 1000)
        if kill:
            old.kill()
        else:
            old.stop()
        stopped = time.monotonic()
        new.launch()
        self.serving[node_id] = to
        new.await_started()
        started = time.monotonic()
        wait_until(f"node {node_id} ({to}) unfenced and every ISR full", lambda: load_alive() or self.fully_replicated(), STEP_TIMEOUT_S, 0.5)
        name = f"{node_id}: {'kafka>kbroker' if to == 'kbroker' else 'kbroker>kafka'}{' (SIGKILL)' if kill else ''}"
        step = Step(name, node_id, stopped - began, started - stopped, time.monotonic() - started)
        step.started_at_ms, step.ended_at_ms = began_ms, int(time.time() * 1000)
        step.quorum = self.quorum()
        return step

    def exited(self) -> dict[int, str]:
        """The nodes whose current process is gone, with the last error it logged."""
        out = {}
        for node_id, kind in self.serving.items():
            if kind == "kafka" and not self.kafka.nodes[node_id].running:
                errors = [line for line in self.kafka.nodes[node_id].tail(400).splitlines() if " ERROR " in line or "Exception" in line]
                out[node_id] = f"kafka: {' / '.join(errors[-2:])[:600]}"
            elif kind == "kbroker" and not self.kbroker[node_id].running:
                errors = [json.dumps(e) for e in self.kbroker[node_id].log_events(current_run=True) if e.get("level") in ("error", "critical")]
                out[node_id] = f"kbroker: {' / '.join(errors[-2:])[:600]}"
        return out

    def close(self) -> None:
        for node in self.kbroker.values():
            node.drop_standby()
            retire(node)
        self.kafka.close()

    def leadership_log(self) -> list[tuple[str, str, int, int]]:
        """The metadata quorum's leaders as every node saw them, in time order: (time, node,
        epoch, leader), from Kafka's state transitions and kbroker's raft.leader_change."""
        seen = []
        for node in self.kafka.nodes.values():
            if node.log_path.exists():
                for match in KAFKA_TRANSITION.finditer(node.log_path.read_text(errors="replace")):
                    leader = node.node_id if match["state"] == "Leader" else int(match["leader"])
                    seen.append((match["time"].replace(",", ".")[11:], f"kafka {node.node_id}", int(match["epoch"]), leader))
        for node_id, node in self.kbroker.items():
            for e in node.log_events():
                if e.get("event") == "raft.leader_change" and e.get("leader") is not None:
                    seen.append((str(e["timestamp"])[11:23], f"kbroker {node_id}", int(e["epoch"]), int(e["leader"])))
        return sorted(seen)


# Kafka's RaftManager: "[time] INFO [RaftManager id=N] Completed transition to FollowerState(fetchTimeoutMs=.., epoch=E, leader=L, ..."
# or "... to Leader(localVoterNode=..., epoch=E, ..." (the leader's epoch comes later on the line).
KAFKA_TRANSITION = re.compile(
    r"^\[(?P<time>[^\]]+)\] INFO \[RaftManager id=\d+\] Completed transition to (?P<state>FollowerState|Leader)\(.*?epoch=(?P<epoch>\d+)(?:, leader=(?P<leader>\d+))?",
    re.MULTILINE,
)


def kbroker_led(leadership: list[tuple[str, str, int, int]]) -> list[str]:
    """The epochs a kbroker node led (it logged itself leader) and the Kafka voters that followed
    it then (they logged FollowerState of that epoch and leader): M4's question."""
    led = sorted({(epoch, leader) for _, node, epoch, leader in leadership if node == f"kbroker {leader}"})
    out = []
    for epoch, leader in led:
        followers = sorted({node for _, node, e, led_by in leadership if (e, led_by) == (epoch, leader) and node.startswith("kafka")})
        out.append(f"epoch {epoch}: kbroker {leader} led; Kafka voters that followed it: {', '.join(followers) or 'none'}")
    return out


def in_window(events: list[dict], step: Step) -> list[dict]:
    return [e for e in events if step.started_at_ms <= int(e.get("timestamp", 0)) <= step.ended_at_ms]


def run_once(
    root: Path, lib: Path, scenario: str, back: bool, settle_s: float, throughput: int, kill_steps: Collection[int] = (), txn_interval_s: float = 0.0
) -> dict:
    """One run; ``kill_steps`` (1-based, in plan order) SIGKILL their steps' nodes instead of SIGTERM."""
    started = time.monotonic()
    cluster = RollingCluster(root, lib, scenario)
    plan = [(n, "kbroker") for n in cluster.converting] + ([(n, "kafka") for n in cluster.converting] if back else [])
    for kill_step in kill_steps:
        if not 1 <= kill_step <= len(plan):
            raise ValueError(f"--kill-step {kill_step}: the run has steps 1 to {len(plan)}")
    tools: list[VerifiableTool] = []
    loop = PacedTransactionalLoop(cluster.bootstrap, TXN_TOPIC, TXN_ID, pause_s=txn_interval_s)
    thread = threading.Thread(target=loop.run, daemon=True)
    try:
        cluster.start()
        for node in cluster.kbroker.values():
            node.warm_up()  # the interpreters kbroker starts in, importing the broker meanwhile
        cluster.create_topics()
        work = root / "tools"
        work.mkdir()
        consumer = verifiable_consumer(lib, work, cluster.bootstrap, TOPIC, GROUP)
        producer = verifiable_producer(lib, work, cluster.bootstrap, TOPIC, throughput)
        tools += [producer, consumer]
        thread.start()

        def load_alive() -> None:
            for tool in tools:
                if tool.proc.poll() is not None:
                    raise RuntimeError(f"{tool.out.name} exited with {tool.proc.returncode}")

        def load_running() -> bool:
            load_alive()
            return bool(loop.committed) and any(e.get("name") == "producer_send_success" for e in producer.events()) and any(
                e.get("name") == "partitions_assigned" for e in consumer.events()
            )

        # The first step starts under the whole load: a group still joining would count its first
        # assignment as a rebalance of step 1.
        wait_until(
            "every ISR full, records acknowledged, the group assigned, a transaction committed", lambda: load_running() and cluster.fully_replicated(), TIMEOUT_S, 0.5
        )

        steps: list[Step] = []
        try:
            time.sleep(settle_s)
            for number, (node_id, to) in enumerate(plan, 1):
                txn_before, committed_before = Counter(loop.errors), len(loop.committed)
                try:
                    step = cluster.convert(node_id, to, load_alive, kill=number in kill_steps)
                except Exception as e:  # a step that never completes ends the run: what died, and why
                    leadership = cluster.leadership_log()
                    return {"scenario": scenario, "failure": f"node {node_id} to {to}: {e}", "exited": cluster.exited(),
                            "steps": [s.__dict__ for s in steps], "leadership": [" ".join(map(str, x)) for x in leadership],
                            "kbroker_led": kbroker_led(leadership), "wall_s": round(time.monotonic() - started, 1)}  # fmt: skip
                step.txn_errors = dict(Counter(loop.errors) - txn_before)
                step.txn_committed = len(loop.committed) - committed_before
                steps.append(step)
                print(f"  step {step.name}: stop {step.stop_s:.1f}s start {step.start_s:.1f}s ISRs full {step.isr_s:.1f}s quorum {step.quorum}", flush=True)
                time.sleep(settle_s)
            load_alive()
        finally:
            loop.stop.set()
            producer.stop()
            thread.join(2 * TIMEOUT_S)

        producer_events = list(producer.events())
        consumer_events = list(consumer.events())
        for step in steps:
            window = in_window(producer_events, step)
            step.acked = sum(1 for e in window if e.get("name") == "producer_send_success")
            step.producer_errors = dict(Counter(e.get("exception", "?") for e in window if e.get("name") == "producer_send_error"))
            window = in_window(consumer_events, step)
            step.consumer = {
                "rebalances": sum(1 for e in window if e.get("name") == "partitions_assigned"),
                "commit_failures": sum(1 for e in window if e.get("name") == "offsets_committed" and not e.get("success", True)),
            }
        acked = Counter(int(e["value"]) for e in producer_events if e.get("name") == "producer_send_success")
        send_errors = Counter(e.get("exception", "?") for e in producer_events if e.get("name") == "producer_send_error")
        ends = end_offsets(cluster.bootstrap, TOPIC, PARTITIONS)
        committed_at_end = True
        try:
            wait_until(f"{GROUP} committed to the log end", lambda: caught_up(committed_offsets(cluster.bootstrap, GROUP, TOPIC, PARTITIONS), ends), TIMEOUT_S, 0.5)
        except AssertionError:
            committed_at_end = False
        consumer.stop()
        consumer_events = list(consumer.events())
        log = Counter(int(v) for v in read_log(cluster.bootstrap, TOPIC, PARTITIONS))
        seen = Counter(int(e["value"]) for e in consumer_events if e.get("name") == "record_data")
        leadership = cluster.leadership_log()
        row = {
            "scenario": scenario,
            "acked": len(acked),
            "send_errors": dict(send_errors),
            "lost": len(set(acked) - set(log)),
            "log_duplicates": sum(n - 1 for n in log.values() if n > 1),
            "group": {
                "missed": len(set(acked) - set(seen)),
                "redelivered": sum(n - 1 for n in seen.values() if n > 1),
                "committed_at_end": committed_at_end,
                "commit_failures": sum(1 for e in consumer_events if e.get("name") == "offsets_committed" and not e.get("success", True)),
            },
            "txn": {**loop.check(read_log(cluster.bootstrap, TXN_TOPIC, PARTITIONS, "read_committed")), "errors": dict(loop.errors)},
            "steps": [s.__dict__ for s in steps],
            "isrs_full_at_end": bool(wait_until("every ISR full at the end", cluster.fully_replicated, TIMEOUT_S, 0.5)),
            "quorum_at_end": cluster.quorum(),
            "leadership": [" ".join(map(str, entry)) for entry in leadership],
            "kbroker_led": kbroker_led(leadership),
            "wall_s": round(time.monotonic() - started, 1),
        }
        return row
    finally:
        loop.stop.set()
        for tool in tools:
            tool.stop(timeout_s=5)
        cluster.close()


def ok(row: dict) -> bool:
    return "failure" not in row and not (
        row["lost"] or row["log_duplicates"] or not row["isrs_full_at_end"] or row["group"]["missed"] or not row["group"]["committed_at_end"]
        or any(row["txn"][c] for c in ("lost", "partial", "aborted_read", "duplicated"))
    )  # fmt: skip


def print_table(run: int, row: dict) -> None:
    if "failure" in row:
        print(f"run {run} ({row['scenario']}, {row['wall_s']} s): FAILED at {row['failure']}; exited: {row['exited']}")
    else:
        print_checks(run, row)
    print_steps(row)


def print_checks(run: int, row: dict) -> None:
    g, t = row["group"], row["txn"]
    print(f"run {run} ({row['scenario']}, {row['wall_s']} s): acked {row['acked']}, lost {row['lost']}, log duplicates {row['log_duplicates']}; "
          f"group missed {g['missed']}, redelivered {g['redelivered']}, committed at end {g['committed_at_end']}; "
          f"txn committed {t['committed']} aborted {t['aborted']} in doubt {t['in_doubt']} lost {t['lost']} partial {t['partial']} "
          f"aborted read {t['aborted_read']} duplicated {t['duplicated']}; ISRs full {row['isrs_full_at_end']}; {'OK' if ok(row) else 'FAILED'}")  # fmt: skip


def print_steps(row: dict) -> None:
    header = ("step", "stop s", "start s", "ISRs full s", "stop signal to full ISRs s", "quorum leader", "acked", "txns committed", "producer errors",
              "group rebalances/commit fails", "txn errors")  # fmt: skip
    print(" | ".join(header))
    for s in row["steps"]:
        errors = ", ".join(f"{k.rsplit('.', 1)[-1]} {n}" for k, n in s["producer_errors"].items()) or "-"
        txn = ", ".join(f"{k} {n}" for k, n in s["txn_errors"].items()) or "-"
        print(" | ".join((s["name"], f"{s['stop_s']:.1f}", f"{s['start_s']:.1f}", f"{s['isr_s']:.1f}", f"{s['stop_s'] + s['start_s'] + s['isr_s']:.1f}", s["quorum"],
                          str(s["acked"]), str(s["txn_committed"]), errors,
                          f"{s['consumer'].get('rebalances', '-')}/{s['consumer'].get('commit_failures', '-')}", txn)))  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.rolling_migration", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--back", action=argparse.BooleanOptionalAction, default=True, help="convert every node back to Kafka afterwards")
    parser.add_argument("--scenario", choices=("combined", "brokers-only"), default="combined")
    parser.add_argument("--settle", type=float, default=8.0, help="seconds of load before the first step and after each")
    parser.add_argument("--throughput", type=int, default=200, help="VerifiableProducer's records per second")
    parser.add_argument(
        "--kill-step", type=int, action="append", default=[], metavar="N", help="SIGKILL instead of SIGTERM at step N (1-based: the steps to kbroker, then back); repeatable"
    )
    parser.add_argument("--txn-interval", type=float, default=0.0, help="seconds the transactional loop pauses after each commit")
    parser.add_argument("--dir", type=Path, help="keep every run's logs here")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args(argv)
    lib = fetch_jars()
    rows = []
    base = args.dir or Path(tempfile.mkdtemp(prefix="rolling-migration-"))
    for run in range(1, args.runs + 1):
        print(f"run {run}: {base / f'run{run}'}", flush=True)
        row = run_once(base / f"run{run}", lib, args.scenario, args.back, args.settle, args.throughput, args.kill_step, args.txn_interval)
        rows.append(row)
        print_table(run, row)
        print("quorum leadership (time, node, epoch, leader it saw):", *row["leadership"], sep="\n  ")
        print("kbroker as quorum leader:", *(row["kbroker_led"] or ["never"]), sep="\n  ", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0 if all(ok(r) for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
