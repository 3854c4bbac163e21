"""ConnectionQuotas (broker/connection_quotas.py): Kafka's max.connections.per.ip, its overrides,
max.connections per listener and broker-wide, and the inter-broker listener's protection."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.config import ConfigError, load_config
from broker.connection_quotas import (
    INT_MAX,
    ConnectionLimitReached,
    ConnectionQuotas,
    TooManyConnections,
    broker_connection_quotas,
    canonical_ip,
    parse_overrides,
    resolve_overrides,
)

TWO_LISTENERS = {
    "listeners": "PLAINTEXT://127.0.0.1:9092,INTERNAL://127.0.0.1:9094",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
    "inter.broker.listener.name": "INTERNAL",
}


def test_a_connection_past_the_per_ip_limit_is_refused_and_not_counted() -> None:
    quotas = ConnectionQuotas({"PLAINTEXT": INT_MAX}, max_connections_per_ip=5)
    assert [quotas.inc("PLAINTEXT", "10.0.0.1") for _ in range(5)] == [None] * 5
    assert quotas.inc("PLAINTEXT", "10.0.0.1") == TooManyConnections("10.0.0.1", 5)
    assert quotas.count("10.0.0.1") == 5 and quotas.total == 5
    assert quotas.inc("PLAINTEXT", "10.0.0.2") is None  # another address has its own count
    quotas.dec("PLAINTEXT", "10.0.0.1")
    assert quotas.inc("PLAINTEXT", "10.0.0.1") is None


def test_an_override_sets_the_limit_of_its_address_only() -> None:
    quotas = ConnectionQuotas({"PLAINTEXT": INT_MAX}, max_connections_per_ip=0, max_connections_per_ip_overrides={"127.0.0.1": 2})
    assert quotas.inc("PLAINTEXT", "127.0.0.1") is None
    assert quotas.inc("PLAINTEXT", "127.0.0.1") is None
    assert quotas.inc("PLAINTEXT", "127.0.0.1") == TooManyConnections("127.0.0.1", 2)
    assert quotas.inc("PLAINTEXT", "10.0.0.1") == TooManyConnections("10.0.0.1", 0)


def test_addresses_compare_as_java_compares_them() -> None:
    quotas = ConnectionQuotas({"PLAINTEXT": INT_MAX}, max_connections_per_ip=1, max_connections_per_ip_overrides={"0:0:0:0:0:0:0:1": 2})
    # A dual-stack listener sees an IPv4 client as an IPv4-mapped IPv6 address.
    assert quotas.inc("PLAINTEXT", "::ffff:127.0.0.1") is None
    assert quotas.inc("PLAINTEXT", "127.0.0.1") == TooManyConnections("127.0.0.1", 1)
    assert quotas.inc("PLAINTEXT", "::1") is None
    assert quotas.inc("PLAINTEXT", "::1") is None
    assert quotas.inc("PLAINTEXT", "::1") == TooManyConnections("::1", 2)
    quotas.dec("PLAINTEXT", "127.0.0.1")
    assert quotas.count("::ffff:127.0.0.1") == 0
    assert canonical_ip("fe80::1%eth0") == "fe80::1"


def test_at_max_connections_the_acceptor_waits_before_the_per_ip_limit_is_checked() -> None:
    quotas = ConnectionQuotas({"PLAINTEXT": INT_MAX}, max_connections=2, max_connections_per_ip=1)
    assert quotas.inc("PLAINTEXT", "10.0.0.1") is None
    assert quotas.inc("PLAINTEXT", "10.0.0.2") is None
    # Kafka's inc waits for a slot first: even an address at its own limit waits.
    assert quotas.inc("PLAINTEXT", "10.0.0.1") == ConnectionLimitReached(None, 2)
    assert quotas.inc("PLAINTEXT", "10.0.0.3") == ConnectionLimitReached(None, 2)
    quotas.dec("PLAINTEXT", "10.0.0.2")
    assert quotas.inc("PLAINTEXT", "10.0.0.1") == TooManyConnections("10.0.0.1", 1)
    assert quotas.inc("PLAINTEXT", "10.0.0.3") is None


def test_a_listener_limit_stops_that_listener_only() -> None:
    quotas = ConnectionQuotas({"PLAINTEXT": 1, "EXTERNAL": 3}, max_connections=3)
    assert quotas.inc("PLAINTEXT", "10.0.0.1") is None
    assert quotas.inc("PLAINTEXT", "10.0.0.2") == ConnectionLimitReached("PLAINTEXT", 1)
    assert quotas.inc("EXTERNAL", "10.0.0.2") is None
    assert quotas.inc("EXTERNAL", "10.0.0.3") is None
    assert quotas.inc("EXTERNAL", "10.0.0.4") == ConnectionLimitReached(None, 3)
    assert (quotas.listener_count("PLAINTEXT"), quotas.listener_count("EXTERNAL"), quotas.total) == (1, 2, 3)


def test_the_inter_broker_listener_goes_past_max_connections_and_the_others_shed() -> None:
    quotas = ConnectionQuotas({"PLAINTEXT": 2, "INTERNAL": 2}, max_connections=2, inter_broker_listener="INTERNAL")
    assert quotas.inc("PLAINTEXT", "10.0.0.1") is None
    assert quotas.inc("PLAINTEXT", "10.0.0.2") is None
    assert quotas.inc("PLAINTEXT", "10.0.0.3") == ConnectionLimitReached("PLAINTEXT", 2)
    assert not quotas.max_connections_exceeded("PLAINTEXT")
    assert quotas.inc("INTERNAL", "10.0.0.9") is None  # past the broker-wide limit: brokers still connect
    assert quotas.max_connections_exceeded("PLAINTEXT") and not quotas.max_connections_exceeded("INTERNAL")
    assert quotas.inc("INTERNAL", "10.0.0.9") is None
    # Its own limit (the broker-wide value unless listener.name.internal.max.connections says otherwise) holds.
    assert quotas.inc("INTERNAL", "10.0.0.9") == ConnectionLimitReached("INTERNAL", 2)
    quotas.dec("PLAINTEXT", "10.0.0.1")
    quotas.dec("PLAINTEXT", "10.0.0.2")
    assert not quotas.max_connections_exceeded("PLAINTEXT")
    assert quotas.inc("PLAINTEXT", "10.0.0.1") == ConnectionLimitReached(None, 2)


def test_a_broker_with_one_listener_does_not_protect_it() -> None:
    quotas = ConnectionQuotas({"PLAINTEXT": INT_MAX}, max_connections=1, inter_broker_listener="PLAINTEXT")
    assert quotas.inc("PLAINTEXT", "10.0.0.1") is None
    assert quotas.inc("PLAINTEXT", "10.0.0.2") == ConnectionLimitReached(None, 1)


def test_closing_what_was_never_counted_is_a_bug() -> None:
    quotas = ConnectionQuotas({"PLAINTEXT": INT_MAX, "OTHER": INT_MAX})
    with pytest.raises(ValueError):
        quotas.dec("PLAINTEXT", "10.0.0.1")
    assert quotas.inc("PLAINTEXT", "10.0.0.1") is None
    with pytest.raises(ValueError):
        quotas.dec("OTHER", "10.0.0.1")
    assert quotas.total == 1


# Every step is what the acceptors do: take a connection (and close it at once if refused for its
# address), close one, or close the least recently used of a listener past max.connections.
LISTENERS = ("INTERNAL", "PLAINTEXT", "EXTERNAL")
IPS = ("10.0.0.1", "10.0.0.2", "::ffff:10.0.0.3", "::1")
limits = st.integers(min_value=0, max_value=4)


@settings(max_examples=300, deadline=None)
@given(
    data=st.data(),
    listener_limits=st.lists(limits, min_size=1, max_size=3),
    max_connections=limits,
    per_ip=limits,
    override=limits,
    protect=st.booleans(),
)
def test_counts_match_the_open_connections_and_stay_within_the_limits(
    data: st.DataObject, listener_limits: list[int], max_connections: int, per_ip: int, override: int, protect: bool
) -> None:
    listener_limit = dict(zip(LISTENERS, listener_limits))
    inter_broker = "INTERNAL" if protect else None
    quotas = ConnectionQuotas(
        listener_limit,
        max_connections=max_connections,
        max_connections_per_ip=per_ip,
        max_connections_per_ip_overrides={"10.0.0.1": override},
        inter_broker_listener=inter_broker,
    )
    protected = inter_broker if len(listener_limit) > 1 and inter_broker in listener_limit else None
    ip_limit = {ip: override if ip == "10.0.0.1" else per_ip for ip in map(canonical_ip, IPS)}
    open_connections: list[tuple[str, str]] = []
    for _ in range(data.draw(st.integers(min_value=1, max_value=40))):
        step = data.draw(st.sampled_from(("inc", "dec", "shed")))
        if step == "inc":
            listener = data.draw(st.sampled_from(list(listener_limit)))
            ip = canonical_ip(data.draw(st.sampled_from(IPS)))
            per_listener = Counter(name for name, _ in open_connections)
            per_address = Counter(address for _, address in open_connections)
            result = quotas.inc(listener, ip)
            if per_listener[listener] >= listener_limit[listener]:
                assert result == ConnectionLimitReached(listener, listener_limit[listener])
            elif listener != protected and len(open_connections) >= max_connections:
                assert result == ConnectionLimitReached(None, max_connections)
            elif per_address[ip] >= ip_limit[ip]:
                assert result == TooManyConnections(ip, ip_limit[ip])
            else:
                assert result is None
                open_connections.append((listener, ip))
        elif step == "dec" and open_connections:
            listener, ip = open_connections.pop(data.draw(st.integers(min_value=0, max_value=len(open_connections) - 1)))
            quotas.dec(listener, ip)
        elif step == "shed":
            for listener, ip in list(open_connections):
                if quotas.max_connections_exceeded(listener):
                    open_connections.remove((listener, ip))
                    quotas.dec(listener, ip)
            assert all(listener == protected for listener, _ in open_connections) or quotas.total <= max_connections
        assert quotas.total == len(open_connections) >= 0
        per_listener = Counter(name for name, _ in open_connections)
        per_address = Counter(address for _, address in open_connections)
        for name, limit in listener_limit.items():
            assert 0 <= quotas.listener_count(name) == per_listener[name] <= limit
        for ip, limit in ip_limit.items():
            assert 0 <= quotas.count(ip) == per_address[ip] <= limit
        # Only the protected listener's connections can take the broker past max.connections.
        assert len(open_connections) - per_listener[protected] <= max_connections


def test_overrides_parse_as_kafka_parses_them() -> None:
    assert parse_overrides("") == {}
    assert parse_overrides("hostName:100,127.0.0.1:200") == {"hostName": 100, "127.0.0.1": 200}
    assert parse_overrides(" ::1:3 , fe80::1%eth0:4") == {"::1": 3, "fe80::1%eth0": 4}
    for bad in ("127.0.0.1", "127.0.0.1:x", ":5", "bad/host:3"):
        with pytest.raises(ValueError):
            parse_overrides(bad)


def test_hostnames_are_resolved_once_and_addresses_kept() -> None:
    asked: list[str] = []

    def resolve(host: str) -> str:
        asked.append(host)
        return {"broker-a": "10.1.1.1", "v6-host": "::ffff:10.1.1.2"}[host]

    assert resolve_overrides({"broker-a": 3, "v6-host": 4, "127.0.0.1": 5, "0:0::1": 6}, resolve) == {
        "10.1.1.1": 3,
        "10.1.1.2": 4,
        "127.0.0.1": 5,
        "::1": 6,
    }
    assert asked == ["broker-a", "v6-host"]

    def unknown(host: str) -> str:
        raise OSError("Name or service not known")

    with pytest.raises(ValueError, match="cannot resolve host 'nowhere'"):
        resolve_overrides({"nowhere": 1}, unknown)


def test_localhost_resolves_to_ipv4_loopback_first() -> None:
    assert resolve_overrides({"localhost": 9}) == {"127.0.0.1": 9}


def test_the_broker_quotas_take_the_listener_prefixed_limit() -> None:
    config = load_config(
        None,
        {
            **TWO_LISTENERS,
            "max.connections": "10",
            "listener.name.plaintext.max.connections": "4",
            "max.connections.per.ip": "3",
            "max.connections.per.ip.overrides": "127.0.0.1:7",
        },
    )
    quotas = broker_connection_quotas(config)
    assert [quotas.inc("PLAINTEXT", f"10.0.0.{i}") for i in range(5)] == [None] * 4 + [ConnectionLimitReached("PLAINTEXT", 4)]
    # INTERNAL has no prefixed limit: max.connections is its own too; as the inter-broker listener it passes the broker-wide one.
    assert [quotas.inc("INTERNAL", f"10.0.1.{i}") for i in range(11)] == [None] * 10 + [ConnectionLimitReached("INTERNAL", 10)]
    assert quotas.max_connections_exceeded("PLAINTEXT")
    quotas = broker_connection_quotas(config)
    assert [quotas.inc("INTERNAL", "127.0.0.1") for _ in range(8)] == [None] * 7 + [TooManyConnections("127.0.0.1", 7)]


def test_the_defaults_are_no_limits() -> None:
    config = load_config(None, {})
    assert (config.max_connections, config.max_connections_per_ip, config.max_connections_per_ip_overrides) == (INT_MAX, INT_MAX, "")
    assert broker_connection_quotas(config).inc("PLAINTEXT", "127.0.0.1") is None


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"max.connections.per.ip": "0"}, "max.connections.per.ip can be set to zero only if max.connections.per.ip.overrides property is set."),
        ({"max.connections": "-1"}, "max.connections"),
        ({"max.connections": "2147483648"}, "max.connections"),
        ({"max.connections.per.ip.overrides": "127.0.0.1"}, "'127.0.0.1' is not HOST:COUNT"),
        ({"max.connections.per.ip.overrides": "a/b:1"}, "max.connections.per.ip.overrides contains invalid addresses : a/b"),
        ({**TWO_LISTENERS, "listener.name.internal.max.connections": "-2"}, "listener.name.internal.max.connections"),
        ({**TWO_LISTENERS, "listener.name.internal.max.connections": "many"}, "listener.name.internal.max.connections"),
    ],
)
def test_bad_limits_are_refused_at_start_up(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        load_config(None, props)


def test_a_zero_per_ip_limit_with_overrides_is_accepted() -> None:
    config = load_config(None, {"max.connections.per.ip": "0", "max.connections.per.ip.overrides": "127.0.0.1:5"})
    assert broker_connection_quotas(config).inc("PLAINTEXT", "10.0.0.1") == TooManyConnections("10.0.0.1", 0)
