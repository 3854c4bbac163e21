"""Client metrics (KIP-714): subscriptions, GetTelemetrySubscriptions and PushTelemetry, sans-IO.

Kafka 4.4's ClientMetricsManager; a subscription's configs and matching are in
broker/client_metrics_config.py, the pushed payload's codec in protocol/otlp_metrics.py.

- A subscription is a CLIENT_METRICS config resource (type 16) named by the operator, with three
  configs: ``metrics`` (metric name prefixes, ``*`` for all), ``interval.ms`` (the push interval,
  100 ms to one hour, 5 minutes by default) and ``match`` (``selector=regex`` pairs over the
  client's instance id, client id, software name and version, source address and port; no
  pattern matches every client). ``validate`` refuses a config set with Kafka's errors and
  messages; the controller calls it before writing the ConfigRecords.
- A client asks GetTelemetrySubscriptions with the zero UUID and is given an instance id; it
  gets the union of the metrics of every subscription it matches, the shortest of their
  intervals, a subscription id that changes with them, the compression types the broker takes,
  delta temporality and ``telemetry.max.bytes``.
- It pushes each interval (PushTelemetry); the rules and their order are Kafka's: a terminated
  client is refused (INVALID_REQUEST), a push before its interval is throttled
  (THROTTLING_QUOTA_EXCEEDED; the first push after a GetTelemetrySubscriptions is taken early, as
  clients add jitter), a stale subscription id is UNKNOWN_SUBSCRIPTION_ID, an unknown codec
  UNSUPPORTED_COMPRESSION_TYPE, a payload over ``telemetry.max.bytes`` TELEMETRY_TOO_LARGE.
- Kafka hands an accepted payload to a ClientTelemetry plugin; kbroker keeps the latest push of
  each client instance, decompressed and decoded (``latest_pushes``), for its own metrics
  endpoint. A payload that does not decompress or decode is INVALID_RECORD, as Kafka answers
  when its plugin fails.

Client instances live in a bounded LRU cache (16384 entries, as Kafka's), each expiring after
max(60 s, 3 push intervals) without a request, or dropped at once when the connection it was made
(or last re-made for new subscriptions) on closes: Kafka's ClientConnectionDisconnectListener,
which its SocketServer calls, and ``connection_closed`` here, which broker/network.py's calls.
Everything here takes the time as an argument.
"""

from __future__ import annotations

import uuid
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Mapping

import lz4.frame
import zstandard
from kio.schema.errors import ErrorCode

from broker.client_metrics_config import (
    ALL_SUBSCRIBED_METRICS,
    INTERVAL_MS_DEFAULT,
    ClientAttributes,
    ClientMetricsConfigError,
    Subscription,
    matches,
    parse_subscription,
    subscription_id,
)
from protocol.compression import CompressionError, decompress
from protocol.otlp_metrics import MetricPoint, ProtobufError, decode_metrics_data

# Kafka's ClientMetricsManager constants, and telemetry.max.bytes's default (MetricConfigs) for a
# manager made without a broker config; the broker passes its telemetry.max.bytes.
SUPPORTED_COMPRESSION_TYPES = (4, 3, 1, 2)  # ZSTD, LZ4, GZIP, SNAPPY, in Kafka's order
KNOWN_COMPRESSION_TYPES = frozenset({0, 1, 2, 3, 4})  # CompressionType.forId: NONE too
CACHE_MAX_SIZE = 16_384
DEFAULT_CACHE_EXPIRY_MS = 60_000
TELEMETRY_MAX_BYTES_DEFAULT = 1_048_576
# What a push may decompress to: a payload past it is refused, not inflated (a 1 MiB zstd or lz4
# frame can stand for gigabytes).
MAX_DECOMPRESSED_BYTES = 16 * 1_048_576

ZERO_UUID = uuid.UUID(int=0)
METADATA_TOPIC_ID = uuid.UUID(int=1)
RESERVED_UUIDS = frozenset({ZERO_UUID, METADATA_TOPIC_ID})  # Kafka's Uuid.RESERVED

