"""DescribeConfigs of a group (resource type 32), as Kafka 4.4's broker answers it.

The configs, values and sources come from broker/group/group_config.py; this module turns them
into the response entities. A broker synonym kbroker has a setting for (``group.consumer.…``)
is shown with this broker's value and where it came from (server.properties or the default),
the others with Kafka's default.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from kio.schema.errors import ErrorCode

from broker.group.group_config import Synonym, describe_group_config
from protocol.entities import build

# (name, value, source) of a broker setting and the layers below it, None if kbroker has no such setting.
BrokerSynonyms = Callable[[str], list[Synonym] | None]


def describe_group(
    group_id: str,
    overrides: dict[str, str],
    keys: Sequence[str] | None,
    synonyms_wanted: bool,
    broker_synonyms: BrokerSynonyms,
    result_cls: Any,
    entry_cls: Any,
    synonym_cls: Any,
) -> Any:
    """One DescribeConfigsResult; a group need not exist to be described (its configs are the broker's)."""
    if not group_id:
        return build(
            result_cls, error_code=ErrorCode.invalid_request, error_message="Group name must not be empty", resource_type=32, resource_name=group_id, configs=()
        )
    configs = []
    for described in describe_group_config(overrides, broker_synonyms):
        if keys and described.name not in keys:
            continue
        synonyms = tuple(build(synonym_cls, name=n, value=v, source=s) for n, v, s in described.synonyms) if synonyms_wanted else ()
        configs.append(
            build(
                entry_cls,
                name=described.name,
                value=described.value,
                read_only=False,
                config_source=described.source,
                is_sensitive=False,
                synonyms=synonyms,
                config_type=described.config_type,
                documentation=None,
            )
        )
    # Kafka leaves the message at its generated default, "", when there is no error.
    return build(result_cls, error_code=ErrorCode.none, error_message="", resource_type=32, resource_name=group_id, configs=tuple(configs))


__all__ = ["BrokerSynonyms", "describe_group"]
