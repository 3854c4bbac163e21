"""ChannelBuilders: what a listener's connections speak, for the side that accepts them and for
a node's own connections to the brokers' and the controllers' listeners.

Kafka's ChannelBuilders. A listener's security protocol comes from listener.security.protocol.map;
a TLS link takes the listener's `ssl.*` settings (`listener.name.<l>.ssl.*` over the broker-wide
ones), a SASL link the mechanism of `sasl.mechanism.inter.broker.protocol` or
`sasl.mechanism.controller.protocol` and the credentials of the listener's
`listener.name.<l>.<mechanism>.sasl.jaas.config`, the same entry whose users its server side checks.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Callable

from broker.network import ListenerSecurity
from broker.security.jaas_config import parse_jaas_config
from broker.security.sasl_client import SaslClient, SaslClientError, sasl_client
from broker.security.sasl_config import LOGIN_MODULES, SERVED_MECHANISMS, ScramLookup, enabled_mechanisms, server_factories
from broker.security.sasl_server_authenticator import SaslServerAuthenticator
from broker.security.ssl_principal_mapper import SslPrincipalMapper
from broker.ssl_factory import SslConfigError, client_context, server_context

if TYPE_CHECKING:
    from broker.config import BrokerConfig

TLS_PROTOCOLS = ("SSL", "SASL_SSL")


@dataclass(frozen=True)
class ClientChannel:
    """How this node connects to one listener of the others: PLAINTEXT when both are None."""

    listener: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str | None = None
    login_options: dict[str, str] = field(default_factory=dict)

    def new_sasl_client(self) -> SaslClient | None:
        return None if self.sasl_mechanism is None else sasl_client(self.sasl_mechanism, self.login_options)


PLAINTEXT_CHANNEL = ClientChannel()


def client_channel(cfg: BrokerConfig, listener: str, mechanism: str) -> ClientChannel:
    """This node's connections to ``listener`` on the other nodes; ValueError says why it cannot work."""
    protocol = cfg.security_protocol_map.get(listener)
    if protocol is None:
        raise ValueError(f"No security protocol defined for listener {listener} in listener.security.protocol.map")
    tls = client_context(cfg.ssl_for_listener(listener)) if protocol in TLS_PROTOCOLS else None
    if not protocol.startswith("SASL_"):
        return ClientChannel(listener, tls)
    if mechanism not in SERVED_MECHANISMS:
        raise ValueError(f"Listener {listener}: SASL mechanism {mechanism} is not served by kbroker ({', '.join(SERVED_MECHANISMS)} is)")
    key = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    text = cfg.listener_prefixed.get(key)
    if text is None:
        raise ValueError(f"Listener {listener}: this node's {mechanism} credentials for it need {key}")
    modules = [m for m in parse_jaas_config(text) if m.name == LOGIN_MODULES[mechanism]]
    if not modules:
        raise ValueError(f"{key}: {mechanism} needs {LOGIN_MODULES[mechanism]}")
    channel = ClientChannel(listener, tls, mechanism, dict(modules[0].options))
    try:
        channel.new_sasl_client()
    except SaslClientError as e:
        raise ValueError(f"{key}: {e}") from None
    return channel


def inter_broker_channel(cfg: BrokerConfig) -> ClientChannel:
    return client_channel(cfg, cfg.inter_broker_listener_name.upper(), cfg.sasl_mechanism_inter_broker_protocol)


def controller_channel(cfg: BrokerConfig) -> ClientChannel:
    """The zero-config node is its own quorum: it never dials a controller listener."""
    names = cfg.controller_listener_name_list
    if not names or cfg.implicit_quorum:
        return PLAINTEXT_CHANNEL
    return client_channel(cfg, names[0], cfg.sasl_mechanism_controller_protocol)


def node_links_problem(cfg: BrokerConfig) -> str | None:
    """Why this node could not reach the brokers' or the controllers' listener, in one line."""
    links = []
    if cfg.is_broker:
        links.append((cfg.inter_broker_listener_name.upper(), "sasl.mechanism.inter.broker.protocol", cfg.sasl_mechanism_inter_broker_protocol))
    if cfg.controller_listener_name_list and not cfg.implicit_quorum:
        links.append((cfg.controller_listener_name_list[0], "sasl.mechanism.controller.protocol", cfg.sasl_mechanism_controller_protocol))
    served = {lst.name for lst in cfg.listener_list}
    for listener, mechanism_config, mechanism in links:
        protocol = cfg.security_protocol_map.get(listener, "PLAINTEXT")
        if protocol.startswith("SASL_") and listener in served and mechanism not in enabled_mechanisms(cfg, listener):
            return f"{mechanism_config} must be included in sasl.enabled.mechanisms of listener {listener} when SASL is used for its links ({mechanism} is not)"
        try:
            client_channel(cfg, listener, mechanism)
        except (ValueError, SslConfigError) as e:
            return str(e)
    return None


class ListenerSecurityBuilder:
    """The server side of this node's listeners; TLS contexts shared by listeners with the same
    ssl.* settings, so that the stores are read once. ``config`` is replaced when a listener's
    stores are (dynamic listener configs)."""

    def __init__(self, cfg: BrokerConfig, scram_lookup: ScramLookup) -> None:
        self.config = cfg
        self._scram_lookup = scram_lookup
        self._tls_contexts: dict[tuple[tuple[str, str], ...], ssl.SSLContext] = {}

    def tls_context(self, listener: str) -> ssl.SSLContext:
        ssl_cfg = self.config.ssl_for_listener(listener)
        key = tuple(sorted((name, str(value)) for name, value in ssl_cfg.model_dump().items() if name.startswith("ssl_")))
        context = self._tls_contexts.get(key)
        if context is None:
            context = self._tls_contexts[key] = server_context(ssl_cfg)
        return context

    def listener_security(self, listener: str) -> ListenerSecurity:
        cfg = self.config
        protocol = cfg.security_protocol_map[listener]
        tls = self.tls_context(listener) if protocol in TLS_PROTOCOLS else None
        if not protocol.startswith("SASL_"):
            mapper = SslPrincipalMapper(cfg.ssl_for_listener(listener).ssl_principal_mapping_rules) if tls is not None else None
            return ListenerSecurity(listener, tls, principal_mapper=mapper)
        mechanisms = server_factories(cfg, listener, self._scram_lookup, start_jwks=True)
        reauth_ms = int(cfg.listener_config(listener, "connections.max.reauth.ms") or 0)
        authenticator: Callable[[], SaslServerAuthenticator] = partial(
            SaslServerAuthenticator, mechanisms, cfg.sasl_server_max_receive_size, cfg.connection_failed_authentication_delay_ms, reauth_ms
        )
        return ListenerSecurity(listener, tls, authenticator)
