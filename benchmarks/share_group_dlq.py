"""A share-group dead-letter write that cannot land while the share-partition leader dies, kbroker
beside Apache Kafka 4.4, on the same steps.

    python -m benchmarks.share_group_dlq [--target kbroker|kafka|both]

Three combined nodes, every inter-broker link behind a proxy (kbroker's tests/cluster/cluster.py
KafkaCluster with proxy_inter_broker, Kafka's tests/chaos/kafka_bench.py KafkaChaosCluster). The
source topic has one partition on nodes 1, 2, 3 (leader 1); the group's DLQ topic
(errors.deadletterqueue.topic.name) one partition on node 3 alone; the group is one whose share
partition's state node 2 coordinates. Node 1's link to node 3's inter-broker listener is cut, so
its DLQ writes cannot land. A member acquires the one record and REJECTs it: the share partition
persists it ARCHIVING (at node 2) and its DLQ write hangs. Node 1 is SIGKILLed before the write is
given up on, and the member fetches from the partition's new leader, which loads the ARCHIVING
record from the share coordinator and writes it to the DLQ. ``dlq_through_leader_kill`` reports
how many DLQ records there are, their headers and write times, whether the record was delivered
again, how long after the kill the DLQ record appeared, and whether the group's start offset then
passes the record (ARCHIVED), accepting more records until it shows (Kafka's share coordinator has
a start offset one state change late). tests/cluster/test_share_group_dlq_cluster.py runs
it against kbroker.

``python -m benchmarks.share_group_dlq`` on 2026-11-30: kbroker and Kafka 4.4 each wrote one DLQ
record (5.1 s and 4.1 s after the kill, i.e. by the new leader) with the same headers, did not
deliver the record again, and their start offsets passed it. With only node 1's identified link
cut (Kafka's DLQ client then went through unhindered), Kafka's old leader wrote the record before
the kill, and in 1 run of 5 the new leader wrote it again: two DLQ records (at least once, not
exactly once, when a leader dies between its DLQ write and its ARCHIVED write).

Every wait is bounded.
"""

from __future__ import annotations

import argparse
import datetime
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from kio.schema.create_topics.v7 import request as create_topics_v7
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4 import request as find_coordinator_v4
from kio.schema.find_coordinator.v6 import request as find_coordinator_v6
from kio.schema.types import BrokerId
from kio.static.primitive import i8, i16, i32

from broker.share_coordinator.share_partition_key import SharePartitionKey
from tests.cluster.cluster import CuttableLinks
from tests.integration.helpers import consume
from tests.integration.test_share_group_dlq import accept_more_until_past
from tests.integration.test_share_fetch_wire import REJECT, RawShareMember, acquired, join_assigned, set_group_configs, topic_id
from tests.integration.wire import request

WAIT_S = 30.0
KILLED = 1
COORDINATOR = 2
DLQ_NODE = 3
KEY_SHARE = 2


@dataclass
class DlqOutcome:
    dlq_records: list[list[tuple[str, bytes]]]
    redelivered: bool
    # From the kill to the first DLQ record showing (None: none did).
    dlq_after_kill_s: float | None
    # Each DLQ record's timestamp (its write time) from the kill.
    written_after_kill_s: list[float]
    # The group's start offset passed the record.
    passed: bool

    def line(self) -> str:
        when = "never" if self.dlq_after_kill_s is None else f"{self.dlq_after_kill_s:.1f} s after the kill"
        written = ", ".join(f"{t:.1f}" for t in self.written_after_kill_s)
        return (
            f"{len(self.dlq_records)} DLQ record(s) (written {written} s after the kill), first seen {when}; "
            f"rejected record delivered again: {self.redelivered}; start offset passed it: {self.passed}"
        )


def leader_of(bootstrap: str, topic: str) -> int | None:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    t = md.topics.get(topic)
    if t is None or t.error is not None or 0 not in t.partitions:
        return None
    leader = t.partitions[0].leader
    return leader if leader >= 0 else None


def coordinator_of(bootstrap: str, group: str) -> str | None:
    answer = request(bootstrap, find_coordinator_v4.FindCoordinatorRequest(key_type=i8(0), coordinator_keys=(group,)))
    [c] = answer.coordinators
    return f"{c.host}:{c.port}" if c.error_code == ErrorCode.none else None


