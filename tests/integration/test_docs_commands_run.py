"""The documents' commands, run: every command of README.md's and docs/**/*.md's shell blocks (as
tests/unit/test_docs.py extracts them) is executed here against real kbroker processes, or is in
``EXCLUDED`` with the reason it is not.

One test per page runs the page's commands in the order the page gives them, so that its steps
build on each other (a topic created, then produced to, then consumed). A command runs as written,
through bash, with only these substitutions: the documents' addresses (127.0.0.1:9092-9094,
HOST:9092, the console's 8080) become the ports this test chose (tests/ports.py), the virtualenv is
the repository's (a ``.venv`` link in each page's working directory, and its ``bin`` on the PATH
as ``. .venv/bin/activate`` puts it), a ``kbroker`` client command that relies on the default
``--bootstrap-server`` is given the page's broker, and a ``<placeholder>`` is what the reader would
fill in. Kafka's tools (``kafka-*.sh``) run from the cached 4.4 jars in the suite's tool JVM
(tests/kafka_tools.py), the class its row of docs/compatibility.md names; ``java ...`` runs as is.

Commands that start something that keeps running (``make run``, ``make cluster``,
``kbroker console``, a ``kbroker consume`` with no ``--max-messages``) are started in the
background, waited for until they answer, and stopped with SIGINT (Ctrl-C), which must be a
graceful exit 0. A ``make`` target runs its recipe (``make -n``) in the page's directory, so its
``./data`` and ``./cluster`` are the test's. Where a page shows what a command prints (in its
comment or its prose), ``EXPECTED`` holds the substance of it, and the command's output must
match. What a page takes for granted without a command (a group with committed offsets, a
reassignment plan file, a server.properties) is made by the page's test (``prepare``) just before
the command that needs it.

``test_every_command_is_run_or_excluded`` fails when a page with commands has no test here, and
when an exclusion matches no command any more: a new command is run by its page's test, or
excluded here with a reason.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.cluster.cluster import wait_until
from tests.integration.conftest import BrokerProcess, retire
from tests.kafka_tools import kafka_tool
from tests.ports import consecutive_free_ports, free_port, free_ports
from tests.unit.test_docs import COMMANDS, COMPATIBILITY, DOCS, ROOT, rel, shell_lines, split_fences

VENV = ROOT / ".venv"
COMMAND_TIMEOUT_S = 60.0
READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 60.0


# --- What is not run, and why ------------------------------------------------------------------

# (page, the command's start): why it is not run. Each entry must still match a command.
EXCLUDED: dict[tuple[str, str], str] = {
    ("README.md", "make test"): "the whole suite: 25 minutes, and this test is part of it",
    ("docs/guarantees.md", "make chaos FAULTS=100"): "the long fault campaign: hours (100,000 Raft simulation seeds, 20,000 cluster simulation seeds, then 100 faults of each kind on a real cluster)",
    ("docs/guarantees.md", "make chaos-soak"): "30 short chaos campaigns (6 faults of each kind, on real clusters): well over an hour",
    ("docs/guarantees.md", "make fuzz"): "1,000,000 mutated requests against a broker: the long form of what the suite runs (tests/fuzz) and replays (tests/integration/test_fuzz_regressions.py)",
    ("docs/guarantees.md", "python -m tests.chaos.campaign"): "chaos campaigns (3 to 100 faults of each kind on a real cluster): minutes to hours each; the suite runs a 10-fault one (tests/chaos)",
    ("docs/guarantees.md", "python -m benchmarks.apache_kafka fetch"): "the same command is run for docs/operations/kafka-tools.md",
    ("docs/design/transactions.md", "python -m benchmarks.transactions"): "a benchmark of three kbroker and three Kafka 4.4 nodes with three clients (franz-go built with Go): minutes, and its numbers mean nothing on a shared machine",
    ("docs/metrics.md", "python -m benchmarks.metrics_cost"): "a cost benchmark (6 runs per setting of 4,000,000 records against brokers it starts): many minutes, and timings mean nothing on a shared machine",
    ("docs/metrics.md", "python -m benchmarks.request_metrics_cost"): "a cost benchmark (64,000 requests per run against brokers it starts): minutes, and timings mean nothing on a shared machine",
    ("docs/metrics.md", "python -m benchmarks.error_counts_cost"): "a CPU-time micro-benchmark (least of 7 runs of every answer): timings mean nothing on a shared machine",
    ("docs/operations/kafka-tools.md", "kafka-streams-groups.sh --bootstrap-server 127.0.0.1:9092 --describe"): "needs a running Kafka Streams application (the group wordcount): tests/integration/test_streams_groups_command.py runs it against one, beside Kafka 4.4",
    ("docs/operations/kafka-tools.md", "kafka-streams-groups.sh --bootstrap-server 127.0.0.1:9092 --reset-offsets"): "needs a stopped Kafka Streams application's group: tests/integration/test_streams_groups_command.py runs it, beside Kafka 4.4",
    ("docs/operations/cluster.md", "make cluster"): "the same command is run for README.md (three nodes and the console, stopped with Ctrl-C)",
    ("docs/operations/kafka-data-dir.md", "kbroker serve --config"): "needs a stopped Kafka 4.4 node's directory: tests/integration/test_kafka_dir_takeover.py runs Kafka and kbroker in turn on one",
    ("docs/operations/kafka-data-dir.md", "kafka-server-start.sh"): "needs a node directory kbroker served from: tests/integration/test_kafka_dir_takeover.py runs Kafka and kbroker in turn on one",
    ("docs/operations/kafka-data-dir.md", "kafka-topics.sh --bootstrap-server 127.0.0.1:9092 --describe --under-replicated-partitions"): "needs a cluster just taken over from Kafka: tests/cluster/test_kafka_cluster_takeover.py waits for every ISR of three over the admin client; the tool's --describe runs in tests/cluster/test_runbook_against_kafka.py",
    ("docs/operations/kafka-data-dir.md", "kafka-leader-election.sh"): "needs a cluster just taken over from Kafka; tests/cluster/test_runbook_against_kafka.py runs the same election against kbroker and Kafka 4.4 clusters",
    ("docs/operations/kafka-data-dir.md", "echo '{\"version\":1,\"partitions\""): "writes the reassignment plan of the commands after it: tests/cluster/test_replication_with_kafka_brokers.py writes its own",
    ("docs/operations/kafka-data-dir.md", "kafka-reassign-partitions.sh"): "needs kbroker brokers under Kafka's controllers: tests/cluster/test_replication_with_kafka_brokers.py runs --execute --throttle and --verify with Kafka's tool",
    ("docs/operations/kafka-data-dir.md", "kafka-metadata-quorum.sh --bootstrap-controller KAFKA_CONTROLLER"): "needs a dynamic Kafka 4.4 quorum: tests/cluster/test_kbroker_controller_in_kafka_quorum.py runs describe, add-controller and remove-controller with Kafka's tool",
    ("docs/operations/kafka-data-dir.md", "kbroker storage format --cluster-id CLUSTER_ID"): "needs a running Kafka 4.4 controller quorum: tests/cluster/test_broker_under_kafka_controllers.py formats a broker so with Kafka's cluster id and starts it",
}


# --- The pages' commands -------------------------------------------------------------------------


@dataclass(frozen=True)
class DocCommand:
    page: str
    line: int
    text: str  # the logical line as written (continuations joined), comment included

    @property
    def code(self) -> str:
        """The command as written, without its trailing comment."""
        quote = ""
        for i, char in enumerate(self.text):
            if quote:
                quote = "" if char == quote else quote
            elif char in "'\"":
                quote = char
            elif char == "#" and (i == 0 or self.text[i - 1].isspace()):
                return self.text[:i].strip()
        return self.text.strip()

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.text.strip()}"


def doc_commands() -> list[DocCommand]:
    """Every logical command line test_docs extracts (one per file:line, its stages together)."""
    wanted: dict[str, set[int]] = {}
    for command in COMMANDS:
        page, line = command.where.rsplit(":", 1)
        wanted.setdefault(page, set()).add(int(line))
    found = []
    for path in DOCS:
        page = rel(path)
        if page not in wanted:
            continue
        _, blocks = split_fences(path.read_text())
        for _, first, lines in blocks:
            for number, text in shell_lines(lines, first):
                if number in wanted[page]:
                    text = re.sub(r"^\s*\$ ", "", text)
                    found.append(DocCommand(page, number, text))
    assert {(c.page, c.line) for c in found} == {(p, n) for p, ns in wanted.items() for n in ns}
    return found


DOC_COMMANDS = doc_commands()


def starts(command: DocCommand, prefix: str) -> bool:
    code = " ".join(re.sub(r"<[^<>]+>", "PLACEHOLDER", command.text).split())
    return code.startswith(prefix)


def exclusion(command: DocCommand) -> str | None:
    for (page, prefix), reason in EXCLUDED.items():
        if command.page == page and starts(command, prefix):
            return reason
    return None


def to_run(page: str) -> list[DocCommand]:
    return [c for c in DOC_COMMANDS if c.page == page and exclusion(c) is None]


# --- Running them -------------------------------------------------------------------------------


def tool_classes() -> dict[str, str]:
    """kafka-*.sh -> its Java class, from docs/compatibility.md's tool table."""
    classes = {}
    for line in COMPATIBILITY.read_text().split("\n"):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and re.fullmatch(r"`kafka-[a-z-]+\.sh`", cells[0]):
            classes[cells[0].strip("`")] = cells[1].strip("`")
    return classes


