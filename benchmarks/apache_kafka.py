"""Apache Kafka 4.4.0 itself as a reference cluster: N combined broker+controller nodes on loopback,
or controller-only and broker-only nodes (``controllers`` and ``brokers``), as kbroker's test clusters.

    python -m benchmarks.apache_kafka fetch
    python -m benchmarks.apache_kafka run [--nodes 3] [--controllers 0 --brokers 0] [--dir DIR] [--override key=value ...]

The jars come from Maven Central once, resolved by ``mvn`` (dependency:copy-dependencies over a
small pom: kafka_2.13 for the server and ``kafka.tools.StorageTool``, kafka-tools for the CLIs,
and the Log4j2 SLF4J-1.7 binding that Kafka 4.x logs through but does not bring in at runtime),
into ``~/.cache/kbroker-bench/kafka-4.4.0/lib`` (``KBROKER_KAFKA_HOME`` moves it). Nothing here
downloads unless asked: ``KafkaReferenceCluster`` takes the jars that ``fetch_jars`` returned,
and ``cached_lib`` says whether they are there. A machine without ``mvn`` (a fresh Debian with
only Java 17, as CI's) gets Maven itself from Maven Central first, checked against its SHA-512.

The quorum is static (``controller.quorum.voters``, kraft.version 0), as in the kbroker cluster
of tests/cluster, unless ``dynamic_quorum`` names the controllers in
``controller.quorum.bootstrap.servers`` instead (KIP-853, kraft.version 1: the voters come from the
format options, ``--standalone`` or ``--initial-controllers``, and from ``add-controller``); every
controller.quorum.* timeout is Kafka's default. Ports are chosen when the cluster is built and kept
across restarts; one cluster id is formatted into every log directory; every node is launched before
any is awaited, so the quorum forms as it would on separate machines. Heaps and thread pools are
sized for a shared 2-core machine.
"""

from __future__ import annotations

import argparse
import base64
import fcntl
import hashlib
import io
import os
import shutil
import signal
import socket
import subprocess
import tarfile
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import IO, Iterable, Mapping, Sequence

KAFKA_VERSION = "4.4.0"
LOG4J_VERSION = "2.25.4"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
CACHE_DIR = Path(os.environ.get("KBROKER_KAFKA_HOME", Path.home() / ".cache" / "kbroker-bench" / f"kafka-{KAFKA_VERSION}"))
# The jar whose presence means a finished download: lib/ is renamed into place only when complete.
MARKER_JAR = f"kafka_2.13-{KAFKA_VERSION}.jar"

POM = f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
 <modelVersion>4.0.0</modelVersion>
 <groupId>local</groupId><artifactId>kafka-reference</artifactId><version>1</version><packaging>pom</packaging>
 <dependencies>
  <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>{KAFKA_VERSION}</version></dependency>
  <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>{KAFKA_VERSION}</version></dependency>
  <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>{LOG4J_VERSION}</version></dependency>
  <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>{LOG4J_VERSION}</version></dependency>
  <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-api</artifactId><version>{LOG4J_VERSION}</version></dependency>
 </dependencies>
</project>
"""

# Console only: the shipped config writes server.log, controller.log... under kafka.logs.dir,
# and one file per node (the process's stderr) is easier to read after a failed run.
LOG4J2_PROPERTIES = """status = warn
appender.err.type = Console
appender.err.name = ERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.err.ref = ERR
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""

# kafka-server-start.sh's performance options, with a heap a third the size of its 1 GiB.
SERVER_JVM_OPTS = (
    "-Xms256M", "-Xmx512M", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:MaxInlineLevel=15", "-Djava.awt.headless=true",
)
TOOL_JVM_OPTS = ("-Xmx256M", "-Djava.awt.headless=true")
# A test suite starts dozens of Kafka JVMs that live for seconds on a 2-core machine; compiled by C1
# alone (the fast-compiling JIT) each start costs about half the CPU. tests/conftest.py sets this
# variable; benchmarks leave it unset and run Kafka as its own scripts do.
SHORT_LIVED_JVM_OPTS_ENV = "KBROKER_SHORT_LIVED_JVM_OPTS"


