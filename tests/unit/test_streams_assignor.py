"""The streams group's sticky task assignor against Kafka 4.4's own StickyTaskAssignor.

``test_matches_kafka`` runs seeded random cases through both: ours, and Kafka's class from
kafka-group-coordinator-4.4.0.jar driven by ``KAFKA_HARNESS`` (compiled with javac against the 4.4
jars in ~/.cache/kbroker-bench/kafka-4.4.0/lib; the test skips where there is no JDK or jar).
``test_kafka_ignores_racks_client_tags_and_warmups`` gives Kafka's members rack ids, client tags,
previous warm-up tasks and ``rack.aware.assignment.tags``, which ours never sees: 4.4 places no
standby by rack and hands out no warm-up task (its AssignmentRefiner returns the target it is
given). The property tests check what any assignment must satisfy, whatever the input.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.group.streams_assignor import (
    AssignmentMemberSpec,
    MemberAssignment,
    TopologySubtopology,
    _java_string_hash,
    _JavaHashMapOrder,
    assign,
)

KAFKA_LIB = Path.home() / ".cache/kbroker-bench/kafka-4.4.0/lib"

KAFKA_HARNESS = r"""
import org.apache.kafka.coordinator.group.api.streams.assignor.*;
import org.apache.kafka.coordinator.group.streams.AssignmentRefiner;
import org.apache.kafka.coordinator.group.streams.TasksTuple;
import org.apache.kafka.coordinator.group.streams.assignor.*;
import java.io.*;
import java.util.*;