def bounded_decompress(codec: int, data: bytes, limit: int = MAX_DECOMPRESSED_BYTES) -> bytes:
    """A push's payload decompressed, CompressionError past ``limit`` bytes. Snappy goes to the
    record codecs as it is: its output is at most about 32 times its input."""
    if codec == 1:
        out = zlib.decompressobj(wbits=47).decompress(data, limit + 1)  # gzip (or zlib) header
    elif codec == 3:
        out = lz4.frame.LZ4FrameDecompressor().decompress(data, max_length=limit + 1)
    elif codec == 4:
        with zstandard.ZstdDecompressor().stream_reader(data) as reader:
            out = reader.read(limit + 1)
    else:
        return decompress(codec, data)
    if len(out) > limit:
        raise CompressionError(f"telemetry decompresses to more than {limit} bytes")
    return out


# --- the manager ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TelemetrySubscription:
    """A GetTelemetrySubscriptions answer: an error, or the client's subscription."""

    error_code: int
    message: str | None = None
    client_instance_id: uuid.UUID = ZERO_UUID
    subscription_id: int = 0
    accepted_compression_types: tuple[int, ...] = ()
    push_interval_ms: int = 0
    telemetry_max_bytes: int = 0
    delta_temporality: bool = False
    requested_metrics: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ClientPush:
    """The latest metrics one client instance pushed."""

    client_instance_id: uuid.UUID
    client: ClientAttributes
    received_ms: int
    resource_attributes: tuple[tuple[str, str], ...]
    points: tuple[MetricPoint, ...]

    def values(self) -> dict[str, float]:
        """Each metric's name and value (a histogram's or summary's sum; the last point of a name
        that has several, with different attributes)."""
        return {p.name: p.value for p in self.points}


@dataclass(slots=True)
class ClientInstance:
    """Kafka's ClientMetricsInstance: a client's subscription and the times of its last requests."""

    instance_id: uuid.UUID
    client: ClientAttributes
    subscription_id: int
    subscription_version: int
    metrics: tuple[str, ...]
    push_interval_ms: int
    # Never (Kafka starts them at 0, which is as long ago for its wall-clock milliseconds).
    last_get_ms: int = -(2**62)
    last_push_ms: int = -(2**62)
    terminating: bool = False
    last_known_error: int = ErrorCode.none
    expires_ms: int = 0
    connection_id: str | None = None  # of its latest request: expiring forgets it (Kafka's ExpirationTimerTask)
    pushes: int = 0  # accepted pushes with metrics
    latest: ClientPush | None = field(default=None, repr=False)

    def maybe_update_get(self, now_ms: int) -> bool:
        if now_ms - max(self.last_get_ms, self.last_push_ms) >= self.push_interval_ms:
            self.last_get_ms = now_ms
            return True
        return False

    def maybe_update_push(self, now_ms: int) -> bool:
        # The first push after a GetTelemetrySubscriptions is taken early: clients jitter the interval.
        accept = self.last_get_ms > self.last_push_ms or now_ms - self.last_push_ms >= self.push_interval_ms
        if accept:
            self.last_push_ms = now_ms
        return accept


