"""Metadata at scale: N partitions (RF=3 over 3 brokers) in the quorum.

    python -m benchmarks.metadata_scale [--partitions 100000] [--json out.json]

Issue #16: snapshot size, time to write it, time for a new broker to load it and be unfenced,
controller idle CPU. Goal: a new broker unfenced within 15 s.

Three controller-only processes form the quorum. The three brokers the partitions are placed on
are synthetic: this process registers them (ids 101-103, as a real broker would, with a
listener nobody serves) and keeps them unfenced with a heartbeat a second. A real broker that
is a replica of N partitions would open N local logs, which is a different benchmark. The
topics are created with CreateTopics sent to the active controller, one topic of
--partitions-per-topic partitions a request.

The controllers snapshot on their timer (metadata.log.max.snapshot.interval.ms, --snapshot-interval-s),
set beyond the expected creation time so that no snapshot lands part way through it. With
Kafka's defaults there would be none for an hour: 100,000 partitions are about 12 MiB of
records, under the 20 MiB between snapshots. The timer is only looked at when something is
published and an idle quorum publishes nothing, so once it is due this process makes one small
write (a one-partition topic) and every controller snapshots. The size is the active
controller's .checkpoint file, the time the duration_ms of its metadata.snapshot_written
event. Then a new broker-only
process (node 4) is formatted and launched; it is a replica of nothing, so it opens no partition
logs, and the time from launch to its broker.unfenced event is the load time (it must have
logged raft.snapshot_loaded). Last, after a settling pause, each controller's CPU over
--idle-s seconds (utime+stime of /proc/<pid>/stat) as % of one core, with the synthetic brokers
and the new broker heartbeating as a live cluster's would. The longest gap between heartbeat
answers and the number of leader elections are reported too: a controller that stops answering
(while it writes a snapshot, say) shows there, and a gap of a session timeout fences brokers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest
from kio.schema.broker_registration.v4.request import BrokerRegistrationRequest, Feature, Listener
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.describe_quorum.v2.request import DescribeQuorumRequest, PartitionData, TopicData
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32, i32Timedelta, i64, u16

from broker.controller.feature_control_manager import METADATA_VERSION_FEATURE, METADATA_VERSION_LEVEL, MINIMUM_METADATA_VERSION_LEVEL
from broker.log_setup import setup_logging
from broker.network_client import NetworkClient, NetworkError
from raft.file_snapshots import snapshot_path
from raft.replicated_log import OffsetAndEpoch
from tests.cluster.cluster import FORMAT_TIMEOUT_S, ClusterNode, KafkaCluster, NodeSpec
from tests.ports import free_ports
from tests.integration.conftest import REPO, retire

GOAL_UNFENCED_S = 15.0
SYNTHETIC_BROKERS = (101, 102, 103)
NEW_BROKER_ID = 4
REPLICATION_FACTOR = 3
PLAINTEXT = 0
HEARTBEAT_EVERY_S = 1.0
SESSION_TIMEOUT_S = 9.0  # broker.session.timeout.ms, Kafka's default, which the controllers keep
REQUEST_TIMEOUT_MS = 120_000
CREATE_TIMEOUT_MS = 120_000
# A synthetic broker follows no log: it claims to have read everything, which unfences it.
CAUGHT_UP_OFFSET = 2**62
LEADER_WAIT_S = 60.0
UNFENCE_WAIT_S = 30.0
NEW_BROKER_WAIT_S = 300.0
SETTLE_S = 5.0
SNAPSHOT_WAIT_S = 30.0
SNAPSHOT_TRIGGER_ATTEMPTS = 3
POLL_S = 0.2
CLUSTER_ID = "kbroker-metadata-scale-0"


# -- sans-IO helpers ---------------------------------------------------------------------------------


def topic_plan(partitions: int, per_topic: int) -> list[int]:
    """Partition counts of the topics that make up ``partitions`` in all, none above ``per_topic``."""
    full, rest = divmod(partitions, per_topic)
    return [per_topic] * full + ([rest] if rest else [])


def cpu_ticks(stat_line: str) -> int:
    """utime + stime of a /proc/<pid>/stat line (the command name may hold spaces and parentheses)."""
    fields = stat_line[stat_line.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state); utime and stime are fields 14 and 15.
    return int(fields[11]) + int(fields[12])


def rss_bytes(status_text: str) -> int:
    for line in status_text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def event_time(event: dict[str, Any]) -> float:
    """The wall time (epoch seconds) of a JSON log line's ISO timestamp."""
    return datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()


