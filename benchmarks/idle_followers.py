"""What following many idle partitions costs: the CPU of three nodes doing nothing but replicate,
and the fetch sessions (KIP-227) that keep it low, on kbroker or on Apache Kafka 4.4.

    python -m benchmarks.idle_followers [--target kbroker|kafka] [--partitions 600] [--seconds 20]

Three combined nodes on loopback; one RF=3 topic with ``--partitions`` partitions (leaders spread
over the nodes, so each node follows two thirds of them) and no traffic. Once every ISR is full
and every leader's fetch session cache holds one session per follower with every partition it
leads, and five seconds more, each node's CPU seconds (utime + stime from /proc/<pid>/stat: the
Python process, or the JVM) over ``--seconds`` are reported, with, per node, what Kafka's metrics
say of its fetch sessions: the follower fetches it answered in that time and their mean size
(RequestMetrics RequestBytes, request=FetchFollower), NumIncrementalFetchSessions,
NumIncrementalFetchPartitionsCached and IncrementalFetchSessionEvictionsPerSec (kafka.server
FetchSessionCache). kbroker's are scraped from its metrics.listener, Kafka's read over JMX (the
agent started in each JVM by ``jcmd ManagementAgent.start`` once the cluster is up, read by
Kafka's own JmxTool). On the active controller the follower fetches include the other voters'
Raft fetches of the metadata log, in both brokers; on the other nodes they are the replica
fetchers' alone. The machine's load average at the end is printed too: on a shared machine it
moves these figures more than anything.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks.apache_kafka import KafkaReferenceCluster, fetch_jars, free_ports
from benchmarks.follower_catchup import cpu_seconds
from tests.cluster.cluster import KafkaCluster, wait_until
from tests.cluster.test_cluster_metrics import scrape
from tests.cluster.test_follower_fetch_sessions import FETCH_SESSION_CACHE, follower_fetches, value
from tests.kafka_tools import ToolJvm

TOPIC = "idle"
TIMEOUT_S = 300.0
SETTLE_S = 5.0
JMX_TOOL = "org.apache.kafka.tools.JmxTool"
SESSION_CACHE_MBEAN = "kafka.server:type=FetchSessionCache,name="
JMX_OBJECTS = {
    "sessions": (SESSION_CACHE_MBEAN + "NumIncrementalFetchSessions", "Value"),
    "partitions_cached": (SESSION_CACHE_MBEAN + "NumIncrementalFetchPartitionsCached", "Value"),
    "evictions": (SESSION_CACHE_MBEAN + "IncrementalFetchSessionEvictionsPerSec", "Count"),
    "follower_fetches": ("kafka.network:type=RequestMetrics,name=RequestBytes,request=FetchFollower", "Count"),
    "follower_fetch_mean": ("kafka.network:type=RequestMetrics,name=RequestBytes,request=FetchFollower", "Mean"),
    "active_controller": ("kafka.controller:type=KafkaController,name=ActiveControllerCount", "Value"),
}


@dataclass
class NodeStats:
    """What one node's metrics say at one moment."""

    active_controller: bool
    sessions: float
    partitions_cached: float
    evictions: float
    follower_fetches: float
    follower_fetch_bytes: float


class KafkaJmx:
    """Kafka 4.4's JMX on running JVMs: the agent started in each by jcmd, read by JmxTool in one tool JVM."""

    def __init__(self, lib: Path, work: Path) -> None:
        self._tools = ToolJvm(lib, work / "jmx-tool.stderr")
        self._urls: dict[int, str] = {}

    def attach(self, node_id: int, pid: int) -> None:
        (port,) = free_ports(1)
        options = [f"jmxremote.port={port}", f"jmxremote.rmi.port={port}", "jmxremote.authenticate=false", "jmxremote.ssl=false", "jmxremote.host=127.0.0.1"]
        out = subprocess.run(["jcmd", str(pid), "ManagementAgent.start", *options], capture_output=True, text=True, timeout=60)
        if out.returncode != 0 or "successfully" not in out.stdout:
            raise RuntimeError(f"jcmd could not start the JMX agent of node {node_id}: {out.stdout}{out.stderr}")
        self._urls[node_id] = f"service:jmx:rmi:///jndi/rmi://127.0.0.1:{port}/jmxrmi"

    def stats(self, node_id: int) -> NodeStats:
        # Every attribute: with --attributes JmxTool 4.4 printed nothing here.
        args = ["--jmx-url", self._urls[node_id], "--one-time", "true", "--report-format", "properties"]
        for name in {mbean for mbean, _ in JMX_OBJECTS.values()}:
            args += ["--object-name", name]
        rc, out, err = self._tools.run(JMX_TOOL, *args)
        if rc != 0:
            raise RuntimeError(f"JmxTool against node {node_id} failed ({rc}): {out}{err}")
        # Lines "<object name>:<attribute>=<value>", after one "time=<ms>".
        read = {key: number for key, _, number in (line.rpartition("=") for line in out.splitlines()) if key}
        got = {key: float(read.get(f"{mbean}:{attribute}", 0)) for key, (mbean, attribute) in JMX_OBJECTS.items()}
        return NodeStats(
            active_controller=got["active_controller"] == 1,
            sessions=got["sessions"],
            partitions_cached=got["partitions_cached"],
            evictions=got["evictions"],
            follower_fetches=got["follower_fetches"],
            # Yammer's Mean is the sum over the count, exactly.
            follower_fetch_bytes=got["follower_fetch_mean"] * got["follower_fetches"],
        )

    def close(self) -> None:
        self._tools.close()