public class StickyHarness {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        int standbys = 0;
        List<String> subs = new ArrayList<>();
        Map<String, Integer> tasks = new HashMap<>();
        Set<String> stateful = new HashSet<>();
        List<String> memberOrder = new ArrayList<>();
        Map<String, String> process = new HashMap<>();
        Map<String, Map<String, Set<Integer>>> active = new HashMap<>(), standby = new HashMap<>();
        Map<String, Map<String, Map<Integer, Long>>> offsets = new HashMap<>();
        Map<String, Map<String, Set<Integer>>> warmup = new HashMap<>();
        Map<String, String> rack = new HashMap<>();
        Map<String, Map<String, String>> clientTags = new HashMap<>();
        List<String> rackAwareTags = new ArrayList<>();
        while ((line = in.readLine()) != null) {
            String[] f = line.trim().split(" ");
            switch (f[0]) {
                case "case":
                    standbys = Integer.parseInt(f[1]);
                    subs.clear(); tasks.clear(); stateful.clear(); memberOrder.clear(); process.clear();
                    active.clear(); standby.clear(); offsets.clear();
                    warmup.clear(); rack.clear(); clientTags.clear(); rackAwareTags.clear();
                    break;
                case "tags":
                    rackAwareTags.addAll(Arrays.asList(f[1].split(",")));
                    break;
                case "rack":
                    rack.put(f[1], f[2]);
                    break;
                case "tag":
                    clientTags.get(f[1]).put(f[2], f[3]);
                    break;
                case "warmup":
                    warmup.get(f[1]).computeIfAbsent(f[2], k -> new HashSet<>()).add(Integer.parseInt(f[3]));
                    break;
                case "refine": {
                    Map<String, TasksTuple> target = Map.of("m", new TasksTuple(Map.of("0", Set.of(1)), Map.of("1", Set.of(0)), Map.of()));
                    System.out.println("result refine " + (AssignmentRefiner.refine(Map.of(), target, Map.of(), null, 2, 10000L) == target));
                    break;
                }
                case "sub":
                    subs.add(f[1]); tasks.put(f[1], Integer.parseInt(f[2]));
                    if (f[3].equals("1")) stateful.add(f[1]);
                    break;
                case "member":
                    memberOrder.add(f[1]); process.put(f[1], f[2]);
                    active.put(f[1], new HashMap<>()); standby.put(f[1], new HashMap<>()); offsets.put(f[1], new HashMap<>());
                    warmup.put(f[1], new HashMap<>()); clientTags.put(f[1], new HashMap<>());
                    break;
                case "active":
                    active.get(f[1]).computeIfAbsent(f[2], k -> new HashSet<>()).add(Integer.parseInt(f[3]));
                    break;
                case "standby":
                    standby.get(f[1]).computeIfAbsent(f[2], k -> new HashSet<>()).add(Integer.parseInt(f[3]));
                    break;
                case "offset":
                    offsets.get(f[1]).computeIfAbsent(f[2], k -> new HashMap<>()).put(Integer.parseInt(f[3]), Long.parseLong(f[4]));
                    break;
                case "end": {
                    Map<String, MemberMetadataAndStateImpl> members = new LinkedHashMap<>();
                    for (String m : memberOrder) {
                        members.put(m, new MemberMetadataAndStateImpl(Optional.empty(), Optional.ofNullable(rack.get(m)), process.get(m), clientTags.get(m),
                            active.get(m), standby.get(m), warmup.get(m), offsets.get(m), Map.of()));
                    }
                    final List<String> subList = new ArrayList<>(subs);
                    final Map<String, Integer> taskCounts = new HashMap<>(tasks);
                    final Set<String> statefulSubs = new HashSet<>(stateful);
                    TopologyDescriber describer = new TopologyDescriber() {
                        public List<String> subtopologies() { return subList; }
                        public int maxNumInputPartitions(String s) { return taskCounts.get(s); }
                        public boolean isStateful(String s) { return statefulSubs.contains(s); }
                    };
                    GroupAssignment result = new StickyTaskAssignor().assign(new GroupSpecImpl(members, new AssignmentConfigsImpl(standbys, rackAwareTags)), describer);
                    StringBuilder out = new StringBuilder("result");
                    for (String m : memberOrder) {
                        MemberAssignment a = result.members().get(m);
                        out.append(" ").append(m).append(" A").append(canonical(a.activeTasks())).append(" S").append(canonical(a.standbyTasks()));
                    }
                    System.out.println(out);
                    break;
                }
            }
        }
    }

    static String canonical(Map<String, Set<Integer>> tasks) {
        List<String> all = new ArrayList<>();
        for (Map.Entry<String, Set<Integer>> e : tasks.entrySet())
            for (int p : e.getValue()) all.add(e.getKey() + ":" + p);
        Collections.sort(all);
        return String.join(",", all);
    }
}
"""


def _canonical(tasks: dict[str, frozenset[int]]) -> str:
    return ",".join(sorted(f"{s}:{p}" for s, ps in tasks.items() for p in ps))


def _result_line(members: dict[str, AssignmentMemberSpec], result: dict[str, MemberAssignment]) -> str:
    return "result " + " ".join(f"{m} A{_canonical(result[m].active_tasks)} S{_canonical(result[m].standby_tasks)}" for m in members)


def _random_case(rng: random.Random, big: bool = False) -> tuple[int, dict[str, TopologySubtopology], dict[str, AssignmentMemberSpec]]:
    """Small cases with short ids, or big ones with ids like Kafka Streams' (process UUIDs, member ids of 22 characters)."""
    if big:
        subtopologies = {str(i): TopologySubtopology(rng.randint(0, 24), rng.random() < 0.6) for i in range(rng.randint(1, 6))}
        processes = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(rng.randint(1, 8))]
        member_ids = [str(uuid.UUID(int=rng.getrandbits(128)))[:22] for _ in range(rng.randint(1, 20))]
    else:
        subtopologies = {str(i): TopologySubtopology(rng.randint(0, 6), rng.random() < 0.6) for i in range(rng.randint(1, 4))}
        processes = [f"process-{i}" for i in range(rng.randint(1, 4))]
        member_ids = [f"member-{rng.getrandbits(32):08x}" for _ in range(rng.randint(1, 7))]
    tasks = [(s, p) for s, info in subtopologies.items() for p in range(info.num_tasks)]
    active: dict[str, dict[str, set[int]]] = {m: {} for m in member_ids}
    standby: dict[str, dict[str, set[int]]] = {m: {} for m in member_ids}
    offsets: dict[str, dict[str, dict[int, int]]] = {m: {} for m in member_ids}
    for s, p in tasks:
        owners = rng.sample(member_ids, k=min(len(member_ids), rng.randint(0, 3)))
        if owners and rng.random() < 0.7:
            active[owners[0]].setdefault(s, set()).add(p)
        for m in owners[1:]:
            standby[m].setdefault(s, set()).add(p)
        if rng.random() < 0.3:
            m = rng.choice(member_ids)
            offsets[m].setdefault(s, {})[p] = rng.randint(0, 1000)
    members = {
        m: AssignmentMemberSpec(
            process_id=rng.choice(processes),
            active_tasks={s: frozenset(ps) for s, ps in active[m].items()},
            standby_tasks={s: frozenset(ps) for s, ps in standby[m].items()},
            task_offsets=offsets[m],
        )
        for m in member_ids
    }
    return rng.randint(0, 3 if big else 2), subtopologies, members


