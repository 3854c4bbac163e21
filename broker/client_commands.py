"""The CLI's client commands: plain Kafka clients (confluent-kafka) that work against any broker.

An ``out`` left None prints to sys.stdout as it is at the call (print's own default), so that a
caller redirecting it, a test running a command in process, sees the output."""

from __future__ import annotations

import concurrent.futures
import json
import sys
import time
from datetime import datetime, timezone
from typing import Any, NoReturn, TextIO

from confluent_kafka import Consumer, ElectionType, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewPartitions, NewTopic, ResourceType
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.errors import ErrorCode
from kio.schema.describe_topic_partitions.v0 import request as describe_v0
from kio.static.primitive import i8, i32

from broker import wire_client
from storage.log_cleaner import CLEANER_STATS_KEY

CONNECT_TIMEOUT_S = 10.0
TOPIC_RESOURCE = 2  # DescribeConfigs resource type


def fail(message: str) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(1)


def _client_config(bootstrap: str, extra: dict[str, str] | None = None) -> dict[str, Any]:
    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "socket.connection.setup.timeout.ms": 5000, "log_level": 0}
    config.update(extra or {})
    return config


def admin(bootstrap: str) -> AdminClient:
    client = AdminClient(_client_config(bootstrap))
    try:
        client.list_topics(timeout=CONNECT_TIMEOUT_S)
    except KafkaException as e:
        fail(f"no broker answered at {bootstrap}: {e.args[0].str() if e.args else e}")
    return client


def _wait(futures: dict[Any, Any], what: str) -> bool:
    ok = True
    for key, fut in futures.items():
        try:
            fut.result(timeout=30)
        except KafkaException as e:
            err = e.args[0]
            print(f"error: {what} {key}: {err.str() if hasattr(err, 'str') else err}", file=sys.stderr)
            ok = False
    return ok


