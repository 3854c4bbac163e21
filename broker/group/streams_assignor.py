"""Kafka 4.4's StickyTaskAssignor ("sticky"), the streams group's task assignor (KIP-1071), sans-IO.

Tasks are (subtopology, partition) pairs. Active tasks go first:
1. back to the member that had them in the previous target, while it is under its quota;
2. then to the least loaded member that had them as standby, or reported offsets for their
   state (a restarted instance rejoins with a new member id but its state on disk);
3. the rest, range-like (by subtopology, then partition), to the least loaded process, and there
   to its least loaded member.
Then ``num_standby_replicas`` standbys of every stateful task, never on a process that holds the
task already: to the previous active owner, the previous standby owners, then the least loaded
processes. A quota (tasks per member, rounded up, recomputed as members fill) keeps the members
balanced; load is a process's task count over its member count.

Kafka breaks ties by the iteration order of its HashMaps (processes by process id, members of a
process by member id) and by its binary heaps; ``_JavaHashMapOrder`` and ``_JavaPriorityQueue``
reproduce both, so the same input gives Kafka's assignment, not just an equally good one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

STICKY_ASSIGNOR_NAME = "sticky"
NUM_STANDBY_REPLICAS_CONFIG = "num.standby.replicas"
# Part of the assignment configs (a change of it is a rebalance); Kafka 4.4's sticky assignor does not read it.
RACK_AWARE_ASSIGNMENT_TAGS_CONFIG = "rack.aware.assignment.tags"

TaskId = tuple[str, int]  # (subtopology id, partition)
Tasks = Mapping[str, frozenset[int]]  # subtopology id -> partitions
T = TypeVar("T")


class TaskAssignorError(Exception):
    """Kafka's TaskAssignorException: no member can take a task."""


@dataclass(frozen=True, slots=True)
class TopologySubtopology:
    """What the assignor knows of a subtopology: its task count (the most partitions of its
    source topics) and whether it has state (changelog topics), which is what gets standbys."""

    num_tasks: int
    stateful: bool