def _case_lines(standbys: int, subtopologies: dict[str, TopologySubtopology], members: dict[str, AssignmentMemberSpec]) -> list[str]:
    lines = [f"case {standbys}"]
    lines += [f"sub {s} {info.num_tasks} {int(info.stateful)}" for s, info in subtopologies.items()]
    for m, spec in members.items():
        lines.append(f"member {m} {spec.process_id}")
        lines += [f"active {m} {s} {p}" for s, ps in spec.active_tasks.items() for p in sorted(ps)]
        lines += [f"standby {m} {s} {p}" for s, ps in spec.standby_tasks.items() for p in sorted(ps)]
        lines += [f"offset {m} {s} {p} {o}" for s, os in spec.task_offsets.items() for p, o in os.items()]
    lines.append("end")
    return lines


def run_kafka_harness(tmp_path: Path, class_name: str, source: str, stdin: str) -> list[str]:
    """Compile ``source`` against Kafka 4.4's jars, feed it ``stdin``, return its "result" lines;
    skips the test where there is no JDK or no jar."""
    if shutil.which("javac") is None or not (KAFKA_LIB / "kafka-group-coordinator-4.4.0.jar").exists():
        pytest.skip("no JDK or no Kafka 4.4 jars")
    (tmp_path / f"{class_name}.java").write_text(source)
    classpath = f"{KAFKA_LIB}/*"
    subprocess.run(["javac", "-cp", classpath, f"{class_name}.java"], cwd=tmp_path, check=True, timeout=120)
    run = subprocess.run(["java", "-cp", f"{classpath}:{tmp_path}", class_name], input=stdin, capture_output=True, text=True, check=True, timeout=120)
    return [line for line in run.stdout.splitlines() if line.startswith("result")]


def test_matches_kafka(tmp_path: Path) -> None:
    rng = random.Random(1071)
    cases = [_random_case(rng) for _ in range(400)] + [_random_case(rng, big=True) for _ in range(200)]
    kafka = run_kafka_harness(tmp_path, "StickyHarness", KAFKA_HARNESS, "\n".join(line for case in cases for line in _case_lines(*case)) + "\n")
    assert len(kafka) == len(cases)
    for (standbys, subtopologies, members), expected in zip(cases, kafka, strict=True):
        assert _result_line(members, assign(members, subtopologies, standbys)) == expected, _case_lines(standbys, subtopologies, members)


def _rack_lines(rng: random.Random, members: dict[str, AssignmentMemberSpec], subtopologies: dict[str, TopologySubtopology]) -> list[str]:
    """Racks, client tags and previous warm-up tasks for the members, and the rack-aware tags."""
    keys = ["zone", "rack", "cluster"]
    lines = [f"tags {','.join(rng.sample(keys, rng.randint(1, 3)))}"]
    for m in members:
        lines.append(f"rack {m} rack-{rng.randint(0, 2)}")
        lines += [f"tag {m} {k} {k}-{rng.randint(0, 2)}" for k in keys if rng.random() < 0.8]
        lines += [f"warmup {m} {s} {p}" for s, info in subtopologies.items() for p in range(info.num_tasks) if rng.random() < 0.1]
    return lines


