"""Broker CPU of consuming the same data again and again, and what the kernel alone costs.

    python -m benchmarks.consume_cpu [--broker kbroker|tansu] [--partitions N] [--rounds N]
                                     [--override key=value ...] [--floor]

Produces workload 1's data (1,000,000 x 100 B; keyed over ``--partitions``) once, then reads
it from offset 0 ``--rounds`` times with a fresh confluent-kafka consumer each time (workload
1's consumer: fetch.queue.backoff.ms=0). For each round: wall time, records/s and the broker's
CPU in ms, summed over its threads from /proc/PID/task/*/schedstat (nanoseconds; /proc/PID/stat
counts in 10 ms ticks, too coarse for a 50 ms figure). Round 0 carries the first consumer's
one-time work (FindCoordinator creates ``__consumer_offsets``); later rounds are the steady cost.

``--floor`` (kbroker, one partition) also serves the broker's own segment file from a forked
process that does nothing per request but one recv and ``os.sendfile`` of 1 MiB, to a client
on a core of its own and then on the same core: the kernel's share of a fetch, which no broker
code can go below.
"""

from __future__ import annotations

import argparse
import glob
import os
import random
import socket
import sys
import time

from benchmarks import workloads
from benchmarks.harness import BrokerUnderTest

RECORDS = 1_000_000
CHUNK = 1 << 20


def cpu_ms(pid: int) -> float:
    """On-CPU time of every thread of ``pid`` so far, in ms."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            pass  # the thread ended between the listing and the read
    return total / 1e6


def sendfile_floor(path: str, server_cpu: int, client_cpu: int, rounds: int) -> list[float]:
    """Server CPU (ms) per pass over ``path`` in 1 MiB sendfiles, server and client pinned."""
    passes = os.path.getsize(path) // CHUNK
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    pid = os.fork()
    if pid == 0:  # the server: recv a position, sendfile 1 MiB from it
        os.sched_setaffinity(0, {server_cpu})
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        fd = os.open(path, os.O_RDONLY)
        while request := conn.recv(64):
            position, sent = int(request), 0
            while sent < CHUNK:
                sent += os.sendfile(conn.fileno(), fd, position + sent, CHUNK - sent)
        os._exit(0)
    listener.close()
    affinity = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {client_cpu})
    costs = []
    try:
        with socket.create_connection(("127.0.0.1", port)) as client:
            view = memoryview(bytearray(CHUNK))
            for _ in range(rounds):
                before = cpu_ms(pid)
                for i in range(passes):
                    client.sendall(b"%d" % (i * CHUNK))
                    got = 0
                    while got < CHUNK:
                        got += client.recv_into(view[got:])
                costs.append(cpu_ms(pid) - before)
    finally:
        os.sched_setaffinity(0, affinity)
        os.waitpid(pid, 0)
    return costs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.consume_cpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--broker", choices=["kbroker", "tansu"], default="kbroker")
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE", help="a kbroker property")
    parser.add_argument("--floor", action="store_true", help="also measure a bare sendfile server on the segment file")
    args = parser.parse_args(argv)
    if args.floor and (args.broker != "kbroker" or args.partitions != 1):
        parser.error("--floor serves kbroker's segment file of a one-partition topic")
    overrides = dict(kv.split("=", 1) for kv in args.override)
    with BrokerUnderTest(args.broker, overrides=overrides, scale=1.0) as broker:
        topic = f"consume-cpu-{time.monotonic_ns()}"
        workloads.create_topic(broker, topic, args.partitions)
        keys = [b"key-%06d" % i for i in range(65536)] if args.partitions > 1 else None
        workloads.produce(broker.bootstrap, topic, RECORDS, [random.Random(7).randbytes(100)], keys)
        time.sleep(1)
        print(f"{args.broker}, {args.partitions} partition(s), overrides {overrides or 'none'}")
        for i in range(args.rounds):
            before, t0 = cpu_ms(broker.pid), time.perf_counter()
            workloads.consume(broker.bootstrap, topic, args.partitions, RECORDS, 0)
            seconds, cpu = time.perf_counter() - t0, cpu_ms(broker.pid) - before
            print(f"round {i}: {seconds:.3f} s, {RECORDS / seconds / 1e3:.0f}k records/s, broker CPU {cpu:.1f} ms")
        if args.floor and broker.data_dir is not None:
            (segment,) = glob.glob(f"{broker.data_dir}/{topic}-0/*.log")
            for where, cpus in (("cores apart", (0, 1)), ("same core", (0, 0))):
                costs = sendfile_floor(segment, *cpus, rounds=3)
                print(f"bare sendfile server, {where}: " + ", ".join(f"{c:.1f}" for c in costs) + " ms per pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
