"""A listener's keystore and truststore updated at run time, as Kafka's dynamic listener configs.

`kafka-configs.sh --entity-type brokers --entity-name <id> --alter --add-config
listener.name.<listener>.ssl.keystore.location=<new file>` (and the other store settings) is a
per-broker dynamic config: the broker receiving it checks the new store first, as Kafka's
SslFactory.validateReconfiguration does (it loads, and its certificate keeps the subject DN and
subject alternative names, so that clients verifying the old one accept the new), the controller
writes it, and the broker serves new connections with it from then on; open connections keep the
certificate they were made with. A renewed certificate goes in a file of its own: setting a config
to the value it has writes nothing, so nothing is reloaded.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from cryptography import x509

from broker.config import BrokerConfig
from broker.metadata.metadata_delta import MetadataDelta
from broker.metadata.metadata_image import BROKER_RESOURCE, MetadataImage
from broker.ssl_factory import SslConfigError, keystore_certificate, server_context

STORE_CONFIGS = frozenset(
    {
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.keystore.key",
        "ssl.keystore.certificate.chain",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.truststore.certificates",
    }
)
_LISTENER_CONFIG = re.compile(r"listener\.name\.([^.]+)\.(ssl\..+)")


def listener_store_config(key: str) -> str | None:
    """The listener a dynamic store config is for, or None if ``key`` is not one."""
    m = _LISTENER_CONFIG.fullmatch(key)
    return m.group(1) if m is not None and m.group(2) in STORE_CONFIGS else None


def with_overrides(cfg: BrokerConfig, overrides: Mapping[str, str | None]) -> BrokerConfig:
    """``cfg`` with the listeners' dynamic store configs (None: back to the static value)."""
    prefixed = dict(cfg.listener_prefixed)
    for key, value in overrides.items():
        if listener_store_config(key) is None:
            continue
        if value is None:
            prefixed.pop(key, None)
        else:
            prefixed[key] = value
    return cfg.model_copy(update={"listener_prefixed": prefixed})


def reconfiguration_problem(current: BrokerConfig, updated: BrokerConfig, listener: str) -> str | None:
    """Why ``listener`` cannot serve with ``updated``'s stores, in Kafka's words, or None."""
    old, new = current.ssl_for_listener(listener), updated.ssl_for_listener(listener)
    try:
        server_context(new)
        before, after = keystore_certificate(old), keystore_certificate(new)
    except (SslConfigError, ValueError, OSError) as e:
        return f"Validation of dynamic config update of SSLFactory failed: {e}"
    if before.subject != after.subject or _alt_names(before) != _alt_names(after):
        return (
            "Validation of dynamic config update of SSLFactory failed: Keystore DistinguishedName or SubjectAltNames do not match: "
            f"existingDN={before.subject.rfc4514_string()}, newDN={after.subject.rfc4514_string()}"
        )
    return None


def _alt_names(certificate: x509.Certificate) -> set[str]:
    try:
        extension = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return set()
    return {str(name.value) for name in extension.value}


class DynamicListenerConfig:
    """A metadata publisher: hands ``apply`` the broker's config with its listeners' dynamic store
    configs each time this broker's own dynamic configs change them."""

    def __init__(self, node_id: int, static: BrokerConfig, apply: Callable[[BrokerConfig], None]) -> None:
        self._resource = (BROKER_RESOURCE, str(node_id))
        self._static = static
        self._apply = apply
        self._stores: dict[str, str] = {}

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        overrides = image.configs.get(self._resource, {})
        stores = {key: value for key, value in overrides.items() if listener_store_config(key) is not None}
        if stores != self._stores:
            self._stores = stores
            self._apply(with_overrides(self._static, stores))