def parse_kv(items: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        for part in item.split(","):
            if not part:
                continue
            if "=" not in part:
                fail(f"expected key=value, got '{part}'")
            key, value = part.split("=", 1)
            out[key.strip()] = value.strip()
    return out


def topics_create(bootstrap: str, name: str, partitions: int, replication_factor: int, configs: dict[str, str], if_not_exists: bool) -> None:
    client = admin(bootstrap)
    futures = client.create_topics([NewTopic(name, partitions, replication_factor, config=configs)])
    try:
        futures[name].result(timeout=30)
    except KafkaException as e:
        if if_not_exists and e.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return
        fail(f"cannot create topic {name}: {e.args[0].str()}")
    print(f"Created topic {name}.")


def topics_list(bootstrap: str, out: TextIO | None = None) -> None:
    metadata = admin(bootstrap).list_topics(timeout=CONNECT_TIMEOUT_S)
    for name in sorted(metadata.topics):
        print(name, file=out)


def topics_describe(bootstrap: str, name: str | None, out: TextIO | None = None) -> None:
    client = admin(bootstrap)
    metadata = client.list_topics(topic=name, timeout=CONNECT_TIMEOUT_S) if name else client.list_topics(timeout=CONNECT_TIMEOUT_S)
    names = [name] if name else sorted(metadata.topics)
    resources = [ConfigResource(ResourceType.TOPIC, n) for n in names if metadata.topics[n].error is None]
    configs: dict[str, dict[str, str]] = {}
    if resources:
        for res, fut in client.describe_configs(resources).items():
            entries = fut.result(timeout=30)
            configs[res.name] = {k: v.value for k, v in entries.items() if not v.is_default}
    for n in names:
        topic = metadata.topics[n]
        if topic.error is not None:
            fail(f"topic {n}: {topic.error.str()}")
        parts = topic.partitions
        rf = len(next(iter(parts.values())).replicas) if parts else 0
        cfg = ",".join(f"{k}={v}" for k, v in sorted(configs.get(n, {}).items()))
        print(f"Topic: {n}\tPartitionCount: {len(parts)}\tReplicationFactor: {rf}\tConfigs: {cfg}", file=out)
        cleaning = _cleaner_stats(bootstrap, n)
        eligible = _eligible_leaders(bootstrap, n)
        for index in sorted(parts):
            p = parts[index]
            line = f"\tTopic: {n}\tPartition: {index}\tLeader: {p.leader}\tReplicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isrs))}"
            elr, last_known = eligible.get(index, (None, None))
            line += f"\tElr: {_broker_list(elr)}\tLastKnownElr: {_broker_list(last_known)}"
            if index in cleaning:
                line += _format_cleaning(cleaning[index])
            print(line, file=out)


def _eligible_leaders(bootstrap: str, topic: str) -> dict[int, tuple[tuple[int, ...] | None, tuple[int, ...] | None]]:
    """Each partition's eligible leader replicas and last known ELR (KIP-966), from DescribeTopicPartitions
    page by page; nothing from a broker that does not serve it (kafka-topics.sh then prints N/A)."""
    found: dict[int, tuple[tuple[int, ...] | None, tuple[int, ...] | None]] = {}
    cursor: describe_v0.Cursor | None = None
    while True:
        body = describe_v0.DescribeTopicPartitionsRequest(topics=(describe_v0.TopicRequest(name=topic),), response_partition_limit=i32(2000), cursor=cursor)
        try:
            response = wire_client.request(bootstrap, body, client_id="kbroker-cli")
        except OSError:
            return found
        for answer in response.topics:
            for p in answer.partitions:
                found[int(p.partition_index)] = (p.eligible_leader_replicas, p.last_known_elr)
        if response.next_cursor is None or response.next_cursor.topic_name != topic:
            return found
        cursor = describe_v0.Cursor(topic_name=topic, partition_index=response.next_cursor.partition_index)


def _broker_list(brokers: tuple[int, ...] | None) -> str:
    return "N/A" if brokers is None else ",".join(map(str, brokers))


def _cleaner_stats(bootstrap: str, topic: str) -> dict[int, dict[str, Any]]:
    """Each partition's dirty ratio and last cleaning, from a DescribeConfigs naming the cleaner's stats key."""
    body = DescribeConfigsRequest(resources=(DescribeConfigsResource(resource_type=i8(TOPIC_RESOURCE), resource_name=topic, configuration_keys=(CLEANER_STATS_KEY,)),))
    try:
        response = wire_client.request(bootstrap, body, client_id="kbroker-cli")
    except OSError:
        return {}
    for result in response.results:
        for entry in result.configs:
            if entry.name == CLEANER_STATS_KEY and entry.value:
                return {int(partition): stats for partition, stats in json.loads(entry.value).items()}
    return {}


def _format_cleaning(stats: dict[str, Any]) -> str:
    text = f"\tDirtyRatio: {stats['dirty_ratio']:.4f}"
    last = stats.get("last_cleaning")
    if not last:
        return text + "\tLastCleaned: never"
    when = datetime.fromtimestamp(last["finished_ms"] / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return (
        f"{text}\tLastCleaned: {when} (up to offset {last['end_offset']}, records {last['messages_read']}->{last['messages_written']}, "
        f"bytes {last['bytes_read']}->{last['bytes_written']}, segments {last['segments_before']}->{last['segments_after']}, "
        f"tombstones removed {last['tombstones_removed']}, {last['elapsed_s']}s)"
    )


def topics_delete(bootstrap: str, name: str) -> None:
    client = admin(bootstrap)  # kept alive until the futures resolve
    if not _wait(client.delete_topics([name]), "cannot delete topic"):
        raise SystemExit(1)
    print(f"Deleted topic {name}.")


def topics_alter(bootstrap: str, name: str, partitions: int | None, set_configs: dict[str, str], delete_configs: list[str]) -> None:
    client = admin(bootstrap)
    ok = True
    if partitions is not None:
        ok &= _wait(client.create_partitions([NewPartitions(name, partitions)]), "cannot add partitions to")
    if set_configs or delete_configs:
        ok &= configs_alter(bootstrap, "topics", name, set_configs, delete_configs, client=client)
    if not ok:
        raise SystemExit(1)


def configs_describe(bootstrap: str, entity_type: str, entity_name: str, out: TextIO | None = None) -> None:
    client = admin(bootstrap)
    resource = ConfigResource(_resource_type(entity_type), entity_name)
    try:
        entries = client.describe_configs([resource])[resource].result(timeout=30)
    except KafkaException as e:
        fail(f"cannot describe {entity_type} {entity_name}: {e.args[0].str()}")
    print(f"Configs for {entity_type.rstrip('s')} {entity_name} are:", file=out)
    for key in sorted(entries):
        e = entries[key]
        print(f"  {key}={e.value} ({ConfigSource(e.source).name})", file=out)


def configs_alter(bootstrap: str, entity_type: str, entity_name: str, set_configs: dict[str, str], delete_configs: list[str], client: AdminClient | None = None) -> bool:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    client = client or admin(bootstrap)
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in set_configs.items()]
    entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in delete_configs]
    resource = ConfigResource(_resource_type(entity_type), entity_name, incremental_configs=entries)
    ok = _wait(client.incremental_alter_configs([resource]), "cannot alter configs of")
    if ok:
        print(f"Completed updating config for {entity_type.rstrip('s')} {entity_name}.")
    return ok


