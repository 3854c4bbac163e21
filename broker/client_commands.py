"""The CLI's client commands: plain Kafka clients (confluent-kafka) that work against any broker."""

from __future__ import annotations

import sys
import time
from typing import Any, NoReturn, TextIO

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewPartitions, NewTopic, ResourceType

CONNECT_TIMEOUT_S = 10.0


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


def topics_list(bootstrap: str, out: TextIO = sys.stdout) -> None:
    metadata = admin(bootstrap).list_topics(timeout=CONNECT_TIMEOUT_S)
    for name in sorted(metadata.topics):
        print(name, file=out)


def topics_describe(bootstrap: str, name: str | None, out: TextIO = sys.stdout) -> None:
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
        for index in sorted(parts):
            p = parts[index]
            print(f"\tTopic: {n}\tPartition: {index}\tLeader: {p.leader}\tReplicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isrs))}", file=out)


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


def configs_describe(bootstrap: str, entity_type: str, entity_name: str, out: TextIO = sys.stdout) -> None:
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


def consume(bootstrap: str, topic: str, from_beginning: bool, partition: int | None, offset: int | None, max_messages: int | None, timeout_ms: int | None, print_key: bool, key_separator: str, out: TextIO = sys.stdout) -> None:
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
