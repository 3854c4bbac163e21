"""A dynamic controller quorum (KIP-853) grown and shrunk with real kbroker processes.

Controller 1 is formatted `--standalone`, so its bootstrap checkpoint makes it the one voter;
controllers 2 and 3 are formatted `--no-initial-controllers` and start with only
controller.quorum.bootstrap.servers, as observers. `kbroker metadata-quorum add-controller`
makes them voters; killing controller 1 shows they are real ones (they elect a leader without
it), and `remove-controller` takes one out again. A broker-only node (4) lets clients work.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka.admin import AdminClient

from tests.cluster.cluster import ClusterNode, NodeSpec, wait_until
from tests.cluster.kbroker_command import quorum_status, run_in_process
from tests.integration.conftest import retire
from tests.integration.helpers import unique_topic
from tests.ports import free_ports

QUORUM_CHANGE_TIMEOUT_S = 60.0
FAILOVER_TIMEOUT_S = 60.0
BROKER_ID = 4
# Short timeouts so the survivors elect a leader soon after controller 1 dies.
RAFT_TIMEOUTS = {
    "controller.quorum.election.timeout.ms": "500",
    "controller.quorum.fetch.timeout.ms": "1000",
    "controller.quorum.request.timeout.ms": "1000",
}


class DynamicQuorum:
    """Three controllers (1..3) and one broker (4) on pre-allocated ports, every one named in
    controller.quorum.bootstrap.servers and none in controller.quorum.voters."""

    def __init__(self, root: Path, cluster_id: str = "kbroker-dynamic-quorum") -> None:
        self.cluster_id = cluster_id
        ports = iter(free_ports(4))
        self.specs = [NodeSpec(i, ("controller",), None, next(ports)) for i in (1, 2, 3)]
        self.specs.append(NodeSpec(BROKER_ID, ("broker",), next(ports), None))
        bootstrap = ",".join(f"127.0.0.1:{s.controller_port}" for s in self.specs if s.controller_port is not None)
        self.nodes = {spec.node_id: self._make_node(root, spec, bootstrap) for spec in self.specs}

    @staticmethod
    def _make_node(root: Path, spec: NodeSpec, bootstrap: str) -> ClusterNode:
        node_dir = root / f"node{spec.node_id}"
        data_dir = node_dir / "data"
        props = {
            "node.id": str(spec.node_id),
            "process.roles": ",".join(spec.roles),
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.quorum.bootstrap.servers": bootstrap,
            "log.dirs": str(data_dir),
            **RAFT_TIMEOUTS,
        }
        if spec.client_port is not None:
            props["listeners"] = f"PLAINTEXT://127.0.0.1:{spec.client_port}"
            props["advertised.listeners"] = props["listeners"]
            props["inter.broker.listener.name"] = "PLAINTEXT"
            props["offsets.topic.replication.factor"] = "1"
            props["transaction.state.log.replication.factor"] = "1"
        else:
            props["listeners"] = f"CONTROLLER://127.0.0.1:{spec.controller_port}"
        node_dir.mkdir(parents=True, exist_ok=True)
        config_file = node_dir / "server.properties"
        config_file.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        return ClusterNode(spec, data_dir, config_file)

    def format(self, node_id: int, *quorum_option: str) -> str:
        out = kbroker("storage", "format", "--cluster-id", self.cluster_id, "--config", str(self.nodes[node_id].config_file), *quorum_option)
        return out.stdout

    def controller(self, node_id: int) -> str:
        return f"127.0.0.1:{self.nodes[node_id].spec.controller_port}"

    def close(self) -> None:
        for node in self.nodes.values():
            retire(node)


def kbroker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`kbroker ARGS`, run in this process: the test runs two dozen commands, most of them polled,
    and an interpreter start for each was most of its wall time (tests/integration/test_cli.py
    runs `python -m broker` itself). Each command bounds its own requests."""
    out = run_in_process(*args)
    if check:
        assert out.returncode == 0, f"kbroker {' '.join(args)} exited {out.returncode}:\n{out.stdout}\n{out.stderr}"
    return out


def voter_ids(status: dict[str, str] | None) -> set[int] | None:
    """The ids in describe --status's CurrentVoters line."""
    if status is None:
        return None
    return {int(v["id"]) for v in json.loads(status["CurrentVoters"])}


def directory_id_of(node: ClusterNode) -> str:
    props = dict(line.split("=", 1) for line in (node.data_dir / "meta.properties").read_text().splitlines() if "=" in line and not line.startswith("#"))
    return props["directory.id"]


def leader_status(quorum: DynamicQuorum, asked: tuple[int, ...]) -> dict[str, str] | None:
    """describe --status from whichever of ``asked`` leads: only the leader describes the quorum."""
    for node_id in asked:
        if quorum.nodes[node_id].running:
            status = quorum_status(quorum.controller(node_id))
            if status is not None and status["LeaderId"] == str(node_id):
                return status
    return None


