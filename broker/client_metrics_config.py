"""ClientMetricsConfigs (KIP-714): a client metrics subscription's configs, their checks with
Kafka 4.4's errors and messages, which clients a subscription's ``match`` selects, and the
subscription id a client is given. Sans-IO."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Iterable, Mapping

import crc32c
from kio.schema.errors import ErrorCode

# Config names and defaults (ClientMetricsConfigs).
METRICS_CONFIG = "metrics"
INTERVAL_MS_CONFIG = "interval.ms"
MATCH_CONFIG = "match"
CONFIG_NAMES = (METRICS_CONFIG, INTERVAL_MS_CONFIG, MATCH_CONFIG)  # ConfigDef's order: parsed in it
CONFIG_DOCS = {
    METRICS_CONFIG: "Telemetry metric name prefix list",
    INTERVAL_MS_CONFIG: "Metrics push interval in milliseconds",
    MATCH_CONFIG: "Client match criteria",
}
ALL_SUBSCRIBED_METRICS = "*"
INTERVAL_MS_DEFAULT = 300_000
MIN_INTERVAL_MS = 100
MAX_INTERVAL_MS = 3_600_000
DEFAULT_CONFIGS = {METRICS_CONFIG: "", INTERVAL_MS_CONFIG: str(INTERVAL_MS_DEFAULT), MATCH_CONFIG: ""}

CLIENT_INSTANCE_ID = "client_instance_id"
CLIENT_ID = "client_id"
CLIENT_SOFTWARE_NAME = "client_software_name"
CLIENT_SOFTWARE_VERSION = "client_software_version"
CLIENT_SOURCE_ADDRESS = "client_source_address"
CLIENT_SOURCE_PORT = "client_source_port"
MATCH_SELECTORS = frozenset(
    {CLIENT_INSTANCE_ID, CLIENT_ID, CLIENT_SOFTWARE_NAME, CLIENT_SOFTWARE_VERSION, CLIENT_SOURCE_ADDRESS, CLIENT_SOURCE_PORT}
)

_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)
_LIST_SEPARATOR = re.compile(r"\s*,\s*")


class ClientMetricsConfigError(ValueError):
    """A refused subscription: ``error_code`` is Kafka's (INVALID_REQUEST or INVALID_CONFIG)."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


def _invalid_request(message: str) -> ClientMetricsConfigError:
    return ClientMetricsConfigError(ErrorCode.invalid_request, message)


def _invalid_config(message: str) -> ClientMetricsConfigError:
    return ClientMetricsConfigError(ErrorCode.invalid_config, message)


def parse_list(name: str, value: str) -> list[str]:
    """A LIST config's items, as Kafka's ConfigDef parses them and its ValidList checks them
    (empty items refused; a repeated item kept once, which Kafka 4.4 only warns about)."""
    trimmed = value.strip()
    if not trimmed:
        return []
    items = _LIST_SEPARATOR.split(trimmed)
    if any(not item for item in items):
        raise _invalid_config(f"Configuration '{name}' values must not be empty.")
    return list(dict.fromkeys(items))


def parse_interval(value: str) -> int:
    """An INT config as ConfigDef parses it (Integer.parseInt of the trimmed value)."""
    trimmed = value.strip()
    if _INT.fullmatch(trimmed) is None or not -(2**31) <= int(trimmed) < 2**31:
        raise _invalid_config(f"Invalid value {value} for configuration {INTERVAL_MS_CONFIG}: Not a number of type INT")
    return int(trimmed)


def parse_match(patterns: Iterable[str]) -> dict[str, re.Pattern[str]]:
    """``selector=regex`` items as ClientMetricsConfigs.parseMatchingPatterns reads them."""
    out: dict[str, re.Pattern[str]] = {}
    for pattern in patterns:
        parts = pattern.split("=")
        while parts and not parts[-1]:  # Java's String.split drops trailing empty strings
            parts.pop()
        if len(parts) != 2 or parts[0].strip() not in MATCH_SELECTORS:
            raise _invalid_config(f"Illegal client matching pattern: {pattern}")
        try:
            out[parts[0].strip()] = re.compile(parts[1].strip())
        except re.error:
            raise _invalid_config(f"Illegal client matching pattern: {pattern}") from None
    return out


@dataclass(frozen=True, slots=True)
class Subscription:
    name: str
    metrics: tuple[str, ...]
    interval_ms: int
    match: Mapping[str, re.Pattern[str]]