def test_kafka_ignores_racks_client_tags_and_warmups(tmp_path: Path) -> None:
    rng = random.Random(20744)
    cases = [_random_case(rng, big=rng.random() < 0.3) for _ in range(200)]
    stdin = []
    for case in cases:
        lines = _case_lines(*case)
        stdin += lines[:-1] + _rack_lines(rng, case[2], case[1]) + lines[-1:]
    stdin.append("refine")
    kafka = run_kafka_harness(tmp_path, "StickyHarness", KAFKA_HARNESS, "\n".join(stdin) + "\n")
    assert kafka[-1] == "result refine true"  # AssignmentRefiner.refine: the target, as given
    assert len(kafka) == len(cases) + 1
    for (standbys, subtopologies, members), expected in zip(cases, kafka, strict=False):
        assert _result_line(members, assign(members, subtopologies, standbys)) == expected, _case_lines(standbys, subtopologies, members)


def test_java_string_hash_and_hashmap_order() -> None:
    # The orders below are what Java 17 printed for the same insertions.
    assert _java_string_hash("Aa") == _java_string_hash("BB")  # a known collision
    assert _java_string_hash("process-0") == -1094761390 & 0xFFFFFFFF  # "process-0".hashCode()
    put = _JavaHashMapOrder()
    for key in ("b", "a", "BB", "Aa"):
        put.add(key)
    assert put.order() == ["BB", "Aa", "a", "b"]  # put appends within a bucket
    computed = _JavaHashMapOrder(2, lazy=True)
    for key in ("process-0", "process-2"):
        computed.add(key)
    assert computed.order() == ["process-2", "process-0"]  # computeIfAbsent prepends
    computed = _JavaHashMapOrder(4, lazy=True)
    for key in ("process-0", "process-3", "process-2", "process-1"):
        computed.add(key)
    assert computed.order() == ["process-1", "process-0", "process-3", "process-2"]  # still 4 buckets


def test_stickiness_keeps_previous_owners() -> None:
    subtopologies = {"0": TopologySubtopology(4, True)}
    members = {
        "a": AssignmentMemberSpec("p1", active_tasks={"0": frozenset({0, 1})}),
        "b": AssignmentMemberSpec("p2", active_tasks={"0": frozenset({2, 3})}),
    }
    result = assign(members, subtopologies, 1)
    assert result["a"].active_tasks == {"0": frozenset({0, 1})}
    assert result["b"].active_tasks == {"0": frozenset({2, 3})}
    assert result["a"].standby_tasks == {"0": frozenset({2, 3})}
    assert result["b"].standby_tasks == {"0": frozenset({0, 1})}


def test_no_members_no_tasks_given() -> None:
    assert assign({}, {"0": TopologySubtopology(0, False)}) == {}


specs = st.dictionaries(
    st.text("abcdef", min_size=1, max_size=4),
    st.builds(AssignmentMemberSpec, st.sampled_from(["p1", "p2", "p3"])),
    min_size=1,
    max_size=6,
)
topologies = st.dictionaries(st.sampled_from(["0", "1", "2"]), st.builds(TopologySubtopology, st.integers(0, 8), st.booleans()), min_size=1)


@settings(max_examples=200, deadline=None)
@given(specs, topologies, st.integers(0, 3))
def test_every_task_once_balanced_and_standbys_apart(members: dict[str, AssignmentMemberSpec], subtopologies: dict[str, TopologySubtopology], standbys: int) -> None:
    result = assign(members, subtopologies, standbys)
    active = [(s, p) for a in result.values() for s, ps in a.active_tasks.items() for p in ps]
    assert sorted(active) == sorted((s, p) for s, info in subtopologies.items() for p in range(info.num_tasks))
    counts = [sum(len(ps) for ps in a.active_tasks.values()) for a in result.values()]
    assert max(counts) - min(counts) <= 1  # from scratch, active tasks are spread evenly over members
    processes = {p for p in (spec.process_id for spec in members.values())}
    for s, info in subtopologies.items():
        for p in range(info.num_tasks):
            holders = [members[m].process_id for m, a in result.items() for kind in (a.active_tasks, a.standby_tasks) if p in kind.get(s, ())]
            assert len(holders) == len(set(holders))  # never twice on one process
            wanted = 1 + (min(standbys, len(processes) - 1) if info.stateful else 0)
            assert len(holders) == wanted