def create_topic(broker: str, what: str) -> None:
    """`kbroker topics create`, retried while the controllers settle."""
    topic = unique_topic()
    wait_until(what, lambda: kbroker("topics", "create", "--bootstrap-server", broker, "--topic", topic, "--partitions", "1", "--replication-factor", "1", check=False).returncode == 0, FAILOVER_TIMEOUT_S, interval_s=0.5)
    # What `kbroker topics list` lists (its printer is bound to the real stdout, out of reach of
    # an in-process run): the broker's Metadata, which has the topic once the broker has read the
    # controller's record of it, a moment after CreateTopics is answered.
    wait_until(f"{topic} listed", lambda: topic in AdminClient({"bootstrap.servers": broker}).list_topics(timeout=10).topics, FAILOVER_TIMEOUT_S)


@pytest.fixture
def quorum(tmp_path: Path) -> Iterator[DynamicQuorum]:
    q = DynamicQuorum(tmp_path)
    try:
        yield q
    finally:
        q.close()


def test_controllers_join_and_leave_a_dynamic_quorum(quorum: DynamicQuorum) -> None:
    assert "dynamic metadata voter directory" in quorum.format(1, "--standalone")
    quorum.format(BROKER_ID)
    for node_id in (2, 3):
        assert "Formatting metadata directory" in quorum.format(node_id, "--no-initial-controllers")
    for node in quorum.nodes.values():
        node.launch()
    for node in quorum.nodes.values():
        node.await_started()

    first = wait_until("controller 1 leading alone", lambda: (s := quorum_status(quorum.controller(1))) and s["LeaderId"] == "1" and s, QUORUM_CHANGE_TIMEOUT_S)
    assert voter_ids(first) == {1}

    for node_id in (2, 3):
        config = str(quorum.nodes[node_id].config_file)

        # Controller 3 is added through controller 2, a voter that does not lead: the tool
        # finds the leader, as Kafka's admin client does.
        asked = quorum.controller(1 if node_id == 2 else 2)

        def added(config: str = config, asked: str = asked) -> bool:
            # Refused until the new controller has caught up as an observer: the refusal is raised
            # so that a timeout shows the last one. DUPLICATE_VOTER means an earlier try of ours
            # went through after the tool gave up waiting for its answer (a busy machine).
            out = kbroker("metadata-quorum", "--bootstrap-controller", asked, "add-controller", "--command-config", config, check=False)
            assert out.returncode == 0 or "duplicate_voter" in out.stderr, f"add-controller exited {out.returncode}:\n{out.stdout}\n{out.stderr}"
            return True

        wait_until(f"controller {node_id} added", added, QUORUM_CHANGE_TIMEOUT_S, interval_s=0.5)
        wait_until(
            f"controller {node_id} a voter",
            lambda node_id=node_id: node_id in (voter_ids(quorum_status(quorum.controller(1))) or set()),
            QUORUM_CHANGE_TIMEOUT_S,
        )
    assert voter_ids(quorum_status(quorum.controller(1))) == {1, 2, 3}

    broker = quorum.nodes[BROKER_ID].bootstrap
    create_topic(broker, "CreateTopics with three voters")

    quorum.nodes[1].kill()
    status = wait_until("a leader among the added controllers", lambda: leader_status(quorum, (2, 3)), FAILOVER_TIMEOUT_S)
    assert int(status["LeaderId"]) in (2, 3) and voter_ids(status) == {1, 2, 3}
    create_topic(broker, "CreateTopics after the failover")

    quorum.nodes[1].restart()
    wait_until(
        "controller 1 following the new leader",
        lambda: any(e.get("leader") in (2, 3) for e in quorum.nodes[1].events_named("raft.leader_change", current_run=True)),
        QUORUM_CHANGE_TIMEOUT_S,
    )

    leader = int(status["LeaderId"])
    removed = 2 if leader == 3 else 3
    directory_id = directory_id_of(quorum.nodes[removed])

    def remove() -> bool:
        # Through the broker, which forwards RemoveRaftVoter to the active controller.
        current = leader_status(quorum, (1, 2, 3))
        assert current is not None, "no leader to ask"
        if removed in (voter_ids(current) or set()):
            kbroker("metadata-quorum", "--bootstrap-server", broker, "remove-controller", "--controller-id", str(removed), "--controller-directory-id", directory_id)
        return True

    wait_until(f"controller {removed} removed", remove, QUORUM_CHANGE_TIMEOUT_S, interval_s=0.5)
    wait_until("two voters", lambda: (s := leader_status(quorum, (1, 2, 3))) and voter_ids(s) == {1, 2, 3} - {removed}, QUORUM_CHANGE_TIMEOUT_S)
    create_topic(broker, "CreateTopics with two voters")
