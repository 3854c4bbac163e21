"""A KRaft cluster of real kbroker processes on loopback, with every controller link behind a proxy.

Each node gets its ports before any node starts, one cluster id is formatted into every log
directory, and every process is launched before any is awaited, so the quorum forms as it
would on real machines. A node reaches controller j through the proxy of the ordered pair
(node, j): its own `controller.quorum.voters` names those proxy ports, which is how a test cuts
one direction of one link. Nodes are killed with SIGKILL and restarted on the same ports; a node
told to ``warm_up`` restarts from an interpreter that has already imported the broker
(tests/cluster/warm_start.py).

With ``proxy_inter_broker``, brokers also reach each other's inter-broker listener (INTERNAL:
replica fetches, transaction markers) through links of their own, ``broker_links[(a, b)]``,
while clients keep the PLAINTEXT listener.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Mapping, TypeVar

from confluent_kafka.admin import AdminClient
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from broker import wire_client
from broker.cli import main as kbroker_main
from broker.metadata_quorum_command import CONTROLLER_ENDPOINT_TYPE
from tests.cluster.kbroker_command import quorum_status
from tests.cluster.link_proxy import LinkProxy, ProxyLoop
from tests.integration.conftest import REPO, BrokerProcess, retire
from tests.ports import free_ports

FORMAT_TIMEOUT_S = 60.0
T = TypeVar("T")


@dataclass
class NodeSpec:
    node_id: int
    roles: tuple[str, ...]
    client_port: int | None
    controller_port: int | None

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles


class ClusterNode(BrokerProcess):
    def __init__(self, spec: NodeSpec, data_dir: Path, config_file: Path) -> None:
        super().__init__(data_dir)
        self.spec = spec
        self.node_id = spec.node_id
        # BrokerProcess waits on `port` for readiness: the client port, or the controller port
        # of a controller-only node.
        self.port = spec.client_port if spec.client_port is not None else spec.controller_port  # type: ignore[assignment]
        self.config_file = config_file
        self.ready_event = "broker.started" if spec.is_broker else "controller.started"
        self._standby: subprocess.Popen[bytes] | None = None
        self._standby_log: IO[bytes] | None = None
        self._started_run = -1  # where in the log the run that was last seen started begins

    def warm_up(self) -> None:
        """Start the interpreter of this node's next run now, while this one runs, is held down or
        shuts down, so that the next ``launch`` does not wait for Python to import the broker."""
        if self._standby is not None and self._standby.poll() is None:
            return
        self.drop_standby()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._standby_log = open(self.log_path, "ab")
        self._standby = self.popen([sys.executable, "-m", "tests.cluster.warm_start"], self._standby_log, stdin=subprocess.PIPE)

    def _started_logged(self) -> bool:
        """Seen once, not looked for again in the same run: the chaos campaign's recover() asks
        every node after each window, and a node up for many windows had its run's whole log,
        thousands of lines, parsed each time."""
        if self._started_run != self._run_log_start:
            if not super()._started_logged():
                return False
            self._started_run = self._run_log_start
        return True

    def launch(self) -> None:
        standby, log_file = self._standby, self._standby_log
        self._standby = self._standby_log = None
        if standby is None or standby.poll() is not None or log_file is None:
            if log_file is not None:
                log_file.close()
            super().launch()
            return
        assert not self.running, "broker already running"
        assert standby.stdin is not None
        self._run_log_start = self.log_path.stat().st_size
        self._log_file = log_file
        standby.stdin.write(json.dumps(self.command()).encode() + b"\n")
        standby.stdin.close()
        self.proc = standby

    def drop_standby(self) -> None:
        if self._standby is not None:
            self._standby.kill()
            self._standby.wait()
            self._standby = None
        if self._standby_log is not None:
            self._standby_log.close()
            self._standby_log = None


class CuttableLinks:
    """Faults on a cluster's node-to-node links: ``links[(a, b)]``, how node a reaches controller
    b, and ``broker_links[(a, b)]``, how broker a reaches broker b, all on ``proxies``."""

    nodes: Mapping[int, Any]
    proxies: ProxyLoop
    links: dict[tuple[int, int], LinkProxy]
    broker_links: dict[tuple[int, int], LinkProxy]

    def _all_links(self) -> Iterable[tuple[tuple[int, int], LinkProxy]]:
        return [*self.links.items(), *self.broker_links.items()]

    def isolate(self, node_id: int) -> None:
        """Cut every link to and from ``node_id``."""
        for (a, b), link in self._all_links():
            if node_id in (a, b):
                link.cut()

    def partition(self, side: Iterable[int]) -> None:
        """Cut every link between ``side`` and the rest."""
        group = set(side)
        self.cut_between(group, set(self.nodes) - group)

    def cut_between(self, one: Iterable[int], other: Iterable[int]) -> None:
        """Cut every link between a node of ``one`` and a node of ``other``, both ways; nodes in
        neither still reach both (a bridge)."""
        first, second = set(one), set(other)
        for (a, b), link in self._all_links():
            if (a in first and b in second) or (a in second and b in first):
                link.cut()

    def heal(self) -> None:
        self.proxies.heal_all()


# Every node's properties before a test's overrides. A classic group's first join waits
# group.initial.rebalance.delay.ms (3 s by default) for more members; Kafka's own integration
# harness sets it to 0 too, and a test about the delay sets it itself.
HARNESS_DEFAULTS = {"group.initial.rebalance.delay.ms": "0"}


class KafkaCluster(CuttableLinks):
    def __init__(
        self,
        root: Path,
        *,
        combined: int = 3,
        controllers: int = 0,
        brokers: int = 0,
        overrides: dict[str, str] | None = None,
        cluster_id: str = "kbroker-test-cluster-0",
        proxy_inter_broker: bool = False,
        node_overrides: dict[int, dict[str, str]] | None = None,
        format_args: tuple[str, ...] = (),
    ) -> None:
        """``combined`` broker+controller nodes, or ``controllers`` + ``brokers`` separate ones (ids
        from 1); ``overrides`` for every node, then ``node_overrides`` for some (a broker.rack);
        ``format_args`` for `storage format` (a bootstrap SCRAM user)."""
        self.root = root
        self.format_args = format_args
        self.cluster_id = cluster_id
        self.proxies = ProxyLoop()
        roles: list[tuple[str, ...]] = [("broker", "controller")] * combined + [("controller",)] * controllers + [("broker",)] * brokers
        ports = iter(free_ports(3 * len(roles) + (2 * len(roles) if proxy_inter_broker else 0)))
        self.specs = [
            NodeSpec(
                node_id=i + 1,
                roles=r,
                client_port=next(ports) if "broker" in r else None,
                controller_port=next(ports) if "controller" in r else None,
            )
            for i, r in enumerate(roles)
        ]
        # A controller is dialled at its demux port, in controller.quorum.voters and in the
        # CONTROLLER listener it advertises (which Raft leaders announce to their followers, and
        # brokers then send their heartbeats to): either way the connection goes through the link
        # of the node that opened it. links[(a, b)]: how node a reaches controller b.
        self.links: dict[tuple[int, int], LinkProxy] = {}
        self.controller_demux_ports: dict[int, int] = {}
        node_ids = [s.node_id for s in self.specs]
        for b in self.specs:
            if b.controller_port is not None:
                self.controller_demux_ports[b.node_id] = port = next(ports)
                peers = [a for a in node_ids if a != b.node_id]
                for a, link in self.proxies.add_demux(port, b.controller_port, str(b.node_id), peers).items():
                    self.links[(a, b.node_id)] = link
        # broker_links[(a, b)]: how broker a reaches broker b's INTERNAL listener, at internal_ports[b][1].
        self.broker_links: dict[tuple[int, int], LinkProxy] = {}
        self.internal_ports: dict[int, tuple[int, int]] = {}
        if proxy_inter_broker:
            broker_ids = [s.node_id for s in self.specs if s.is_broker]
            for b_id in broker_ids:
                listen, advertised = self.internal_ports[b_id] = (next(ports), next(ports))
                peers = [a for a in broker_ids if a != b_id]
                for a, link in self.proxies.add_demux(advertised, listen, str(b_id), peers).items():
                    self.broker_links[(a, b_id)] = link
        self.nodes = {spec.node_id: self._make_node(spec, {**(overrides or {}), **(node_overrides or {}).get(spec.node_id, {})}) for spec in self.specs}

    def _voters_for(self, node_id: int) -> str:
        return ",".join(f"{b}@127.0.0.1:{port}" for b, port in self.controller_demux_ports.items())

    def _make_node(self, spec: NodeSpec, overrides: dict[str, str]) -> ClusterNode:
        node_dir = self.root / f"node{spec.node_id}"
        data_dir = node_dir / "data"
        listeners = []
        if spec.client_port is not None:
            listeners.append(f"PLAINTEXT://127.0.0.1:{spec.client_port}")
        if spec.controller_port is not None:
            listeners.append(f"CONTROLLER://127.0.0.1:{spec.controller_port}")
        props = {
            **HARNESS_DEFAULTS,
            "node.id": str(spec.node_id),
            "process.roles": ",".join(spec.roles),
            "listeners": ",".join(listeners),
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.quorum.voters": self._voters_for(spec.node_id),
            "log.dirs": str(data_dir),
        }
        advertised_listeners = []
        if spec.client_port is not None:
            advertised_listeners.append(f"PLAINTEXT://127.0.0.1:{spec.client_port}")
            props["inter.broker.listener.name"] = "PLAINTEXT"
        if spec.controller_port is not None:
            advertised_listeners.append(f"CONTROLLER://127.0.0.1:{self.controller_demux_ports[spec.node_id]}")
        props["advertised.listeners"] = ",".join(advertised_listeners)
        if spec.node_id in self.internal_ports:
            listen, advertised = self.internal_ports[spec.node_id]
            props["listeners"] += f",INTERNAL://127.0.0.1:{listen}"
            props["advertised.listeners"] += f",INTERNAL://127.0.0.1:{advertised}"
            props["inter.broker.listener.name"] = "INTERNAL"
            props["listener.security.protocol.map"] += ",INTERNAL:PLAINTEXT"
        props.update(overrides)
        node_dir.mkdir(parents=True, exist_ok=True)
        config_file = node_dir / "server.properties"
        config_file.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        return ClusterNode(spec, data_dir, config_file)

    def add_listener(self, name: str, protocol: str) -> dict[int, int]:
        """Before start: a listener ``name`` speaking ``protocol`` on every node, beside those its
        config file names, advertised as it listens; its port by node id."""
        ports = dict(zip(self.nodes, free_ports(len(self.nodes))))
        for node_id, node in self.nodes.items():
            props = dict(line.split("=", 1) for line in node.config_file.read_text().splitlines() if "=" in line)
            endpoint = f"{name}://127.0.0.1:{ports[node_id]}"
            node.overrides.update(
                {
                    "listeners": f"{props['listeners']},{endpoint}",
                    "advertised.listeners": f"{props['advertised.listeners']},{endpoint}",
                    "listener.security.protocol.map": f"{props['listener.security.protocol.map']},{name}:{protocol}",
                }
            )
        return ports

    def format(self) -> None:
        """`kbroker storage format` for every node, run in this process: the same code as the
        command (tests/integration/test_storage_tool.py runs that), without an interpreter start
        per node for each of the suite's clusters."""
        for node in self.nodes.values():
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                code = kbroker_main(["storage", "format", "--cluster-id", self.cluster_id, "--config", str(node.config_file), *self.format_args])
            assert code == 0, f"storage format of node {node.node_id} failed: {out.getvalue()}"

    def start(self) -> "KafkaCluster":
        self.format()
        for node in self.nodes.values():
            node.launch()
        for node in self.nodes.values():
            node.await_started()
        return self

    def close(self) -> None:
        for node in self.nodes.values():
            node.drop_standby()
            retire(node)
        self.proxies.close()

    @property
    def brokers(self) -> list[ClusterNode]:
        return [n for n in self.nodes.values() if n.spec.is_broker]

    @property
    def controllers(self) -> list[ClusterNode]:
        return [n for n in self.nodes.values() if n.spec.is_controller]

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers if b.running)

    def await_all_brokers_live(self, timeout_s: float = 120.0) -> None:
        """Wait until every broker is registered and unfenced as every running broker's Metadata
        shows it: a node healed from a partition may still be fenced when the heal returns, and
        the next test of a module-scoped cluster would find too few brokers for three replicas."""
        wanted = sorted(b.node_id for b in self.brokers)

        def whole() -> bool:
            return all(
                sorted(AdminClient({"bootstrap.servers": b.bootstrap, "socket.timeout.ms": 10000}).list_topics(timeout=10).brokers) == wanted
                for b in self.brokers
                if b.running
            )

        wait_until("every broker registered and unfenced", whole, timeout_s)

    def controller_bootstrap(self, node_id: int) -> str:
        spec = self.nodes[node_id].spec
        return f"127.0.0.1:{spec.controller_port}"


