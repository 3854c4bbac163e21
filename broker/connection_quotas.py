"""Kafka's ConnectionQuotas: how many connections a broker holds, per address, per listener and in all.

Sans-IO: the acceptors (broker/network.py) ask it before they take a connection and tell it when
one closes, whatever closed it. The rules are Kafka's (ConnectionQuotas in SocketServer.scala):

- ``max.connections.per.ip``, or the address's entry in ``max.connections.per.ip.overrides``: a
  connection past it is accepted and closed at once.
- ``max.connections`` (broker-wide) and ``listener.name.<l>.max.connections`` (per listener, the
  broker-wide value when not given): at either limit the listener's acceptor takes no connection
  until one closes, so new clients wait in the listen backlog instead of being refused.
- The inter-broker listener, when the broker has other listeners too, is held to its own
  listener limit only, so brokers always reach each other; when its connections take the broker
  past ``max.connections``, the other listeners close their least recently used connections.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.config import BrokerConfig

# Java's Integer.MAX_VALUE: Kafka's default for every connection limit, "no limit".
INT_MAX = 2**31 - 1
# Kafka's Utils.validHostPattern: the characters a host of the overrides may hold.
_HOST = re.compile(r"[0-9a-zA-Z\-%._:]+")


@dataclass(frozen=True, slots=True)
class TooManyConnections:
    """The address already holds its maximum: the new connection is closed."""

    ip: str
    limit: int


@dataclass(frozen=True, slots=True)
class ConnectionLimitReached:
    """The listener's max.connections (``listener``), or the broker's (None), is reached: the
    acceptor waits for a connection to close."""

    listener: str | None
    limit: int


Refusal = TooManyConnections | ConnectionLimitReached


class ConnectionQuotas:
    def __init__(
        self,
        listeners: Mapping[str, int],
        *,
        max_connections: int = INT_MAX,
        max_connections_per_ip: int = INT_MAX,
        max_connections_per_ip_overrides: Mapping[str, int] | None = None,
        inter_broker_listener: str | None = None,
    ) -> None:
        """``listeners``: each listener's own max.connections."""
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self._overrides = {canonical_ip(ip): limit for ip, limit in (max_connections_per_ip_overrides or {}).items()}
        self._listener_limits = dict(listeners)
        # Kafka protects the inter-broker listener only on a broker that also has others.
        self._protected = inter_broker_listener if len(self._listener_limits) > 1 else None
        self._per_ip: dict[str, int] = {}
        self._per_listener = dict.fromkeys(self._listener_limits, 0)
        self.total = 0

    def reconfigure(self, config: BrokerConfig) -> None:
        """Take the broker's new max.connections, max.connections.per.ip and its overrides (dynamic
        broker configs); open connections stay, new ones are counted against the new limits."""
        update = broker_connection_quotas(config)
        self.max_connections = update.max_connections
        self.max_connections_per_ip = update.max_connections_per_ip
        self._overrides = update._overrides

    def count(self, ip: str) -> int:
        return self._per_ip.get(canonical_ip(ip), 0)

    def listener_count(self, listener: str) -> int:
        return self._per_listener[listener]

    def inc(self, listener: str, ip: str) -> Refusal | None:
        """Count a connection the listener's acceptor took from ``ip``; a refusal counts nothing.

        As Kafka's acceptor, a connection first waits for a slot, then meets its address's limit."""
        limit = self._listener_limits[listener]
        if self._per_listener[listener] >= limit:
            return ConnectionLimitReached(listener, limit)
        if listener != self._protected and self.total >= self.max_connections:
            return ConnectionLimitReached(None, self.max_connections)
        ip = canonical_ip(ip)
        count = self._per_ip.get(ip, 0)
        limit = self._overrides.get(ip, self.max_connections_per_ip)
        if count >= limit:
            return TooManyConnections(ip, limit)
        self._per_ip[ip] = count + 1
        self._per_listener[listener] += 1
        self.total += 1
        return None

    def dec(self, listener: str, ip: str) -> None:
        """A counted connection closed."""
        ip = canonical_ip(ip)
        count = self._per_ip.get(ip, 0)
        if count == 0 or self._per_listener[listener] == 0:
            raise ValueError(f"no connection from {ip} counted on listener {listener}")
        if count == 1:
            del self._per_ip[ip]
        else:
            self._per_ip[ip] = count - 1
        self._per_listener[listener] -= 1
        self.total -= 1

    def max_connections_exceeded(self, listener: str) -> bool:
        """The broker is past max.connections (the inter-broker listener took it there): this
        listener should close its least recently used connection."""
        return self.total > self.max_connections and listener != self._protected


def canonical_ip(ip: str) -> str:
    """An address as Java's InetAddress compares them: IPv6 in its compressed form, an
    IPv4-mapped IPv6 address (a dual-stack listener's IPv4 client) as the IPv4 address."""
    if ":" not in ip:
        return ip
    address = ipaddress.IPv6Address(ip.split("%", 1)[0])
    return str(address.ipv4_mapped or address)


def parse_overrides(value: str) -> dict[str, int]:
    """max.connections.per.ip.overrides: ``host:count``, comma-separated. As Kafka's parseCsvMap, the
    last colon splits, so an IPv6 address needs no brackets."""
    overrides: dict[str, int] = {}
    for item in filter(None, (s.strip() for s in value.split(","))):
        host, sep, count = item.rpartition(":")
        host = host.strip()
        if not sep or not re.fullmatch(r"-?\d+", count.strip()):
            raise ValueError(f"'{item}' is not HOST:COUNT")
        if not _HOST.fullmatch(host):
            raise ValueError(f"max.connections.per.ip.overrides contains invalid addresses : {host}")
        overrides[host] = int(count)
    return overrides


def _resolve(host: str) -> str:
    """One address of ``host``, IPv4 first, as Java's InetAddress.getByName picks it."""
    infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    infos.sort(key=lambda info: info[0] != socket.AF_INET)
    return str(infos[0][4][0])


def resolve_overrides(overrides: Mapping[str, int], resolve: Callable[[str], str] = _resolve) -> dict[str, int]:
    """The overrides by address: a hostname is resolved now, once, as Kafka resolves it at start-up."""
    resolved: dict[str, int] = {}
    for host, limit in overrides.items():
        try:
            ip = canonical_ip(str(ipaddress.ip_address(host)))
        except ValueError:
            try:
                ip = canonical_ip(resolve(host))
            except OSError as e:
                raise ValueError(f"max.connections.per.ip.overrides: cannot resolve host '{host}': {e}") from None
        resolved[ip] = limit
    return resolved


def broker_connection_quotas(config: BrokerConfig) -> ConnectionQuotas:
    """The quotas of a broker's client listeners, from its configuration."""
    listeners: dict[str, int] = {}
    for lst in config.client_listeners:
        # listener.name.<l>.max.connections, else max.connections (Kafka's prefix override).
        limit = config.listener_config(lst.name, "max.connections")
        assert limit is not None
        listeners[lst.name] = int(limit)
    return ConnectionQuotas(
        listeners,
        max_connections=config.max_connections,
        max_connections_per_ip=config.max_connections_per_ip,
        max_connections_per_ip_overrides=resolve_overrides(parse_overrides(config.max_connections_per_ip_overrides)),
        inter_broker_listener=config.inter_broker_listener_name.upper(),
    )