def short_lived_jvm_opts() -> tuple[str, ...]:
    """The extra JVM options of SHORT_LIVED_JVM_OPTS_ENV (none unless a test run sets it)."""
    return tuple(os.environ.get(SHORT_LIVED_JVM_OPTS_ENV, "").split())


# KafkaRaftServer logs this once the broker has caught up with the metadata log and is unfenced.
STARTED_MESSAGE = b"Kafka Server started"

# Maven's binary distribution, published on Maven Central beside the jars it resolves.
MAVEN_VERSION = "3.9.9"
MAVEN_URL = f"https://repo1.maven.org/maven2/org/apache/maven/apache-maven/{MAVEN_VERSION}/apache-maven-{MAVEN_VERSION}-bin.tar.gz"
MAVEN_SHA512 = "a555254d6b53d267965a3404ecb14e53c3827c09c3b94b5678835887ab404556bfaf78dcfe03ba76fa2508649dca8531c74bca4d5846513522404d48e8c4ac8b"

FETCH_TIMEOUT_S = 600.0
FORMAT_TIMEOUT_S = 120.0
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0
POLL_INTERVAL_S = 0.1


def cached_lib(cache: Path = CACHE_DIR) -> Path | None:
    """The lib/ directory of a finished download, or None; never touches the network."""
    return cached_maven_lib(cache, MARKER_JAR)


def fetch_jars(cache: Path = CACHE_DIR) -> Path:
    """Kafka's jars and their runtime dependencies from Maven Central, once; returns their directory."""
    return fetch_maven_jars(cache, POM, MARKER_JAR, f"Kafka {KAFKA_VERSION}")


def cached_maven_lib(cache: Path, marker_jar: str) -> Path | None:
    """``cache``'s lib/ once a download finished (lib/ is renamed into place only when complete, so
    ``marker_jar`` in it means complete), or None; never touches the network."""
    lib = cache / "lib"
    return lib if (lib / marker_jar).is_file() else None


def fetch_maven_jars(cache: Path, pom: str, marker_jar: str, what: str) -> Path:
    """The runtime dependencies of ``pom`` from Maven Central into ``cache``/lib, once; returns lib/."""
    lib = cached_maven_lib(cache, marker_jar)
    if lib is not None:
        return lib
    cache.mkdir(parents=True, exist_ok=True)
    # Test processes running side by side (pytest-xdist workers) download it once between them.
    with open(cache / ".fetch.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return cached_maven_lib(cache, marker_jar) or _download_jars(cache, pom, what)


def _download_jars(cache: Path, pom: str, what: str) -> Path:
    mvn = shutil.which("mvn") or str(maven(cache.parent))
    (cache / "pom.xml").write_text(pom)
    partial = cache / "lib.partial"
    repo = cache / "m2"
    shutil.rmtree(partial, ignore_errors=True)
    out = subprocess.run(
        [mvn, "-B", "-q", f"-Dmaven.repo.local={repo}", f"{DEPENDENCY_PLUGIN}:copy-dependencies",
         f"-DoutputDirectory={partial}", "-DincludeScope=runtime"],
        cwd=cache, capture_output=True, text=True, timeout=FETCH_TIMEOUT_S,
    )
    if out.returncode != 0:
        raise RuntimeError(f"mvn could not resolve {what}:\n{out.stdout[-4000:]}{out.stderr[-4000:]}")
    partial.rename(cache / "lib")
    # lib/ holds copies of every jar; the Maven repository is only scaffolding for them.
    shutil.rmtree(repo, ignore_errors=True)
    return cache / "lib"


def maven(home: Path) -> Path:
    """The ``mvn`` of Maven's binary distribution under ``home``, downloaded and checked once."""
    mvn = home / f"apache-maven-{MAVEN_VERSION}" / "bin" / "mvn"
    if mvn.is_file():
        return mvn
    home.mkdir(parents=True, exist_ok=True)
    with urllib.request.urlopen(MAVEN_URL, timeout=FETCH_TIMEOUT_S) as response:
        archive = response.read()
    if hashlib.sha512(archive).hexdigest() != MAVEN_SHA512:
        raise RuntimeError(f"{MAVEN_URL} does not match its published SHA-512")
    with tempfile.TemporaryDirectory(dir=home) as unpacked:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            # The archive is checked; the filter argument only exists from Python 3.11.4.
            tar.extractall(unpacked, **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))
        # Renamed into place whole, so a half-unpacked Maven is never taken for a finished one.
        (Path(unpacked) / f"apache-maven-{MAVEN_VERSION}").rename(mvn.parents[1])
    return mvn