NEW_BROKER_MILESTONES = (
    "first log line",  # the interpreter is up and the modules are imported
    "raft.snapshot_frozen",  # the snapshot has been fetched from the leader
    "raft.snapshot_loaded",  # and read back
    "metadata_loader.snapshot_loaded",  # and applied to the image
    "broker.registered",
    "broker.caught_up",
    "broker.unfenced",
)


def timeline(events: list[dict[str, Any]], launched: float) -> dict[str, float]:
    """Seconds from ``launched`` (wall time) to the first of each milestone in ``events``."""
    out: dict[str, float] = {}
    timed = [e for e in events if "timestamp" in e]
    if timed:
        out[NEW_BROKER_MILESTONES[0]] = event_time(timed[0]) - launched
    for name in NEW_BROKER_MILESTONES[1:]:
        first = next((e for e in timed if e.get("event") == name), None)
        if first is not None:
            out[name] = event_time(first) - launched
    return out


# -- results -------------------------------------------------------------------------------------------


@dataclass
class SnapshotResult:
    node_id: int
    offset: int
    epoch: int
    records: int
    duration_ms: float
    size_bytes: int


@dataclass
class Result:
    partitions: int
    topics: int
    create_s: float = 0.0
    metadata_log_end_offset: int = 0
    snapshots_during_create: int = 0
    snapshot: SnapshotResult | None = None
    other_snapshots: list[SnapshotResult] = field(default_factory=list)
    new_broker_unfenced_s: float | None = None
    new_broker_snapshot_records: int | None = None
    # Seconds from launch to the first of each of NEW_BROKER_MILESTONES the new broker logged.
    new_broker_timeline: dict[str, float] = field(default_factory=dict)
    new_broker_rss_bytes: int = 0
    idle_s: float = 0.0
    controller_idle_cpu_pct: dict[int, float] = field(default_factory=dict)
    controller_rss_bytes: dict[int, int] = field(default_factory=dict)
    snapshots_during_idle: int = 0
    heartbeat_max_gap_s: float = 0.0
    heartbeat_max_gap_ended: str = ""
    # controller.activated events after the first: leadership moved.
    leader_elections_after_first: int = 0
    goal_met: bool | None = None


# -- the synthetic brokers and the active controller -----------------------------------------------------


class ActiveController:
    """Requests to whichever controller is active; NOT_CONTROLLER makes it look again."""

    def __init__(self, client: NetworkClient, controllers: dict[int, tuple[str, int]]) -> None:
        self._client = client
        self._controllers = controllers
        self.leader: tuple[str, int] | None = None
        self.leader_id: int | None = None
        self.high_watermark = -1

    async def describe(self) -> None:
        """Find the quorum leader and its high watermark (only the leader knows it)."""
        request = DescribeQuorumRequest(topics=(TopicData(topic_name="__cluster_metadata", partitions=(PartitionData(partition_index=i32(0)),)),))
        candidates = list(self._controllers)
        while candidates:
            node_id = candidates.pop(0)
            try:
                response = await self._client.send(self._controllers[node_id], request, timeout_ms=5000)
            except NetworkError:
                continue
            partition = response.topics[0].partitions[0] if response.topics else None
            if partition is None:
                continue
            if partition.error_code == ErrorCode.none:
                self.leader_id = node_id
                self.high_watermark = int(partition.high_watermark)
                self.leader = self._controllers[node_id]
                return
            if int(partition.leader_id) in candidates:
                candidates.remove(int(partition.leader_id))
                candidates.insert(0, int(partition.leader_id))
        self.leader = None

    async def send(self, body: Any, timeout_ms: int = REQUEST_TIMEOUT_MS) -> Any:
        deadline = time.monotonic() + LEADER_WAIT_S
        while True:
            if self.leader is None:
                await self.describe()
            if self.leader is not None:
                try:
                    response = await self._client.send(self.leader, body, timeout_ms=timeout_ms)
                    if not _not_controller(response):
                        return response
                except NetworkError:
                    pass
                self.leader = None
            if time.monotonic() > deadline:
                raise RuntimeError(f"no active controller answered {type(body).__name__} within {LEADER_WAIT_S}s")
            await asyncio.sleep(POLL_S)


