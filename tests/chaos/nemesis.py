"""The nemesis: faults over a KafkaCluster, each recorded in the History as ``start-<kind>`` and
``stop-<kind>`` info operations of process ``nemesis`` whose value names the nodes or links hit.

A fault's ``start`` does the damage and ``stop`` undoes it; between the two the campaign holds the
fault for ``hold_s`` (longer than broker.session.timeout.ms where the fault is meant to get a node
fenced or a leader moved). ``victims`` are the nodes it makes faulty: a mixed window adds a second
fault on one of them, so the window never has more faulty nodes than one fault alone, which is
what RF=3 with min.insync.replicas=2 promises to survive.

Every node has its successor's interpreter started ahead (tests/cluster/warm_start.py): ``recover``
starts one for each node once the nodes are up, so it has imported the broker by the next fault
and a restart costs the broker's own start-up, not Python's. Started only when a fault stopped a
node, the import (1-2 s of wall time on a busy 2-core machine, more than a kill's or a restart's
hold) was still running when the node was started again, and every restart waited for it.
"""

from __future__ import annotations

import os
import random
import signal
from dataclasses import dataclass, field
from typing import Any, Callable

from tests.chaos.history import NEMESIS, History
from tests.chaos.log_dir_fault import FullDisk
from tests.chaos.probes import active_controller, admin, partition_states
from tests.chaos.kafka_bench import ChaosCluster
from tests.cluster.cluster import wait_until

RECOVERY_TIMEOUT_S = 120.0
# A restart replays its logs and the metadata log: on a saturated machine, late in a long
# campaign, that took over a minute once (the harness's 60 s default then killed the node and
# ended the campaign). The bench waits, as an operator would; a node that never starts still fails it.
START_TIMEOUT_S = 300.0
# A Metadata request to one broker: polled this often, a full ISR is seen within a tenth of a
# second of it, in every one of the campaign's hundred or so recoveries.
ISR_POLL_S = 0.1


@dataclass
class Env:
    """What every fault acts on."""

    cluster: ChaosCluster
    history: History
    topics: dict[str, int]  # the workload partitions: topic -> partition count
    rng: random.Random
    session_s: float  # broker.session.timeout.ms
    pause_s: float  # how long a node stays stopped: past the broker's and the group members' sessions
    disk: FullDisk | None = None  # mounted at disk_node's log dir, if the machine allowed it
    disk_node: int | None = None

    def start(self, kind: str, value: Any) -> None:
        self.history.info(NEMESIS, f"start-{kind}", value)

    def stop(self, kind: str, value: Any) -> None:
        self.history.info(NEMESIS, f"stop-{kind}", value)

    def nodes(self) -> list[int]:
        return sorted(self.cluster.nodes)

    def leader_of_a_partition(self) -> tuple[str, int, int]:
        """A random workload partition and its leader."""
        states = partition_states(admin(self.cluster.bootstrap), self.topics)
        (topic, p), (leader, _, _) = self.rng.choice(sorted((tp, s) for tp, s in states.items() if s[0] >= 0))
        return topic, p, leader


@dataclass
class Fault:
    kind: str = ""
    victims: set[int] = field(default_factory=set)
    value: dict[str, Any] = field(default_factory=dict)

    def hold_s(self, env: Env) -> float:
        # Past the broker session: the victim is fenced and its leaderships move before it returns.
        return env.session_s + 0.5

    def start(self, env: Env, among: set[int] | None) -> None:
        """Do the damage, to one of ``among`` if given (the first fault's victims in a mixed window)."""
        raise NotImplementedError

    def stop(self, env: Env) -> None:
        raise NotImplementedError


def relaunch(env: Env, node_id: int) -> None:
    """Start a dead node again, not waiting for it: in a mixed window it may still be cut off
    from the quorum it needs to finish starting. ``recover`` waits for every node."""
    node = env.cluster.nodes[node_id]
    if not node.running:
        node.launch()


class Kill(Fault):
    """SIGKILL of one node: kill-random, kill-leader (of a workload partition), kill-controller."""

    def start(self, env: Env, among: set[int] | None) -> None:
        if among is not None or self.kind == "kill-random":
            node = env.rng.choice(sorted(among if among is not None else env.nodes()))
            self.value = {"node": node}
        elif self.kind == "kill-leader":
            topic, p, node = env.leader_of_a_partition()
            self.value = {"node": node, "topic": topic, "partition": p}
        else:
            node = wait_until("an active controller", lambda: active_controller(env.cluster), RECOVERY_TIMEOUT_S)
            self.value = {"node": node}
        self.victims = {node}
        env.cluster.nodes[node].warm_up()
        env.cluster.nodes[node].kill()
        env.start(self.kind, self.value)

    def stop(self, env: Env) -> None:
        relaunch(env, self.value["node"])
        env.stop(self.kind, self.value)