CLIENT_SUBCOMMANDS = {"topics", "configs", "produce", "consume", "leader-election", "reassign-partitions", "groups", "metadata-quorum", "features", "console"}


@dataclass
class Page:
    """One page's run: its working directory, the address each documented port stands for here,
    and what was run."""

    name: str
    workdir: Path
    ports: dict[int, int] = field(default_factory=dict)
    placeholders: dict[str, str] = field(default_factory=dict)
    background: list[tuple[DocCommand, subprocess.Popen[str], Path]] = field(default_factory=list)
    ran: list[DocCommand] = field(default_factory=list)
    outputs: dict[int, str] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        # The page's directory stands for the repository's root: `python -m benchmarks...` imports from it.
        return dict(os.environ, PATH=f"{VENV / 'bin'}:{os.environ['PATH']}", VIRTUAL_ENV=str(VENV), PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")

    def substitute(self, text: str) -> str:
        for documented, ours in self.ports.items():
            text = re.sub(rf"(127\.0\.0\.1|HOST):{documented}\b", f"127.0.0.1:{ours}", text)
        for placeholder, value in self.placeholders.items():
            text = text.replace(placeholder, value)
        return text

    def with_bootstrap(self, code: str) -> str:
        """A kbroker client command given the page's broker where it relies on the default."""
        stages = code.split(" | ")
        last = shlex.split(stages[-1])
        if last[:1] == ["kbroker"] and last[1:2] and last[1] in CLIENT_SUBCOMMANDS and "--bootstrap-server" not in last:
            stages[-1] += f" --bootstrap-server 127.0.0.1:{self.ports[9092]}"
        return " | ".join(stages)

    def variants(self, command: DocCommand) -> list[str]:
        """The runnable forms of the command: comment dropped, ``[--opt]`` both without and with."""
        code = self.with_bootstrap(self.substitute(command.code))
        optional = re.search(r" \[(--[a-z-]+)\]", code)
        if optional:
            return [code.replace(optional.group(0), ""), code.replace(optional.group(0), " " + optional.group(1))]
        return [code]


def long_running(code: str) -> bool:
    words = shlex.split(code.split(" | ")[-1])
    if words[:2] in (["make", "run"], ["make", "cluster"]) or words[:2] == ["kbroker", "console"]:
        return True
    return words[:2] == ["kbroker", "consume"] and "--max-messages" not in words and "--timeout-ms" not in words


def run_one(page: Page, command: DocCommand, code: str, kafka_lib: Path) -> str:
    words = shlex.split(code)
    if re.fullmatch(r"kafka-[a-z-]+\.sh", words[0]):
        main_class = tool_classes()[words[0]]
        done = kafka_tool(kafka_lib, main_class, *words[1:])
        out = done.stdout + done.stderr
        assert done.returncode == 0, f"{command}\nran {main_class} {shlex.join(words[1:])}\nexit {done.returncode}:\n{out}"
        return out
    done = subprocess.run(["bash", "-c", code], cwd=page.workdir, env=page.env(), capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, stdin=subprocess.DEVNULL)
    out = done.stdout + done.stderr
    assert done.returncode == 0, f"{command}\nran: {code}\nexit {done.returncode}:\n{out}"
    return out


def make_recipe(page: Page, code: str) -> str:
    """The recipe of a make target, prerequisites taken as made (the virtualenv is installed)."""
    words = shlex.split(code)
    done = subprocess.run(["make", "-s", "-n", "-o", ".venv/.installed", *words[1:]], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, f"make -n {shlex.join(words[1:])}: {done.stderr}"
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, f"{code}: a recipe of one line expected, got {lines}"
    return lines[0]


def start_background(page: Page, command: DocCommand, code: str) -> str:
    """Start a command that keeps running; return once it answers, with what it printed so far."""
    words = shlex.split(code)
    if words[:2] == ["make", "run"]:
        port = free_port()
        page.ports[9092] = port
        code = make_recipe(page, code) + f" --override listeners=PLAINTEXT://127.0.0.1:{port}"
        ready: Callable[[], object] = lambda: brokers(port) >= 1  # noqa: E731
    elif words[:2] == ["make", "cluster"]:
        port, controller_port, console_port = consecutive_free_ports(3), consecutive_free_ports(3), free_port()
        page.ports.update({9092 + i: port + i for i in range(3)})
        page.ports[8080] = console_port
        recipe = make_recipe(page, code)
        assert "--console-port 8080" in recipe, recipe
        code = recipe.replace("--console-port 8080", f"--console-port {console_port}") + f" --port {port} --controller-port {controller_port}"
        ready = lambda: brokers(port) >= 3 and http_ok(console_port)  # noqa: E731
    elif words[:2] == ["kbroker", "console"]:
        console_port = int(words[words.index("--port") + 1])
        ready = lambda: http_ok(console_port)  # noqa: E731
    else:  # kbroker consume, following the log: answers when it has printed a record
        ready = None
    log = page.workdir / f"background-{command.line}.log"
    proc = subprocess.Popen(
        ["bash", "-c", code], cwd=page.workdir, env=page.env(), stdin=subprocess.DEVNULL,
        stdout=open(log, "w"), stderr=subprocess.STDOUT, text=True, start_new_session=True,
        preexec_fn=default_sigint,
    )  # fmt: skip
    page.background.append((command, proc, log))

    def answers_or_exited() -> bool:
        if proc.poll() is not None:
            return True
        if ready is None:
            return bool(log.read_text().strip())
        return bool(ready())

    try:
        wait_until(f"{command} to answer (ran: {code})", answers_or_exited, READY_TIMEOUT_S, interval_s=0.25)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{log.read_text()[-3000:]}") from None
    assert proc.poll() is None, f"{command}\nran: {code}\nexited {proc.returncode}:\n{log.read_text()[-3000:]}"
    # make run: "data in ./data"; make cluster: "data under ./cluster/".
    for target, data in (("run", "data"), ("cluster", "cluster")):
        if words[:2] == ["make", target]:
            assert (page.workdir / data).is_dir(), f"{command}: no ./{data} in {page.workdir}"
    return log.read_text()


def default_sigint() -> None:
    """Ctrl-C's default in the command: a suite started in the background (``cmd &``, as CI may
    run it) inherits SIGINT ignored, and Python keeps an ignored SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def stop_background(page: Page) -> None:
    """Ctrl-C each background command, newest first: each must exit 0."""
    problems = []
    while page.background:
        command, proc, log = page.background.pop()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole foreground group
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
                problems.append(f"{command}: still running {STOP_TIMEOUT_S}s after Ctrl-C:\n{log.read_text()[-3000:]}")
                continue
        if proc.returncode != 0:
            problems.append(f"{command}: exit {proc.returncode} after Ctrl-C:\n{log.read_text()[-3000:]}")
    assert not problems, "\n".join(problems)


def brokers(port: int) -> int:
    return len(AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", "log_level": 0}).list_topics(timeout=5).brokers)


def http_ok(port: int) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as answer:
        return bool(answer.status == 200)


# What a page shows a command prints (its comment, or the prose around it), in substance.
EXPECTED: dict[tuple[str, str], list[str]] = {
    ("README.md", "kbroker topics create orders"): [r"Created topic orders\."],
    ("README.md", "kbroker consume orders"): [r"^k1\thello$", r"^k2\tworld$"],
    ("README.md", "kbroker topics describe orders"): [r"Topic: orders\s.*PartitionCount: 6"],
    ("README.md", "make cluster"): [r"console: http://127\.0\.0\.1:\d+/"],
    # leader, replicas and ISR per partition
    ("README.md", "kbroker topics describe payments"): [r"Partition: 0\s+Leader: \d\s+Replicas: \d,\d,\d\s+Isr: \d,\d,\d"],
    ("README.md", "kbroker consume payments"): [r"^a$", r"^b$", r"^c$"],
    ("README.md", "kbroker metadata-quorum"): [r"LeaderId:\s+\d", r"CurrentVoters:"],
    ("docs/operations/command-line.md", "kbroker topics list"): [r"^orders$"],
    ("docs/operations/command-line.md", "kbroker topics describe orders"): [r"PartitionCount: 6", r"retention\.ms=86400000"],
    ("docs/operations/command-line.md", "kbroker configs describe"): [r"retention\.ms=86400000"],
    ("docs/operations/command-line.md", "kbroker consume orders --from-beginning"): [r"^k1\thello$", r"^k2\tworld$"],
    ("docs/operations/command-line.md", "kbroker consume orders --partition 0 --offset 42"): [r"\Arecord-42\nrecord-43\n"],
    ("docs/operations/command-line.md", "kbroker groups list"): [r"^billing$"],
    ("docs/operations/command-line.md", "kbroker groups describe --group billing"): [
        r"GROUP\s+TOPIC\s+PARTITION\s+CURRENT-OFFSET\s+LOG-END-OFFSET\s+LAG\s+CONSUMER-ID\s+HOST\s+CLIENT-ID",
        r"billing\s+orders\s+0\s",
    ],
    ("docs/operations/command-line.md", "kbroker groups describe --all-groups"): [r"billing"],
    # dry run: prints the plan
    ("docs/operations/command-line.md", "kbroker groups reset-offsets --group billing --topic"): [r"billing\s+orders\s+0\s+42", r"billing\s+orders\s+1\s+\d+"],
    ("docs/operations/command-line.md", "kbroker groups delete"): [r"billing"],
    ("docs/operations/kafka-tools.md", "python -m benchmarks.apache_kafka fetch"): [r"\.cache/kbroker-bench/kafka-4\.4\.0/lib"],
    ("docs/operations/kafka-tools.md", "kafka-configs.sh --bootstrap-server 127.0.0.1:9092 --entity-type brokers"): [r"Dynamic configs for broker 1 are:"],
    ("docs/operations/kafka-tools.md", "kafka-configs.sh --bootstrap-server 127.0.0.1:9092 --entity-type topics"): [r"Completed updating config for topic orders\."],
    ("docs/operations/kafka-tools.md", "java -cp"): [r"Dynamic configs for broker 1 are:"],
    ("docs/configuration.md", "kafka-configs.sh --bootstrap-server 127.0.0.1:9092 --entity-type broker-loggers --entity-name 1 --describe"): [r"broker\.replica_manager="],
    ("docs/configuration.md", "kafka-configs.sh --bootstrap-server 127.0.0.1:9092 --entity-type broker-loggers --entity-name 1 --alter"): [r"Completed updating config for broker-logger 1\."],
    ("docs/configuration.md", "kafka-configs.sh --bootstrap-server 127.0.0.1:9092 --entity-type groups --entity-name orders --alter"): [r"Completed updating config for group orders\."],
    # "the group's value with source DYNAMIC_GROUP_CONFIG"; with --all, every config of the group.
    ("docs/configuration.md", "kafka-configs.sh --bootstrap-server 127.0.0.1:9092 --entity-type groups --entity-name orders --describe"): [
        r"^Dynamic configs for group orders are:",
        r"consumer\.session\.timeout\.ms=50000 .*DYNAMIC_GROUP_CONFIG:consumer\.session\.timeout\.ms=50000",
        r"consumer\.heartbeat\.interval\.ms=6000 .*DYNAMIC_GROUP_CONFIG:consumer\.heartbeat\.interval\.ms=6000",
        r"^All configs for group orders are:",
    ],
    # "print Kafka 4.4's lines, in feature-name order, levels as numbers: `metadata.version was upgraded to 33.`"
    ("docs/operations/upgrades.md", "kbroker features --bootstrap-server HOST:9092 upgrade --metadata 4.4"): [r"^metadata\.version was upgraded to 33\.$"],
    ("docs/operations/upgrades.md", "kbroker features --bootstrap-server HOST:9092 upgrade --feature eligible"): [r"^eligible\.leader\.replicas\.version was upgraded to 1\.$"],
    ("docs/operations/upgrades.md", "kbroker features --bootstrap-server HOST:9092 upgrade --feature group"): [r"^group\.version was upgraded to 1\.$"],
    ("docs/operations/upgrades.md", "kafka-features.sh --bootstrap-server HOST:9092 upgrade --metadata 4.4"): [r"^metadata\.version was upgraded to 33\.$"],
    ("docs/operations/upgrades.md", "kafka-features.sh --bootstrap-server HOST:9092 upgrade --feature"): [
        r"^eligible\.leader\.replicas\.version was upgraded to 1\.\nmetadata\.version was upgraded to 33\.$",
    ],
    ("docs/security.md", "kbroker storage format"): [r"^Formatting metadata directory \S+ with cluster\.id \S+\.$"],
    ("docs/security.md", "kafka-acls.sh"): [r"User:alice.*operation=READ.*permissionType=ALLOW"],
}


def expectations(command: DocCommand) -> list[str]:
    found: list[str] = []
    for (page, prefix), patterns in EXPECTED.items():
        if command.page == page and starts(command, prefix):
            found += patterns
    return found


def run_page(page: Page, kafka_lib: Path, prepare: dict[str, Callable[[Page], None]] | None = None) -> None:
    """Run the page's commands in order (``prepare[prefix]`` first where given), then stop what
    still runs in the background."""
    prepare = prepare or {}
    try:
        for command in to_run(page.name):
            for prefix, step in prepare.items():
                if starts(command, prefix):
                    step(page)
            outputs = []
            for code in page.variants(command):
                words = shlex.split(code.split(" | ")[-1])
                if long_running(code):
                    if words[:2] in (["make", "run"], ["make", "cluster"]):
                        stop_background(page)  # "Stop `make run` first"
                    outputs.append(start_background(page, command, code))
                else:
                    outputs.append(run_one(page, command, code, kafka_lib))
            out = "\n".join(outputs)
            for pattern in expectations(command):
                assert re.search(pattern, out, re.M), f"{command}: its output does not show /{pattern}/:\n{out}"
            page.ran.append(command)
            page.outputs[command.line] = out
            with open(page.workdir / "outputs.txt", "a") as f:
                f.write(f"$ {command}\n{out}\n")
        stop_background(page)
    finally:
        for _, proc, _ in page.background:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
    assert page.ran == to_run(page.name)


# --- Fixtures -----------------------------------------------------------------------------------


def workdir(tmp_path: Path, name: str) -> Path:
    path = tmp_path / re.sub(r"[^A-Za-z0-9]+", "-", name)
    path.mkdir()
    (path / ".venv").symlink_to(VENV)
    return path


@pytest.fixture
def node(tmp_path: Path) -> Iterator[BrokerProcess]:
    """One zero-config node, as `make run` starts it."""
    b = BrokerProcess(tmp_path / "node" / "data").start()
    yield b
    retire(b)


# --- One test per page ------------------------------------------------------------------------


def test_readme(tmp_path: Path, kafka_lib: Path) -> None:
    page = Page("README.md", workdir(tmp_path, "README.md"))
    run_page(page, kafka_lib)


def commit_group_offsets(bootstrap: str) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "billing", "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition("orders", p, 1) for p in range(2)], asynchronous=False)
    finally:
        consumer.close()


def test_command_line(tmp_path: Path, kafka_lib: Path, node: BrokerProcess) -> None:
    page = Page("docs/operations/command-line.md", workdir(tmp_path, "command-line"), ports={9092: node.port})
    bootstrap = node.bootstrap

    def records_in_partition_0(page: Page) -> None:
        # "--offset 42": a partition holding more than 42 records.
        lines = "".join(f"record-{i}\n" for i in range(50))
        subprocess.run(["bash", "-c", f"kbroker produce orders --partition 0 --bootstrap-server {bootstrap}"], input=lines, env=page.env(), check=True, text=True, timeout=COMMAND_TIMEOUT_S)

    def topic_orders_again(page: Page) -> None:
        # The block's `topics delete orders` comes before the commands on `orders` that follow it:
        # the topic again, as the block's first line made it.
        first = to_run(page.name)[0]
        assert starts(first, "kbroker topics create orders"), first
        created = lambda: subprocess.run(["bash", "-c", page.variants(first)[0]], env=page.env(), capture_output=True, timeout=COMMAND_TIMEOUT_S).returncode == 0  # noqa: E731
        wait_until("topic orders created again after its deletion", created, COMMAND_TIMEOUT_S, interval_s=0.5)

    def reassignment_plan(page: Page) -> None:
        (page.workdir / "plan.json").write_text('{"version": 1, "partitions": [{"topic": "orders", "partition": 0, "replicas": [1]}]}\n')

    run_page(page, kafka_lib, prepare={
        "kbroker configs describe": topic_orders_again,
        "kbroker consume orders --partition 0 --offset 42": records_in_partition_0,
        "kbroker reassign-partitions": reassignment_plan,
        "kbroker groups list": lambda page: commit_group_offsets(bootstrap),
    })  # fmt: skip


def test_kafka_tools(tmp_path: Path, kafka_lib: Path, node: BrokerProcess) -> None:
    page = Page("docs/operations/kafka-tools.md", workdir(tmp_path, "kafka-tools"), ports={9092: node.port})

    def topic_orders(page: Page) -> None:
        subprocess.run(["bash", "-c", f"kbroker topics create orders --bootstrap-server {node.bootstrap}"], env=page.env(), check=True, timeout=COMMAND_TIMEOUT_S)

    run_page(page, kafka_lib, prepare={"kafka-configs.sh --bootstrap-server 127.0.0.1:9092 --entity-type topics": topic_orders})


def test_configuration(tmp_path: Path, kafka_lib: Path, node: BrokerProcess) -> None:
    run_page(Page("docs/configuration.md", workdir(tmp_path, "configuration"), ports={9092: node.port}), kafka_lib)


def test_console(tmp_path: Path, kafka_lib: Path, node: BrokerProcess) -> None:
    # The page's two addresses are a cluster's; here both are the one node's.
    page = Page("docs/console.md", workdir(tmp_path, "console"), ports={9092: node.port, 9093: node.port, 8080: free_port()})
    page.placeholders["--port 8080"] = f"--port {page.ports[8080]}"  # the page's console port is ours too
    run_page(page, kafka_lib)


def test_upgrades(tmp_path: Path, kafka_lib: Path, node: BrokerProcess) -> None:
    run_page(Page("docs/operations/upgrades.md", workdir(tmp_path, "upgrades"), ports={9092: node.port}), kafka_lib)


def authorizer_properties() -> str:
    """docs/security.md's properties block that turns the authorizer on."""
    _, blocks = split_fences((ROOT / "docs" / "security.md").read_text())
    for info, _, lines in blocks:
        if info == "properties" and any(line.startswith("authorizer.class.name=") for line in lines):
            return "\n".join(lines) + "\n"
    raise AssertionError("docs/security.md shows no authorizer properties")


def test_security(tmp_path: Path, kafka_lib: Path) -> None:
    page = Page("docs/security.md", workdir(tmp_path, "security"))
    port, controller_port = free_ports(2)
    page.ports[9092] = port
    cluster_id = subprocess.run([str(VENV / "bin" / "kbroker"), "storage", "random-uuid"], capture_output=True, text=True, check=True, timeout=COMMAND_TIMEOUT_S).stdout.strip()
    page.placeholders["<cluster id>"] = cluster_id
    node = BrokerProcess(page.workdir / "data")
    node.port = port
    # The node's server.properties, with the page's authorizer block.
    (page.workdir / "server.properties").write_text(
        "process.roles=broker,controller\nnode.id=1\n"
        f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}\n"
        "controller.listener.names=CONTROLLER\n"
        f"controller.quorum.voters=1@127.0.0.1:{controller_port}\n"
        f"log.dirs={node.data_dir}\n" + authorizer_properties()
    )
    node.config_file = page.workdir / "server.properties"

    def start_the_node(page: Page) -> None:
        node.start()
        # The node runs on the storage the page's `storage format` wrote.
        assert node.events_named("broker.started")[-1]["cluster_id"] == cluster_id

    try:
        run_page(page, kafka_lib, prepare={"kafka-acls.sh": start_the_node})
    finally:
        retire(node)


PAGE_TESTS = {
    "README.md": test_readme,
    "docs/operations/command-line.md": test_command_line,
    "docs/operations/kafka-tools.md": test_kafka_tools,
    "docs/configuration.md": test_configuration,
    "docs/console.md": test_console,
    "docs/operations/upgrades.md": test_upgrades,
    "docs/security.md": test_security,
}


# --- Every command run or excluded --------------------------------------------------------------


def test_every_command_is_run_or_excluded() -> None:
    problems = []
    for command in DOC_COMMANDS:
        if exclusion(command) is None and command.page not in PAGE_TESTS:
            problems.append(f"{command}: neither run (no test for {command.page} here) nor in EXCLUDED")
    for (page, prefix), reason in EXCLUDED.items():
        if not reason.strip():
            problems.append(f"EXCLUDED[{page!r}, {prefix!r}] gives no reason")
        if not any(c.page == page and starts(c, prefix) for c in DOC_COMMANDS):
            problems.append(f"EXCLUDED[{page!r}, {prefix!r}] matches no command of the documents any more")
    for page in PAGE_TESTS:
        if not to_run(page):
            problems.append(f"{page} has a test here but no command left to run")
    for page, prefix in EXPECTED:
        if not any(c.page == page and starts(c, prefix) for c in to_run(page)):
            problems.append(f"EXPECTED[{page!r}, {prefix!r}] matches no command that is run")
    # "the same command is run for ...": it is.
    for (page, prefix), reason in EXCLUDED.items():
        m = re.match(r"the same command is run for (\S+)", reason)
        if m and not any(starts(c, prefix) for c in to_run(m.group(1).rstrip("."))):
            problems.append(f"EXCLUDED[{page!r}, {prefix!r}]: {m.group(1)} runs no such command")
    assert not problems, "\n".join(problems)