def _not_controller(response: Any) -> bool:
    if getattr(response, "error_code", None) == ErrorCode.not_controller:
        return True
    return any(t.error_code == ErrorCode.not_controller for t in getattr(response, "topics", ()))


class SyntheticBroker:
    """Registers the way BrokerLifecycleManager does and heartbeats every second."""

    def __init__(self, broker_id: int, port: int, controller: ActiveController) -> None:
        self.broker_id = broker_id
        self.port = port
        self.controller = controller
        self.incarnation_id = uuid.uuid4()
        self.log_dir_id = uuid.uuid4()
        self.broker_epoch = -1
        self.fenced = True
        self.max_gap_s = 0.0
        self.max_gap_ended_at = 0.0  # wall time
        self._last_heartbeat: float | None = None

    async def register(self) -> None:
        request = BrokerRegistrationRequest(
            broker_id=i32(self.broker_id),
            cluster_id=CLUSTER_ID,
            incarnation_id=self.incarnation_id,
            listeners=(Listener(name="PLAINTEXT", host="127.0.0.1", port=u16(self.port), security_protocol=i16(PLAINTEXT)),),
            features=(Feature(name=METADATA_VERSION_FEATURE, min_supported_version=i16(MINIMUM_METADATA_VERSION_LEVEL), max_supported_version=i16(METADATA_VERSION_LEVEL)),),
            rack=None,
            log_dirs=(self.log_dir_id,),
            previous_broker_epoch=i64(-1),
        )
        response = await self.controller.send(request)
        if response.error_code != ErrorCode.none:
            raise RuntimeError(f"broker {self.broker_id}: registration refused with {response.error_code.name}")
        self.broker_epoch = int(response.broker_epoch)

    async def heartbeat(self) -> None:
        request = BrokerHeartbeatRequest(
            broker_id=i32(self.broker_id),
            broker_epoch=i64(self.broker_epoch),
            current_metadata_offset=i64(CAUGHT_UP_OFFSET),
            want_fence=False,
            want_shut_down=False,
            offline_log_dirs=(),
        )
        response = await self.controller.send(request, timeout_ms=5000)
        now = time.monotonic()
        if self._last_heartbeat is not None and now - self._last_heartbeat > self.max_gap_s:
            self.max_gap_s = now - self._last_heartbeat
            self.max_gap_ended_at = time.time()
        self._last_heartbeat = now
        if response.error_code == ErrorCode.stale_broker_epoch:
            await self.register()
        elif response.error_code == ErrorCode.none:
            self.fenced = bool(response.is_fenced)

    async def run(self) -> None:
        while True:
            try:
                await self.heartbeat()
            except (RuntimeError, NetworkError):
                pass  # the next one tries again; a session outlives a few misses
            await asyncio.sleep(HEARTBEAT_EVERY_S)


# -- processes ---------------------------------------------------------------------------------------------


def new_broker(cluster: KafkaCluster) -> ClusterNode:
    """A broker-only node added after the fact, as KafkaCluster._make_node would have made it."""
    client_port = free_ports(1)[0]
    spec = NodeSpec(node_id=NEW_BROKER_ID, roles=("broker",), client_port=client_port, controller_port=None)
    node_dir = cluster.root / f"node{spec.node_id}"
    data_dir = node_dir / "data"
    voters = ",".join(f"{c.node_id}@127.0.0.1:{c.spec.controller_port}" for c in cluster.controllers)
    props = {
        "node.id": str(spec.node_id),
        "process.roles": "broker",
        "listeners": f"PLAINTEXT://127.0.0.1:{client_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{client_port}",
        "inter.broker.listener.name": "PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.quorum.voters": voters,
        "log.dirs": str(data_dir),
    }
    node_dir.mkdir(parents=True, exist_ok=True)
    config_file = node_dir / "server.properties"
    config_file.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    subprocess.run(
        [sys.executable, "-m", "broker", "storage", "format", "--cluster-id", cluster.cluster_id, "--config", str(config_file)],
        cwd=REPO, check=True, capture_output=True, timeout=FORMAT_TIMEOUT_S,
    )
    return ClusterNode(spec, data_dir, config_file)


