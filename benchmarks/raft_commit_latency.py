"""Raft commit latency: from an append on the metadata quorum's leader to its commit there.

    python -m benchmarks.raft_commit_latency [--records 5000] [--rate 500] [--linger-ms 25] [--json out.json]

Three voters on loopback, all in this one process: each is a real KafkaRaftManager (the asyncio
shell the controllers run) with its own NetworkClient, its own metadata log in a temporary
directory (fsync and all) and its own SocketServer serving the Raft APIs through KafkaApis the
way a controller listener does. So every Fetch, Vote and BeginQuorumEpoch crosses real TCP and
the project's framing. Three controller processes would be more faithful still, but the commit
is only visible inside the leader's process (DescribeQuorum shows the high watermark only when
asked, so polling it adds its own delay); in one process the leader's listener sees each
CommittedBatch the moment the manager hands it out. The loop is uvloop's, as a node's. The
price: the three nodes share one event loop and one core (GIL), so the followers' work (their
fsyncs included, which block the loop) delays the leader, and the figures are an upper bound
for what separate processes would show.

Once a leader is elected and a first record has committed (connections up, the epoch's
LeaderChange committed), ``--records`` one-record appends of a small ConfigRecord are made on
the leader at ``--rate`` per second; each is timed from the ``append`` call to the leader's
listener receiving the batch holding its offset. ``controller.quorum.append.linger.ms``
(``--linger-ms``, Kafka's default 25) batches appends, so the number of batches is printed too.
The generator's worst lateness behind its schedule is reported: latency is measured from the
actual append, so a late generator hides waiting that a client would have seen.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import uvloop
from broker.config import BrokerConfig
from broker.controller_server import RAFT_APIS
from broker.handlers.api_versions import api_versions_response
from broker.kafka_apis import KafkaApis, RequestContext
from broker.log_setup import setup_logging
from broker.metadata.metadata_records import ConfigRecord, MetadataRecord
from broker.network import SocketServer, TransferMetrics
from broker.network_client import NetworkClient
from broker.raft_manager import KafkaRaftManager
from broker.shared_server import INTER_NODE_REQUEST_TIMEOUT_MS
from protocol.api_keys import CONTROLLER_APIS, ApiKey
from raft.kafka_metadata_log import MetadataLogConfig
from raft.kafka_raft_client import NotLeaderError
from raft.raft_config import RaftConfig
from raft.replicated_log import OffsetAndEpoch
from raft.voter_set import Endpoint, VoterNode, VoterSet

VOTERS = 3
CLUSTER_ID = "raft-commit-bench-0000"
LISTENER = "CONTROLLER"
TOPIC_RESOURCE = 2  # ConfigResource.Type.TOPIC
ELECTION_LIMIT_S = 30.0
DRAIN_LIMIT_S = 30.0
# The run is over: no point waiting for the graceful resignation, which needs followers that are closing too.
SHUTDOWN_TIMEOUT_MS = 100

# The Raft half of a controller listener's table.
RAFT_LISTENER_APIS = {key: CONTROLLER_APIS[key] for key in (*RAFT_APIS, ApiKey.API_VERSIONS)}


@dataclass(slots=True)
class CommitLatencyResult:
    records: int
    rate: float
    linger_ms: int
    batches: int
    duration_s: float
    throughput: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    generator_max_lag_ms: float
    latencies_ms: list[float] = field(repr=False)  # in offset order

    def summary(self) -> dict[str, Any]:
        out = asdict(self)
        del out["latencies_ms"]
        return out


class CommitClock:
    """A node's Raft listener: the time from each append (made through ``appended``) to its commit."""

    def __init__(self) -> None:
        self.appended: dict[int, float] = {}
        self.latencies_s: list[float] = []
        self.batches = 0
        self.committed_through = -1
        self.leader_changes = 0
        self.progress = asyncio.Event()

    def handle_commit(self, batch: Any) -> None:
        now = time.perf_counter()
        self.committed_through = batch.last_offset
        self.progress.set()
        timed = False
        for offset in range(batch.base_offset, batch.last_offset + 1):
            appended_at = self.appended.pop(offset, None)
            if appended_at is not None:
                self.latencies_s.append(now - appended_at)
                timed = True
        if timed:
            self.batches += 1

    def handle_load_snapshot(self, snapshot_id: OffsetAndEpoch, records: Sequence[MetadataRecord]) -> None:
        pass

    def handle_leader_change(self, leader_id: int | None, epoch: int) -> None:
        self.leader_changes += 1

    async def wait_committed(self, offset: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self.committed_through < offset:
            self.progress.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"offset {offset} not committed within {timeout_s:.0f} s (committed through {self.committed_through})")
            try:
                await asyncio.wait_for(self.progress.wait(), remaining)
            except asyncio.TimeoutError:
                pass


