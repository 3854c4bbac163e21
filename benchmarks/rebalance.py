"""How long a consumer group takes to form: three confluent-kafka consumers subscribe at
once to a 6-partition topic that holds records; the figure is the time from subscribe()
until every consumer has received its first record (the median of --runs groups).

    python -m benchmarks.rebalance [--protocol classic|consumer] [--initial-delay-ms 3000] [--bootstrap HOST:PORT]

Without --bootstrap a kbroker node is started with the given group.initial.rebalance.delay.ms
(Kafka's default, 3000 ms, holds a new group's first rebalance back that long on purpose).
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks.harness import BrokerUnderTest

MEMBERS = 3
PARTITIONS = 6


def form_group(bootstrap: str, topic: str, protocol: str) -> float:
    group = f"rebalance-{time.monotonic_ns()}"
    firsts: list[float] = []
    lock = threading.Lock()
    start = threading.Barrier(MEMBERS + 1)

    def member() -> None:
        config = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest", "group.protocol": protocol}
        if protocol == "classic":
            config["session.timeout.ms"] = 10000
        consumer = Consumer(config)
        start.wait()
        t0 = time.perf_counter()
        consumer.subscribe([topic])
        deadline = t0 + 60
        while time.perf_counter() < deadline:
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                with lock:
                    firsts.append(time.perf_counter() - t0)
                break
        consumer.close()

    threads = [threading.Thread(target=member) for _ in range(MEMBERS)]
    for t in threads:
        t.start()
    start.wait()
    for t in threads:
        t.join(90)
    if len(firsts) < MEMBERS:
        raise RuntimeError(f"only {len(firsts)} of {MEMBERS} members got a record")
    return max(firsts)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--protocol", choices=["classic", "consumer"], default="classic")
    parser.add_argument("--initial-delay-ms", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--bootstrap")
    args = parser.parse_args()
    broker = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        broker = BrokerUnderTest("kbroker", {"group.initial.rebalance.delay.ms": str(args.initial_delay_ms)})
        broker.start()
        bootstrap = broker.bootstrap
    try:
        topic = f"rebalance-{int(time.time())}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
        producer = Producer({"bootstrap.servers": bootstrap})
        for p in range(PARTITIONS):
            for _ in range(10):
                producer.produce(topic, b"x", partition=p)
        producer.flush(30)
        times = [form_group(bootstrap, topic, args.protocol) for _ in range(args.runs)]
    finally:
        if broker is not None:
            broker.close()
    print(
        f"{MEMBERS}-member {args.protocol} group, initial delay {args.initial_delay_ms} ms: "
        f"subscribe to every member's first record {statistics.median(times):.2f} s (median of {len(times)}: {', '.join(f'{t:.2f}' for t in times)})"
    )


if __name__ == "__main__":
    main()