def share_coordinator_id(bootstrap: str, group: str, tid: uuid.UUID) -> int | None:
    key = SharePartitionKey(group, tid, 0).as_coordinator_key()
    answer = request(bootstrap, find_coordinator_v6.FindCoordinatorRequest(key_type=i8(KEY_SHARE), coordinator_keys=(key,)))
    [c] = answer.coordinators
    return int(c.node_id) if c.error_code == ErrorCode.none else None


def group_coordinated_by(bootstrap: str, prefix: str, tid: uuid.UUID, node: int) -> str:
    """A group whose share partition ``tid``-0 has its state at ``node``."""
    for i in range(200):
        group = f"{prefix}-{i}"
        if until(f"a share coordinator of {group}", lambda group=group: share_coordinator_id(bootstrap, group, tid)) == node:
            return group
    raise AssertionError(f"no group of 200 has its share state at node {node}")


def until(what: str, probe: Callable[[], object], timeout_s: float = WAIT_S) -> object:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            found = probe()
        except Exception:  # a node just killed, a connection refused: ask again
            found = None
        if found:
            return found
        assert time.monotonic() < deadline, f"no {what} within {timeout_s} s"
        time.sleep(0.2)


def create_topics(bootstrap: str, topic: str, dlq_topic: str) -> None:
    """By CreateTopics with manual assignments (librdkafka 2.16's AdminClient refuses them)."""

    def creatable(name: str, replicas: list[int], configs: dict[str, str]) -> create_topics_v7.CreatableTopic:
        return create_topics_v7.CreatableTopic(
            name=name,
            num_partitions=i32(-1),
            replication_factor=i16(-1),
            assignments=(create_topics_v7.CreatableReplicaAssignment(partition_index=i32(0), broker_ids=tuple(BrokerId(r) for r in replicas)),),
            configs=tuple(create_topics_v7.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()),
        )

    topics = (
        creatable(topic, [KILLED, 2, DLQ_NODE], {}),
        creatable(dlq_topic, [DLQ_NODE], {"errors.deadletterqueue.group.enable": "true"}),
    )
    answer = request(bootstrap, create_topics_v7.CreateTopicsRequest(topics=topics, timeout=datetime.timedelta(seconds=WAIT_S), validate_only=False))
    assert [t.error_code for t in answer.topics] == [ErrorCode.none] * 2, answer
    for name in (topic, dlq_topic):
        until(f"{name} in the metadata", lambda name=name: leader_of(bootstrap, name) is not None)


def cut_dlq_writes(cluster: CuttableLinks) -> None:
    """Cut node 1's link to node 3's inter-broker listener. Kafka's DLQ client names itself
    ShareGroupDLQManager-client-<node id>, which the link demultiplexer does not attribute to a node
    (tests/chaos/kafka_bench.py's KAFKA_CLIENT_ID): its connections take the link of unknown sources
    to node 3, cut too (nothing else reaches node 3 that way here)."""
    cluster.broker_links[(KILLED, DLQ_NODE)].cut()
    for link in cluster.proxies.proxies:
        if link.name == f"?->{DLQ_NODE}-internal":
            link.cut()


def join(bootstrap: str, group: str, member_id: str, topic: str) -> None:
    coordinator = until(f"coordinator of {group}", lambda: coordinator_of(bootstrap, group))
    join_assigned(str(coordinator), group, member_id, topic, 1)


