"""The `kbroker` source and sink options, checked the way Spark's Kafka connector checks them.

Sans-IO: options in (a case-insensitive mapping, as Spark hands them over), frozen dataclasses
out, `KBrokerOptionError` with the connector's wording for anything wrong. The dataclasses
are pickled to Spark's executors with the readers and writers.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Mapping

# The offsets Spark's Kafka connector uses in its JSON for "earliest" and "latest".
EARLIEST = -2
LATEST = -1

KAFKA_PREFIX = "kafka."
# Kafka-client properties Spark refuses because the connector manages them itself.
_UNSUPPORTED_CLIENT_PROPS = {
    "auto.offset.reset": "Kafka option 'auto.offset.reset' is not supported. Instead set the source option "
    "'startingOffsets' to 'earliest' or 'latest' to specify where to start.",
    "key.deserializer": "Kafka option 'key.deserializer' is not supported, as keys are always read as byte arrays.",
    "value.deserializer": "Kafka option 'value.deserializer' is not supported, as values are always read as byte arrays.",
    "enable.auto.commit": "Kafka option 'enable.auto.commit' is not supported, as offsets are kept in Spark's checkpoint.",
    "interceptor.classes": "Kafka option 'interceptor.classes' is not supported.",
}
_UNSUPPORTED_SINK_PROPS = {
    "key.serializer": "Kafka option 'key.serializer' is not supported, as keys are always written as byte arrays.",
    "value.serializer": "Kafka option 'value.serializer' is not supported, as values are always written as byte arrays.",
}
_STRATEGIES = ("assign", "subscribe", "subscribepattern")
DEFAULT_POLL_TIMEOUT_MS = 120_000
DEFAULT_GROUP_ID_PREFIX = "spark-kbroker-source"

TopicPartition = tuple[str, int]


class KBrokerOptionError(ValueError):
    """A bad option: raised while Spark loads the source, before any job runs."""


@dataclass(frozen=True)
class Subscription:
    """Which partitions a query reads: `subscribe`, `subscribePattern` or `assign`."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[TopicPartition, ...] = ()

    def matches(self, topic: str) -> bool:
        if self.assigned:
            return any(t == topic for t, _ in self.assigned)
        if self.pattern is not None:
            # Java's Pattern.matches: the whole name; internal topics only when named.
            return not topic.startswith("__") and re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics


@dataclass(frozen=True)
class OffsetSpec:
    """`earliest`, `latest`, or explicit offsets per partition (EARLIEST/LATEST allowed as values)."""

    default: int
    per_partition: tuple[tuple[TopicPartition, int], ...] = ()

    def as_dict(self) -> dict[TopicPartition, int]:
        return dict(self.per_partition)


@dataclass(frozen=True)
class SourceOptions:
    bootstrap_servers: str
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    include_headers: bool
    poll_timeout_ms: int
    client_config: tuple[tuple[str, str], ...] = field(default=())

    def consumer_config(self, group_id: str) -> dict[str, str | bool | int]:
        """confluent-kafka consumer settings: kafka.* options over the connector's own."""
        conf: dict[str, str | bool | int] = {
            "bootstrap.servers": self.bootstrap_servers,
            # No group is ever joined (partitions are assigned), nothing is committed: librdkafka
            # still wants an id, as Spark's connector sets one.
            "group.id": group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "fetch.queue.backoff.ms": 0,
        }
        conf.update(dict(self.client_config))
        return conf


@dataclass(frozen=True)
class SinkOptions:
    bootstrap_servers: str
    topic: str | None
    client_config: tuple[tuple[str, str], ...] = ()

    def producer_config(self) -> dict[str, str | int]:
        """confluent-kafka producer settings with the Java producer's defaults Spark relies on.

        `murmur2_random` is librdkafka's Java-compatible partitioner: a keyed record lands where
        the Java client (and so Spark's connector) puts it; librdkafka's own default is crc32.
        """
        conf: dict[str, str | int] = {
            "bootstrap.servers": self.bootstrap_servers,
            "acks": "all",
            "partitioner": "murmur2_random",
            "linger.ms": 5,
        }
        conf.update(dict(self.client_config))
        return conf


