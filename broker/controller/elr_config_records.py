"""min.insync.replicas under eligible leader replicas (KIP-966), as Kafka 4.4's ConfigurationControlManager.

An ELR member is only known to hold every committed record for the min.insync.replicas it
was chosen under, so while the feature is on:

- a change to a topic's min.insync.replicas clears that topic's ELR and last known ELR, and a
  change to the cluster-wide one clears every partition's: one ClearElrRecord per changed
  ConfigRecord, after all of the request's ConfigRecords and in the same atomic batch;
- a single broker's min.insync.replicas may not be set or removed (a per-node value would make
  the ELR mean different things on different controllers), nor the cluster-wide one removed;
- turning the feature on first pins the cluster-wide value: a ConfigRecord with the
  controller's static min.insync.replicas if there is none, then a ConfigRecord removing each
  broker's own value, ahead of the FeatureLevelRecord.

Turning the feature off writes only the FeatureLevelRecord: Kafka leaves each partition's ELR
in place until its next PartitionChangeRecord clears it, and a snapshot leaves it out.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from kio.schema.errors import ErrorCode

from broker.controller.controller_result import ApiError
from broker.controller.feature_control_manager import ELIGIBLE_LEADER_REPLICAS_FEATURE
from broker.metadata.metadata_image import BROKER_RESOURCE, TOPIC_RESOURCE, MetadataImage
from broker.metadata.metadata_records import ClearElrRecord, ConfigRecord

MIN_INSYNC_REPLICAS = "min.insync.replicas"

BROKER_MIN_ISR_ERROR = "Broker-level min.insync.replicas cannot be altered while ELR is enabled."
CLUSTER_MIN_ISR_REMOVAL_ERROR = "Cluster-level min.insync.replicas cannot be removed while ELR is enabled."


def check_min_isr_change(records: Iterable[ConfigRecord], elr_enabled: bool) -> None:
    """Kafka's isDisallowedBrokerMinIsrTransition and isDisallowedClusterMinIsrTransition, in its order."""
    if not elr_enabled:
        return
    for record in records:
        if record.name != MIN_INSYNC_REPLICAS or record.resource_type != BROKER_RESOURCE:
            continue
        if record.resource_name:
            raise ApiError(ErrorCode.invalid_config, BROKER_MIN_ISR_ERROR)
        if record.value is None:
            raise ApiError(ErrorCode.invalid_config, CLUSTER_MIN_ISR_REMOVAL_ERROR)


def clear_elr_records(records: Iterable[ConfigRecord], elr_enabled: bool) -> list[ClearElrRecord]:
    """Kafka's createClearElrRecordsAsNeeded: one ClearElrRecord per min.insync.replicas
    ConfigRecord, naming the topic, or "" (every topic) for any other resource."""
    if not elr_enabled:
        return []
    return [
        ClearElrRecord(topic_name=r.resource_name if r.resource_type == TOPIC_RESOURCE else "")
        for r in records
        if r.name == MIN_INSYNC_REPLICAS
    ]


def elr_safety_records(image: MetadataImage, updates: Mapping[str, int], static_min_isr: int) -> list[ConfigRecord]:
    """Kafka's maybeGenerateElrSafetyRecords, for an UpdateFeatures that sets the feature to 1 or
    more (even where it already is): the cluster-wide value pinned, the per-broker ones removed."""
    if updates.get(ELIGIBLE_LEADER_REPLICAS_FEATURE, 0) <= 0:
        return []
    records: list[ConfigRecord] = []
    if MIN_INSYNC_REPLICAS not in image.configs.get((BROKER_RESOURCE, ""), {}):
        records.append(ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="", name=MIN_INSYNC_REPLICAS, value=str(static_min_isr)))
    broker_ids = sorted(int(name) for kind, name in image.configs if kind == BROKER_RESOURCE and name)
    for broker_id in broker_ids:
        if MIN_INSYNC_REPLICAS in image.configs[(BROKER_RESOURCE, str(broker_id))]:
            records.append(ConfigRecord(resource_type=BROKER_RESOURCE, resource_name=str(broker_id), name=MIN_INSYNC_REPLICAS, value=None))
    return records


__all__ = [
    "BROKER_MIN_ISR_ERROR",
    "CLUSTER_MIN_ISR_REMOVAL_ERROR",
    "MIN_INSYNC_REPLICAS",
    "check_min_isr_change",
    "clear_elr_records",
    "elr_safety_records",
]
