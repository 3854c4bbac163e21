"""Partition reassignment (KIP-455) across four brokers: three combined nodes and a broker-only
node 4, each broker's replica fetches behind a proxy so a test can hold an added replica back.

A partition moved from {1, 2, 3} to {2, 3, 4} under an idempotent acks=all producer (min ISR 2)
loses and duplicates nothing, offsets stay dense; ListPartitionReassignments shows the move while
it waits for broker 4 and not after; the removed replica's directory is deleted. A cancel puts
the original replicas back and deletes the added one's copy; a replica moved off a dead broker
is deleted when that broker is back. kafka-python's admin client speaks
AlterPartitionReassignments and ListPartitionReassignments; `kbroker reassign-partitions` does
--generate, --execute with --throttle, --verify (which clears the throttles) and --list, and so
does Apache Kafka's own tool (its Java AdminClient) when Kafka's jars are cached.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, Iterator

import pytest
from confluent_kafka.admin import ConfigResource, NewTopic, ResourceType
from kafka import TopicPartition as KafkaPythonTopicPartition
from kafka.admin import KafkaAdminClient

from benchmarks.apache_kafka import TOOL_JVM_OPTS
from tests.cluster.cluster import KafkaCluster, wait_until
from tests.cluster.kbroker_command import run_in_process
from tests.cluster.test_replication import admin, partition_state, produce
from tests.cluster.test_replication_faults import Load, assert_acked_once_at_their_offsets, read_to_end, wait_for_isr
from tests.integration.helpers import unique_topic

TIMEOUT_S = 90.0
# A held-back replica's fetch, lost in its cut link, is given up after 5 s (a release closes its
# connections, so it need not wait that out). A killed broker is fenced (and leaves the ISRs) after 3 s.
OVERRIDES = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500", "replica.socket.timeout.ms": "5000"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    c = KafkaCluster(tmp_path_factory.mktemp("reassignment"), combined=3, brokers=1, proxy_inter_broker=True, overrides=OVERRIDES)
    try:
        yield c.start()
    finally:
        c.close()


@pytest.fixture(autouse=True)
def healed(cluster: KafkaCluster) -> Iterator[None]:
    yield
    cluster.heal()
    for link in cluster.broker_links.values():
        link.heal()


def create_on(cluster: KafkaCluster, name: str, replicas: list[int]) -> None:
    client = admin(cluster.bootstrap)
    topic = NewTopic(name, num_partitions=1, replica_assignment=[replicas], config={"min.insync.replicas": "2"})
    client.create_topics([topic], operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S)[name].result(timeout=TIMEOUT_S)
    wait_for_isr(cluster, name, set(replicas))


def kafka_python_admin(cluster: KafkaCluster) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=int(TIMEOUT_S * 1000))


def ongoing(client: KafkaAdminClient, name: str) -> dict[str, list[int]] | None:
    moves = client.list_partition_reassignments()
    return moves.get(KafkaPythonTopicPartition(name, 0))


def wait_for_replicas(cluster: KafkaCluster, name: str, replicas: list[int]) -> None:
    """Until Metadata shows these replicas: a broker's metadata may lag the controller's answer a little."""

    def shown() -> bool | None:
        return list(admin(cluster.bootstrap).list_topics(name, timeout=TIMEOUT_S).topics[name].partitions[0].replicas) == replicas or None

    wait_until(f"Metadata to show {name}-0 on {replicas}", shown, TIMEOUT_S)


def replica_dir(cluster: KafkaCluster, node_id: int, name: str) -> Path:
    return cluster.nodes[node_id].data_dir / f"{name}-0"


def hold_back(cluster: KafkaCluster, follower: int) -> None:
    """Cut the follower's replica fetches from every other broker: it can join no ISR."""
    for (a, _), link in cluster.broker_links.items():
        if a == follower:
            link.cut()


def release(cluster: KafkaCluster, follower: int) -> None:
    """Heal the follower's links and close its connections through them: it fetches again at once
    on new ones instead of first waiting out the fetch lost in the cut (replica.socket.timeout.ms)."""
    for (a, _), link in cluster.broker_links.items():
        if a == follower:
            link.heal()
            link.reset()


