"""Kafka 4.4's broker configs that kbroker knows by name but has no implementation for.

Every config Kafka 4.4 describes is in broker/kafka_config_defs.py. Those BrokerConfig has no field
for (tiered storage, Kerberos, metric reporters, share and streams groups, socket buffer sizes, ...)
are accepted in server.properties, checked against Kafka's type, kept by name and described with
the value given, or Kafka's default: they change nothing (docs/configuration-reference.md lists
them). The ones Kafka can change while it runs are accepted, stored and described the same way
through kafka-configs.

A value that would switch on a feature kbroker lacks is refused instead, at start and dynamically,
in one line: running without it while the operator expects it (tiered storage, a topic policy, a
custom principal builder, ...) would break what the data and its access were configured to do.
"""

from __future__ import annotations

from broker.kafka_config_defs import KAFKA_BROKER_CONFIGS

DEFAULT_PRINCIPAL_BUILDER = "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder"

# The values kbroker refuses: the config, which values, and why (what kbroker lacks).
_FEATURE_SWITCHES: dict[str, tuple[str, str]] = {
    # config: (kind of value refused, reason)
    "remote.log.storage.system.enable": ("true", "kbroker has no tiered storage"),
    "transaction.two.phase.commit.enable": ("true", "kbroker has no two-phase commit transactions (KIP-939)"),
    "controller.quorum.auto.join.enable": ("true", "kbroker's controllers do not join the quorum by themselves: add a voter with kafka-metadata-quorum add-controller"),
    "create.topic.policy.class.name": ("set", "kbroker runs no topic creation policy"),
    "alter.config.policy.class.name": ("set", "kbroker runs no config alteration policy"),
    "client.quota.callback.class": ("set", "kbroker's client quotas take no callback class"),
    "ssl.engine.factory.class": ("set", "kbroker's TLS (broker/ssl_factory.py) takes no engine factory class"),
    "delegation.token.secret.key": ("set", "kbroker has no delegation tokens"),
    "config.providers": ("set", "kbroker resolves no config providers: give the values themselves"),
    "principal.builder.class": ("other", "kbroker names clients as Kafka's DefaultKafkaPrincipalBuilder does, with no other class"),
}
_DEFAULTS_ALLOWED = {"principal.builder.class": DEFAULT_PRINCIPAL_BUILDER}

# Kafka's listener configs without a BrokerConfig field that it changes only per broker, never at
# the cluster default level (its DynamicListenerConfig's SSL and SASL settings).
PER_BROKER_ONLY = frozenset(
    {
        "principal.builder.class",
        "ssl.provider",
        "ssl.keymanager.algorithm",
        "ssl.trustmanager.algorithm",
        "ssl.secure.random.implementation",
        "ssl.engine.factory.class",
        "sasl.jaas.config",
        "sasl.kerberos.service.name",
        "sasl.kerberos.kinit.cmd",
        "sasl.kerberos.ticket.renew.window.factor",
        "sasl.kerberos.ticket.renew.jitter",
        "sasl.kerberos.min.time.before.relogin",
        "sasl.kerberos.principal.to.local.rules",
        "sasl.login.refresh.window.factor",
        "sasl.login.refresh.window.jitter",
        "sasl.login.refresh.min.period.seconds",
        "sasl.login.refresh.buffer.seconds",
    }
)

_INT_RANGES = {"SHORT": 2**15, "INT": 2**31, "LONG": 2**63}


def type_problem(key: str, value: str) -> str | None:
    """Kafka's ConfigDef parse of ``value`` as ``key``'s type: its message, or None when it parses."""
    definition = KAFKA_BROKER_CONFIGS.get(key)
    if definition is None:
        return None
    text = value.strip()
    kind = definition.type
    if kind in _INT_RANGES:
        try:
            number = int(text)
        except ValueError:
            number = None
        if number is None or not -_INT_RANGES[kind] <= number < _INT_RANGES[kind]:
            return f"Invalid value {value} for configuration {key}: Not a number of type {kind}"
    elif kind == "DOUBLE":
        try:
            float(text)
        except ValueError:
            return f"Invalid value {value} for configuration {key}: Not a number of type DOUBLE"
    elif kind == "BOOLEAN" and text.lower() not in ("true", "false"):
        return f"Invalid value {value} for configuration {key}: Expected value to be either true or false"
    return None


def feature_problem(key: str, value: str) -> str | None:
    """Why kbroker refuses ``value`` for ``key`` (a feature it lacks), or None."""
    switch = _FEATURE_SWITCHES.get(key)
    if switch is None:
        return None
    kind, reason = switch
    text = value.strip()
    refused = (
        (kind == "true" and text.lower() == "true")
        or (kind == "set" and text != "")
        or (kind == "other" and text not in ("", _DEFAULTS_ALLOWED.get(key)))
    )
    if not refused:
        return None
    shown = "a value" if KAFKA_BROKER_CONFIGS[key].sensitive else value
    return f"{key}={shown} is refused: {reason}"


def problem(key: str, value: str) -> str | None:
    """The first reason kbroker cannot take ``key``=``value`` (a Kafka config it has no field for)."""
    return type_problem(key, value) or feature_problem(key, value)


__all__ = ["DEFAULT_PRINCIPAL_BUILDER", "PER_BROKER_ONLY", "feature_problem", "problem", "type_problem"]