class Pause(Fault):
    """SIGSTOP of one node, SIGCONT once it has been silent longer than its broker session."""

    def __init__(self) -> None:
        super().__init__("pause")

    def hold_s(self, env: Env) -> float:
        return env.pause_s

    def start(self, env: Env, among: set[int] | None) -> None:
        node = env.rng.choice(sorted(among if among is not None else env.nodes()))
        self.victims, self.value = {node}, {"node": node}
        self._signal(env, node, signal.SIGSTOP)
        env.start(self.kind, self.value)

    def stop(self, env: Env) -> None:
        self._signal(env, self.value["node"], signal.SIGCONT)
        env.stop(self.kind, self.value)

    @staticmethod
    def _signal(env: Env, node_id: int, sig: signal.Signals) -> None:
        proc = env.cluster.nodes[node_id].proc
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, sig)


class Partition(Fault):
    """A network partition over the proxied links (controller and inter-broker, both directions):
    partition-leader-isolated, partition-majority-minority, partition-bridge."""

    def hold_s(self, env: Env) -> float:
        return 2 * env.session_s

    def start(self, env: Env, among: set[int] | None) -> None:
        nodes = env.nodes()
        if self.kind == "partition-leader-isolated":
            topic, p, leader = env.leader_of_a_partition()
            env.cluster.isolate(leader)
            self.victims, self.value = {leader}, {"isolated": [leader], "topic": topic, "partition": p}
        elif self.kind == "partition-majority-minority":
            minority = sorted(env.rng.sample(nodes, (len(nodes) - 1) // 2))
            env.cluster.partition(minority)
            self.victims, self.value = set(minority), {"minority": minority, "majority": [n for n in nodes if n not in minority]}
        else:
            shuffled = env.rng.sample(nodes, len(nodes))
            bridge, rest = shuffled[0], shuffled[1:]
            one, other = sorted(rest[: len(rest) // 2]), sorted(rest[len(rest) // 2 :])
            env.cluster.cut_between(one, other)
            self.victims, self.value = {bridge}, {"bridge": bridge, "halves": [one, other]}
        env.start(self.kind, self.value)

    def stop(self, env: Env) -> None:
        env.cluster.heal()
        env.stop(self.kind, self.value)


class Restart(Fault):
    """A clean restart: SIGTERM (a controlled shutdown, which must exit 0), then start again."""

    def __init__(self) -> None:
        super().__init__("restart")

    def hold_s(self, env: Env) -> float:
        return 0.5

    def start(self, env: Env, among: set[int] | None) -> None:
        node = env.rng.choice(sorted(among if among is not None else env.nodes()))
        self.victims, self.value = {node}, {"node": node}
        env.start(self.kind, self.value)
        env.cluster.nodes[node].warm_up()
        env.cluster.nodes[node].stop()

    def stop(self, env: Env) -> None:
        relaunch(env, self.value["node"])
        env.stop(self.kind, self.value)


class RollingRestart(Fault):
    """Every node restarted cleanly, one at a time, each once the workload partitions' ISRs are
    full again; all of it inside ``start``."""

    def __init__(self) -> None:
        super().__init__("rolling-restart")

    def hold_s(self, env: Env) -> float:
        return 0.0

    def start(self, env: Env, among: set[int] | None) -> None:
        order = env.rng.sample(env.nodes(), len(env.nodes()))
        self.victims, self.value = set(order), {"order": order}
        env.start(self.kind, self.value)
        for node in order:
            env.cluster.nodes[node].warm_up()
        for node in order:
            env.cluster.nodes[node].stop()
            relaunch(env, node)
            env.cluster.nodes[node].await_started(START_TIMEOUT_S)
            env.cluster.nodes[node].warm_up()
            await_full_isr(env)

    def stop(self, env: Env) -> None:
        env.stop(self.kind, self.value)


class DiskFull(Fault):
    """The log directory of the node mounted on a small tmpfs filled to ENOSPC, then freed. Kafka
    takes a failed log directory offline until the broker restarts, so ``stop`` restarts it."""

    def __init__(self) -> None:
        super().__init__("disk-full")

    def start(self, env: Env, among: set[int] | None) -> None:
        assert env.disk is not None and env.disk_node is not None, "disk-full scheduled without a mounted log dir"
        self.victims, self.value = {env.disk_node}, {"node": env.disk_node}
        env.cluster.nodes[env.disk_node].warm_up()
        env.disk.fill()
        env.start(self.kind, self.value)

    def stop(self, env: Env) -> None:
        assert env.disk is not None and env.disk_node is not None
        env.disk.free()
        env.cluster.nodes[env.disk_node].kill()
        relaunch(env, env.disk_node)
        env.stop(self.kind, self.value)


FAULTS: dict[str, Callable[[], Fault]] = {
    "kill-random": lambda: Kill("kill-random"),
    "kill-leader": lambda: Kill("kill-leader"),
    "kill-controller": lambda: Kill("kill-controller"),
    "pause": Pause,
    "partition-leader-isolated": lambda: Partition("partition-leader-isolated"),
    "partition-majority-minority": lambda: Partition("partition-majority-minority"),
    "partition-bridge": lambda: Partition("partition-bridge"),
    "restart": Restart,
    "rolling-restart": RollingRestart,
    "disk-full": DiskFull,
}
KINDS = tuple(FAULTS)
# The second fault of a mixed window, by the first's kind: it hits one of the first's victims,
# which must still be running for it.
MIXES: dict[str, tuple[str, ...]] = {
    "partition-leader-isolated": ("kill-random", "pause", "restart"),
    "partition-majority-minority": ("kill-random", "pause", "restart"),
    "partition-bridge": ("kill-random", "pause", "restart"),
    "pause": ("kill-random",),
    "disk-full": ("kill-random", "pause"),
}


def schedule(rng: random.Random, kinds: tuple[str, ...], per_kind: int, mixed: float) -> list[tuple[str, ...]]:
    """Fault windows holding ``per_kind`` faults of each kind in a seeded random order; about
    ``mixed`` of the windows that can take a second, overlapping fault get one."""
    pending = [k for k in kinds for _ in range(per_kind)]
    rng.shuffle(pending)
    windows: list[tuple[str, ...]] = []
    while pending:
        first = pending.pop(0)
        second = next((k for k in pending if k in MIXES.get(first, ())), None)
        if second is not None and rng.random() < mixed:
            pending.remove(second)
            windows.append((first, second))
        else:
            windows.append((first,))
    return windows


def await_full_isr(env: Env) -> None:
    """Until every workload partition has a leader and all its replicas in the ISR."""
    client = admin(",".join(b.bootstrap for b in env.cluster.brokers))

    def full() -> bool:
        states = partition_states(client, env.topics)
        return len(states) == sum(env.topics.values()) and all(leader >= 0 and isr == replicas for leader, isr, replicas in states.values())

    wait_until("every workload partition's ISR full", full, RECOVERY_TIMEOUT_S, interval_s=ISR_POLL_S)


def recover(env: Env, after: tuple[str, ...] = (), warm_up: bool = True) -> None:
    """Heal every link, resume every paused node, start every dead one, and wait for every node
    to have started and every workload partition's ISR to be full. ``after``: the window's kinds,
    recorded with any node found to have exited by itself. ``warm_up``: start the nodes' next
    interpreters, for the faults to come."""
    env.cluster.heal()
    for node in env.cluster.nodes.values():
        if node.running and node.proc is not None:
            os.kill(node.proc.pid, signal.SIGCONT)
    for node in env.cluster.nodes.values():
        if not node.running:
            # Every fault that stops a node starts it again: this one exited by itself.
            assert node.proc is not None
            env.history.info(NEMESIS, "crashed", {"node": node.node_id, "exit": node.proc.returncode, "after": list(after)})
            node.launch()
    for node in env.cluster.nodes.values():
        node.await_started(START_TIMEOUT_S)
    if warm_up:
        warm_up_every_node(env)
    await_full_isr(env)


def warm_up_every_node(env: Env) -> None:
    """Start the next interpreter of every node that has none (a restart used it): it imports the
    broker while the cluster recovers, before a fault needs it."""
    for node in env.cluster.nodes.values():
        node.warm_up()


def crash_all(env: Env) -> None:
    """Every node killed at once (SIGKILL) and started again, as after a power cut that spared
    the page cache: what each node recovers from its own log must still hold every
    acknowledged record."""
    value = {"nodes": env.nodes()}
    for node in env.cluster.nodes.values():
        node.warm_up()
    env.start("crash-all", value)
    for node in env.cluster.nodes.values():
        node.kill()
    for node in env.cluster.nodes.values():
        node.launch()
    env.stop("crash-all", value)
    # The drain comes next, no fault: no node restarts again.
    recover(env, warm_up=False)


def run_window(env: Env, kinds: tuple[str, ...], sleep: Callable[[float], None]) -> list[Fault]:
    """Start the window's faults (the second on one of the first's victims), hold them, and stop
    the ones that started, in reverse order, whatever happened."""
    started: list[Fault] = []
    try:
        for kind in kinds:
            fault = FAULTS[kind]()
            among = started[0].victims if started else None
            fault.start(env, among)
            started.append(fault)
        sleep(max(f.hold_s(env) for f in started))
    finally:
        for fault in reversed(started):
            fault.stop(env)
    return started