class ClientMetricsManager:
    def __init__(
        self,
        telemetry_max_bytes: int = TELEMETRY_MAX_BYTES_DEFAULT,
        *,
        cache_max_size: int = CACHE_MAX_SIZE,
        cache_expiry_ms: int = DEFAULT_CACHE_EXPIRY_MS,
        new_uuid: Callable[[], uuid.UUID] = uuid.uuid4,
    ) -> None:
        self.telemetry_max_bytes = telemetry_max_bytes
        self._cache_max_size = cache_max_size
        self._cache_expiry_ms = cache_expiry_ms
        self._new_uuid = new_uuid
        self._subscriptions: dict[str, Subscription] = {}
        self._raw: dict[str, Mapping[str, str]] = {}
        self._version = 0
        self._instances: OrderedDict[uuid.UUID, ClientInstance] = OrderedDict()
        # Kafka's clientConnectionIdMap: the connection each instance was made on, which takes it when it closes.
        self._connections: dict[str, uuid.UUID] = {}
        self._software: OrderedDict[str, tuple[str, str]] = OrderedDict()
        self._next_sweep_ms = 0
        self.invalid_subscriptions: dict[str, str] = {}  # name -> why it is ignored

    # Subscriptions, from the metadata image's CLIENT_METRICS configs.

    def update_subscriptions(self, configs: Mapping[str, Mapping[str, str]]) -> bool:
        """Make the subscriptions those of ``configs`` (name -> configs); True when they changed.
        A subscription whose configs do not parse (not written by a controller that checked them)
        is left out and named in ``invalid_subscriptions``."""
        if configs == self._raw:
            return False
        subscriptions: dict[str, Subscription] = {}
        invalid: dict[str, str] = {}
        for name, values in configs.items():
            if not values:
                continue
            try:
                subscriptions[name] = parse_subscription(name, values)
            except ClientMetricsConfigError as e:
                invalid[name] = str(e)
        self._raw = {name: dict(values) for name, values in configs.items()}
        self._subscriptions = subscriptions
        self.invalid_subscriptions = invalid
        self._version += 1
        return True

    def subscription_names(self) -> list[str]:
        return list(self._subscriptions)

    def subscription(self, name: str) -> Subscription | None:
        return self._subscriptions.get(name)

    # What the connection told about the client.

    def record_client_software(self, connection_id: str, name: str | None, version: str | None) -> None:
        """An ApiVersions request's client software name and version, for the connection's later requests."""
        if not name and not version:
            return
        self._software[connection_id] = (name or "", version or "")
        self._software.move_to_end(connection_id)
        while len(self._software) > self._cache_max_size:
            self._software.popitem(last=False)

    def client_software(self, connection_id: str) -> tuple[str, str] | None:
        return self._software.get(connection_id)

    def connection_closed(self, connection_id: str) -> None:
        """ClientConnectionDisconnectListener.onDisconnect: the client instance made on this
        connection goes (its metrics leave the endpoint now, not at expiry), and so does what the
        connection's ApiVersions named (Kafka keeps it on the channel)."""
        self._software.pop(connection_id, None)
        instance_id = self._connections.pop(connection_id, None)
        if instance_id is not None:
            self._instances.pop(instance_id, None)

    # The requests.

    def get_telemetry_subscriptions(
        self, requested_id: uuid.UUID | None, client: ClientAttributes, now_ms: int, connection_id: str | None = None
    ) -> TelemetrySubscription:
        """ClientMetricsManager.processGetTelemetrySubscriptionRequest, asked on ``connection_id``."""
        self._maybe_sweep(now_ms)
        instance_id = requested_id if requested_id is not None and requested_id != ZERO_UUID else self._generate_id()
        instance = self._instance(instance_id, client, now_ms, connection_id)
        if not instance.maybe_update_get(now_ms) and instance.last_known_error not in (
            ErrorCode.unknown_subscription_id,
            ErrorCode.unsupported_compression_type,
        ):
            return TelemetrySubscription(
                ErrorCode.throttling_quota_exceeded, f"Request from the client [{requested_id}] arrived before the next push interval time"
            )
        instance.last_known_error = ErrorCode.none
        return TelemetrySubscription(
            ErrorCode.none,
            None,
            instance_id,
            instance.subscription_id,
            SUPPORTED_COMPRESSION_TYPES,
            instance.push_interval_ms,
            self.telemetry_max_bytes,
            True,
            instance.metrics,
        )

    def push_telemetry(
        self,
        instance_id: uuid.UUID | None,
        subscription_id: int,
        terminating: bool,
        compression_type: int,
        metrics: bytes,
        client: ClientAttributes,
        now_ms: int,
        connection_id: str | None = None,
    ) -> tuple[int, str | None]:
        """ClientMetricsManager.processPushTelemetryRequest, sent on ``connection_id``: (error code, why)."""
        self._maybe_sweep(now_ms)
        if instance_id is None or instance_id in RESERVED_UUIDS:
            return ErrorCode.invalid_request, f"Invalid request from the client [{instance_id}], invalid client instance id"
        instance = self._instance(instance_id, client, now_ms, connection_id)
        try:
            refusal = self._check_push(instance, subscription_id, terminating, compression_type, metrics, now_ms)
        finally:
            instance.terminating = terminating
        if refusal is not None:
            instance.last_known_error = refusal[0]
            return refusal
        if metrics:
            try:
                payload = bounded_decompress(compression_type, metrics)
                resource, points = decode_metrics_data(payload)
            except (CompressionError, ProtobufError, zlib.error, zstandard.ZstdError, RuntimeError) as e:
                instance.last_known_error = ErrorCode.invalid_record
                return ErrorCode.invalid_record, f"Error exporting client metrics for client instance id: {instance_id}: {e}"
            instance.latest = ClientPush(instance_id, instance.client, now_ms, resource, tuple(points))
            instance.pushes += 1
        instance.last_known_error = ErrorCode.none
        return ErrorCode.none, None

    def _check_push(
        self, instance: ClientInstance, subscription_id: int, terminating: bool, compression_type: int, metrics: bytes, now_ms: int
    ) -> tuple[int, str] | None:
        who = instance.instance_id
        if instance.terminating:
            return (
                ErrorCode.invalid_request,
                f"Client [{who}] sent the previous request with state terminating to TRUE, can not acceptany requests after that",
            )
        if not instance.maybe_update_push(now_ms) and not terminating:
            return ErrorCode.throttling_quota_exceeded, f"Request from the client [{who}] arrived before the next push interval time"
        if subscription_id != instance.subscription_id:
            return ErrorCode.unknown_subscription_id, f"Unknown client subscription id for the client [{who}]"
        if compression_type not in KNOWN_COMPRESSION_TYPES:
            return ErrorCode.unsupported_compression_type, f"Unknown compression type [{compression_type}] is received in telemetry request from [{who}]"
        if len(metrics) > self.telemetry_max_bytes:
            return ErrorCode.telemetry_too_large, f"Telemetry request from [{who}] is larger than the maximum allowed size [{self.telemetry_max_bytes}]"
        return None

    # What the clients pushed.

    def latest_pushes(self, now_ms: int | None = None) -> list[ClientPush]:
        """The latest push of each client instance still cached (after expiring those due at ``now_ms``)."""
        if now_ms is not None:
            self._sweep(now_ms)
        return [i.latest for i in self._instances.values() if i.latest is not None]

    def instance(self, instance_id: uuid.UUID) -> ClientInstance | None:
        return self._instances.get(instance_id)

    def __len__(self) -> int:
        return len(self._instances)

    # The cache.

    def _generate_id(self) -> uuid.UUID:
        while True:
            candidate = self._new_uuid()
            if candidate not in self._instances and candidate not in RESERVED_UUIDS:
                return candidate

    def _instance(self, instance_id: uuid.UUID, client: ClientAttributes, now_ms: int, connection_id: str | None) -> ClientInstance:
        """The cached instance (re-evaluated if the subscriptions changed since), or a new one,
        which belongs to ``connection_id`` from now on (Kafka's createClientInstanceAndUpdateCache)."""
        instance = self._instances.get(instance_id)
        if instance is not None and instance.expires_ms <= now_ms:
            self._forget(instance)
            instance = None
        if instance is None or instance.subscription_version < self._version:
            instance = self._new_instance(instance_id, client if instance is None else instance.client, instance)
            if connection_id is not None:
                self._connections[connection_id] = instance_id
        self._instances[instance_id] = instance
        self._instances.move_to_end(instance_id)
        while len(self._instances) > self._cache_max_size:
            self._forget(next(iter(self._instances.values())))
        instance.expires_ms = now_ms + max(self._cache_expiry_ms, 3 * instance.push_interval_ms)
        instance.connection_id = connection_id
        return instance

    def _forget(self, instance: ClientInstance) -> None:
        """Drop an expired or evicted instance, and the connection of its latest request's claim on it."""
        del self._instances[instance.instance_id]
        if instance.connection_id is not None and self._connections.get(instance.connection_id) == instance.instance_id:
            del self._connections[instance.connection_id]

    def _new_instance(self, instance_id: uuid.UUID, client: ClientAttributes, previous: ClientInstance | None) -> ClientInstance:
        interval = INTERVAL_MS_DEFAULT
        metrics: dict[str, None] = {}
        everything = False
        for sub in self._subscriptions.values():
            if matches(sub.match, instance_id, client):
                everything = everything or ALL_SUBSCRIBED_METRICS in sub.metrics
                metrics.update(dict.fromkeys(sub.metrics))
                interval = min(interval, sub.interval_ms)
        chosen = (ALL_SUBSCRIBED_METRICS,) if everything else tuple(metrics)
        instance = ClientInstance(instance_id, client, subscription_id(chosen, interval, instance_id), self._version, chosen, interval)
        if previous is not None:
            # Kafka builds a new instance, with no request times: the next request is not throttled.
            instance.latest, instance.pushes = previous.latest, previous.pushes
        return instance

    def _maybe_sweep(self, now_ms: int) -> None:
        if now_ms >= self._next_sweep_ms:
            self._sweep(now_ms)
            self._next_sweep_ms = now_ms + 1_000

    def _sweep(self, now_ms: int) -> None:
        for instance in [inst for inst in self._instances.values() if inst.expires_ms <= now_ms]:
            self._forget(instance)


__all__ = ["ClientMetricsManager", "ClientPush", "TelemetrySubscription", "bounded_decompress"]