def random_cluster_id() -> str:
    """A Kafka Uuid in its base64url form, as `kafka-storage random-uuid` prints one."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):  # Kafka avoids these too: they read as options on a command line
            return text


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on 127.0.0.1 (all bound at once, so none repeats)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _connects(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


COMBINED = ("broker", "controller")


class KafkaNode:
    """One KRaft JVM, combined broker+controller unless ``roles`` says otherwise (a controller-only
    node has no client port, a broker-only node no controller port); restarts keep its ports and
    log directory."""

    def __init__(
        self, node_id: int, client_port: int | None, controller_port: int | None, node_dir: Path, lib: Path, log4j_config: Path,
        roles: tuple[str, ...] = COMBINED,
    ) -> None:
        self.node_id = node_id
        self.roles = roles
        self.client_port = client_port
        self.controller_port = controller_port
        self.node_dir = node_dir
        self.data_dir = node_dir / "data"
        self.config_file = node_dir / "server.properties"
        self.log_path = node_dir / "server.log"
        self.lib = lib
        self.log4j_config = log4j_config
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None
        self._run_log_start = 0

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    @property
    def controller_bootstrap(self) -> str:
        return f"127.0.0.1:{self.controller_port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def java(self, main_class: str, *args: str, jvm_opts: tuple[str, ...] = SERVER_JVM_OPTS) -> list[str]:
        # The JVM expands lib/* itself; kafka-run-class.sh puts the same on the class path.
        return ["java", *jvm_opts, *short_lived_jvm_opts(), f"-Dlog4j2.configurationFile={self.log4j_config}", f"-Dkafka.logs.dir={self.node_dir}",
                "-cp", str(self.lib / "*"), main_class, *args]

    def launch(self) -> None:
        """Start the JVM without waiting: a cluster launches every node before awaiting any."""
        assert not self.running, f"node {self.node_id} already running"
        self._run_log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        self._log_file = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            self.java("kafka.Kafka", str(self.config_file)), cwd=self.node_dir,
            stdin=subprocess.DEVNULL, stdout=self._log_file, stderr=self._log_file,
        )

    def await_started(self, timeout_s: float = START_TIMEOUT_S) -> None:
        assert self.proc is not None, f"node {self.node_id} never launched"
        deadline = time.monotonic() + timeout_s
        # KafkaRaftServer logs its started message whatever the roles; a controller-only node has only its controller port.
        port = self.client_port if self.is_broker else self.controller_port
        assert port is not None
        while not (self._started_logged() and _connects(port)):
            if self.proc.poll() is not None:
                self._close_log()
                raise RuntimeError(f"node {self.node_id} exited with {self.proc.returncode} during start-up:\n{self.tail()}")
            if time.monotonic() > deadline:
                self.kill()
                raise TimeoutError(f"node {self.node_id} not started after {timeout_s}s:\n{self.tail()}")
            time.sleep(POLL_INTERVAL_S)

    def kill(self) -> None:
        """SIGKILL: a crash, nothing flushed by Kafka itself."""
        self.send_kill()
        if self.proc is not None:
            self.proc.wait(STOP_TIMEOUT_S)
        self._close_log()

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM: Kafka's controlled shutdown, its leaderships moved before it exits."""
        if self.running:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout_s)
        self._close_log()

    def send_kill(self) -> None:
        if self.running:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)

    def tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def _started_logged(self) -> bool:
        with open(self.log_path, "rb") as f:
            f.seek(self._run_log_start)
            return STARTED_MESSAGE in f.read()

    def _close_log(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None


def format_storage(nodes: Iterable[KafkaNode], cluster_id: str, node_args: Mapping[int, Sequence[str]] | None = None) -> None:
    """`kafka-storage format` on every node at once (each is a JVM start: seconds); ``node_args``
    adds options for some nodes (a dynamic quorum's ``--standalone``, ``--no-initial-controllers``)."""
    procs = [
        (node, subprocess.Popen(
            node.java(
                "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(node.config_file), *(node_args or {}).get(node.node_id, ()),
                jvm_opts=TOOL_JVM_OPTS,
            ),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        ))
        for node in nodes
    ]
    failures = []
    for node, proc in procs:
        try:
            output, _ = proc.communicate(timeout=FORMAT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            output, _ = proc.communicate()
        if proc.returncode != 0:
            failures.append(f"node {node.node_id}: {output.decode(errors='replace')[-2000:]}")
    if failures:
        raise RuntimeError("kafka-storage format failed:\n" + "\n".join(failures))


def start_nodes(nodes: Iterable[KafkaNode]) -> None:
    """Every node launched before any is awaited, so the quorum forms as it would on separate machines."""
    started = list(nodes)
    for node in started:
        node.launch()
    for node in started:
        node.await_started()


def kill_nodes(nodes: Iterable[KafkaNode]) -> None:
    # Every JVM is signalled before any is waited on, so a second Ctrl-C during the waits cannot
    # leave one running.
    killed = list(nodes)
    for node in killed:
        node.send_kill()
    for node in killed:
        node.kill()


class KafkaReferenceCluster:
    """``nodes`` combined KRaft nodes of Apache Kafka, then ``controllers`` controller-only and
    ``brokers`` broker-only ones, ids from 1 in that order (as tests/cluster/cluster.py numbers
    kbroker's); every controller a voter of a static quorum, or with ``dynamic_quorum`` every one
    named in controller.quorum.bootstrap.servers (the voters are then whatever ``format``'s
    ``node_args`` say). ``overrides`` for every node, then ``node_overrides`` for some (a node's
    own log.dirs)."""

    def __init__(
        self, root: Path, lib: Path, *, nodes: int = 3, overrides: dict[str, str] | None = None, controllers: int = 0, brokers: int = 0,
        node_overrides: dict[int, dict[str, str]] | None = None, dynamic_quorum: bool = False,
    ) -> None:
        self.root = root
        self.lib = lib
        self.cluster_id = random_cluster_id()
        root.mkdir(parents=True, exist_ok=True)
        self.log4j_config = root / "log4j2.properties"
        self.log4j_config.write_text(LOG4J2_PROPERTIES)
        ports = iter(free_ports(2 * nodes + controllers + brokers))
        roles = [COMBINED] * nodes + [("controller",)] * controllers + [("broker",)] * brokers
        self.nodes = {
            i: KafkaNode(
                i, next(ports) if "broker" in r else None, next(ports) if "controller" in r else None,
                root / f"node{i}", lib, self.log4j_config, roles=r,
            )
            for i, r in enumerate(roles, start=1)
        }
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes.values() if n.is_controller)
        size = nodes + brokers
        for node in self.nodes.values():
            node.node_dir.mkdir(parents=True, exist_ok=True)
            props = self.properties(node, voters, size)
            if dynamic_quorum:
                del props["controller.quorum.voters"]
                props["controller.quorum.bootstrap.servers"] = ",".join(n.controller_bootstrap for n in self.controllers)
            props |= (overrides or {}) | (node_overrides or {}).get(node.node_id, {})
            node.config_file.write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    @staticmethod
    def properties(node: KafkaNode, voters: str, size: int) -> dict[str, str]:
        """``size``: how many brokers the cluster has, for the internal topics' replication."""
        listeners = [f"PLAINTEXT://127.0.0.1:{node.client_port}"] if node.is_broker else []
        listeners += [f"CONTROLLER://127.0.0.1:{node.controller_port}"] if node.is_controller else []
        props = {
            "process.roles": ",".join(node.roles),
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "listeners": ",".join(listeners),
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT" if node.is_broker else "CONTROLLER:PLAINTEXT",
            "log.dirs": str(node.data_dir),
            # Kafka's defaults are 3 and 8 threads per node: too many for three JVMs on two cores.
            "num.network.threads": "2",
            "num.io.threads": "2",
        }
        if not node.is_broker:
            return props
        return props | {
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.client_port}",
            "inter.broker.listener.name": "PLAINTEXT",
            "group.initial.rebalance.delay.ms": "0",
            # Internal topics' defaults (RF 3, min ISR 2) only fit clusters of three or more.
            "offsets.topic.replication.factor": str(min(size, 3)),
            "transaction.state.log.replication.factor": str(min(size, 3)),
            "transaction.state.log.min.isr": str(min(size, 2)),
            "share.coordinator.state.topic.replication.factor": str(min(size, 3)),
            "share.coordinator.state.topic.min.isr": str(min(size, 2)),
        }

    @classmethod
    def one_node_with_listener(cls, root: Path, lib: Path, protocol: str, properties: dict[str, str]) -> tuple["KafkaReferenceCluster", int]:
        """One node with, beside its PLAINTEXT and CONTROLLER listeners, a listener named and
        secured ``protocol`` (SSL, SASL_SSL, ...) on a port of its own, configured with
        ``properties``; not started. Returns the cluster and that listener's port."""
        cluster = cls(root, lib, nodes=1)
        node = cluster.nodes[1]
        (port,) = free_ports(1)
        props = cluster.properties(node, f"1@127.0.0.1:{node.controller_port}", 1) | properties
        props |= {
            "listeners": f"PLAINTEXT://127.0.0.1:{node.client_port},CONTROLLER://127.0.0.1:{node.controller_port},{protocol}://127.0.0.1:{port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.client_port},{protocol}://127.0.0.1:{port}",
            "listener.security.protocol.map": f"CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,{protocol}:{protocol}",
        }
        node.config_file.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        return cluster, port

    def format(self, node_args: Mapping[int, Sequence[str]] | None = None) -> None:
        format_storage(self.nodes.values(), self.cluster_id, node_args)

    def start(self) -> "KafkaReferenceCluster":
        self.format()
        start_nodes(self.nodes.values())
        return self

    def kill(self, node_id: int) -> None:
        self.nodes[node_id].kill()

    def launch(self, node_id: int) -> None:
        self.nodes[node_id].launch()

    def await_started(self, node_id: int, timeout_s: float = START_TIMEOUT_S) -> None:
        self.nodes[node_id].await_started(timeout_s)

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes.values() if n.running and n.is_broker)

    @property
    def brokers(self) -> list[KafkaNode]:
        return [n for n in self.nodes.values() if n.is_broker]

    @property
    def controllers(self) -> list[KafkaNode]:
        return [n for n in self.nodes.values() if n.is_controller]

    def controller_bootstrap(self, node_id: int) -> str:
        return self.nodes[node_id].controller_bootstrap

    def close(self) -> None:
        kill_nodes(self.nodes.values())

    def __enter__(self) -> "KafkaReferenceCluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.apache_kafka", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("fetch", help="download the jars (once) and print their directory")
    run = commands.add_parser("run", help="start a cluster and keep it up until Ctrl-C")
    run.add_argument("--nodes", type=int, default=3, help="combined broker+controller nodes")
    run.add_argument("--controllers", type=int, default=0, help="controller-only nodes, after the combined ones")
    run.add_argument("--brokers", type=int, default=0, help="broker-only nodes, after the controllers")
    run.add_argument("--dir", type=Path, help="keep the nodes' data and logs here (default: a temporary directory)")
    run.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    started = time.monotonic()
    lib = fetch_jars()
    if args.command == "fetch":
        print(f"{lib} ({time.monotonic() - started:.1f} s)")
        return 0
    overrides = dict(o.split("=", 1) for o in args.override)
    with tempfile.TemporaryDirectory(prefix="apache-kafka-") as tmp:
        with KafkaReferenceCluster(
            args.dir or Path(tmp), lib, nodes=args.nodes, overrides=overrides, controllers=args.controllers, brokers=args.brokers
        ) as cluster:
            cluster.start()
            print(f"Apache Kafka {KAFKA_VERSION}, cluster id {cluster.cluster_id}, up in {time.monotonic() - started:.1f} s", flush=True)
            print(f"bootstrap.servers={cluster.bootstrap}")
            print(f"controllers={','.join(n.controller_bootstrap for n in cluster.controllers)}")
            print(f"logs: {cluster.root}/node*/server.log; Ctrl-C stops every node", flush=True)
            try:
                while all(n.running for n in cluster.nodes.values()):
                    time.sleep(1.0)
            except KeyboardInterrupt:
                return 0
            print("a node exited; stopping the cluster", flush=True)
            return 1


if __name__ == "__main__":
    raise SystemExit(main())