def test_a_move_under_acks_all_loses_nothing_and_deletes_the_removed_replica(cluster: KafkaCluster) -> None:
    name = unique_topic("move")
    create_on(cluster, name, [1, 2, 3])
    client = kafka_python_admin(cluster)
    try:
        with Load(cluster.bootstrap, name) as load:
            load.wait_for_more(100, "before the move")
            hold_back(cluster, 4)
            answer = client.alter_partition_reassignments({KafkaPythonTopicPartition(name, 0): [2, 3, 4]})
            assert answer == {KafkaPythonTopicPartition(name, 0): None}
            # Broker 4 cannot fetch: the move waits, the ISR is still {1, 2, 3} and acks=all goes on.
            move = ongoing(client, name)
            assert move == {"replicas": [2, 3, 4, 1], "adding_replicas": [4], "removing_replicas": [1]}
            load.wait_for_more(100, "while broker 4 is held back")
            assert ongoing(client, name) is not None
            wait_for_replicas(cluster, name, [2, 3, 4, 1])
            release(cluster, 4)
            # Broker 4 copies the log from the start, joins the ISR, and that completes the move.
            wait_until("the move to complete", lambda: ongoing(client, name) is None or None, TIMEOUT_S)
            load.wait_for_more(100, "after the move")
        wait_for_replicas(cluster, name, [2, 3, 4])
        leader, in_sync = partition_state(cluster.bootstrap, name)
        assert leader in (2, 3, 4) and set(in_sync) <= {2, 3, 4}
        wait_until("broker 1's copy deleted", lambda: not replica_dir(cluster, 1, name).exists() or None, TIMEOUT_S)
        assert replica_dir(cluster, 4, name).exists()
        records, _ = read_to_end(cluster.bootstrap, name, [0])
        assert_acked_once_at_their_offsets(records, load.acked)
    finally:
        client.close()


def test_a_cancel_reverts_to_the_original_replicas(cluster: KafkaCluster) -> None:
    name = unique_topic("cancel")
    create_on(cluster, name, [1, 2, 3])
    assert len(produce(cluster.bootstrap, name, [b"c%d" % i for i in range(200)])) == 200
    client = kafka_python_admin(cluster)
    try:
        hold_back(cluster, 4)
        assert client.alter_partition_reassignments({KafkaPythonTopicPartition(name, 0): [1, 2, 4]}) == {KafkaPythonTopicPartition(name, 0): None}
        assert ongoing(client, name) == {"replicas": [1, 2, 4, 3], "adding_replicas": [4], "removing_replicas": [3]}
        wait_until("broker 4's (empty) copy created", lambda: replica_dir(cluster, 4, name).exists() or None, TIMEOUT_S)
        assert client.alter_partition_reassignments({KafkaPythonTopicPartition(name, 0): None}) == {KafkaPythonTopicPartition(name, 0): None}
        assert ongoing(client, name) is None
        wait_for_replicas(cluster, name, [1, 2, 3])
        wait_until("broker 4's copy deleted", lambda: not replica_dir(cluster, 4, name).exists() or None, TIMEOUT_S)
        # Nothing left to cancel: Kafka's NO_REASSIGNMENT_IN_PROGRESS.
        [error] = client.alter_partition_reassignments({KafkaPythonTopicPartition(name, 0): None}).values()
        assert error is not None and error.errno == 85
    finally:
        client.close()
    release(cluster, 4)
    wait_for_isr(cluster, name, {1, 2, 3})
    records, _ = read_to_end(cluster.bootstrap, name, [0])
    assert len(records) == 200


