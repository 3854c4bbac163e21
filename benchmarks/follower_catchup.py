"""How fast a follower that was away catches up, and what it costs its leader.

    python -m benchmarks.follower_catchup [--megabytes 1024] [--partitions 1] [--record-bytes 10000]
                                          [--override key=value ...] [--profile-follower SECONDS]

Three combined nodes on loopback (the cluster of tests/cluster). An RF=3 topic is created with
every partition led by one broker that is not the active controller and followed by the other
two, and its full ISR awaited; the follower that is not the controller is stopped with SIGTERM;
librdkafka then produces ``--megabytes`` of incompressible records with acks=1 to the leader.
Once the other follower holds all of it (so that the high watermark is the log end, and
rejoining the ISR means having copied everything), the stopped follower is started again, and
the benchmark polls Metadata until it is back in every partition's ISR.

Reported: the catch-up rate, MB behind over the time from the follower's restart to its return
to the ISR, and over the transfer alone (from the first byte the follower's log directory gained,
sampled every 50 ms, to its return to the ISR); and the CPU seconds per MB of the leader and of
the follower from the restart to the return, from utime + stime in /proc/<pid>/stat. The leader sends the segments with sendfile, so its CPU per
MB is the cost of the fetch requests, not of copying the data.

With ``--profile-follower``, py-spy (if installed) records the follower for that many seconds of
the catch-up and prints where its time went.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.cluster import ClusterNode, KafkaCluster, leader_id, wait_until

TIMEOUT_S = 600.0
MB = 1_000_000
TOPIC = "catchup"


def partition_states(bootstrap: str, partitions: int) -> list[tuple[int, list[int]]]:
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(TOPIC, timeout=30).topics[TOPIC].partitions
    return [(meta[p].leader, sorted(meta[p].isrs)) for p in range(partitions)]


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc/<pid>/stat (fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def log_bytes(node: ClusterNode) -> int:
    """Bytes of the topic's segment files in ``node``'s log directory."""
    return sum(f.stat().st_size for d in node.data_dir.glob(f"{TOPIC}-*") for f in d.glob("*.log"))


def produce(bootstrap: str, total_bytes: int, record_bytes: int) -> int:
    """acks=1 records of incompressible bytes until ``total_bytes`` are acknowledged; the bytes sent."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "1",
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.kbytes": 262_144,
            "compression.type": "none",
            "log_level": 0,
        }
    )
    pool = [os.urandom(record_bytes) for _ in range(64)]
    failures: list[str] = []

    def done(err, _msg) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            failures.append(str(err))

    sent = 0
    i = 0
    while sent < total_bytes:
        try:
            producer.produce(TOPIC, pool[i % len(pool)], on_delivery=done)
        except BufferError:
            producer.poll(0.05)
            continue
        sent += record_bytes
        i += 1
        producer.poll(0)
    producer.flush(TIMEOUT_S)
    if failures:
        raise RuntimeError(f"{len(failures)} records failed, the first: {failures[0]}")
    return sent


def profile(pid: int, seconds: float, out: Path) -> threading.Thread | None:
    py_spy = shutil.which("py-spy")
    if py_spy is None:
        print("py-spy not found on PATH: no profile")
        return None
    command = [py_spy, "record", "--pid", str(pid), "--duration", str(int(seconds)), "--format", "raw", "--output", str(out), "--nonblocking"]
    thread = threading.Thread(target=subprocess.run, args=(command,), kwargs={"capture_output": True}, daemon=True)
    thread.start()
    return thread