class QuorumNode:
    """One voter: its socket server, network client, Raft manager and commit clock."""

    def __init__(self, node_id: int, directory: Path) -> None:
        self.node_id = node_id
        self.directory = directory
        self.clock = CommitClock()
        self.network = NetworkClient(f"raft-bench-{node_id}", request_timeout_ms=INTER_NODE_REQUEST_TIMEOUT_MS)
        self.raft: KafkaRaftManager | None = None
        handlers: dict[ApiKey, Any] = {key: self._raft_request for key in RAFT_APIS}
        handlers[ApiKey.API_VERSIONS] = lambda ctx, req: api_versions_response(ctx.version, RAFT_LISTENER_APIS)
        defaults = BrokerConfig.model_fields
        self.server = SocketServer(
            "127.0.0.1",
            0,
            KafkaApis(handlers, RAFT_LISTENER_APIS).dispatch,  # type: ignore[arg-type]
            max_request_size=defaults["socket_request_max_bytes"].default,
            max_in_flight=defaults["queued_max_requests"].default,
            metrics=TransferMetrics(),
        )

    def _raft_request(self, ctx: RequestContext, request: Any) -> Any:
        assert self.raft is not None
        return self.raft.handle_request(request)

    def build_raft(self, voters: VoterSet, linger_ms: int) -> None:
        self.raft = KafkaRaftManager(
            node_id=self.node_id,
            directory_id=uuid.uuid4(),
            cluster_id=CLUSTER_ID,
            metadata_dir=self.directory,
            raft_config=RaftConfig(append_linger_ms=linger_ms),
            voters=voters,
            bootstrap_servers=[],
            network=self.network,
            log_config=MetadataLogConfig(),
        )
        self.raft.register_listener(self.clock)

    async def close(self) -> None:
        if self.raft is not None and self.raft.client is not None:
            await self.raft.resign(SHUTDOWN_TIMEOUT_MS)
            await self.raft.shutdown()
        await self.server.stop_accepting()
        await self.server.close_connections()
        self.network.close()
        await self.network.wait_closed()


async def start_quorum(root: Path, linger_ms: int) -> list[QuorumNode]:
    """Three voters listening and started; the managers start together so none gets a request before it can answer."""
    nodes = [QuorumNode(node_id, root / f"node{node_id}") for node_id in range(1, VOTERS + 1)]
    for node in nodes:
        node.directory.mkdir(parents=True)
        await node.server.start()
    voters = VoterSet(VoterNode(n.node_id, None, (Endpoint(LISTENER, "127.0.0.1", n.server.port),)) for n in nodes)
    for node in nodes:
        node.build_raft(voters, linger_ms)
    for node in nodes:
        assert node.raft is not None
        node.raft.start()
    return nodes


async def await_leader(nodes: list[QuorumNode], timeout_s: float) -> QuorumNode:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for node in nodes:
            if node.raft is not None and node.raft.is_leader():
                return node
        await asyncio.sleep(0.01)
    raise TimeoutError(f"no leader elected within {timeout_s:.0f} s")


