"""A kbroker controller in Apache Kafka 4.4's dynamic quorum (issue 36, M4): it follows as an
observer, `kafka-metadata-quorum add-controller` makes it a voter (kraft.version 1), it votes, it
survives a SIGKILL, and `remove-controller` takes it out again, leaving it an observer. Then kbroker
leads Kafka's quorum: Kafka's leader removes itself, leaving kbroker the one voter; kbroker adds
Kafka's controllers back as voters and removes itself, handing the leadership back.

Kafka controller 1 is formatted `--standalone` (the one voter of the bootstrap checkpoint); Kafka
controller 2 and kbroker controller 3 are formatted `--no-initial-controllers` and start with only
controller.quorum.bootstrap.servers. Kafka's controller 2 is added and removed beside kbroker's, as
the oracle: Kafka's tool must show the two alike (Observer, then Follower, then Observer again, lag
0, the same add-controller and remove-controller output), and Kafka's controller 1, SIGKILLed and
restarted with kbroker, is the oracle for a voter coming back. Every command and every answer is
Kafka's own tool's; only kbroker's storage format is kbroker's.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from benchmarks.apache_kafka import KafkaReferenceCluster
from broker.cli import main as kbroker_main
from tests.cluster.cluster import ClusterNode, NodeSpec, wait_until
from tests.integration.conftest import retire
from tests.kafka_tools import kafka_tool
from tests.ports import free_ports

METADATA_QUORUM = "org.apache.kafka.tools.MetadataQuorumCommand"
KBROKER_ID = 3
TIMEOUT_S = 60.0
# Kafka's admin client asked just after the leader died can be told by a controller that the dead
# node leads, and then waits out its whole default.api.timeout.ms (60 s) for a node to send to, even
# once the quorum has a new leader: an all-Kafka quorum does the same. A describe gives up sooner
# and is asked again.
DESCRIBE_ADMIN = {"default.api.timeout.ms": "5000", "request.timeout.ms": "3000"}


@dataclass
class MixedQuorum:
    kafka: KafkaReferenceCluster
    kbroker: ClusterNode
    lib: Path
    admin_config: Path

    @property
    def bootstrap_controllers(self) -> str:
        """Every controller, kbroker's too: Kafka's admin client asks any of them for the active one."""
        return ",".join([n.controller_bootstrap for n in self.kafka.controllers] + [f"127.0.0.1:{self.kbroker.spec.controller_port}"])

    def tool(self, *args: str) -> str:
        """The tool's output, asked again while it fails: around an election the controllers it
        asks may not know the new leader yet."""
        last: list[str] = []

        def run() -> str | None:
            done = kafka_tool(self.lib, METADATA_QUORUM, "--bootstrap-controller", self.bootstrap_controllers, *args)
            last[:] = [f"exited {done.returncode}:\n{done.stdout}{done.stderr}"]
            if done.returncode != 0:
                print(f"kafka-metadata-quorum {' '.join(args)} {last[0]}")  # shown if the test fails
            return done.stdout if done.returncode == 0 else None

        try:
            return wait_until(f"kafka-metadata-quorum {' '.join(args)}", run, TIMEOUT_S, interval_s=0.5)
        except AssertionError as e:
            raise AssertionError(f"{e}; it last {last[0] if last else 'never answered'}") from None

    def replication(self) -> dict[int, dict[str, str]]:
        """describe --replication, by node id."""
        header, *rows = [line.split() for line in self.tool("--command-config", str(self.admin_config), "describe", "--replication").splitlines() if line.strip()]
        return {int(row[0]): dict(zip(header, row)) for row in rows}

    def status(self) -> dict[str, str]:
        out = self.tool("--command-config", str(self.admin_config), "describe", "--status")
        return {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in out.splitlines() if ":" in line)}

    def voters(self) -> dict[int, dict]:
        return {v["id"]: v for v in json.loads(self.status()["CurrentVoters"])}

    def config_file(self, node_id: int) -> Path:
        return self.kbroker.config_file if node_id == KBROKER_ID else self.kafka.nodes[node_id].config_file  # type: ignore[return-value]

    def directory_id(self, node_id: int) -> str:
        data_dir = self.kbroker.data_dir if node_id == KBROKER_ID else self.kafka.nodes[node_id].data_dir
        return re.search(r"^directory\.id=(.+)$", (data_dir / "meta.properties").read_text(), re.M).group(1)  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def quorum(tmp_path_factory: pytest.TempPathFactory, kafka_lib: Path) -> Iterator[MixedQuorum]:
    root = tmp_path_factory.mktemp("kafka-quorum")
    kafka = KafkaReferenceCluster(root / "kafka", kafka_lib, nodes=0, controllers=2, dynamic_quorum=True)
    (port,) = free_ports(1)
    # Every controller, of either kind, names them all as bootstrap servers: an observer finds the
    # leader through them, and Kafka's observers would never hear of a kbroker leader otherwise.
    bootstrap_servers = ",".join([n.controller_bootstrap for n in kafka.controllers] + [f"127.0.0.1:{port}"])
    for node in kafka.nodes.values():
        lines = node.config_file.read_text().splitlines()
        kept = [line for line in lines if not line.startswith("controller.quorum.bootstrap.servers=")]
        node.config_file.write_text("\n".join([*kept, f"controller.quorum.bootstrap.servers={bootstrap_servers}"]) + "\n")
    node_dir = root / "kbroker"
    node_dir.mkdir()
    props = {
        "node.id": str(KBROKER_ID),
        "process.roles": "controller",
        "listeners": f"CONTROLLER://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT",
        "controller.quorum.bootstrap.servers": bootstrap_servers,
        "log.dirs": str(node_dir / "data"),
    }
    config_file = node_dir / "server.properties"
    config_file.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    kbroker = ClusterNode(NodeSpec(KBROKER_ID, ("controller",), None, port), node_dir / "data", config_file)
    admin_config = root / "admin.properties"
    admin_config.write_text("".join(f"{k}={v}\n" for k, v in DESCRIBE_ADMIN.items()))
    try:
        # Kafka's format is a JVM start per node: kbroker is formatted (in process, with Kafka's
        # cluster id) and launched meanwhile, and finds the quorum once it is up.
        with ThreadPoolExecutor(1) as pool:
            kafka_formatted = pool.submit(kafka.format, {1: ("--standalone",), 2: ("--no-initial-controllers",)})
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                code = kbroker_main(["storage", "format", "--cluster-id", kafka.cluster_id, "--config", str(config_file), "--no-initial-controllers"])
            assert code == 0, out.getvalue()
            kbroker.launch()
            kafka_formatted.result()
        for node in kafka.nodes.values():
            node.launch()
        for node in kafka.nodes.values():
            node.await_started()
        kbroker.await_started()
        yield MixedQuorum(kafka, kbroker, kafka_lib, admin_config)
    finally:
        retire(kbroker)
        kafka.close()


def caught_up(q: MixedQuorum, statuses: dict[int, tuple[str, ...]]) -> dict[int, dict[str, str]] | None:
    """describe --replication once every node named has one of its statuses and lag 0."""
    rows = q.replication()
    ok = all(n in rows and rows[n]["Status"] in s and rows[n]["Lag"] == "0" for n, s in statuses.items())
    return rows if ok else None


def change_voters(q: MixedQuorum, what: str, node_id: int, joins: bool, *args: str) -> str:
    """add-controller / remove-controller, retried while the leader refuses it for now (a new voter
    not caught up yet, an election under way). The tool's output, or "" when an earlier try that the
    tool gave up waiting for went through after all."""

    def attempt() -> str | None:
        if (node_id in q.voters()) == joins:
            return ""
        answer = kafka_tool(q.lib, METADATA_QUORUM, "--bootstrap-controller", q.bootstrap_controllers, *args)
        if answer.returncode != 0:
            print(f"{what} exited {answer.returncode}:\n{answer.stdout}{answer.stderr}")  # shown if the test fails
        return answer.stdout if answer.returncode == 0 else None

    return wait_until(what, attempt, TIMEOUT_S, interval_s=0.5)


def add_controller(q: MixedQuorum, node_id: int) -> None:
    """`add-controller` with the node's own server.properties; Kafka's tool prints what it added."""
    port = q.kbroker.spec.controller_port if node_id == KBROKER_ID else q.kafka.nodes[node_id].controller_port
    added = change_voters(q, f"add-controller {node_id}", node_id, True, "--command-config", str(q.config_file(node_id)), "add-controller")
    assert not added or added.strip() == f"Added controller {node_id} with directory id {q.directory_id(node_id)} and endpoints: CONTROLLER://127.0.0.1:{port}"


def remove_controller(q: MixedQuorum, node_id: int) -> None:
    directory_id = q.directory_id(node_id)
    removed = change_voters(q, f"remove-controller {node_id}", node_id, False, "remove-controller", "--controller-id", str(node_id), "--controller-directory-id", directory_id)
    assert not removed or removed.strip() == f"Removed KRaft controller {node_id} with directory id {directory_id}"


def test_kbroker_controller_joins_votes_restarts_and_leaves_a_kafka_quorum(quorum: MixedQuorum) -> None:
    q = quorum
    kafka2, kbroker = 2, KBROKER_ID
    rows = wait_until("controllers 2 and 3 observers, caught up", lambda: caught_up(q, {1: ("Leader",), kafka2: ("Observer",), kbroker: ("Observer",)}), TIMEOUT_S)
    assert rows[kbroker]["DirectoryId"] == q.directory_id(kbroker)
    assert set(q.voters()) == {1}

    for node_id in (kafka2, kbroker):  # Kafka's controller first: the oracle
        add_controller(q, node_id)
    wait_until("three voters caught up", lambda: caught_up(q, {1: ("Leader",), kafka2: ("Follower",), kbroker: ("Follower",)}), TIMEOUT_S)
    voters = q.voters()
    assert set(voters) == {1, kafka2, kbroker}
    assert voters[kbroker] == {"id": kbroker, "directoryId": q.directory_id(kbroker), "endpoints": [f"CONTROLLER://127.0.0.1:{q.kbroker.spec.controller_port}"]}

    # Votes: with the leader dead, a new one needs both survivors' votes, Kafka's and kbroker's.
    # Which of the two stands first and wins is up to their timers; either is fine.
    epoch = int(q.status()["LeaderEpoch"])
    q.kafka.kill(1)
    status = wait_until("a leader among controllers 2 and 3", lambda: (s := q.status())["LeaderId"] in ("2", "3") and s, TIMEOUT_S)
    assert int(status["LeaderEpoch"]) > epoch and set(q.voters()) == {1, kafka2, kbroker}
    leader = int(status["LeaderId"])
    wait_until(f"controller {5 - leader} following {leader}", lambda: caught_up(q, {leader: ("Leader",), 5 - leader: ("Follower",)}), TIMEOUT_S)

    # Survives restarts: Kafka's controller 1 comes back (the oracle), then kbroker is SIGKILLed and
    # started again on its log; both rejoin as voters, caught up. One after the other: with both
    # down, a Kafka leader left alone writes entries nobody else gets, truncated under the next
    # leader, and Kafka 4.4 does not re-read the control records a follower truncation replaced
    # (KRaftControlRecordStateMachine.truncateNewEntries leaves its next offset where it was): a
    # VotersRecord later written at those offsets never reaches that node's voter set. Seen once,
    # with kbroker's removal below: Kafka's controller 2 then led with voters [1, 2, 3].
    q.kafka.launch(1)
    q.kbroker.warm_up()
    q.kafka.await_started(1)
    wait_until("controller 1 a voter caught up again", lambda: caught_up(q, {1: ("Leader", "Follower")}), TIMEOUT_S)
    q.kbroker.kill()
    q.kbroker.launch()
    q.kbroker.await_started()
    wait_until("kbroker following a leader again", lambda: any(e.get("leader") is not None for e in q.kbroker.events_named("raft.leader_change", current_run=True)), TIMEOUT_S)
    voter_statuses = ("Leader", "Follower")
    wait_until("three voters caught up after the restarts", lambda: caught_up(q, {1: voter_statuses, kafka2: voter_statuses, kbroker: voter_statuses}), TIMEOUT_S)
    assert set(q.voters()) == {1, kafka2, kbroker}

    # Removed cleanly: kbroker first, then Kafka's controller 2 (the oracle); each stays an observer.
    for node_id, remaining in ((kbroker, {1, kafka2}), (kafka2, {1})):
        remove_controller(q, node_id)
        wait_until(f"voters {sorted(remaining)}", lambda remaining=remaining: set(q.voters()) == remaining, TIMEOUT_S)
    wait_until("controllers 2 and 3 observers again", lambda: caught_up(q, {1: ("Leader",), kafka2: ("Observer",), kbroker: ("Observer",)}), TIMEOUT_S)
    assert q.kbroker.running and q.kafka.nodes[kafka2].running


def test_kbroker_leads_kafkas_quorum_adds_and_removes_voters(quorum: MixedQuorum) -> None:
    """kbroker as the leader of Kafka's quorum: the one voter left when Kafka's leader removes
    itself, it adds Kafka's controllers back (AddRaftVoter answered by kbroker: each observer caught
    up, its ApiVersions taking kraft.version 1), they follow it, and it removes itself, handing the
    leadership back to a Kafka controller."""
    q = quorum
    kafka1, kafka2, kbroker = 1, 2, KBROKER_ID
    wait_until("Kafka's controller 1 the one voter", lambda: caught_up(q, {kafka1: ("Leader",), kafka2: ("Observer",), kbroker: ("Observer",)}), TIMEOUT_S)
    assert set(q.voters()) == {kafka1}
    add_controller(q, kbroker)
    epoch = int(q.status()["LeaderEpoch"])
    # Kafka's leader removes itself and resigns; kbroker, the one voter left, stands alone.
    remove_controller(q, kafka1)
    status = wait_until("kbroker leading", lambda: (s := q.status())["LeaderId"] == str(kbroker) and s, TIMEOUT_S)
    assert int(status["LeaderEpoch"]) > epoch and set(q.voters()) == {kbroker}

    for node_id in (kafka1, kafka2):
        add_controller(q, node_id)
    wait_until("Kafka's controllers following kbroker", lambda: caught_up(q, {kbroker: ("Leader",), kafka1: ("Follower",), kafka2: ("Follower",)}), TIMEOUT_S)
    assert set(q.voters()) == {kafka1, kafka2, kbroker} and q.status()["LeaderId"] == str(kbroker)

    # kbroker removes itself: one of Kafka's controllers leads, kbroker observes.
    remove_controller(q, kbroker)
    status = wait_until("a Kafka controller leading", lambda: (s := q.status())["LeaderId"] in (str(kafka1), str(kafka2)) and s, TIMEOUT_S)
    leader = int(status["LeaderId"])
    wait_until("kbroker an observer again", lambda: caught_up(q, {leader: ("Leader",), 3 - leader: ("Follower",), kbroker: ("Observer",)}), TIMEOUT_S)
    assert set(q.voters()) == {kafka1, kafka2} and q.kbroker.running
