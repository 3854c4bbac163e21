"""What the nemesis asks the cluster: partition leaders and ISRs (Metadata), the active controller
(DescribeQuorum), and a thread that records every leader or controller change it sees as an
``observe`` operation of the nemesis."""

from __future__ import annotations

import threading
from typing import Any

from confluent_kafka.admin import AdminClient
from kio.schema.describe_quorum.v2.request import DescribeQuorumRequest, PartitionData, TopicData
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32

from broker import wire_client
from tests.chaos.history import NEMESIS, History
from tests.chaos.kafka_bench import ChaosCluster

METADATA_TIMEOUT_S = 5.0
OBSERVE_INTERVAL_S = 0.5
_DESCRIBE_QUORUM = DescribeQuorumRequest(topics=(TopicData(topic_name="__cluster_metadata", partitions=(PartitionData(partition_index=i32(0)),)),))

PartitionState = tuple[int, tuple[int, ...], tuple[int, ...]]  # leader, ISR, replicas


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 5000, "log_level": 2})


def partition_states(client: AdminClient, topics: dict[str, int]) -> dict[tuple[str, int], PartitionState]:
    """(leader, ISR, replicas) of every partition of ``topics``, as one broker's Metadata shows them."""
    states: dict[tuple[str, int], PartitionState] = {}
    for topic in topics:
        meta = client.list_topics(topic, timeout=METADATA_TIMEOUT_S).topics[topic]
        for p, pm in meta.partitions.items():
            states[(topic, p)] = (pm.leader, tuple(sorted(pm.isrs)), tuple(sorted(pm.replicas)))
    return states


def active_controller(cluster: ChaosCluster) -> int | None:
    """The Raft leader of the metadata quorum: only it answers DescribeQuorum, so every running
    controller is asked until one does."""
    for node in cluster.controllers:
        if not node.running:
            continue
        try:
            response = wire_client.request(cluster.controller_bootstrap(node.node_id), _DESCRIBE_QUORUM, client_id="chaos-nemesis")
        except OSError:
            continue
        partition = response.topics[0].partitions[0] if response.topics else None
        if response.error_code == ErrorCode.none and partition is not None and partition.error_code == ErrorCode.none and partition.leader_id >= 0:
            return int(partition.leader_id)
    return None


class Observer:
    """Polls the workload partitions' leaders and the active controller in a thread; each change
    is an ``observe`` op: ``{"topic", "partition", "leader", "previous"}`` or ``{"controller", "previous"}``."""

    def __init__(self, cluster: ChaosCluster, history: History, topics: dict[str, int]) -> None:
        self.cluster = cluster
        self.history = history
        self.topics = topics
        self._admin = admin(",".join(b.bootstrap for b in cluster.brokers))
        self._leaders: dict[tuple[str, int], int] = {}
        self._controller: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-observer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.wait(OBSERVE_INTERVAL_S):
            self._observe_leaders()
            self._observe_controller()

    def _observe_leaders(self) -> None:
        try:
            states = partition_states(self._admin, self.topics)
        except Exception:  # no broker answered Metadata this round: nothing observed
            return
        for (topic, p), (leader, _, _) in sorted(states.items()):
            previous = self._leaders.get((topic, p))
            if leader != previous:
                self._leaders[(topic, p)] = leader
                self._record({"topic": topic, "partition": p, "leader": leader, "previous": previous})

    def _observe_controller(self) -> None:
        try:
            controller = active_controller(self.cluster)
        except Exception:  # a controller failing over may answer with garbage or close
            return
        if controller is not None and controller != self._controller:
            self._record({"controller": controller, "previous": self._controller})
            self._controller = controller

    def _record(self, value: dict[str, Any]) -> None:
        self.history.info(NEMESIS, "observe", value)