def test_a_replica_removed_while_its_broker_was_down_is_deleted_when_it_returns(cluster: KafkaCluster) -> None:
    name = unique_topic("stray")
    create_on(cluster, name, [1, 2, 3])
    assert len(produce(cluster.bootstrap, name, [b"s%d" % i for i in range(100)])) == 100
    cluster.nodes[3].warm_up()  # its next interpreter imports the broker while it is down
    cluster.nodes[3].kill()
    try:
        wait_for_isr(cluster, name, {1, 2})
        client = kafka_python_admin(cluster)
        try:
            # 3 is out of the ISR: the move completes as soon as 4 has caught up.
            assert client.alter_partition_reassignments({KafkaPythonTopicPartition(name, 0): [1, 2, 4]}) == {KafkaPythonTopicPartition(name, 0): None}
            wait_until("the move to complete", lambda: ongoing(client, name) is None or None, TIMEOUT_S)
        finally:
            client.close()
        wait_for_replicas(cluster, name, [1, 2, 4])
        assert replica_dir(cluster, 3, name).exists()
    finally:
        cluster.nodes[3].launch()
        cluster.nodes[3].await_started(TIMEOUT_S)
    wait_until("broker 3's stray copy deleted", lambda: not replica_dir(cluster, 3, name).exists() or None, TIMEOUT_S)
    records, _ = read_to_end(cluster.bootstrap, name, [0])
    assert len(records) == 100


def reassign(cluster: KafkaCluster, *args: str) -> subprocess.CompletedProcess[str]:
    """`kbroker reassign-partitions`, in process: --verify is polled without an interpreter start each time."""
    return run_in_process("reassign-partitions", "--bootstrap-server", cluster.bootstrap, *args)


def described(cluster: KafkaCluster, resource: ConfigResource) -> dict[str, Any]:
    client = admin(cluster.bootstrap)  # kept referenced until the answer is in
    return client.describe_configs([resource])[resource].result(timeout=TIMEOUT_S)  # type: ignore[no-any-return]


def broker_config(cluster: KafkaCluster, broker: int, key: str) -> str | None:
    entry = described(cluster, ConfigResource(ResourceType.BROKER, str(broker))).get(key)
    return None if entry is None else entry.value


def topic_config(cluster: KafkaCluster, name: str, key: str) -> str | None:
    entry = described(cluster, ConfigResource(ResourceType.TOPIC, name)).get(key)
    return None if entry is None or entry.is_default else entry.value


def test_the_command_generates_executes_with_a_throttle_and_verifies(cluster: KafkaCluster, tmp_path: Path) -> None:
    name = unique_topic("cli")
    create_on(cluster, name, [1, 2, 3])
    assert len(produce(cluster.bootstrap, name, [b"x%d" % i for i in range(200)])) == 200
    topics_file = tmp_path / "topics.json"
    topics_file.write_text(json.dumps({"version": 1, "topics": [{"topic": name}]}))

    generated = reassign(cluster, "--generate", "--topics-to-move-json-file", str(topics_file), "--broker-list", "2,3,4")
    assert generated.returncode == 0, generated.stderr
    lines = generated.stdout.splitlines()
    assert lines[0] == "Current partition replica assignment"
    assert json.loads(lines[1]) == {"version": 1, "partitions": [{"topic": name, "partition": 0, "replicas": [1, 2, 3], "log_dirs": ["any"] * 3}]}
    assert lines[3] == "Proposed partition reassignment configuration"
    proposed = json.loads(lines[4])
    [entry] = proposed["partitions"]
    assert sorted(entry["replicas"]) == [2, 3, 4]
    plan = tmp_path / "plan.json"
    plan.write_text(lines[4])

    shrink = tmp_path / "shrink.json"
    shrink.write_text(json.dumps({"version": 1, "partitions": [{"topic": name, "partition": 0, "replicas": [2, 3]}]}))
    refused = reassign(cluster, "--execute", "--reassignment-json-file", str(shrink), "--disallow-replication-factor-change")
    assert refused.returncode == 1
    assert refused.stdout.endswith(f"Error reassigning partition(s):\n{name}-0: The replication factor is changed from 3 to 2\n"), refused.stdout

    hold_back(cluster, 4)
    executed = reassign(cluster, "--execute", "--reassignment-json-file", str(plan), "--throttle", "50000000")
    assert executed.returncode == 0, executed.stdout + executed.stderr
    assert "Save this to use as the --reassignment-json-file option during rollback" in executed.stdout
    assert "The inter-broker throttle limit was set to 50000000 B/s" in executed.stdout
    assert executed.stdout.rstrip().endswith(f"Successfully started partition reassignment for {name}-0")
    # The throttles Kafka's tool sets: rates on every broker of the move, replicas on the topic.
    for broker in (1, 2, 3, 4):
        assert broker_config(cluster, broker, "leader.replication.throttled.rate") == "50000000"
        assert broker_config(cluster, broker, "follower.replication.throttled.rate") == "50000000"
    assert topic_config(cluster, name, "leader.replication.throttled.replicas") == "0:1,0:2,0:3"
    assert topic_config(cluster, name, "follower.replication.throttled.replicas") == "0:4"
    assert f"{name}-0: replicas:" in reassign(cluster, "--list").stdout
    again = reassign(cluster, "--execute", "--reassignment-json-file", str(plan))
    assert again.returncode == 1 and again.stdout.startswith("Cannot execute because there is an existing partition assignment.")

    pending = reassign(cluster, "--verify", "--reassignment-json-file", str(plan))
    assert pending.returncode == 0 and f"Reassignment of partition {name}-0 is still in progress." in pending.stdout
    assert "Clearing" not in pending.stdout
    release(cluster, 4)

    def verified() -> str | None:
        out = reassign(cluster, "--verify", "--reassignment-json-file", str(plan)).stdout
        return out if f"Reassignment of partition {name}-0 is completed." in out else None

    done = wait_until("--verify to see the move completed", verified, TIMEOUT_S)
    assert "Clearing broker-level throttles on brokers 1,2,3,4" in done and f"Clearing topic-level throttles on topic {name}" in done
    assert broker_config(cluster, 4, "leader.replication.throttled.rate") is None
    assert topic_config(cluster, name, "leader.replication.throttled.replicas") is None
    wait_for_replicas(cluster, name, entry["replicas"])
    assert reassign(cluster, "--list").stdout.strip() == "No partition reassignments found."
    records, _ = read_to_end(cluster.bootstrap, name, [0])
    assert len(records) == 200


