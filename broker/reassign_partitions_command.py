"""`kbroker reassign-partitions`: kafka-reassign-partitions.sh, over the wire.

Its actions, JSON formats, checks and output: --generate proposes a placement of the listed
topics over --broker-list (Kafka's AdminUtils assignment, rack-aware when the brokers have racks
unless --disable-rack-aware); --execute starts the
moves of a reassignment JSON (AlterPartitionReassignments) after printing the current
assignment for a rollback, and with --throttle sets the replication throttles Kafka's tool
sets; --verify tells each partition's state and, once no move is left in the cluster, clears
the throttles; --cancel reverts the moves in progress; --list shows them. Brokers forward the
reassignment APIs to the active controller; a broker resource's configs go to that broker.
"""

from __future__ import annotations

import datetime
import json
import random
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence, TextIO

from kio.schema.alter_partition_reassignments.v0 import request as alter_v0
from kio.schema.alter_partition_reassignments.v1 import request as alter_v1
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1.request import AlterableConfig, AlterConfigsResource, IncrementalAlterConfigsRequest
from kio.schema.list_partition_reassignments.v0.request import ListPartitionReassignmentsRequest, ListPartitionReassignmentsTopics
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.static.primitive import i8, i32

from broker import wire_client
from broker.dynamic_broker_config import FOLLOWER_REPLICATION_THROTTLED_RATE, LEADER_REPLICATION_THROTTLED_RATE, REPLICA_ALTER_LOG_DIRS_IO_MAX_BYTES_PER_SECOND

CLIENT_ID = "kbroker-reassign-partitions"
API_TIMEOUT = datetime.timedelta(seconds=60)
ANY_LOG_DIR = "any"
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
OP_SET, OP_DELETE = 0, 1
LEADER_THROTTLED_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_THROTTLED_REPLICAS = "follower.replication.throttled.replicas"
BROKER_LEVEL_THROTTLES = (LEADER_REPLICATION_THROTTLED_RATE, FOLLOWER_REPLICATION_THROTTLED_RATE, REPLICA_ALTER_LOG_DIRS_IO_MAX_BYTES_PER_SECOND)
TOPIC_LEVEL_THROTTLES = (LEADER_THROTTLED_REPLICAS, FOLLOWER_THROTTLED_REPLICAS)
CANNOT_EXECUTE_BECAUSE_OF_EXISTING_MESSAGE = (
    "Cannot execute because there is an existing partition assignment.  Use --additional to override this and "
    "create a new partition assignment in addition to the existing one. The --additional "
    "flag can also be used to change the throttle by resubmitting the current reassignment."
)
YOU_MUST_RUN_VERIFY_PERIODICALLY_MESSAGE = "Warning: You must run --verify periodically, until the reassignment completes, to ensure the throttle is removed."

TopicPartition = tuple[str, int]
Assignment = dict[TopicPartition, list[int]]


class ReassignCommandError(Exception):
    """What the tool prints, after "Error: ", before exiting 1 (Kafka's AdminCommandFailedException and the like)."""


class TerseError(ReassignCommandError):
    """Kafka's TerseException: printed as it is."""


@dataclass(frozen=True, slots=True)
class Ongoing:
    replicas: list[int]
    adding: list[int]
    removing: list[int]