def _resource_type(entity_type: str) -> ResourceType:
    if entity_type in ("topics", "topic"):
        return ResourceType.TOPIC
    if entity_type in ("brokers", "broker"):
        return ResourceType.BROKER
    fail(f"unknown entity type {entity_type} (topics or brokers)")


def produce(bootstrap: str, topic: str, key_separator: str | None, headers: dict[str, str], partition: int | None, stdin: TextIO = sys.stdin, extra: dict[str, str] | None = None) -> None:
    admin(bootstrap)
    producer = Producer(_client_config(bootstrap, extra))
    errors: list[str] = []

    def on_delivery(err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            errors.append(err.str())

    count = 0
    for line in stdin:
        line = line.rstrip("\n")
        key: str | None = None
        value = line
        if key_separator is not None and key_separator in line:
            key, value = line.split(key_separator, 1)
        kwargs: dict[str, Any] = {"value": value.encode(), "key": key.encode() if key is not None else None, "on_delivery": on_delivery}
        if headers:
            kwargs["headers"] = [(k, v.encode()) for k, v in headers.items()]
        if partition is not None:
            kwargs["partition"] = partition
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
        count += 1
    remaining = producer.flush(30)
    if errors or remaining:
        fail(f"{len(errors) + remaining} of {count} records not delivered: {errors[:1]}")


def consume(bootstrap: str, topic: str, from_beginning: bool, partition: int | None, offset: int | None, max_messages: int | None, timeout_ms: int | None, print_key: bool, key_separator: str, out: TextIO | None = None) -> None:
    client = admin(bootstrap)
    metadata = client.list_topics(topic=topic, timeout=CONNECT_TIMEOUT_S).topics.get(topic)
    if metadata is None or metadata.error is not None:
        fail(f"topic {topic} does not exist")
    consumer = Consumer(_client_config(bootstrap, {"group.id": "kbroker-cli", "enable.auto.commit": "false", "enable.partition.eof": "false", "fetch.queue.backoff.ms": "0"}))
    partitions = [partition] if partition is not None else sorted(metadata.partitions)
    if offset is not None:
        start = offset
    elif from_beginning:
        start = -2  # OFFSET_BEGINNING
    else:
        start = -1  # OFFSET_END
    consumer.assign([TopicPartition(topic, p, start) for p in partitions])
    seen = 0
    deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000
    try:
        while max_messages is None or seen < max_messages:
            if deadline is not None and time.monotonic() > deadline:
                break
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                fail(msg.error().str())
            value = msg.value()
            text = "null" if value is None else value.decode("utf-8", "replace")
            if print_key:
                key = msg.key()
                text = ("null" if key is None else key.decode("utf-8", "replace")) + key_separator + text
            print(text, file=out, flush=True)
            seen += 1
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()
    print(f"Processed a total of {seen} messages", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# kbroker groups: kafka-consumer-groups.sh's list / describe / delete / reset-offsets.
# ---------------------------------------------------------------------------------------------

# Kafka's names for the group states (GroupState / ConsumerGroupState.toString).
GROUP_STATE_NAMES = {
    "UNKNOWN": "Unknown",
    "PREPARING_REBALANCING": "PreparingRebalance",
    "COMPLETING_REBALANCING": "CompletingRebalance",
    "STABLE": "Stable",
    "DEAD": "Dead",
    "EMPTY": "Empty",
}
RESET_SCENARIOS = ("to-earliest", "to-latest", "to-current", "to-offset", "shift-by", "to-datetime")
MISSING = "-"


def group_state_name(state: Any) -> str:
    """Kafka's spelling of a confluent-kafka ConsumerGroupState (or of a string)."""
    if state is None:
        return "Unknown"
    name = getattr(state, "name", str(state))
    return GROUP_STATE_NAMES.get(name, name)


def parse_group_states(text: str) -> set[Any]:
    """'Stable,empty' -> {ConsumerGroupState.STABLE, ConsumerGroupState.EMPTY}; case-insensitive, as Kafka."""
    from confluent_kafka import ConsumerGroupState

    by_name = {kafka.lower(): ConsumerGroupState[ours] for ours, kafka in GROUP_STATE_NAMES.items()}
    states: set[Any] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if part.lower() not in by_name:
            fail(f"unknown group state '{part}'; valid states: {', '.join(GROUP_STATE_NAMES.values())}")
        states.add(by_name[part.lower()])
    return states


def parse_topic_partitions(spec: str) -> tuple[str, list[int] | None]:
    """'orders' -> ('orders', None) (every partition); 'orders:0,2' -> ('orders', [0, 2])."""
    topic, sep, parts = spec.partition(":")
    if not topic:
        fail(f"bad --topic '{spec}': expected TOPIC or TOPIC:P[,P...]")
    if not sep:
        return topic, None
    out: list[int] = []
    for p in parts.split(","):
        p = p.strip()
        if not p.isdigit():
            fail(f"bad --topic '{spec}': partition '{p}' is not a number")
        out.append(int(p))
    if not out:
        fail(f"bad --topic '{spec}': no partitions after ':'")
    return topic, sorted(set(out))


def parse_datetime_ms(text: str) -> int:
    """Kafka's --to-datetime: 'YYYY-MM-DDTHH:mm:SS.sss' with an optional zone ('Z', '+01:00'); no zone = local time."""
    from datetime import datetime

    raw = text.strip()
    try:
        moment = datetime.fromisoformat(raw[:-1] + "+00:00" if raw.endswith("Z") else raw)
    except ValueError:
        fail(f"bad --to-datetime '{text}': expected YYYY-MM-DDTHH:mm:SS.sss[zone], e.g. 2024-01-31T12:00:00.000")
    if moment.tzinfo is None:
        moment = moment.astimezone()  # local time zone, as Kafka's tool does
    return int(moment.timestamp() * 1000)


def format_table(header: list[str], rows: list[list[str]], fixed: dict[int, int] | None = None) -> str:
    """Columns left-aligned like kafka-consumer-groups.sh: variable columns at least 15 wide, the last unpadded."""
    fixed = fixed or {}
    widths = []
    for i, name in enumerate(header):
        widths.append(fixed.get(i) or max([15, len(name)] + [len(r[i]) for r in rows]))
    lines = []
    for row in [header, *rows]:
        cells = [cell.ljust(widths[i]) if i < len(row) - 1 else cell for i, cell in enumerate(row)]
        lines.append(" ".join(cells).rstrip())
    return "\n".join(lines)


OFFSETS_HEADER = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
OFFSETS_FIXED = {2: 10, 3: 15, 4: 15, 5: 15}


def offsets_rows(group: str, description: Any, committed: dict[tuple[str, int], int], log_end: dict[tuple[str, int], int]) -> list[list[str]]:
    """One row per partition (assigned or committed), then one per member without partitions."""
    owner: dict[tuple[str, int], Any] = {}
    idle: list[Any] = []
    for member in (description.members if description is not None else []):
        tps = list(member.assignment.topic_partitions) if member.assignment is not None else []
        if not tps:
            idle.append(member)
        for tp in tps:
            owner[(tp.topic, tp.partition)] = member
    rows: list[list[str]] = []
    for key in sorted(set(owner) | set(committed)):
        current = committed.get(key)
        end = log_end.get(key)
        lag = MISSING if current is None or end is None else str(max(end - current, 0))
        member = owner.get(key)
        rows.append([
            group, key[0], str(key[1]),
            MISSING if current is None else str(current),
            MISSING if end is None else str(end),
            lag,
            member.member_id if member else MISSING,
            member.host if member else MISSING,
            member.client_id if member else MISSING,
        ])
    for member in sorted(idle, key=lambda m: m.member_id):
        rows.append([group, MISSING, MISSING, MISSING, MISSING, MISSING, member.member_id, member.host, member.client_id])
    return rows


def _describe_groups(client: AdminClient, groups: list[str]) -> dict[str, Any]:
    """group -> ConsumerGroupDescription, or None when the group does not exist."""
    out: dict[str, Any] = {}
    for group, fut in client.describe_consumer_groups(groups, request_timeout=30).items():
        try:
            desc = fut.result(timeout=30)
        except KafkaException as e:
            err = e.args[0]
            if err.code() == KafkaError.GROUP_ID_NOT_FOUND:
                out[group] = None
                continue
            fail(f"cannot describe group {group}: {err.str()}")
        out[group] = None if group_state_name(desc.state) == "Dead" else desc
    return out


def _committed_offsets(client: AdminClient, group: str) -> dict[tuple[str, int], int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    fut = client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=30)[group]
    try:
        result = fut.result(timeout=30)
    except KafkaException as e:
        fail(f"cannot fetch the committed offsets of group {group}: {e.args[0].str()}")
    out: dict[tuple[str, int], int] = {}
    for tp in result.topic_partitions or []:
        if tp.error is not None:
            fail(f"cannot fetch the committed offset of group {group} for {tp.topic}-{tp.partition}: {tp.error.str()}")
        if tp.offset >= 0:
            out[(tp.topic, tp.partition)] = tp.offset
    return out


def _list_offsets(client: AdminClient, keys: list[tuple[str, int]], spec: Any) -> dict[tuple[str, int], int]:
    """ListOffsets for (topic, partition) pairs; -1 where the broker found none (a timestamp past the end)."""
    if not keys:
        return {}
    futures = client.list_offsets({TopicPartition(t, p): spec for t, p in keys}, request_timeout=30)
    out: dict[tuple[str, int], int] = {}
    for tp, fut in futures.items():
        try:
            out[(tp.topic, tp.partition)] = int(fut.result(timeout=30).offset)
        except KafkaException as e:
            fail(f"cannot list offsets of {tp.topic}-{tp.partition}: {e.args[0].str()}")
    return out


def _all_group_ids(client: AdminClient, states: set[Any] | None = None) -> list[Any]:
    kwargs: dict[str, Any] = {"request_timeout": 30}
    if states:
        kwargs["states"] = states
    try:
        result = client.list_consumer_groups(**kwargs).result(timeout=30)
    except KafkaException as e:
        fail(f"cannot list groups: {e.args[0].str()}")
    for err in result.errors or []:
        fail(f"cannot list groups: {err.str() if hasattr(err, 'str') else err}")
    return sorted(result.valid or [], key=lambda g: g.group_id)


def groups_list(bootstrap: str, states: str | None, out: TextIO | None = None) -> None:
    """`--list`: group ids; with `--state [S,S]` a GROUP/STATE table filtered by the broker (ListGroups v4)."""
    client = admin(bootstrap)
    if states is None:
        for listing in _all_group_ids(client):
            print(listing.group_id, file=out)
        return
    rows = [[g.group_id, group_state_name(g.state)] for g in _all_group_ids(client, parse_group_states(states) if states else None)]
    width = max([len(r[0]) for r in rows], default=5) + 10
    print(format_table(["GROUP", "STATE"], rows, {0: width}), file=out)


def _resolve_groups(client: AdminClient, groups: list[str] | None, all_groups: bool) -> list[str]:
    if all_groups:
        return [g.group_id for g in _all_group_ids(client)]
    if not groups:
        fail("one of --group or --all-groups is required")
    return list(dict.fromkeys(groups))


def groups_describe(bootstrap: str, groups: list[str] | None, all_groups: bool, members: bool = False, state: bool = False, verbose: bool = False, out: TextIO | None = None) -> None:
    client = admin(bootstrap)
    names = _resolve_groups(client, groups, all_groups)
    if not names:
        return
    descriptions = _describe_groups(client, names)
    missing = [g for g in names if descriptions[g] is None]
    for group in names:
        desc = descriptions[group]
        if group in missing:
            print(f"\nError: Consumer group '{group}' does not exist.", file=sys.stderr)
            continue
        state_name = group_state_name(desc.state)
        if state:
            coordinator = desc.coordinator
            coord = f"{coordinator.host}:{coordinator.port}  ({coordinator.id})" if coordinator is not None else MISSING
            row = [group, coord, desc.partition_assignor or "", state_name, str(len(desc.members))]
            print("\n" + format_table(["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"], [row], {0: max(15, len(group)), 1: max(25, len(coord))}), file=out)
            continue
        if state_name == "Empty":
            print(f"\nConsumer group '{group}' has no active members.", file=sys.stderr)
        elif state_name in ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"):
            print(f"\nWarning: Consumer group '{group}' is rebalancing.", file=sys.stderr)
        if members:
            rows = []
            for m in sorted(desc.members, key=lambda m: m.member_id):
                tps = sorted((tp.topic, tp.partition) for tp in (m.assignment.topic_partitions if m.assignment else []))
                row = [group, m.member_id, m.group_instance_id or MISSING, m.host, m.client_id, str(len(tps))]
                if verbose:
                    by_topic: dict[str, list[int]] = {}
                    for t, p in tps:
                        by_topic.setdefault(t, []).append(p)
                    row.append(",".join(f"{t}({','.join(map(str, ps))})" for t, ps in sorted(by_topic.items())) or MISSING)
                rows.append(row)
            header = ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS"] + (["ASSIGNMENT"] if verbose else [])
            if rows:
                print("\n" + format_table(header, rows, {5: 12}), file=out)
            continue
        committed = _committed_offsets(client, group)
        keys = set(committed)
        for m in desc.members:
            keys |= {(tp.topic, tp.partition) for tp in (m.assignment.topic_partitions if m.assignment else [])}
        from confluent_kafka.admin import OffsetSpec

        log_end = _list_offsets(client, sorted(keys), OffsetSpec.latest())
        rows = offsets_rows(group, desc, committed, log_end)
        if rows:
            print("\n" + format_table(OFFSETS_HEADER, rows, OFFSETS_FIXED), file=out)
    if missing:
        raise SystemExit(1)


def groups_delete(bootstrap: str, groups: list[str] | None, all_groups: bool, out: TextIO | None = None) -> None:
    client = admin(bootstrap)
    names = _resolve_groups(client, groups, all_groups)
    if not names:
        print("No consumer groups to delete.", file=out)
        return
    failed: dict[str, str] = {}
    for group, fut in client.delete_consumer_groups(names, request_timeout=30).items():
        try:
            fut.result(timeout=30)
        except KafkaException as e:
            failed[group] = e.args[0].str() if hasattr(e.args[0], "str") else str(e.args[0])
    deleted = [g for g in names if g not in failed]

    def quoted(gs: list[str]) -> str:
        return ", ".join(f"'{g}'" for g in gs)

    if not failed:
        print(f"Deletion of requested consumer groups ({quoted(deleted)}) was successful.", file=out)
        return
    print("Error: Deletion of some consumer groups failed:", file=sys.stderr)
    for group, reason in failed.items():
        print(f"* Group '{group}' could not be deleted due to: {reason}", file=sys.stderr)
    if deleted:
        print(f"\nThese consumer groups were deleted successfully: {quoted(deleted)}", file=out)
    raise SystemExit(1)


def plan_reset(
    scenario: str,
    value: Any,
    keys: list[tuple[str, int]],
    committed: dict[tuple[str, int], int],
    earliest: dict[tuple[str, int], int],
    latest: dict[tuple[str, int], int],
    by_time: dict[tuple[str, int], int] | None = None,
    warn: TextIO | None = None,
) -> dict[tuple[str, int], int]:
    """Kafka's ResetOffsets arithmetic: the new offset of every partition, kept within [earliest, latest]."""
    plan: dict[tuple[str, int], int] = {}
    for key in keys:
        topic_partition = f"{key[0]}-{key[1]}"
        if scenario == "to-earliest":
            plan[key] = earliest[key]
            continue
        if scenario == "to-latest":
            plan[key] = latest[key]
            continue
        if scenario == "to-current":
            plan[key] = committed.get(key, latest[key])
            continue
        if scenario == "to-datetime":
            found = (by_time or {}).get(key, -1)
            plan[key] = found if found >= 0 else latest[key]
            continue
        if scenario == "to-offset":
            wanted = int(value)
        elif scenario == "shift-by":
            if key not in committed:
                fail(f"Cannot shift offset for partition {topic_partition} since there is no current committed offset")
            wanted = committed[key] + int(value)
        else:
            fail(f"unknown reset scenario {scenario}")
        if wanted > latest[key]:
            print(f"New offset ({wanted}) is higher than latest offset for topic partition {topic_partition}. Value will be set to {latest[key]}", file=warn or sys.stderr)
            wanted = latest[key]
        elif wanted < earliest[key]:
            print(f"New offset ({wanted}) is lower than earliest offset for topic partition {topic_partition}. Value will be set to {earliest[key]}", file=warn or sys.stderr)
            wanted = earliest[key]
        plan[key] = wanted
    return plan


def format_reset_plan(plans: dict[str, dict[tuple[str, int], int]]) -> str:
    rows = [[g, t, str(p), str(off)] for g, plan in plans.items() for (t, p), off in sorted(plan.items())]
    return format_table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], rows, {2: 10})