def wait_until(what: str, probe: Callable[[], T | None], timeout_s: float, interval_s: float = 0.1) -> T:
    """Poll ``probe`` until it returns something other than None/False; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = probe()
            if value is not None and value is not False:
                return value
        except Exception as e:  # a probe against a node that is failing over may raise
            last_error = e
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}" + (f" (last error: {last_error!r})" if last_error else ""))


def leader_id(cluster: KafkaCluster, asked: int) -> int | None:
    """The quorum leader as controller ``asked`` knows it (its DescribeCluster's controller id, as
    kafka-metadata-quorum finds the leader); None without one. Asked in process and of ``asked``
    alone: describing the quorum is forwarded to the leader, which waits out a whole request
    timeout when the leader is paused or cut off."""
    response = wire_client.request(
        cluster.controller_bootstrap(asked),
        DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=i8(CONTROLLER_ENDPOINT_TYPE)),
        client_id="cluster-test",
    )
    if response.error_code == ErrorCode.unsupported_version:
        # Before metadata.version 3.7-IV0 controllers answer no DescribeCluster.
        status = quorum_status(cluster.controller_bootstrap(asked))
        return None if status is None or int(status["LeaderId"]) < 0 else int(status["LeaderId"])
    return None if response.error_code != ErrorCode.none or response.controller_id < 0 else int(response.controller_id)