def tp_name(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


def _plural(items: Iterable[object]) -> str:
    return "" if len(list(items)) == 1 else "s"


# -- the JSON files -------------------------------------------------------------------------------


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise ReassignCommandError("The input string is not a valid JSON") from None


def _check_version(data: Any) -> None:
    version = data.get("version", 1) if isinstance(data, dict) else None
    if version != 1:
        raise ReassignCommandError(f"Not supported version field value {version}")


def parse_topics_to_move(text: str) -> list[str]:
    """--topics-to-move-json-file: {"version": 1, "topics": [{"topic": "t"}, ...]}."""
    data = _json(text)
    _check_version(data)
    try:
        return [str(entry["topic"]) for entry in data.get("topics", [])]
    except (KeyError, TypeError) as e:
        raise ReassignCommandError(f"Invalid topics-to-move JSON: {e!r}") from None


def parse_reassignment(text: str) -> list[tuple[TopicPartition, list[int]]]:
    """--reassignment-json-file: {"version": 1, "partitions": [{"topic", "partition", "replicas", "log_dirs"?}]},
    in file order, repeats kept for the caller to refuse. Log directories other than "any" need
    AlterReplicaLogDirs, which a kbroker node (one log dir) answers but has no other dir to move to."""
    data = _json(text)
    _check_version(data)
    parts: list[tuple[TopicPartition, list[int]]] = []
    try:
        for entry in data.get("partitions", []):
            tp = (str(entry["topic"]), int(entry["partition"]))
            replicas = [int(b) for b in entry["replicas"]]
            log_dirs = [str(d) for d in entry.get("log_dirs", [ANY_LOG_DIR] * len(replicas))]
            if len(log_dirs) != len(replicas):
                raise ReassignCommandError(f"Size of replicas list {_java_list(replicas)} is different from size of log dirs list {_java_list(log_dirs)} for partition {tp_name(tp)}")
            if any(d != ANY_LOG_DIR for d in log_dirs):
                raise ReassignCommandError(f"Moving replicas between log directories is not supported: {tp_name(tp)} names {_java_list(log_dirs)}")
            parts.append((tp, replicas))
    except (KeyError, TypeError, ValueError) as e:
        raise ReassignCommandError(f"Invalid reassignment JSON: {e!r}") from None
    return parts


def _java_list(items: Sequence[object]) -> str:
    """How Java prints a collection, as Kafka's messages show them."""
    return "[" + ", ".join(str(i) for i in items) + "]"


def format_reassignment_json(assignment: Assignment) -> str:
    """Kafka's formatAsReassignmentJson: compact, partitions by topic then index, every log dir "any"."""
    partitions = [
        {"topic": t, "partition": p, "replicas": assignment[(t, p)], "log_dirs": [ANY_LOG_DIR] * len(assignment[(t, p)])} for t, p in sorted(assignment)
    ]
    return json.dumps({"version": 1, "partitions": partitions}, separators=(",", ":"))


def check_execute_args(parts: list[tuple[TopicPartition, list[int]]]) -> Assignment:
    """Kafka's parseExecuteAssignmentArgs checks, in its order."""
    if not parts:
        raise ReassignCommandError("Partition reassignment list cannot be empty")
    if any(not replicas for _, replicas in parts):
        raise ReassignCommandError("Partition replica list cannot be empty")
    keys = [tp for tp, _ in parts]
    repeated = sorted({tp for tp in keys if keys.count(tp) > 1})
    if repeated:
        raise ReassignCommandError(f"Partition reassignment contains duplicate topic partitions: {','.join(tp_name(tp) for tp in repeated)}")
    repeats = [(tp, sorted({b for b in replicas if replicas.count(b) > 1})) for tp, replicas in parts]
    repeats = [(tp, dups) for tp, dups in repeats if dups]
    if repeats:
        detail = ". ".join(f"{tp_name(tp)} contains multiple entries for {','.join(map(str, dups))}" for tp, dups in repeats)
        raise ReassignCommandError(f"Partition replica lists may not contain duplicate entries: {detail}")
    return dict(parts)


# -- --generate ---------------------------------------------------------------------------------------


def _start_and_shift(replication_factor: int, brokers: int, rng: random.Random) -> tuple[int, int]:
    """Kafka's checks of a placement's replication factor, then its random first leader's index
    and second replica's shift."""
    if replication_factor <= 0:
        raise ReassignCommandError("Replication factor must be larger than 0.")
    if replication_factor > brokers:
        raise ReassignCommandError(f"Replication factor: {replication_factor} larger than available brokers: {brokers}.")
    return rng.randrange(brokers), rng.randrange(brokers)


def assign_replicas_to_brokers(partitions: int, replication_factor: int, brokers: Sequence[int], rng: random.Random) -> dict[int, list[int]]:
    """Kafka's AdminUtils.assignReplicasToBrokersRackUnaware: partition i's first replica at
    (i + a random start) round the brokers, the others shifted by an amount that grows every
    time the partitions wrap round, so that leaders and followers spread evenly."""
    n = len(brokers)
    start, shift = _start_and_shift(replication_factor, n, rng)
    placed: dict[int, list[int]] = {}
    for partition in range(partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start) % n
        placed[partition] = [brokers[first]] + [brokers[(first + 1 + (shift + j) % (n - 1)) % n] for j in range(replication_factor - 1)]
    return placed


def rack_alternated_brokers(racks: Mapping[int, str]) -> list[int]:
    """Kafka's getRackAlternatedBrokerList: one broker of each rack in turn (racks by name,
    brokers of a rack by id), so that neighbours in the list are in different racks."""
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(racks):
        by_rack.setdefault(racks[broker], []).append(broker)
    queues = [iter(by_rack[rack]) for rack in sorted(by_rack)]
    arranged: list[int] = []
    while len(arranged) < len(racks):
        for queue in queues:
            broker = next(queue, None)
            if broker is not None:
                arranged.append(broker)
    return arranged


def assign_replicas_to_brokers_rack_aware(partitions: int, replication_factor: int, racks: Mapping[int, str], rng: random.Random) -> dict[int, list[int]]:
    """Kafka's AdminUtils.assignReplicasToBrokersRackAware: leaders round the rack-alternated
    list as in the rack-unaware placement; each further replica is the next broker, at the
    same growing shift, that adds a rack while some rack has no replica yet and a broker while
    some broker has none."""
    arranged = rack_alternated_brokers(racks)
    n = len(arranged)
    start, shift = _start_and_shift(replication_factor, n, rng)
    rack_count = len(set(racks.values()))
    placed: dict[int, list[int]] = {}
    for partition in range(partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start) % n
        replicas = [arranged[first]]
        racks_used = {racks[arranged[first]]}
        k = 0
        while len(replicas) < replication_factor:
            broker = arranged[(first + 1 + (shift * rack_count + k) % (n - 1)) % n]
            k += 1
            if racks[broker] in racks_used and len(racks_used) < rack_count:
                continue
            if broker in replicas and len(replicas) < n:
                continue
            replicas.append(broker)
            racks_used.add(racks[broker])
        placed[partition] = replicas
    return placed


def assign_replicas(partitions: int, replication_factor: int, brokers: Mapping[int, str | None], rng: random.Random) -> dict[int, list[int]]:
    """Kafka's AdminUtils.assignReplicasToBrokers: rack-aware when every broker has a rack,
    rack-unaware when none has (or the racks are left out); a mix is an error."""
    racks = {b: rack for b, rack in brokers.items() if rack is not None}
    if not racks:
        return assign_replicas_to_brokers(partitions, replication_factor, sorted(brokers), rng)
    if len(racks) < len(brokers):
        raise ReassignCommandError("Not all brokers have rack information for replica rack aware assignment.")
    return assign_replicas_to_brokers_rack_aware(partitions, replication_factor, racks, rng)


def generate(bootstrap: str, topics_json: str, broker_list: str, out: TextIO, *, rack_aware: bool = True) -> tuple[Assignment, Assignment]:
    """--generate: print the current assignment of the topics and one over the listed brokers; (proposed, current)."""
    try:
        wanted_brokers = [int(b) for b in broker_list.split(",")]
    except ValueError:
        raise ReassignCommandError(f"Invalid broker list: {broker_list}") from None
    repeated = sorted({b for b in wanted_brokers if wanted_brokers.count(b) > 1})
    if repeated:
        raise ReassignCommandError(f"Broker list contains duplicate entries: {_java_list(repeated)}")
    topics = parse_topics_to_move(topics_json)
    repeated_topics = sorted({t for t in topics if topics.count(t) > 1})
    if repeated_topics:
        raise ReassignCommandError(f"List of topics to reassign contains duplicate entries: {_java_list(repeated_topics)}")
    metadata = _metadata(bootstrap, topics)
    current = _assignment_of(metadata, topics)
    brokers = {int(b.node_id): b.rack if rack_aware else None for b in metadata.brokers if b.node_id in wanted_brokers}
    proposed: Assignment = {}
    chooser = random.Random()
    for topic in dict.fromkeys(topics):
        partitions = sorted(p for t, p in current if t == topic)
        placed = assign_replicas(len(partitions), len(current[(topic, partitions[0])]), brokers, chooser)
        proposed.update(((topic, p), replicas) for p, replicas in placed.items())
    print(f"Current partition replica assignment\n{format_reassignment_json(current)}\n", file=out)
    print(f"Proposed partition reassignment configuration\n{format_reassignment_json(proposed)}", file=out)
    return proposed, current


# -- the cluster, over the wire -------------------------------------------------------------------------


def _metadata(bootstrap: str, topics: Sequence[str] | None) -> Any:
    request = MetadataRequest(
        topics=None if topics is None else tuple(MetadataRequestTopic(topic_id=None, name=t) for t in dict.fromkeys(topics)),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    return wire_client.request(bootstrap, request, client_id=CLIENT_ID)


def _assignment_of(metadata: Any, topics: Iterable[str]) -> Assignment:
    """Every partition's replicas; a topic that does not exist is an error, as Kafka's describeTopics."""
    found = {t.name: t for t in metadata.topics}
    assignment: Assignment = {}
    for name in topics:
        topic = found.get(name)
        if topic is None or topic.error_code != ErrorCode.none:
            raise ReassignCommandError(f"org.apache.kafka.common.errors.UnknownTopicOrPartitionException: Topic {name} not found.")
        assignment.update(((name, int(p.partition_index)), [int(b) for b in p.replica_nodes]) for p in topic.partitions)
    return assignment


def list_reassignments(bootstrap: str, partitions: Iterable[TopicPartition] | None = None) -> dict[TopicPartition, Ongoing]:
    """ListPartitionReassignments: the moves in progress, of every partition (None) or of these."""
    topics = None
    if partitions is not None:
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        topics = tuple(ListPartitionReassignmentsTopics(name=t, partition_indexes=tuple(i32(p) for p in ps)) for t, ps in by_topic.items())
    response = wire_client.request(bootstrap, ListPartitionReassignmentsRequest(timeout=API_TIMEOUT, topics=topics), client_id=CLIENT_ID)
    if response.error_code != ErrorCode.none:
        raise ReassignCommandError(f"{_exception(response.error_code)}: {response.error_message or ''}".rstrip())
    return {
        (t.name, int(p.partition_index)): Ongoing([int(b) for b in p.replicas], [int(b) for b in p.adding_replicas], [int(b) for b in p.removing_replicas])
        for t in response.topics
        for p in t.partitions
    }


def alter_reassignments(bootstrap: str, targets: dict[TopicPartition, list[int] | None], *, allow_replication_factor_change: bool = True) -> dict[TopicPartition, str]:
    """AlterPartitionReassignments (None cancels a partition's move): the errors by partition, as
    Kafka's tool prints them. v0 unless replication factor changes are refused, which takes v1
    (KIP-860), as Kafka's client picks."""
    wire = alter_v0 if allow_replication_factor_change else alter_v1
    by_topic: dict[str, list[Any]] = {}
    for (t, p), replicas in targets.items():
        target = None if replicas is None else tuple(i32(b) for b in replicas)
        by_topic.setdefault(t, []).append(wire.ReassignablePartition(partition_index=i32(p), replicas=target))
    topics = tuple(wire.ReassignableTopic(name=t, partitions=tuple(ps)) for t, ps in by_topic.items())
    if allow_replication_factor_change:
        request: Any = alter_v0.AlterPartitionReassignmentsRequest(timeout=API_TIMEOUT, topics=topics)
    else:
        request = alter_v1.AlterPartitionReassignmentsRequest(timeout=API_TIMEOUT, allow_replication_factor_change=False, topics=topics)
    response = wire_client.request(bootstrap, request, client_id=CLIENT_ID)
    errors: dict[TopicPartition, str] = {}
    for topic in response.responses:
        for p in topic.partitions:
            code = p.error_code if p.error_code != ErrorCode.none else response.error_code
            if code != ErrorCode.none:
                errors[(topic.name, int(p.partition_index))] = p.error_message or response.error_message or _exception(code)
    return errors


def _exception(code: int) -> str:
    return "org.apache.kafka.common.errors." + "".join(w.capitalize() for w in ErrorCode(code).name.split("_")) + "Exception"


def _alter_configs(bootstrap: str, metadata: Any, resources: dict[tuple[int, str], list[tuple[str, int, str | None]]]) -> None:
    """IncrementalAlterConfigs: a broker's resource to that broker (it checks that it is named), topics to any."""
    endpoints = {str(b.node_id): f"{b.host}:{b.port}" for b in metadata.brokers}
    batches: dict[str, list[AlterConfigsResource]] = {}
    for (kind, name), ops in resources.items():
        target = endpoints.get(name, bootstrap) if kind == BROKER_RESOURCE else bootstrap
        configs = tuple(AlterableConfig(name=key, config_operation=i8(op), value=value) for key, op, value in ops)
        batches.setdefault(target, []).append(AlterConfigsResource(resource_type=i8(kind), resource_name=name, configs=configs))
    for target, batch in batches.items():
        response = wire_client.request(target, IncrementalAlterConfigsRequest(resources=tuple(batch), validate_only=False), client_id=CLIENT_ID)
        for r in response.responses:
            if r.error_code != ErrorCode.none:
                raise ReassignCommandError(f"{_exception(r.error_code)}: {r.error_message or ''}".rstrip())


# -- --execute -----------------------------------------------------------------------------------------


def proposed_move_map(ongoing: dict[TopicPartition, Ongoing], proposed: Assignment, current: Assignment) -> dict[TopicPartition, tuple[set[int], set[int]]]:
    """Kafka's calculateProposedMoveMap: each moving partition's (sources, destinations). A move
    already in progress keeps its sources: the replicas it had before it began."""
    moves = {tp: ({b for b in o.replicas if b not in o.adding}, set(o.adding)) for tp, o in ongoing.items()}
    for tp, replicas in proposed.items():
        sources = moves[tp][0] if tp in moves else set(current[tp])
        moves[tp] = (sources, set(replicas) - sources)
    return moves


def throttle_configs(moves: dict[TopicPartition, tuple[set[int], set[int]]]) -> dict[str, tuple[str, str]]:
    """Per topic, Kafka's leader throttles ("partition:source" pairs) and follower throttles ("partition:destination")."""
    leader: dict[str, set[str]] = {}
    follower: dict[str, set[str]] = {}
    for (topic, p), (sources, destinations) in moves.items():
        leader.setdefault(topic, set()).update(f"{p}:{b}" for b in sources)
        follower.setdefault(topic, set()).update(f"{p}:{b}" for b in destinations if b not in sources)
    return {t: (",".join(sorted(leader[t])), ",".join(sorted(follower.get(t, set())))) for t in leader}


def execute(
    bootstrap: str, reassignment_json: str, out: TextIO, *, throttle: int = -1, additional: bool = False, allow_replication_factor_change: bool = True
) -> None:
    """--execute: start the moves; with ``throttle`` >= 0, throttle them as Kafka's tool does first."""
    proposed = check_execute_args(parse_reassignment(reassignment_json))
    ongoing = list_reassignments(bootstrap)
    if ongoing and not additional:
        raise TerseError(CANNOT_EXECUTE_BECAUSE_OF_EXISTING_MESSAGE)
    metadata = _metadata(bootstrap, sorted({t for t, _ in proposed}))
    known = {int(b.node_id) for b in metadata.brokers}
    unknown = next((b for replicas in proposed.values() for b in replicas if b not in known), None)
    if unknown is not None:
        raise ReassignCommandError(f"Unknown broker id {unknown}")
    everything = _assignment_of(metadata, sorted({t for t, _ in proposed}))
    missing = [tp for tp in proposed if tp not in everything]
    if missing:
        raise ReassignCommandError(f"org.apache.kafka.common.errors.UnknownTopicOrPartitionException: Unable to find partition: {', '.join(map(tp_name, missing))}")
    current = {tp: everything[tp] for tp in proposed}
    print(
        f"Current partition replica assignment\n\n{format_reassignment_json(current)}\n\nSave this to use as the --reassignment-json-file option during rollback",
        file=out,
    )
    if throttle >= 0:
        print(YOU_MUST_RUN_VERIFY_PERIODICALLY_MESSAGE, file=out)
        moves = proposed_move_map(ongoing, proposed, current)
        topic_ops = {(TOPIC_RESOURCE, t): [(LEADER_THROTTLED_REPLICAS, OP_SET, lead), (FOLLOWER_THROTTLED_REPLICAS, OP_SET, follow)] for t, (lead, follow) in throttle_configs(moves).items()}
        _alter_configs(bootstrap, metadata, topic_ops)
        brokers = sorted({b for sources, destinations in moves.values() for b in sources | destinations})
        rate = str(throttle)
        _alter_configs(bootstrap, metadata, {(BROKER_RESOURCE, str(b)): [(LEADER_REPLICATION_THROTTLED_RATE, OP_SET, rate), (FOLLOWER_REPLICATION_THROTTLED_RATE, OP_SET, rate)] for b in brokers})
        print(f"The inter-broker throttle limit was set to {throttle} B/s", file=out)
    errors = alter_reassignments(bootstrap, dict(proposed), allow_replication_factor_change=allow_replication_factor_change)
    if errors:
        raise TerseError("Error reassigning partition(s):\n" + "\n".join(f"{tp_name(tp)}: {errors[tp]}" for tp in sorted(errors)))
    print(f"Successfully started partition reassignment{_plural(proposed)} for {','.join(tp_name(tp) for tp in sorted(proposed))}", file=out)


# -- --verify, --cancel, --list ------------------------------------------------------------------------------


def verify(bootstrap: str, reassignment_json: str, out: TextIO, *, preserve_throttles: bool = False) -> bool:
    """--verify: each partition's state; True while any move is in progress in the cluster.
    Once none is, the throttles are cleared (unless preserved), as Kafka's tool does."""
    targets = parse_reassignment(reassignment_json)
    ongoing = list_reassignments(bootstrap)
    metadata = _metadata(bootstrap, sorted({t for (t, _), _ in targets}))
    replicas_now = {(t.name, int(p.partition_index)): [int(b) for b in p.replica_nodes] for t in metadata.topics for p in t.partitions}
    lines = ["Status of partition reassignment:"]
    for tp, target in sorted(targets):
        if tp in ongoing:
            lines.append(f"Reassignment of partition {tp_name(tp)} is still in progress.")
            continue
        current = replicas_now.get(tp, [])
        if current == target:
            lines.append(f"Reassignment of partition {tp_name(tp)} is completed.")
        else:
            lines.append(f"There is no active reassignment of partition {tp_name(tp)}, but replica set is {','.join(map(str, current))} rather than {','.join(map(str, target))}.")
    print("\n".join(lines), file=out)
    print(file=out)  # where Kafka's tool lists log directory moves, of which kbroker has none
    if not ongoing and not preserve_throttles:
        _clear_all_throttles(bootstrap, metadata, targets, out)
    return bool(ongoing)


def _clear_all_throttles(bootstrap: str, metadata: Any, targets: list[tuple[TopicPartition, list[int]]], out: TextIO) -> None:
    """Kafka's clearAllThrottles: every broker of the cluster and of the targets, every topic of the targets."""
    brokers = sorted({int(b.node_id) for b in metadata.brokers} | {b for _, replicas in targets for b in replicas})
    print(f"Clearing broker-level throttles on broker{_plural(brokers)} {','.join(map(str, brokers))}", file=out)
    _alter_configs(bootstrap, metadata, {(BROKER_RESOURCE, str(b)): [(key, OP_DELETE, None) for key in BROKER_LEVEL_THROTTLES] for b in brokers})
    topics = sorted({t for (t, _), _ in targets})
    print(f"Clearing topic-level throttles on topic{_plural(topics)} {','.join(topics)}", file=out)
    _alter_configs(bootstrap, metadata, {(TOPIC_RESOURCE, t): [(key, OP_DELETE, None) for key in TOPIC_LEVEL_THROTTLES] for t in topics})


def cancel(bootstrap: str, reassignment_json: str, out: TextIO, *, preserve_throttles: bool = False) -> list[TopicPartition]:
    """--cancel: revert the listed partitions' moves in progress; the partitions cancelled."""
    targets = parse_reassignment(reassignment_json)
    ongoing = list_reassignments(bootstrap, [tp for tp, _ in targets])
    # As Kafka's tool: a move that only adds replicas is left to finish.
    cancelling = sorted(tp for tp, o in ongoing.items() if not o.adding or o.removing)
    if cancelling:
        errors = alter_reassignments(bootstrap, dict.fromkeys(cancelling))
        if errors:
            raise TerseError(
                f"Error cancelling partition reassignment{_plural(errors)} for:\n" + "\n".join(f"{tp_name(tp)}: {errors[tp]}" for tp in sorted(errors))
            )
        print(f"Successfully cancelled partition reassignment{_plural(cancelling)} for: {','.join(map(tp_name, cancelling))}", file=out)
    else:
        print("None of the specified partition reassignments are active.", file=out)
    print("None of the specified partition moves are active.", file=out)
    if not preserve_throttles:
        _clear_all_throttles(bootstrap, _metadata(bootstrap, sorted({t for (t, _), _ in targets})), targets, out)
    return cancelling


def list_command(bootstrap: str, out: TextIO) -> None:
    """--list: Kafka's curReassignmentsToString."""
    ongoing = list_reassignments(bootstrap)
    if not ongoing:
        print("No partition reassignments found.", file=out)
        return
    lines = []
    for tp in sorted(ongoing):
        o = ongoing[tp]
        line = f"{tp_name(tp)}: replicas: {','.join(map(str, o.replicas))}."
        if o.adding:
            line += f" adding: {','.join(map(str, o.adding))}."
        if o.removing:
            line += f" removing: {','.join(map(str, o.removing))}."
        lines.append(line)
    print("Current partition reassignments:\n" + "\n".join(lines), file=out)


__all__ = [
    "ReassignCommandError",
    "TerseError",
    "alter_reassignments",
    "assign_replicas_to_brokers",
    "cancel",
    "execute",
    "format_reassignment_json",
    "generate",
    "list_command",
    "list_reassignments",
    "parse_reassignment",
    "parse_topics_to_move",
    "proposed_move_map",
    "throttle_configs",
    "verify",
]