def dlq_through_leader_kill(cluster: CuttableLinks, address_of: Callable[[int], str], kill: Callable[[int], None], tag: str) -> tuple[str, str, DlqOutcome]:
    """The scenario on a running 3-node cluster with cuttable inter-broker links: ``address_of(node)``
    its client address, ``kill(node)`` SIGKILLs it. Returns the group, the source topic and the outcome."""
    nodes = sorted(cluster.nodes)
    bootstrap = ",".join(address_of(n) for n in nodes)
    topic, dlq_topic = f"dlq-kill-src-{tag}", f"dlq.dlq-kill-{tag}"
    create_topics(bootstrap, topic, dlq_topic)
    until(f"leader {KILLED} of {topic}", lambda: leader_of(bootstrap, topic) == KILLED)
    tid = topic_id(bootstrap, topic)
    group = group_coordinated_by(bootstrap, f"dlq-kill-{tag}", tid, COORDINATOR)
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest", "errors.deadletterqueue.topic.name": dlq_topic})
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    producer.produce(topic, key=b"k0", value=b"v0", partition=0)
    assert producer.flush(WAIT_S) == 0
    member_id = str(uuid.uuid4())
    join(bootstrap, group, member_id, topic)
    cut_dlq_writes(cluster)

    member = RawShareMember(address_of(KILLED), group, tid, member_id)
    try:
        until("the record acquired", lambda: (0, 0, 1) in acquired(member.fetch()))
        answer = member.acknowledge({0: [(0, 0, REJECT)]})
        assert answer.error_code == 0 and [p.error_code for t in answer.responses for p in t.partitions] == [0], answer
    finally:
        member.close()
    # ARCHIVING is persisted (the acknowledgement was answered); the DLQ write cannot land.
    time.sleep(0.5)
    kill(KILLED)
    killed_at, killed_wall = time.monotonic(), time.time()
    cluster.heal()
    live = [n for n in nodes if n != KILLED]
    bootstrap = ",".join(address_of(n) for n in live)
    new_leader = int(str(until(f"a new leader of {topic}", lambda: (leader_of(bootstrap, topic) or KILLED) != KILLED and leader_of(bootstrap, topic))))
    join(bootstrap, group, member_id, topic)

    redelivered = False
    first_seen: float | None = None
    member = RawShareMember(address_of(new_leader), group, tid, member_id)
    try:
        deadline = time.monotonic() + WAIT_S
        while first_seen is None and time.monotonic() < deadline:
            # Fetching initializes the share partition on the new leader, which resumes the DLQ write.
            redelivered |= any(first <= 0 <= last for first, last, _ in acquired(member.fetch(max_wait_ms=500)))
            if consume(bootstrap, dlq_topic, 0, 0, 1, timeout_s=0.5):
                first_seen = time.monotonic() - killed_at
        passed = accept_more_until_past(bootstrap, member, group, topic, 0, 1)
    finally:
        member.close()
    # Exactly once: a second DLQ record would follow the first within the retries' span.
    messages = consume(bootstrap, dlq_topic, 0, 0, 2, timeout_s=2.0)
    return group, topic, DlqOutcome(
        [[(k, bytes(v)) for k, v in (m.headers() or [])] for m in messages],
        redelivered,
        first_seen,
        [m.timestamp()[1] / 1000 - killed_wall for m in messages],
        passed,
    )


def run_kbroker(root: Path) -> DlqOutcome:
    from tests.cluster.cluster import KafkaCluster
    from tests.cluster.test_replication import FAST_FAILOVER
    from tests.integration.test_features import await_finalized

    cluster = KafkaCluster(root, combined=3, overrides=dict(FAST_FAILOVER), proxy_inter_broker=True)
    try:
        cluster.start()
        await_finalized(cluster.bootstrap, "share.version", 2)
        return dlq_through_leader_kill(cluster, lambda n: f"127.0.0.1:{cluster.nodes[n].port}", lambda n: cluster.nodes[n].kill(), uuid.uuid4().hex[:8])[2]
    finally:
        cluster.close()


def run_kafka(root: Path) -> DlqOutcome:
    from benchmarks.apache_kafka import fetch_jars
    from tests.chaos.kafka_bench import KafkaChaosCluster

    failover = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500"}
    cluster = KafkaChaosCluster(root, fetch_jars(), size=3, overrides=failover)
    try:
        cluster.start()
        return dlq_through_leader_kill(cluster, lambda n: cluster.nodes[n].bootstrap, lambda n: cluster.nodes[n].kill(), uuid.uuid4().hex[:8])[2]
    finally:
        cluster.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.share_group_dlq", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", choices=("kbroker", "kafka", "both"), default="both")
    args = parser.parse_args(argv)
    targets = ("kbroker", "kafka") if args.target == "both" else (args.target,)
    with tempfile.TemporaryDirectory(prefix="dlq-bench-") as tmp:
        for target in targets:
            outcome = (run_kbroker if target == "kbroker" else run_kafka)(Path(tmp) / target)
            print(f"{target}: {outcome.line()}", flush=True)
            for headers in outcome.dlq_records:
                print("   ", [(k, v.decode()) for k, v in headers])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
