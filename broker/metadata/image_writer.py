"""The records that rebuild a MetadataImage: what a metadata snapshot holds.

Kafka's MetadataImage.write. Replayed in order over the empty image, they give back an equal
image, so a snapshot can stand for the log up to the image's offset. The order is Kafka's:
features (metadata.version first, as every metadata log starts), brokers, the controllers'
registrations (from metadata.version 3.7-IV0, KIP-919: below it Kafka reports them lost and
writes none), topics each followed
by its partitions, configurations, client quotas, the producer id block, SCRAM credentials, then ACLs.
"""

from __future__ import annotations

import dataclasses

from broker.metadata import metadata_version as mv
from broker.metadata.metadata_image import MetadataImage
from broker.metadata.metadata_records import (
    AccessControlEntryRecord,
    ClientQuotaRecord,
    ConfigRecord,
    EntityData,
    FeatureLevelRecord,
    MetadataRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    TopicRecord,
    UserScramCredentialRecord,
)

METADATA_VERSION_FEATURE = "metadata.version"


def image_records(image: MetadataImage) -> list[MetadataRecord]:
    """The image as records, each at the version the image's metadata.version implies."""
    version = mv.for_level(image.features.get(METADATA_VERSION_FEATURE))
    # Kafka's ImageWriterOptions.eligibleLeaderReplicasEnabled: with the feature off, a partition's
    # ELR is stale (turning it off leaves it until the partition next changes) and is left out.
    elr_enabled = image.features.get(mv.ELIGIBLE_LEADER_REPLICAS_FEATURE, 0) >= 1
    records: list[MetadataRecord] = []
    for name in sorted(image.features, key=lambda n: (n != METADATA_VERSION_FEATURE, n)):
        records.append(FeatureLevelRecord(name=name, feature_level=image.features[name]))
    for broker_id in sorted(image.brokers):
        broker = image.brokers[broker_id]
        records.append(
            RegisterBrokerRecord(
                broker_id=broker.broker_id,
                incarnation_id=broker.incarnation_id,
                broker_epoch=broker.epoch,
                end_points=broker.endpoints,
                features=broker.supported_features,
                rack=broker.rack,
                fenced=broker.fenced,
                in_controlled_shutdown=broker.in_controlled_shutdown,
                log_dirs=broker.directories,
                cordoned_log_dirs=broker.cordoned_directories if version.is_cordoned_log_dirs_supported else None,
                record_version=version.register_broker_record_version,
            )
        )
    if version.is_controller_registration_supported:
        records.extend(image.controllers[controller_id].to_record() for controller_id in sorted(image.controllers))
    for name in sorted(image.topics):
        topic = image.topics[name]
        records.append(TopicRecord(name=name, topic_id=topic.topic_id))
        for partition_id in sorted(topic.partitions):
            p = topic.partitions[partition_id]
            records.append(
                PartitionRecord(
                    partition_id=partition_id,
                    topic_id=topic.topic_id,
                    replicas=p.replicas,
                    isr=p.isr,
                    removing_replicas=p.removing_replicas,
                    adding_replicas=p.adding_replicas,
                    leader=p.leader,
                    leader_recovery_state=p.leader_recovery_state,
                    leader_epoch=p.leader_epoch,
                    partition_epoch=p.partition_epoch,
                    directories=p.directories,
                    eligible_leader_replicas=(p.elr or None) if elr_enabled else None,
                    last_known_elr=(p.last_known_elr or None) if elr_enabled else None,
                    record_version=version.partition_record_version,
                )
            )
    for resource_type, resource_name in sorted(image.configs):
        entries = image.configs[(resource_type, resource_name)]
        for key in sorted(entries):
            records.append(ConfigRecord(resource_type=resource_type, resource_name=resource_name, name=key, value=entries[key]))
    if image.next_producer_id:
        # Kafka writes the block's owner as -1: only the next id matters to whoever replays it.
        records.append(ProducerIdsRecord(broker_id=-1, broker_epoch=-1, next_producer_id=image.next_producer_id))
    for entity, values in sorted(image.client_quotas.items(), key=lambda item: [(t, n or "") for t, n in item[0]]):
        for key in sorted(values):
            records.append(ClientQuotaRecord(entity=tuple(EntityData(entity_type=t, entity_name=n) for t, n in entity), key=key, value=values[key]))
    for (name, mechanism), c in sorted(image.scram_credentials.items()):
        records.append(
            UserScramCredentialRecord(name=name, mechanism=mechanism, salt=c.salt, stored_key=c.stored_key, server_key=c.server_key, iterations=c.iterations)
        )
    for acl_id, acl in sorted(image.acls.items()):
        records.append(AccessControlEntryRecord(id=acl_id, **dataclasses.asdict(acl)))
    return records


__all__ = ["image_records"]