def groups_reset_offsets(
    bootstrap: str,
    groups: list[str] | None,
    all_groups: bool,
    topics: list[str] | None,
    all_topics: bool,
    scenario: str,
    value: Any,
    execute: bool,
    dry_run: bool,
    out: TextIO | None = None,
) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import OffsetSpec

    if not topics and not all_topics:
        fail("reset-offsets needs --topic TOPIC[:P,P] or --all-topics")
    if not execute and not dry_run:
        print(
            "WARN: No action will be performed as the --execute option is missing. "
            "Add --dry-run to keep this behaviour explicitly, or --execute to reset the offsets.",
            file=sys.stderr,
        )
    when_ms = parse_datetime_ms(value) if scenario == "to-datetime" else None
    client = admin(bootstrap)
    names = _resolve_groups(client, groups, all_groups)
    descriptions = _describe_groups(client, names)
    for group in names:
        desc = descriptions[group]
        state_name = group_state_name(desc.state) if desc is not None else "Dead"
        if state_name not in ("Empty", "Dead"):
            fail(f"Assignments can only be reset if the group '{group}' is inactive, but the current state is {state_name}.")

    requested: list[tuple[str, int]] = []
    if topics:
        specs = [parse_topic_partitions(t) for t in topics]
        for topic, parts in specs:
            metadata = client.list_topics(topic=topic, timeout=CONNECT_TIMEOUT_S).topics.get(topic)
            if metadata is None or metadata.error is not None:
                fail(f"topic {topic} does not exist")
            existing = sorted(metadata.partitions)
            for p in parts if parts is not None else existing:
                if p not in existing:
                    fail(f"partition {topic}-{p} does not exist (the topic has {len(existing)} partitions)")
                requested.append((topic, p))

    plans: dict[str, dict[tuple[str, int], int]] = {}
    for group in names:
        committed = _committed_offsets(client, group)
        keys = sorted(set(requested)) if topics else sorted(committed)
        if not keys:
            plans[group] = {}
            continue
        earliest = _list_offsets(client, keys, OffsetSpec.earliest())
        latest = _list_offsets(client, keys, OffsetSpec.latest())
        by_time = _list_offsets(client, keys, OffsetSpec.for_timestamp(when_ms)) if when_ms is not None else None
        if by_time is not None:
            for key, off in by_time.items():
                if off < 0:
                    print(f"\nWarn: Partition {key[1]} from topic {key[0]} is empty. Falling back to latest known offset.", file=sys.stderr)
        plans[group] = plan_reset(scenario, value, keys, committed, earliest, latest, by_time)

    if execute:
        for group, plan in plans.items():
            if not plan:
                continue
            tps = [TopicPartition(t, p, off) for (t, p), off in sorted(plan.items())]
            fut = client.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)], request_timeout=30)[group]
            try:
                result = fut.result(timeout=30)
            except KafkaException as e:
                err = e.args[0]
                fail(f"cannot reset the offsets of group {group}: {err.str() if hasattr(err, 'str') else err}")
            for tp in result.topic_partitions or []:
                if tp.error is not None:
                    fail(f"cannot reset the offset of group {group} for {tp.topic}-{tp.partition}: {tp.error.str()}")
    print("\n" + format_reset_plan(plans), file=out)