def proc_cpu_ticks(pid: int) -> int:
    return cpu_ticks(Path(f"/proc/{pid}/stat").read_text())


def proc_rss(pid: int) -> int:
    return rss_bytes(Path(f"/proc/{pid}/status").read_text())


def snapshot_events(node: ClusterNode) -> list[dict[str, Any]]:
    return node.events_named("metadata.snapshot_written")


def metadata_dir(node: ClusterNode) -> Path:
    return node.data_dir / "__cluster_metadata-0"


# -- the run -------------------------------------------------------------------------------------------------


async def wait_for(what: str, probe: Any, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = await asyncio.to_thread(probe)
        if value:
            return value
        await asyncio.sleep(POLL_S)
    raise RuntimeError(f"timed out after {timeout_s}s waiting for {what}")


async def create_topics(controller: ActiveController, plan: list[int], prefix: str = "scale", exist_ok: bool = False) -> None:
    """``exist_ok``: a write that was retried after a leader change may have been made already."""
    for index, count in enumerate(plan):
        topic = CreatableTopic(name=f"{prefix}-{index:05d}", num_partitions=i32(count), replication_factor=i16(REPLICATION_FACTOR), assignments=(), configs=())
        request = CreateTopicsRequest(topics=(topic,), timeout=i32Timedelta.parse(timedelta(milliseconds=CREATE_TIMEOUT_MS)), validate_only=False)
        response = await controller.send(request, timeout_ms=CREATE_TIMEOUT_MS)
        result = response.topics[0]
        if result.error_code != ErrorCode.none and not (exist_ok and result.error_code == ErrorCode.topic_already_exists):
            raise RuntimeError(f"CreateTopics {topic.name}: {result.error_code.name} {result.error_message}")


def _first_snapshots_from(controllers: list[ClusterNode], offset: int) -> list[tuple[ClusterNode, dict[str, Any]]] | None:
    """Each controller's first snapshot at or past ``offset``, once every one has written one."""
    firsts = []
    for c in controllers:
        after = [e for e in snapshot_events(c) if e["offset"] >= offset]
        if not after:
            return None
        firsts.append((c, after[0]))
    return firsts


def _timer_due(controllers: list[ClusterNode], interval_s: float) -> float:
    """When every controller's snapshot timer has run out (wall time): it restarts at start-up and at each snapshot."""
    last = [max(event_time(e) for e in c.log_events() if e.get("event") in ("controller.started", "metadata.snapshot_written")) for c in controllers]
    return max(last) + interval_s


async def snapshot_after(controller: ActiveController, controllers: list[ClusterNode], offset: int, interval_s: float) -> list[tuple[ClusterNode, dict[str, Any]]]:
    """The controllers' snapshots holding everything up to ``offset``.

    The snapshot timer is only looked at when something new is published, and an idle quorum
    publishes nothing, so once the timer is due one small write (a one-partition topic) is
    that something.
    """
    for attempt in range(SNAPSHOT_TRIGGER_ATTEMPTS):
        due = await asyncio.to_thread(_timer_due, controllers, interval_s)
        await asyncio.sleep(max(0.0, due - time.time()) + 1.0)
        await create_topics(controller, [1], prefix=f"scale-snapshot-trigger-{attempt}", exist_ok=True)
        try:
            return await wait_for("the snapshots", lambda: _first_snapshots_from(controllers, offset), SNAPSHOT_WAIT_S)
        except RuntimeError:
            continue
    raise RuntimeError(f"no snapshot past offset {offset} on every controller after {SNAPSHOT_TRIGGER_ATTEMPTS} trigger writes")


async def measure(cluster: KafkaCluster, args: argparse.Namespace, result: Result, started: list[ClusterNode]) -> None:
    """Fills ``result``; the nodes it launches go into ``started`` for the caller to retire."""
    controllers = cluster.controllers
    addresses = {c.node_id: ("127.0.0.1", int(c.spec.controller_port or 0)) for c in controllers}
    # The admin writes and each broker's heartbeats on connections of their own, as with real
    # clients: a heartbeat must not queue behind a CreateTopics.
    clients = [NetworkClient(f"metadata-scale-{name}", request_timeout_ms=REQUEST_TIMEOUT_MS) for name in ("admin", *map(str, SYNTHETIC_BROKERS))]
    controller = ActiveController(clients[0], addresses)
    ports = free_ports(len(SYNTHETIC_BROKERS))
    brokers = [SyntheticBroker(b, port, ActiveController(client, addresses)) for b, port, client in zip(SYNTHETIC_BROKERS, ports, clients[1:])]
    tasks: list[asyncio.Task[None]] = []
    try:
        for b in brokers:
            await b.register()
        tasks = [asyncio.create_task(b.run()) for b in brokers]
        await wait_for("the synthetic brokers to be unfenced", lambda: all(not b.fenced for b in brokers), UNFENCE_WAIT_S)

        plan = topic_plan(args.partitions, args.partitions_per_topic)
        create_started = time.monotonic()
        await create_topics(controller, plan)
        result.create_s = time.monotonic() - create_started
        await controller.describe()
        result.metadata_log_end_offset = controller.high_watermark
        assert controller.leader_id is not None
        leader = cluster.nodes[controller.leader_id]
        print(f"created {args.partitions} partitions in {len(plan)} topics in {result.create_s:.1f} s; log end {result.metadata_log_end_offset}", flush=True)
        result.snapshots_during_create = len(await asyncio.to_thread(snapshot_events, leader))

        events = await snapshot_after(controller, controllers, result.metadata_log_end_offset, args.snapshot_interval_s)
        for node, event in events:
            path = snapshot_path(metadata_dir(node), OffsetAndEpoch(event["offset"], event["epoch"]))
            size = path.stat().st_size if path.exists() else -1
            snap = SnapshotResult(node.node_id, event["offset"], event["epoch"], event["records"], event["duration_ms"], size)
            if node is leader:
                result.snapshot = snap
            else:
                result.other_snapshots.append(snap)
        print(f"snapshot: {result.snapshot}", flush=True)

        broker = await asyncio.to_thread(new_broker, cluster)
        started.append(broker)
        launched = time.time()
        await asyncio.to_thread(broker.launch)
        try:
            unfenced = await wait_for("the new broker to be unfenced", lambda: broker.events_named("broker.unfenced"), args.new_broker_wait_s)
        except RuntimeError:
            print(broker.tail(), file=sys.stderr)
            raise
        result.new_broker_unfenced_s = event_time(unfenced[0]) - launched
        events = await asyncio.to_thread(broker.log_events)
        result.new_broker_timeline = timeline(events, launched)
        loaded = [e for e in events if e.get("event") == "raft.snapshot_loaded"]
        if loaded:
            result.new_broker_snapshot_records = int(loaded[0]["records"])
        result.goal_met = result.new_broker_unfenced_s <= GOAL_UNFENCED_S and bool(loaded)
        print(f"new broker unfenced {result.new_broker_unfenced_s:.2f} s after launch (snapshot loaded: {bool(loaded)})", flush=True)

        await asyncio.sleep(SETTLE_S)
        before_snapshots = await asyncio.to_thread(lambda: sum(len(snapshot_events(c)) for c in controllers))
        pids = {c.node_id: c.proc.pid for c in controllers if c.proc is not None}
        ticks_before = {n: proc_cpu_ticks(pid) for n, pid in pids.items()}
        idle_started = time.monotonic()
        await asyncio.sleep(args.idle_s)
        result.idle_s = time.monotonic() - idle_started
        ticks_after = {n: proc_cpu_ticks(pid) for n, pid in pids.items()}
        hz = os.sysconf("SC_CLK_TCK")
        result.controller_idle_cpu_pct = {n: 100.0 * (ticks_after[n] - ticks_before[n]) / hz / result.idle_s for n in pids}
        result.controller_rss_bytes = {n: proc_rss(pid) for n, pid in pids.items()}
        result.snapshots_during_idle = await asyncio.to_thread(lambda: sum(len(snapshot_events(c)) for c in controllers)) - before_snapshots
        if broker.proc is not None:
            result.new_broker_rss_bytes = proc_rss(broker.proc.pid)
        worst = max(brokers, key=lambda b: b.max_gap_s)
        result.heartbeat_max_gap_s = worst.max_gap_s
        result.heartbeat_max_gap_ended = datetime.fromtimestamp(worst.max_gap_ended_at, timezone.utc).isoformat()
        activations = await asyncio.to_thread(lambda: sum(len(c.events_named("controller.activated")) for c in controllers))
        result.leader_elections_after_first = activations - 1
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for client in clients:
            client.close()
            await client.wait_closed()


def report(result: Result) -> str:
    mib = 1024 * 1024
    rows = [
        ("partitions (RF=3, 3 brokers)", f"{result.partitions} in {result.topics} topics"),
        ("create time", f"{result.create_s:.1f} s ({result.partitions / result.create_s:.0f} partitions/s)" if result.create_s else "-"),
        ("metadata log end offset", str(result.metadata_log_end_offset)),
        ("snapshots written during creation (leader)", str(result.snapshots_during_create)),
    ]
    if result.snapshot is not None:
        s = result.snapshot
        rows += [
            (f"snapshot size (controller {s.node_id}, offset {s.offset})", f"{s.size_bytes / mib:.2f} MiB, {s.records} records"),
            ("snapshot write time (active controller)", f"{s.duration_ms:.0f} ms"),
        ]
        if result.other_snapshots:
            rows.append(("snapshot write time (other controllers)", ", ".join(f"{o.duration_ms:.0f} ms" for o in result.other_snapshots)))
    if result.new_broker_unfenced_s is not None:
        rows.append(("new broker: snapshot records loaded", "-" if result.new_broker_snapshot_records is None else str(result.new_broker_snapshot_records)))
        rows += [(f"new broker: {name} after launch", f"{t:.2f} s") for name, t in result.new_broker_timeline.items() if name != "broker.unfenced"]
        rows += [
            ("new broker: unfenced after launch", f"{result.new_broker_unfenced_s:.2f} s (goal <= {GOAL_UNFENCED_S:.0f} s: {'met' if result.goal_met else 'NOT met'})"),
            ("new broker RSS", f"{result.new_broker_rss_bytes / mib:.0f} MiB"),
        ]
    for node_id, pct in sorted(result.controller_idle_cpu_pct.items()):
        rows.append((f"controller {node_id} idle CPU over {result.idle_s:.0f} s", f"{pct:.1f} % of a core, RSS {result.controller_rss_bytes[node_id] / mib:.0f} MiB"))
    rows += [
        ("snapshots written during the idle window", str(result.snapshots_during_idle)),
        ("synthetic brokers: longest gap between heartbeat answers", f"{result.heartbeat_max_gap_s:.2f} s (sessions last {SESSION_TIMEOUT_S:.0f} s), ended {result.heartbeat_max_gap_ended}"),
        ("quorum leader elections after the first", str(result.leader_elections_after_first)),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.metadata_scale", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=100_000)
    parser.add_argument("--partitions-per-topic", type=int, default=1000)
    parser.add_argument("--snapshot-interval-s", type=float, default=None, help="the controllers' metadata.log.max.snapshot.interval.ms; default 30 s + 1 ms a partition")
    parser.add_argument("--idle-s", type=float, default=30.0)
    parser.add_argument("--new-broker-wait-s", type=float, default=NEW_BROKER_WAIT_S)
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE", help="for the controllers")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the data directories and logs (their path is printed)")
    args = parser.parse_args(argv)
    setup_logging("WARNING")
    if args.snapshot_interval_s is None:
        args.snapshot_interval_s = 30.0 + args.partitions / 1000
    overrides = {
        "metadata.log.max.snapshot.interval.ms": str(int(args.snapshot_interval_s * 1000)),
        # Only the timer: a snapshot must not land part way through the creation.
        "metadata.log.max.record.bytes.between.snapshots": str(2**40),
    }
    overrides.update(dict(o.split("=", 1) for o in args.override))
    result = Result(partitions=args.partitions, topics=len(topic_plan(args.partitions, args.partitions_per_topic)))
    root = Path(tempfile.mkdtemp(prefix="metadata-scale-"))
    cluster = KafkaCluster(root, combined=0, controllers=3, brokers=0, overrides=overrides, cluster_id=CLUSTER_ID)
    started: list[ClusterNode] = []
    try:
        cluster.start()
        asyncio.run(measure(cluster, args, result, started))
    finally:
        for node in started:
            retire(node)
        cluster.close()
        if args.keep:
            print(f"logs and data kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
        print(report(result))
        if args.json is not None:
            args.json.write_text(json.dumps(asdict(result), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