def _lower_keys(options: Mapping[str, str]) -> dict[str, str]:
    """Option names are case-insensitive, as in Spark (whose options mapping already lowers them)."""
    return {k.lower(): v for k, v in options.items()}


def _client_config(options: Mapping[str, str], refused: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    conf = []
    for key, value in options.items():
        if not key.startswith(KAFKA_PREFIX) or key == "kafka.bootstrap.servers":
            continue
        prop = key[len(KAFKA_PREFIX):]
        if prop in refused:
            raise KBrokerOptionError(refused[prop])
        conf.append((prop, str(value)))
    return tuple(sorted(conf))


def _bootstrap(options: Mapping[str, str], role: str) -> str:
    servers = str(options.get("kafka.bootstrap.servers", "")).strip()
    if not servers:
        raise KBrokerOptionError(f"Option 'kafka.bootstrap.servers' must be specified for configuring Kafka {role}")
    return servers


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = str(options.get(name.lower(), str(default))).strip().lower()
    if raw not in ("true", "false"):
        raise KBrokerOptionError(f"Option '{name}' must be 'true' or 'false', got '{options.get(name.lower())}'")
    return raw == "true"


def _positive_int(options: Mapping[str, str], name: str) -> int | None:
    raw = options.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = 0
    if value <= 0:
        raise KBrokerOptionError(f"Option '{name}' must be a positive integer, got '{raw}'")
    return value


def _json(text: str, what: str, shape: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise KBrokerOptionError(f"Invalid JSON in option '{what}': {e.msg} (at char {e.pos}); expected {shape}, got '{text}'") from None


def parse_subscription(options: Mapping[str, str]) -> Subscription:
    given = [s for s in _STRATEGIES if s in options]
    if not given:
        raise KBrokerOptionError(
            "One of the following options must be specified for Kafka source: subscribe, subscribePattern, assign. "
            "See the docs for more details."
        )
    if len(given) > 1:
        raise KBrokerOptionError(
            "Only one of the following options can be specified for Kafka source: subscribe, subscribePattern, assign. "
            f"Got: {', '.join(given)}"
        )
    strategy, raw = given[0], str(options[given[0]]).strip()
    if strategy == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise KBrokerOptionError(f"No topics to subscribe to as specified value for option 'subscribe' is '{raw}'")
        return Subscription(topics=topics)
    if strategy == "subscribepattern":
        if not raw:
            raise KBrokerOptionError("Pattern to subscribe is empty as specified value for option 'subscribePattern' is ''")
        try:
            re.compile(raw)
        except re.error as e:
            raise KBrokerOptionError(f"Invalid regular expression in option 'subscribePattern': {e}") from None
        return Subscription(pattern=raw)
    shape = 'a JSON object of topic to partition list, e.g. {"topicA":[0,1],"topicB":[2,4]}'
    parsed = _json(raw, "assign", shape)
    if not isinstance(parsed, dict) or not parsed or not all(
        isinstance(ps, list) and all(isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in ps) for ps in parsed.values()
    ):
        raise KBrokerOptionError(f"Option 'assign' must be {shape}, got '{raw}'")
    return Subscription(assigned=tuple(sorted((str(t), p) for t, ps in parsed.items() for p in ps)))


def parse_offsets(options: Mapping[str, str], name: str, default: int, allowed: tuple[int, ...]) -> OffsetSpec:
    """`earliest` / `latest` / `{"topic":{"0":23,"1":-1}}`; `allowed` says which of the two words may appear."""
    raw = options.get(name.lower())
    if raw is None:
        return OffsetSpec(default)
    text = str(raw).strip()
    words = {"earliest": EARLIEST, "latest": LATEST}
    if text.lower() in words:
        value = words[text.lower()]
        if value not in allowed:
            raise KBrokerOptionError(f"{name} '{text}' is not allowed here")
        return OffsetSpec(value)
    shape = 'earliest, latest or a JSON object such as {"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
    parsed = _json(text, name, shape)
    if not isinstance(parsed, dict) or not parsed:
        raise KBrokerOptionError(f"Option '{name}' must be {shape}, got '{text}'")
    per_partition: list[tuple[TopicPartition, int]] = []
    for topic, offsets in parsed.items():
        if not isinstance(offsets, dict) or not offsets:
            raise KBrokerOptionError(f"Option '{name}' must be {shape}, got '{text}'")
        for partition, offset in offsets.items():
            if not str(partition).isdigit() or not isinstance(offset, int) or isinstance(offset, bool) or offset < EARLIEST:
                raise KBrokerOptionError(f"Option '{name}': bad partition/offset {partition!r}: {offset!r} for topic '{topic}'")
            if offset < 0 and offset not in allowed:
                raise KBrokerOptionError(f"Option '{name}': offset {offset} is not allowed here (topic '{topic}', partition {partition})")
            per_partition.append(((str(topic), int(partition)), offset))
    return OffsetSpec(default, tuple(sorted(per_partition)))


def source_options(options: Mapping[str, str], streaming: bool | None) -> SourceOptions:
    """Streaming: starting defaults to latest, no endingOffsets. Batch: earliest to latest.

    `streaming=None` is Spark's load(), which does not say which kind of query follows: the
    checks both kinds share run there, the rest when the reader is made.
    """
    options = _lower_keys(options)
    bootstrap = _bootstrap(options, "consumer")
    subscription = parse_subscription(options)
    if streaming is None:
        starting = parse_offsets(options, "startingOffsets", LATEST, (EARLIEST, LATEST))
        ending = parse_offsets(options, "endingOffsets", LATEST, (LATEST,))
    elif streaming:
        if "endingoffsets" in options:
            raise KBrokerOptionError("Ending offset not valid in streaming queries")
        starting = parse_offsets(options, "startingOffsets", LATEST, (EARLIEST, LATEST))
        ending = OffsetSpec(LATEST)
    else:
        starting = parse_offsets(options, "startingOffsets", EARLIEST, (EARLIEST,))
        ending = parse_offsets(options, "endingOffsets", LATEST, (LATEST,))
        if "maxoffsetspertrigger" in options:
            raise KBrokerOptionError("Option 'maxOffsetsPerTrigger' is only for streaming queries")
    for spec, name in ((starting, "startingOffsets"), (ending, "endingOffsets")):
        _check_offsets_in_subscription(spec, subscription, name)
    return SourceOptions(
        bootstrap_servers=bootstrap,
        subscription=subscription,
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=_positive_int(options, "maxOffsetsPerTrigger"),
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        include_headers=_bool(options, "includeHeaders", False),
        poll_timeout_ms=_positive_int(options, "kafkaConsumer.pollTimeoutMs") or DEFAULT_POLL_TIMEOUT_MS,
        client_config=_client_config(options, _UNSUPPORTED_CLIENT_PROPS),
    )


def _check_offsets_in_subscription(spec: OffsetSpec, subscription: Subscription, name: str) -> None:
    if subscription.assigned:
        extra = {tp for tp, _ in spec.per_partition} - set(subscription.assigned)
        if extra:
            raise KBrokerOptionError(f"Option '{name}' names partitions that are not assigned: {sorted(extra)}")
        return
    stray = sorted({t for (t, _), _ in spec.per_partition if not subscription.matches(t)})
    if stray:
        raise KBrokerOptionError(f"Option '{name}' names topics outside the subscription: {stray}")


def sink_options(options: Mapping[str, str]) -> SinkOptions:
    options = _lower_keys(options)
    topic = options.get("topic")
    return SinkOptions(
        bootstrap_servers=_bootstrap(options, "producer"),
        topic=str(topic).strip() or None if topic is not None else None,
        client_config=_client_config(options, _UNSUPPORTED_SINK_PROPS),
    )
