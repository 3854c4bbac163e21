"""A SASL listener's mechanisms and their servers, from Kafka's config names.

`sasl.enabled.mechanisms` (or `listener.name.<l>.sasl.enabled.mechanisms`) lists a listener's
mechanisms; each needs `listener.name.<l>.<mechanism>.sasl.jaas.config`, as a Kafka broker does
(kbroker reads no JAAS file). PLAIN's users are the `user_<name>="<password>"` options of
PlainLoginModule; SCRAM's (ScramLoginModule) are the credentials in the metadata log;
OAUTHBEARER's (OAuthBearerLoginModule) tokens are checked by the unsecured validator's options,
or, with OAuthBearerValidatorCallbackHandler, against the keys of a JWKS endpoint (KIP-768).
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Callable

from broker.security.jaas_config import JaasConfigError, parse_jaas_config
from broker.metadata.metadata_image import ScramCredential
from broker.security.oauthbearer_sasl_server import OAuthBearerSaslServer
from broker.security.oauthbearer_validator import VALIDATOR_CALLBACK_HANDLERS, OAuthBearerJwtSaslServer, RefreshingJwks, validator_config
from broker.security.plain_sasl_server import PlainSaslServer
from broker.security.scram import SCRAM_MECHANISMS, ScramSaslServer
from broker.security.sasl_server import SaslServerFactory

if TYPE_CHECKING:
    from broker.config import BrokerConfig

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTHBEARER_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
SERVED_MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS, "OAUTHBEARER")
LOGIN_MODULES = {"PLAIN": PLAIN_LOGIN_MODULE, "OAUTHBEARER": OAUTHBEARER_LOGIN_MODULE, **{m: SCRAM_LOGIN_MODULE for m in SCRAM_MECHANISMS}}
# Where a SCRAM server finds a user's credential: the broker's metadata image.
ScramLookup = Callable[[str, int], ScramCredential | None]


def enabled_mechanisms(cfg: BrokerConfig, listener: str) -> list[str]:
    value = cfg.listener_config(listener, "sasl.enabled.mechanisms") or ""
    return [m.strip() for m in value.split(",") if m.strip()]


def sasl_listener_problem(cfg: BrokerConfig, listener: str) -> str | None:
    """Why the listener's SASL settings cannot work, in one line; None when they can."""
    try:
        server_factories(cfg, listener)
    except ValueError as e:
        return str(e)
    return None


def server_factories(
    cfg: BrokerConfig,
    listener: str,
    scram_lookup: ScramLookup = lambda user, mechanism: None,
    start_jwks: bool = False,
) -> dict[str, SaslServerFactory]:
    """Per enabled mechanism, a new server for each connection's exchange. ``start_jwks``: fetch
    a signed-token listener's JWKS keys now and keep them fresh (a listener starting), not only
    check its settings."""
    mechanisms = enabled_mechanisms(cfg, listener)
    if not mechanisms:
        raise ValueError(f"Listener {listener}: sasl.enabled.mechanisms is empty")
    factories: dict[str, SaslServerFactory] = {}
    for mechanism in mechanisms:
        if mechanism not in SERVED_MECHANISMS:
            raise ValueError(
                f"Listener {listener}: SASL mechanism {mechanism} is not served by kbroker ({', '.join(SERVED_MECHANISMS)} is): "
                f"set sasl.enabled.mechanisms or listener.name.{listener.lower()}.sasl.enabled.mechanisms"
            )
        key = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
        text = cfg.listener_prefixed.get(key)
        if text is None:
            raise ValueError(f"Listener {listener}: SASL mechanism {mechanism} needs {key}")
        try:
            modules = parse_jaas_config(text)
        except JaasConfigError as e:
            raise ValueError(f"{key}: {e}") from None
        login_module = LOGIN_MODULES[mechanism]
        found = [m for m in modules if m.name == login_module]
        if not found:
            raise ValueError(f"{key}: {mechanism} needs {login_module}")
        if mechanism == "PLAIN":
            users = {k.removeprefix("user_"): v for k, v in found[0].options.items() if k.startswith("user_")}
            factories[mechanism] = partial(PlainSaslServer, users)
        elif mechanism == "OAUTHBEARER":
            handler = cfg.listener_prefixed.get(f"listener.name.{listener.lower()}.oauthbearer.sasl.server.callback.handler.class")
            if handler is None:
                factories[mechanism] = partial(OAuthBearerSaslServer, found[0].options)
            elif handler.strip() in VALIDATOR_CALLBACK_HANDLERS:
                validation = validator_config({name: _oauthbearer_config(cfg, listener, name) for name in OAUTHBEARER_CONFIGS})
                jwks = RefreshingJwks(validation.jwks_endpoint_url, validation.jwks_refresh_ms)
                if start_jwks:
                    jwks.start()
                factories[mechanism] = partial(OAuthBearerJwtSaslServer, validation, jwks)
            else:
                raise ValueError(f"Listener {listener}: OAUTHBEARER server callback handler {handler} is not served (OAuthBearerValidatorCallbackHandler is)")
        else:
            factories[mechanism] = partial(ScramSaslServer, SCRAM_MECHANISMS[mechanism], scram_lookup)
    return factories


OAUTHBEARER_CONFIGS = (
    "sasl.oauthbearer.jwks.endpoint.url",
    "sasl.oauthbearer.jwks.endpoint.refresh.ms",
    "sasl.oauthbearer.expected.audience",
    "sasl.oauthbearer.expected.issuer",
    "sasl.oauthbearer.sub.claim.name",
    "sasl.oauthbearer.scope.claim.name",
    "sasl.oauthbearer.clock.skew.seconds",
)


def _oauthbearer_config(cfg: BrokerConfig, listener: str, name: str) -> str | None:
    """`listener.name.<l>.oauthbearer.<name>`, `listener.name.<l>.<name>`, then the broker-wide one."""
    prefixed = cfg.listener_prefixed.get(f"listener.name.{listener.lower()}.oauthbearer.{name}")
    value = prefixed if prefixed is not None else cfg.listener_config(listener, name)
    return None if value is None else str(value)
