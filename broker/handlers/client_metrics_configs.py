"""DescribeConfigs of a client metrics subscription (resource type 16), as Kafka 4.4 describes it:
its three configs by name, a set one as CLIENT_METRICS_CONFIG with itself as its synonym, the
others as DEFAULT_CONFIG with none; values parsed ("a, a" shows "a"); INT and LIST types; Kafka's
documentation when asked. A subscription that does not exist is all defaults, not an error."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from kio.schema.errors import ErrorCode

from broker.client_metrics_config import CONFIG_DOCS, INTERVAL_MS_CONFIG, described_configs
from protocol.entities import build

CLIENT_METRICS_CONFIG = 7  # DescribeConfigs' ConfigSource
DEFAULT_CONFIG = 5
TYPE_INT, TYPE_LIST = 3, 7


def describe_client_metrics(
    name: str,
    configs: Mapping[str, str],
    keys: Sequence[str] | None,
    synonyms_wanted: bool,
    documentation_wanted: bool,
    result_cls: type,
    entry_cls: type,
    synonym_cls: type,
) -> Any:
    """The DescribeConfigsResult of subscription ``name``, whose stored configs are ``configs``."""
    if not name:
        return build(
            result_cls,
            error_code=ErrorCode.invalid_request,
            error_message="Client metrics subscription name must not be empty",
            resource_type=16,
            resource_name=name,
            configs=(),
        )
    entries = []
    for key, value, is_set in described_configs(configs):
        if keys and key not in keys:
            continue
        source = CLIENT_METRICS_CONFIG if is_set else DEFAULT_CONFIG
        synonyms = (build(synonym_cls, name=key, value=value, source=source),) if synonyms_wanted and is_set else ()
        entries.append(
            build(
                entry_cls,
                name=key,
                value=value,
                read_only=False,
                config_source=source,
                is_sensitive=False,
                synonyms=synonyms,
                config_type=TYPE_INT if key == INTERVAL_MS_CONFIG else TYPE_LIST,
                documentation=CONFIG_DOCS[key] if documentation_wanted else None,
            )
        )
    return build(result_cls, error_code=ErrorCode.none, error_message="", resource_type=16, resource_name=name, configs=tuple(entries))


__all__ = ["describe_client_metrics"]