@dataclass(frozen=True, slots=True)
class AssignmentMemberSpec:
    """Kafka's MemberMetadataAndStateImpl: a member's process and its tasks in the previous target
    assignment; ``task_offsets`` are the changelog offset sums the member reported per task."""

    process_id: str
    active_tasks: Tasks = field(default_factory=dict)
    standby_tasks: Tasks = field(default_factory=dict)
    warmup_tasks: Tasks = field(default_factory=dict)
    task_offsets: Mapping[str, Mapping[int, int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MemberAssignment:
    active_tasks: dict[str, frozenset[int]]
    standby_tasks: dict[str, frozenset[int]]


# -- Java's tie-breaking ------------------------------------------------------------------------------


def _java_string_hash(s: str) -> int:
    h = 0
    raw = s.encode("utf-16-be")
    for i in range(0, len(raw), 2):
        h = (31 * h + ((raw[i] << 8) | raw[i + 1])) & 0xFFFFFFFF
    return h


class _JavaHashMapOrder:
    """The iteration order of a java.util.HashMap<String, ?> built by inserting keys in order: by
    bucket of the final table, then by insertion (resizes keep a bucket's relative order). ``put``
    appends to its bucket and doubles the table right after the insertion that passes the
    threshold; ``computeIfAbsent`` (``lazy``) prepends, and resizes only at the start of the next
    call, so its table can end up smaller."""

    def __init__(self, initial_capacity: int | None = None, *, lazy: bool = False) -> None:
        capacity = 16
        if initial_capacity is not None:
            capacity = 1
            while capacity < initial_capacity:
                capacity <<= 1
        self._capacity = capacity
        self._lazy = lazy
        self._keys: dict[str, None] = {}

    def add(self, key: str) -> None:
        if self._lazy and len(self._keys) > int(self._capacity * 0.75):
            self._capacity <<= 1
        if key in self._keys:
            return
        self._keys[key] = None
        if not self._lazy and len(self._keys) > int(self._capacity * 0.75):
            self._capacity <<= 1

    def order(self) -> list[str]:
        mask = self._capacity - 1
        inserted = list(reversed(self._keys)) if self._lazy else list(self._keys)

        def bucket(key: str) -> int:
            h = _java_string_hash(key)
            return (h ^ (h >> 16)) & mask

        return sorted(inserted, key=bucket)  # sorted() is stable


class _JavaPriorityQueue(Generic[T]):
    """java.util.PriorityQueue's binary heap, sift for sift, so that equal elements come out in
    Kafka's order. ``key`` is read at every comparison, as Kafka's comparators read live loads."""

    def __init__(self, key: Callable[[T], float]) -> None:
        self._key = key
        self._heap: list[T] = []

    def __bool__(self) -> bool:
        return bool(self._heap)

    def add(self, item: T) -> None:
        heap, key = self._heap, self._key
        heap.append(item)
        k = len(heap) - 1
        while k > 0:
            parent = (k - 1) >> 1
            if key(item) >= key(heap[parent]):
                break
            heap[k] = heap[parent]
            k = parent
        heap[k] = item

    def poll(self) -> T | None:
        heap, key = self._heap, self._key
        if not heap:
            return None
        result = heap[0]
        last = heap.pop()
        n = len(heap)
        if n:
            k = 0
            half = n >> 1
            while k < half:
                child = 2 * k + 1
                right = child + 1
                if right < n and key(heap[child]) > key(heap[right]):
                    child = right
                if key(last) <= key(heap[child]):
                    break
                heap[k] = heap[child]
                k = child
            heap[k] = last
        return result


# -- the assignor -------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Member:
    process_id: str
    member_id: str


class _ProcessState:
    """Kafka's ProcessState: the tasks given to one process (all its members) so far."""

    def __init__(self, process_id: str) -> None:
        self.process_id = process_id
        self.capacity = 0
        self.load = float("inf")
        self.task_count = 0
        self._member_order = _JavaHashMapOrder()
        self.member_task_counts: dict[str, int] = {}
        self.active: dict[str, set[TaskId]] = {}
        self.standby: dict[str, set[TaskId]] = {}
        self.tasks: set[TaskId] = set()
        self._members_by_load: _JavaPriorityQueue[list[object]] | None = None

    def add_member(self, member_id: str) -> None:
        self._member_order.add(member_id)
        self.member_task_counts[member_id] = 0
        self.capacity += 1
        self._compute_load()

    def _compute_load(self) -> None:
        self.load = -1.0 if self.capacity <= 0 else self.task_count / self.capacity

    def has_task(self, task: TaskId) -> bool:
        return task in self.tasks

    def add_task(self, member_id: str, task: TaskId, active: bool) -> int:
        # A task given to a chosen member invalidates the heap of members; it is rebuilt on demand.
        self._members_by_load = None
        return self._add(member_id, task, active)

    def _add(self, member_id: str, task: TaskId, active: bool) -> int:
        self.task_count += 1
        self.tasks.add(task)
        (self.active if active else self.standby).setdefault(member_id, set()).add(task)
        count = self.member_task_counts[member_id] + 1
        self.member_task_counts[member_id] = count
        self._compute_load()
        return count

    def add_task_to_least_loaded_member(self, task: TaskId, active: bool) -> int:
        if not self.member_task_counts:
            return -1
        order = self._member_order.order()
        if len(order) == 1:
            return self._add(order[0], task, active)
        if self._members_by_load is None:
            self._members_by_load = _JavaPriorityQueue(key=lambda entry: entry[1])  # type: ignore[arg-type,return-value]
            for member_id in order:
                self._members_by_load.add([member_id, self.member_task_counts[member_id]])
        entry = self._members_by_load.poll()
        if entry is None:
            raise TaskAssignorError(f"No members available to assign task {task}")
        count = self._add(str(entry[0]), task, active)
        entry[1] = count
        self._members_by_load.add(entry)
        return count


def _tasks_per_member(tasks: int, members: int) -> int:
    return 0 if members == 0 else -(-tasks // members)


class _LocalState:
    def __init__(self, members: Mapping[str, AssignmentMemberSpec], subtopologies: Mapping[str, TopologySubtopology], num_standby_replicas: int) -> None:
        self.num_standby_replicas = num_standby_replicas
        self.total_active_tasks = sum(s.num_tasks for s in subtopologies.values())
        self.total_tasks = self.total_active_tasks + sum(s.num_tasks * num_standby_replicas for s in subtopologies.values() if s.stateful)
        self.members_with_active_capacity = len(members)
        self.members_with_capacity = len(members)
        self.active_tasks_per_member = _tasks_per_member(self.total_active_tasks, len(members))
        self.total_tasks_per_member = _tasks_per_member(self.total_tasks, len(members))
        self.processes: dict[str, _ProcessState] = {}
        process_order = _JavaHashMapOrder(len(members), lazy=True)  # Kafka's computeIfAbsent
        self.active_prev: dict[TaskId, _Member] = {}
        candidates: dict[TaskId, list[tuple[bool, int, _Member]]] = {}
        for member_id, spec in members.items():
            member = _Member(spec.process_id, member_id)
            process_order.add(spec.process_id)
            self.processes.setdefault(spec.process_id, _ProcessState(spec.process_id)).add_member(member_id)
            for subtopology, partitions in spec.active_tasks.items():
                for partition in partitions:
                    self.active_prev[(subtopology, partition)] = member
            for subtopology, partitions in spec.standby_tasks.items():
                for partition in partitions:
                    offset = spec.task_offsets.get(subtopology, {}).get(partition, 0)
                    candidates.setdefault((subtopology, partition), []).append((True, offset, member))
            for subtopology, offsets in spec.task_offsets.items():
                for partition, offset in offsets.items():
                    if partition in spec.standby_tasks.get(subtopology, frozenset()):
                        continue
                    candidates.setdefault((subtopology, partition), []).append((False, offset, member))
        # Kafka's order: previous standbys before members known only by their offsets, most caught up first.
        self.standby_prev: dict[TaskId, list[_Member]] = {
            task: [member for _, _, member in sorted(found, key=lambda c: (not c[0], -c[1]))] for task, found in candidates.items()
        }
        self.process_order = [self.processes[p] for p in process_order.order()]

    def on_active(self, count: int) -> None:
        if count == self.active_tasks_per_member:
            self.members_with_active_capacity -= 1
            self.total_active_tasks -= count
            self.active_tasks_per_member = _tasks_per_member(self.total_active_tasks, self.members_with_active_capacity)

    def on_task(self, count: int) -> None:
        if count == self.total_tasks_per_member:
            self.members_with_capacity -= 1
            self.total_tasks -= count
            self.total_tasks_per_member = _tasks_per_member(self.total_tasks, self.members_with_capacity)

    def processes_by_load(self) -> _JavaPriorityQueue[_ProcessState]:
        queue: _JavaPriorityQueue[_ProcessState] = _JavaPriorityQueue(key=lambda p: p.load)
        for process in self.process_order:
            queue.add(process)
        return queue

    def least_loaded_prev_member(self, members: list[_Member] | None, standby_task: TaskId | None) -> _Member | None:
        """Kafka's findPrevMemberWithLeastLoad: the first candidate, replaced only by one whose
        process and member are both less loaded."""
        candidate = None
        process_load = member_load = float("inf")
        for member in members or ():
            process = self.processes[member.process_id]
            if standby_task is not None and process.has_task(standby_task):
                continue
            load, own = process.load, process.member_task_counts[member.member_id]
            if candidate is None or (load < process_load and own < member_load):
                candidate, process_load, member_load = member, load, own
        return candidate


def assign(members: Mapping[str, AssignmentMemberSpec], subtopologies: Mapping[str, TopologySubtopology], num_standby_replicas: int = 0) -> dict[str, MemberAssignment]:
    """The target assignment of every member in ``members`` (in the order Kafka's GroupSpec lists them)."""
    state = _LocalState(members, subtopologies, num_standby_replicas)
    _assign_active(state, [(s, p) for s, info in subtopologies.items() for p in range(info.num_tasks)])
    if num_standby_replicas > 0:
        _assign_standby(state, [(s, p) for s, info in subtopologies.items() if info.stateful for p in range(info.num_tasks)])
    active: dict[str, set[TaskId]] = {}
    standby: dict[str, set[TaskId]] = {}
    for process in state.processes.values():
        for member_id, tasks in process.active.items():
            active.setdefault(member_id, set()).update(tasks)
        for member_id, tasks in process.standby.items():
            standby.setdefault(member_id, set()).update(tasks)
    return {member_id: MemberAssignment(_compacted(active.get(member_id, ())), _compacted(standby.get(member_id, ()))) for member_id in members}


def _compacted(tasks: Iterable[TaskId]) -> dict[str, frozenset[int]]:
    by_subtopology: dict[str, set[int]] = {}
    for subtopology, partition in tasks:
        by_subtopology.setdefault(subtopology, set()).add(partition)
    return {s: frozenset(ps) for s, ps in by_subtopology.items()}


def _assign_active(state: _LocalState, tasks: list[TaskId]) -> None:
    # Range-like previous assignments pair equal partitions: by partition first.
    tasks.sort(key=lambda t: (t[1], t[0]))
    remaining = []
    for task in tasks:
        prev = state.active_prev.get(task)
        if prev is not None and _give_active(state, prev, task):
            continue
        remaining.append(task)
    tasks, remaining = remaining, []
    for task in tasks:
        prev = state.least_loaded_prev_member(state.standby_prev.get(task), None)
        if prev is not None and _give_active(state, prev, task):
            continue
        remaining.append(task)
    # What is left goes out range-like: by subtopology, then partition.
    remaining.sort()
    queue = state.processes_by_load()
    for task in remaining:
        process = queue.poll()
        if process is None:
            raise TaskAssignorError(f"No process available to assign active task {task}.")
        count = process.add_task_to_least_loaded_member(task, True)
        if count == -1:
            raise TaskAssignorError(f"No member available to assign active task {task}.")
        state.on_active(count)
        state.on_task(count)
        queue.add(process)


def _give_active(state: _LocalState, member: _Member, task: TaskId) -> bool:
    process = state.processes[member.process_id]
    if process.member_task_counts[member.member_id] >= state.active_tasks_per_member:
        return False
    count = process.add_task(member.member_id, task, True)
    state.on_active(count)
    state.on_task(count)
    return True


def _assign_standby(state: _LocalState, tasks: list[TaskId]) -> None:
    to_least_loaded: list[tuple[TaskId, int]] = []
    tasks.sort(key=lambda t: (t[1], t[0]), reverse=True)
    for task in tasks:
        for i in range(state.num_standby_replicas):
            prev_active = state.active_prev.get(task)
            if prev_active is not None:
                process = state.processes[prev_active.process_id]
                if not process.has_task(task) and process.member_task_counts[prev_active.member_id] < state.total_tasks_per_member:
                    state.on_task(process.add_task(prev_active.member_id, task, False))
                    continue
            prev_standby = state.least_loaded_prev_member(state.standby_prev.get(task), task)
            if prev_standby is not None:
                process = state.processes[prev_standby.process_id]
                if process.member_task_counts[prev_standby.member_id] < state.total_tasks_per_member:
                    state.on_task(process.add_task(prev_standby.member_id, task, False))
                    continue
            to_least_loaded.append((task, state.num_standby_replicas - i))
            break
    to_least_loaded.sort(key=lambda x: x[0], reverse=True)
    queue = state.processes_by_load()
    for task, replicas in to_least_loaded:
        for _ in range(replicas):
            # Not enough processes without the task: fewer standbys than asked, as Kafka (which logs a warning).
            if not _standby_to_least_loaded(state, queue, task):
                break


def _standby_to_least_loaded(state: _LocalState, queue: _JavaPriorityQueue[_ProcessState], task: TaskId) -> bool:
    process = queue.poll()
    if process is None:
        return False
    found = False
    if not process.has_task(task):
        count = process.add_task_to_least_loaded_member(task, False)
        if count != -1:
            found = True
            state.on_task(count)
    elif queue:
        found = _standby_to_least_loaded(state, queue, task)
    queue.add(process)
    return found