def config_record(i: int) -> ConfigRecord:
    return ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="bench", name="retention.ms", value=str(i))


async def measure(leader: QuorumNode, records: int, rate: float) -> CommitLatencyResult:
    raft, clock = leader.raft, leader.clock
    assert raft is not None
    warmup = raft.append([config_record(-1)])
    await clock.wait_committed(warmup, DRAIN_LIMIT_S)
    clock.latencies_s.clear()
    clock.batches = 0
    leader_changes = clock.leader_changes
    interval = 1.0 / rate
    lag = 0.0
    last = warmup
    start = time.perf_counter()
    for i in range(records):
        due = start + i * interval
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        appended_at = time.perf_counter()
        lag = max(lag, appended_at - due)
        try:
            last = raft.append([config_record(i)])
        except NotLeaderError as e:
            raise RuntimeError(f"node {leader.node_id} lost the leadership after {i} appends; rerun on a less loaded machine") from e
        clock.appended[last] = appended_at
    await clock.wait_committed(last, DRAIN_LIMIT_S)
    duration = time.perf_counter() - start
    if clock.leader_changes != leader_changes or clock.appended:
        raise RuntimeError("the leadership changed during the run: the latencies would mix epochs")
    in_order = [s * 1000 for s in clock.latencies_s]
    latencies = sorted(in_order)
    return CommitLatencyResult(
        records=records,
        rate=rate,
        linger_ms=raft.client.config.append_linger_ms if raft.client is not None else -1,
        batches=clock.batches,
        duration_s=duration,
        throughput=records / duration,
        p50_ms=statistics.median(latencies),
        p99_ms=statistics.quantiles(latencies, n=100, method="inclusive")[98] if len(latencies) > 1 else latencies[0],
        max_ms=latencies[-1],
        generator_max_lag_ms=lag * 1000,
        latencies_ms=in_order,
    )


async def run_benchmark(root: Path, *, records: int, rate: float, linger_ms: int) -> CommitLatencyResult:
    """A fresh three-voter quorum under ``root``, measured and shut down."""
    nodes = await start_quorum(root, linger_ms)
    try:
        leader = await await_leader(nodes, ELECTION_LIMIT_S)
        return await measure(leader, records, rate)
    finally:
        await asyncio.gather(*(node.close() for node in nodes), return_exceptions=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.raft_commit_latency", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=5000)
    parser.add_argument("--rate", type=float, default=500.0, help="appends per second")
    parser.add_argument("--linger-ms", type=int, default=RaftConfig().append_linger_ms, help="controller.quorum.append.linger.ms")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write the summary and every latency here")
    args = parser.parse_args(argv)
    if args.records < 1 or args.rate <= 0:
        parser.error("--records and --rate must be positive")
    setup_logging("WARNING")
    with tempfile.TemporaryDirectory(prefix="raft-commit-") as root:
        result = uvloop.run(run_benchmark(Path(root), records=args.records, rate=args.rate, linger_ms=args.linger_ms))
    print(f"raft commit latency, {VOTERS} voters on loopback TCP in ONE process: they share one event loop and core,")
    print("  the followers' work and fsyncs delay the leader, so these figures are an upper bound")
    print(f"  {result.records} appends at {result.rate:g}/s, linger {result.linger_ms} ms: {result.batches} batches, {result.records / max(result.batches, 1):.1f} records/batch")
    print(f"  p50 {result.p50_ms:.1f} ms, p99 {result.p99_ms:.1f} ms, max {result.max_ms:.1f} ms")
    print(f"  throughput {result.throughput:.0f} records/s over {result.duration_s:.2f} s; generator lag max {result.generator_max_lag_ms:.1f} ms")
    if args.json is not None:
        args.json.write_text(json.dumps({**result.summary(), "voters_in_one_process": VOTERS, "latencies_ms": result.latencies_ms}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