def kbroker_stats(cluster: KafkaCluster, node_id: int) -> NodeStats:
    samples = scrape(cluster, node_id)
    count, total = follower_fetches(samples)
    return NodeStats(
        active_controller=value(samples, "kafka_controller_kafkacontroller_activecontrollercount") == 1,
        sessions=value(samples, FETCH_SESSION_CACHE + "numincrementalfetchsessions"),
        partitions_cached=value(samples, FETCH_SESSION_CACHE + "numincrementalfetchpartitionscached"),
        evictions=value(samples, FETCH_SESSION_CACHE + "incrementalfetchsessionevictions_total"),
        follower_fetches=count,
        follower_fetch_bytes=total,
    )


def measure(bootstrap: str, pids: dict[int, int], stats: Callable[[int], NodeStats], partitions: int, seconds: float) -> list[str]:
    """Create the topic, wait for every ISR, then CPU and fetch-session figures of each node over ``seconds``."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, partitions, 3)], operation_timeout=60, request_timeout=60)[TOPIC].result(timeout=60)

    def full() -> dict[int, int] | None:
        state = admin.list_topics(TOPIC, timeout=30).topics[TOPIC].partitions.values()
        if len(state) != partitions or any(len(p.isrs) != 3 for p in state):
            return None
        return {n: sum(p.leader == n for p in state) for n in pids}

    led = wait_until("every ISR full", full, TIMEOUT_S)

    def sessions_whole() -> bool:
        return all((s.sessions, s.partitions_cached) == (2, 2 * led[n]) for n, s in ((n, stats(n)) for n in pids))

    wait_until("every leader caching one session per follower with the partitions it leads", sessions_whole, TIMEOUT_S, interval_s=1.0)
    time.sleep(SETTLE_S)
    before = {n: stats(n) for n in pids}
    cpu_before = {n: cpu_seconds(pid) for n, pid in pids.items()}
    time.sleep(seconds)
    cpu = {n: cpu_seconds(pid) - cpu_before[n] for n, pid in pids.items()}
    after = {n: stats(n) for n in pids}
    lines = []
    for n in pids:
        a, b = after[n], before[n]
        fetches = a.follower_fetches - b.follower_fetches
        mean = (a.follower_fetch_bytes - b.follower_fetch_bytes) / fetches if fetches else float("nan")
        role = "active controller, Raft fetches included" if a.active_controller else "replica fetches only"
        lines.append(
            f"node {n} (leads {led[n]}): CPU {cpu[n]:.2f} s; {fetches:.0f} follower fetches answered, {mean:.1f} bytes each on average ({role}); "
            f"NumIncrementalFetchSessions {a.sessions:.0f}, NumIncrementalFetchPartitionsCached {a.partitions_cached:.0f}, evictions {a.evictions:.0f}"
        )
    load = Path("/proc/loadavg").read_text().split()[0]
    lines.append(f"CPU per node over {seconds:.0f} s: " + ", ".join(f"{cpu[n]:.2f} s" for n in pids) + f" (mean {sum(cpu.values()) / len(cpu):.2f} s; load average {load})")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", choices=("kbroker", "kafka"), default="kbroker")
    parser.add_argument("--partitions", type=int, default=600)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kbroker-idle-") as root:
        if args.target == "kafka":
            kafka = KafkaReferenceCluster(Path(root) / "kafka", fetch_jars(), nodes=3)
            jmx = KafkaJmx(kafka.lib, Path(root))
            try:
                kafka.start()
                pids = {n: node.proc.pid for n, node in kafka.nodes.items() if node.proc is not None}
                for n, pid in pids.items():
                    jmx.attach(n, pid)
                lines = measure(kafka.bootstrap, pids, jmx.stats, args.partitions, args.seconds)
            finally:
                jmx.close()
                kafka.close()
        else:
            listeners = {i + 1: f"http://127.0.0.1:{port}" for i, port in enumerate(free_ports(3))}
            cluster = KafkaCluster(Path(root), combined=3, node_overrides={n: {"metrics.listener": url} for n, url in listeners.items()})
            try:
                cluster.start()
                pids = {n.node_id: n.proc.pid for n in cluster.brokers if n.proc is not None}
                lines = measure(cluster.bootstrap, pids, lambda n: kbroker_stats(cluster, n), args.partitions, args.seconds)
            finally:
                cluster.close()
    print(f"{args.target}: {args.partitions} idle RF=3 partitions")
    for line in lines:
        print(line)


if __name__ == "__main__":
    main()