def summarise_profile(path: Path, top: int = 15) -> None:
    """Self time per function from py-spy's raw (collapsed stacks) output."""
    if not path.exists():
        print("py-spy wrote no profile (ptrace refused?)")
        return
    self_time: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        leaf = stack.rsplit(";", 1)[-1]
        self_time[leaf] = self_time.get(leaf, 0) + int(count)
        total += int(count)
    print(f"follower profile, self time of {total} samples:")
    for leaf, count in sorted(self_time.items(), key=lambda kv: -kv[1])[:top]:
        print(f"  {count / total:6.1%}  {leaf}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=int, default=1024, help="how far behind the follower falls (MB of records)")
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--record-bytes", type=int, default=10_000)
    parser.add_argument("--override", action="append", default=[], help="a broker property for every node, key=value")
    parser.add_argument("--profile-follower", type=float, default=0.0, metavar="SECONDS")
    args = parser.parse_args()
    overrides = dict(o.split("=", 1) for o in args.override)
    with tempfile.TemporaryDirectory(prefix="kbroker-catchup-") as root:
        cluster = KafkaCluster(Path(root), combined=3, overrides=overrides)
        try:
            cluster.start()
            controller = wait_until("the active controller", lambda: leader_id(cluster, cluster.brokers[0].node_id), TIMEOUT_S)
            leader, follower = (n for n in cluster.brokers if n.node_id != controller)
            other = cluster.nodes[controller]
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
            assignment = [[leader.node_id, follower.node_id, other.node_id]] * args.partitions
            admin.create_topics([NewTopic(TOPIC, num_partitions=args.partitions, replica_assignment=assignment)], operation_timeout=60, request_timeout=60)[TOPIC].result(timeout=60)
            wait_until("a full ISR", lambda: all(len(i) == 3 for _, i in partition_states(cluster.bootstrap, args.partitions)) or None, TIMEOUT_S)
            survivor = leader
            follower.stop()
            wait_until("the follower out of the ISR", lambda: all(follower.node_id not in i for _, i in partition_states(survivor.bootstrap, args.partitions)) or None, TIMEOUT_S)
            started = time.monotonic()
            sent = produce(survivor.bootstrap, args.megabytes * MB, args.record_bytes)
            print(f"produced {sent / MB:,.0f} MB with acks=1 in {time.monotonic() - started:.1f} s while node {follower.node_id} was down")
            wait_until("the other follower caught up", lambda: log_bytes(other) >= log_bytes(leader) or None, TIMEOUT_S)

            assert leader.proc is not None
            leader_cpu = cpu_seconds(leader.proc.pid)
            held = log_bytes(follower)
            launched = time.monotonic()
            follower.launch()
            assert follower.proc is not None
            follower_pid = follower.proc.pid
            spy = profile(follower_pid, args.profile_follower, Path(root) / "follower.spy") if args.profile_follower else None
            first_byte: list[float] = []

            def back() -> bool | None:
                follower_cpu[0] = cpu_seconds(follower_pid)
                if not first_byte and log_bytes(follower) > held:
                    first_byte.append(time.monotonic())
                return all(follower.node_id in i for _, i in partition_states(survivor.bootstrap, args.partitions)) or None

            follower_cpu = [0.0]
            wait_until("the follower back in the ISR", back, TIMEOUT_S, interval_s=0.05)
            rejoined = time.monotonic()
            leader_cpu_s = cpu_seconds(leader.proc.pid) - leader_cpu
            megabytes = sent / MB
            copied = (log_bytes(follower) - held) / MB
            transfer_s = rejoined - first_byte[0]
            print(
                f"follower back in the ISR {rejoined - launched:.1f} s after its restart, having copied {copied:,.0f} MB: "
                f"{megabytes / (rejoined - launched):,.1f} MB/s from the restart, {copied / transfer_s:,.1f} MB/s over the "
                f"{transfer_s:.1f} s from its first byte"
            )
            print(f"leader CPU {leader_cpu_s:.2f} s = {leader_cpu_s / megabytes * 1000:.1f} ms per MB; follower CPU {follower_cpu[0]:.2f} s = {follower_cpu[0] / megabytes * 1000:.1f} ms per MB")
            if spy is not None:
                spy.join(args.profile_follower + 30)
                summarise_profile(Path(root) / "follower.spy")
        finally:
            cluster.close()


if __name__ == "__main__":
    main()