def kafka_tool(lib: Path, cluster: KafkaCluster, *args: str) -> subprocess.CompletedProcess[str]:
    """Apache Kafka's own kafka-reassign-partitions.sh (its Java AdminClient) against this cluster."""
    command = ["java", *TOOL_JVM_OPTS, "-cp", str(lib / "*"), "org.apache.kafka.tools.reassign.ReassignPartitionsCommand", "--bootstrap-server", cluster.bootstrap]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=TIMEOUT_S)


def test_kafkas_own_tool_moves_a_partition(cluster: KafkaCluster, tmp_path: Path, kafka_lib: Path) -> None:
    lib = kafka_lib
    name = unique_topic("java")
    create_on(cluster, name, [1, 2, 3])
    assert len(produce(cluster.bootstrap, name, [b"j%d" % i for i in range(200)])) == 200
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": name, "partition": 0, "replicas": [4, 2, 3]}]}))
    hold_back(cluster, 4)
    executed = kafka_tool(lib, cluster, "--execute", "--reassignment-json-file", str(plan), "--throttle", "50000000")
    assert executed.returncode == 0, executed.stdout + executed.stderr
    assert f"Successfully started partition reassignment for {name}-0" in executed.stdout
    assert "The inter-broker throttle limit was set to 50000000 B/s" in executed.stdout
    listed = kafka_tool(lib, cluster, "--list")
    assert f"{name}-0: replicas: 4,2,3,1. adding: 4. removing: 1." in listed.stdout, listed.stdout + listed.stderr
    assert broker_config(cluster, 4, "follower.replication.throttled.rate") == "50000000"
    release(cluster, 4)
    # Each --verify is a JVM start: asked once the move is over, it is asked about once.
    client = kafka_python_admin(cluster)
    try:
        wait_until("the move to complete", lambda: ongoing(client, name) is None or None, TIMEOUT_S)
    finally:
        client.close()

    def verified() -> str | None:
        out = kafka_tool(lib, cluster, "--verify", "--reassignment-json-file", str(plan)).stdout
        return out if f"Reassignment of partition {name}-0 is completed." in out else None

    done = wait_until("Kafka's --verify to see the move completed", verified, TIMEOUT_S)
    assert "Clearing broker-level throttles on brokers 1,2,3,4" in done
    assert broker_config(cluster, 4, "follower.replication.throttled.rate") is None
    wait_for_replicas(cluster, name, [4, 2, 3])
    records, _ = read_to_end(cluster.bootstrap, name, [0])
    assert len(records) == 200