# kafka-leader-election.sh's --election-type, as ElectLeaders' election types.
ELECTION_TYPES = {"preferred": ElectionType.PREFERRED, "unclean": ElectionType.UNCLEAN}
ELECTION_TIMEOUT_S = 30.0  # the Kafka tool's default API timeout


def parse_election_partitions(text: str) -> list[tuple[str, int]]:
    """kafka-leader-election.sh's --path-to-json-file: {"partitions": [{"topic": "t", "partition": 0}, ...]}."""
    try:
        data = json.loads(text) if text.strip() else None
    except json.JSONDecodeError as e:
        fail(f"the replica election data is not JSON: {e}")
    if not data:
        fail("Replica election data is empty")
    if not isinstance(data, dict) or "partitions" not in data:
        fail('Replica election data is missing "partitions" field')
    try:
        partitions = [(str(entry["topic"]), int(entry["partition"])) for entry in data["partitions"]]
    except (KeyError, TypeError, ValueError) as e:
        fail(f"Replica election data has an invalid partition entry: {e!r}")
    repeated = sorted({tp for tp in partitions if partitions.count(tp) > 1})
    if repeated:
        fail(f"Replica election data contains duplicate partitions: [{', '.join(f'{t}-{p}' for t, p in repeated)}]")
    return partitions