def parse_subscription(name: str, configs: Mapping[str, str]) -> Subscription:
    """The subscription ``configs`` define; ClientMetricsConfigError as ClientMetricsConfigs.validate
    refuses them: a nameless subscription, an unknown config, then each value in ConfigDef's order,
    then the interval's bounds, then the match patterns."""
    if not name:
        raise _invalid_request("Subscription name can't be empty")
    for key in configs:
        if key not in CONFIG_NAMES:
            raise _invalid_request(f"Unknown client metrics configuration: {key}")
    metrics = parse_list(METRICS_CONFIG, configs.get(METRICS_CONFIG, ""))
    interval = parse_interval(configs[INTERVAL_MS_CONFIG]) if INTERVAL_MS_CONFIG in configs else INTERVAL_MS_DEFAULT
    match = parse_list(MATCH_CONFIG, configs.get(MATCH_CONFIG, ""))
    if not MIN_INTERVAL_MS <= interval <= MAX_INTERVAL_MS:
        raise _invalid_request(
            f"Invalid value {interval} for {INTERVAL_MS_CONFIG}, interval must be between {MIN_INTERVAL_MS} and {MAX_INTERVAL_MS} (1 hour)"
        )
    return Subscription(name, tuple(metrics), interval, parse_match(match))


def validate(name: str, configs: Mapping[str, str]) -> None:
    """ClientMetricsConfigs.validate: raises ClientMetricsConfigError."""
    parse_subscription(name, configs)


def described_configs(configs: Mapping[str, str]) -> list[tuple[str, str, bool]]:
    """(name, value as Kafka shows it, whether it is set) of each config of a subscription, by name:
    the set ones parsed and joined back ("a, a" is "a"), the others at their defaults."""
    out = []
    for key in sorted(CONFIG_NAMES):
        if key not in configs:
            out.append((key, DEFAULT_CONFIGS[key], False))
            continue
        value = configs[key]
        try:
            shown = str(parse_interval(value)) if key == INTERVAL_MS_CONFIG else ",".join(parse_list(key, value))
        except ClientMetricsConfigError:
            shown = value
        out.append((key, shown, True))
    return out


@dataclass(frozen=True, slots=True)
class ClientAttributes:
    """What a match pattern can select on, from the request's connection."""

    client_id: str | None = None
    software_name: str | None = None
    software_version: str | None = None
    source_address: str | None = None
    source_port: str | None = None

    @staticmethod
    def of(client_id: str | None, address: str, software: tuple[str, str] | None) -> "ClientAttributes":
        """From a connection's ``ip:port`` and the software its ApiVersions named."""
        host, _, port = address.rpartition(":")
        return ClientAttributes(client_id, software[0] if software else None, software[1] if software else None, host or None, port or None)


def matches(patterns: Mapping[str, re.Pattern[str]], instance_id: uuid.UUID, client: ClientAttributes) -> bool:
    """ClientMetricsInstanceMetadata.isMatch: every pattern matches its attribute whole; none matches all."""
    attributes = {
        CLIENT_INSTANCE_ID: str(instance_id),
        CLIENT_ID: client.client_id,
        CLIENT_SOFTWARE_NAME: client.software_name,
        CLIENT_SOFTWARE_VERSION: client.software_version,
        CLIENT_SOURCE_ADDRESS: client.source_address,
        CLIENT_SOURCE_PORT: client.source_port,
    }
    for key, pattern in patterns.items():
        value = attributes.get(key)
        if value is None or pattern.fullmatch(value) is None:
            return False
    return True


def java_uuid_hash(value: uuid.UUID) -> int:
    """Kafka's Uuid.hashCode, as a signed 32-bit int."""
    msb, lsb = value.int >> 64, value.int & (2**64 - 1)
    h = msb ^ lsb
    return _int32((h >> 32) ^ (h & 0xFFFFFFFF))


def _int32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - 2**32 if v >= 2**31 else v


def subscription_id(metrics: Iterable[str], interval_ms: int, instance_id: uuid.UUID) -> int:
    """Kafka's computeSubscriptionId: CRC32C of the metrics and interval, XOR the instance id's hash
    (the metrics sorted here, where Kafka takes a HashSet's order: the id is opaque to clients)."""
    text = "[" + ", ".join(sorted(metrics)) + "]" + str(interval_ms)
    return _int32(crc32c.crc32c(text.encode()) ^ java_uuid_hash(instance_id))


__all__ = [
    "ALL_SUBSCRIBED_METRICS",
    "CONFIG_NAMES",
    "ClientAttributes",
    "ClientMetricsConfigError",
    "Subscription",
    "described_configs",
    "matches",
    "parse_subscription",
    "subscription_id",
    "validate",
]