def _java_exception(err: KafkaError) -> str:
    """How Kafka's tool names an error: its exception class, Kafka's name of the error in CamelCase
    (librdkafka's names differ: UNKNOWN_TOPIC_OR_PART). REQUEST_TIMED_OUT, met when no controller
    answers a forwarded election, is Kafka's TimeoutException."""
    try:
        kafka_name = "timeout" if err.code() == KafkaError.REQUEST_TIMED_OUT else ErrorCode(err.code()).name
    except ValueError:
        kafka_name = err.name().lower()
    return "org.apache.kafka.common.errors." + "".join(w.capitalize() for w in kafka_name.split("_")) + "Exception"


def leader_election(bootstrap: str, election_type: str, partitions: list[tuple[str, int]] | None) -> int:
    """kafka-leader-election.sh: elect the preferred (or, with none in sync, any live) replica of the
    partitions, None meaning every partition; prints what Kafka's tool prints, 1 if any failed."""
    kind = ELECTION_TYPES[election_type]
    client = admin(bootstrap)
    wanted = None if partitions is None else [TopicPartition(t, p) for t, p in partitions]
    # No request_timeout: confluent-kafka 2.16's binding refuses every keyword argument of elect_leaders.
    future = client.elect_leaders(kind, wanted)
    try:
        results = future.result(timeout=ELECTION_TIMEOUT_S)
    except concurrent.futures.TimeoutError:
        print("Timeout waiting for election results")
        fail("Timeout waiting for election results")
    except KafkaException as e:
        err = e.args[0]
        if err.code() in (KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT):
            print("Timeout waiting for election results")
        elif err.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED:
            print("Not authorized to perform leader election")
        fail(err.str())
    succeeded: list[str] = []
    not_needed: list[str] = []
    failed: list[tuple[str, KafkaError]] = []
    for tp in sorted(results, key=lambda tp: (tp.topic, tp.partition)):
        name = f"{tp.topic}-{tp.partition}"
        # Each value is None or the partition's KafkaError (documented as a KafkaException: both are taken).
        error = results[tp]
        if isinstance(error, KafkaException):
            error = error.args[0]
        if error is None:
            succeeded.append(name)
        elif error.code() == KafkaError.ELECTION_NOT_NEEDED:
            not_needed.append(name)
        else:
            failed.append((name, error))
    if succeeded:
        print(f"Successfully completed leader election ({kind.name}) for partitions {', '.join(succeeded)}")
    if not_needed:
        print(f"Valid replica already elected for partitions {', '.join(not_needed)}")
    for name, err in failed:
        print(f"Error completing leader election ({kind.name}) for partition: {name}: {_java_exception(err)}: {err.str()}")
    if failed:
        print(f"error: {len(failed)} replica(s) could not be elected", file=sys.stderr)
        return 1
    return 0
