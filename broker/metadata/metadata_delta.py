"""MetadataDelta: committed records replayed over an image, and the next image they make.

Kafka's MetadataDelta: one sub-delta per part of the image (features, cluster, topics,
configurations, producer ids), created only when a record touches that part, so a publisher
skips what did not change by checking for None. ``replay`` checks each record against the
state replayed so far and raises MetadataImageError before changing anything; ``apply``
builds the next image and shares every untouched part with the previous one.

Metadata transactions (Begin/End/AbortTransactionRecord) are the loader's business: a delta
treats them as no-ops.
"""

from __future__ import annotations

import dataclasses
import uuid
from types import MappingProxyType
from typing import Callable, Iterable, Mapping

from broker.metadata.metadata_image import (
    TOPIC_RESOURCE,
    BrokerRegistration,
    ControllerRegistration,
    MetadataImage,
    MetadataImageError,
    QuotaEntity,
    ScramCredential,
    TopicImage,
)
from broker.metadata.metadata_records import (
    AbortTransactionRecord,
    AccessControlEntryRecord,
    BeginTransactionRecord,
    BrokerRegistrationChangeRecord,
    ClearElrRecord,
    ClientQuotaRecord,
    ConfigRecord,
    EndTransactionRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    MetadataRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RegisterControllerRecord,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    UnregisterControllerRecord,
    UserScramCredentialRecord,
)
from broker.metadata.topics_delta import TopicDelta, TopicsDelta
from broker.security.standard_acl import StandardAcl

ConfigResource = tuple[int, str]


class FeaturesDelta:
    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.changes: dict[str, int | None] = {}  # None: the feature is gone (level 0)

    def replay(self, record: FeatureLevelRecord) -> None:
        self.changes[record.name] = None if record.feature_level == 0 else record.feature_level

    def apply(self) -> Mapping[str, int]:
        features = self.image.features.copy()
        for name, level in self.changes.items():
            if level is None:
                features.pop(name, None)
            else:
                features[name] = level
        return MappingProxyType(features)


class ClusterDelta:
    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.changed_brokers: dict[int, BrokerRegistration | None] = {}  # None: unregistered
        self.changed_controllers: dict[int, ControllerRegistration | None] = {}  # None: unregistered

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        if broker_id in self.changed_brokers:
            return self.changed_brokers[broker_id]
        return self.image.brokers.get(broker_id)

    def _registered(self, broker_id: int, epoch: int, record: MetadataRecord) -> BrokerRegistration:
        broker = self.broker(broker_id)
        if broker is None or broker.epoch != epoch:
            raise MetadataImageError(f"{type(record).__name__} for broker {broker_id} epoch {epoch}, which is not registered")
        return broker

    def replay(self, record: MetadataRecord) -> None:
        if isinstance(record, RegisterControllerRecord):
            self.changed_controllers[record.controller_id] = ControllerRegistration.from_record(record)
        elif isinstance(record, UnregisterControllerRecord):
            # As Kafka's ClusterDelta: the image does not check that there was a registration (the
            # active controller did before writing the record).
            self.changed_controllers[record.controller_id] = None
        elif isinstance(record, RegisterBrokerRecord):
            self.changed_brokers[record.broker_id] = BrokerRegistration.from_record(record)
        elif isinstance(record, UnregisterBrokerRecord):
            self._registered(record.broker_id, record.broker_epoch, record)
            self.changed_brokers[record.broker_id] = None
        elif isinstance(record, (FenceBrokerRecord, UnfenceBrokerRecord)):
            broker = self._registered(record.id, record.epoch, record)
            self.changed_brokers[record.id] = dataclasses.replace(broker, fenced=isinstance(record, FenceBrokerRecord))
        elif isinstance(record, BrokerRegistrationChangeRecord):
            broker = self._registered(record.broker_id, record.broker_epoch, record)
            if record.fenced not in (-1, 0, 1) or record.in_controlled_shutdown not in (0, 1):
                raise MetadataImageError(f"invalid BrokerRegistrationChangeRecord {record}")
            self.changed_brokers[record.broker_id] = dataclasses.replace(
                broker,
                fenced=broker.fenced if record.fenced == 0 else record.fenced == 1,
                in_controlled_shutdown=broker.in_controlled_shutdown or record.in_controlled_shutdown == 1,
                directories=tuple(record.log_dirs) or broker.directories,
                cordoned_directories=broker.cordoned_directories if record.cordoned_log_dirs is None else tuple(record.cordoned_log_dirs),
            )

    def apply(self) -> Mapping[int, BrokerRegistration]:
        brokers = self.image.brokers.copy()
        for broker_id, registration in self.changed_brokers.items():
            if registration is None:
                brokers.pop(broker_id, None)
            else:
                brokers[broker_id] = registration
        return MappingProxyType(brokers)

    def apply_controllers(self) -> Mapping[int, ControllerRegistration]:
        if not self.changed_controllers:
            return self.image.controllers
        controllers = dict(self.image.controllers)
        for controller_id, registration in self.changed_controllers.items():
            if registration is None:
                controllers.pop(controller_id, None)
            else:
                controllers[controller_id] = registration
        return MappingProxyType(controllers)


class ConfigurationsDelta:
    """Per resource: whether its previous entries are dropped (its topic was removed) and the keys set or deleted since."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.changes: dict[ConfigResource, tuple[bool, dict[str, str | None]]] = {}

    def replay(self, record: ConfigRecord) -> None:
        key = (record.resource_type, record.resource_name)
        reset, entries = self.changes.get(key, (False, {}))
        entries[record.name] = record.value
        self.changes[key] = (reset, entries)

    def delete_resource(self, resource: ConfigResource) -> None:
        self.changes[resource] = (True, {})

    def changed_resources(self, resource_type: int) -> list[str]:
        return [name for (kind, name) in self.changes if kind == resource_type]

    def apply(self) -> Mapping[ConfigResource, Mapping[str, str]]:
        configs = self.image.configs.copy()
        for resource, (reset, entries) in self.changes.items():
            current = {} if reset else dict(configs.get(resource, ()))
            for name, value in entries.items():
                if value is None:
                    current.pop(name, None)
                else:
                    current[name] = value
            if current:
                configs[resource] = MappingProxyType(current)
            else:
                configs.pop(resource, None)
        return MappingProxyType(configs)


class ProducerIdsDelta:
    def __init__(self, image: MetadataImage) -> None:
        self.next_producer_id = image.next_producer_id

    def replay(self, record: ProducerIdsRecord) -> None:
        self.next_producer_id = record.next_producer_id


class ScramDelta:
    def __init__(self, image: MetadataImage) -> None:
        self.credentials = dict(image.scram_credentials)

    def replay(self, record: UserScramCredentialRecord | RemoveUserScramCredentialRecord) -> None:
        if isinstance(record, UserScramCredentialRecord):
            self.credentials[(record.name, record.mechanism)] = ScramCredential(record.salt, record.stored_key, record.server_key, record.iterations)
        else:
            self.credentials.pop((record.name, record.mechanism), None)

    def apply(self) -> Mapping[tuple[str, int], ScramCredential]:
        return MappingProxyType(self.credentials)


class ClientQuotasDelta:
    def __init__(self, image: MetadataImage) -> None:
        self.quotas = {entity: dict(values) for entity, values in image.client_quotas.items()}

    def replay(self, record: ClientQuotaRecord) -> None:
        entity = quota_entity((e.entity_type, e.entity_name) for e in record.entity)
        values = self.quotas.setdefault(entity, {})
        if record.remove:
            values.pop(record.key, None)
            if not values:
                del self.quotas[entity]
        else:
            values[record.key] = record.value

    def apply(self) -> Mapping[QuotaEntity, Mapping[str, float]]:
        return MappingProxyType({entity: MappingProxyType(values) for entity, values in self.quotas.items()})


class AclsDelta:
    def __init__(self, image: MetadataImage) -> None:
        self.acls = dict(image.acls)

    def replay(self, record: AccessControlEntryRecord | RemoveAccessControlEntryRecord) -> None:
        if isinstance(record, AccessControlEntryRecord):
            self.acls[record.id] = StandardAcl(
                record.resource_type, record.resource_name, record.pattern_type, record.principal, record.host, record.operation, record.permission_type
            )
        elif self.acls.pop(record.id, None) is None:
            raise MetadataImageError(f"no ACL with id {record.id} to remove")

    def apply(self) -> Mapping[uuid.UUID, StandardAcl]:
        return MappingProxyType(self.acls)


def quota_entity(parts: Iterable[tuple[str, str | None]]) -> QuotaEntity:
    return tuple(sorted(parts, key=lambda part: part[0]))


class MetadataDelta:
    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.features_delta: FeaturesDelta | None = None
        self.cluster_delta: ClusterDelta | None = None
        self.topics_delta: TopicsDelta | None = None
        self.configs_delta: ConfigurationsDelta | None = None
        self.producer_ids_delta: ProducerIdsDelta | None = None
        self.scram_delta: ScramDelta | None = None
        self.client_quotas_delta: ClientQuotasDelta | None = None
        self.acls_delta: AclsDelta | None = None
        self.record_count = 0

    # Kafka's getOrCreate*Delta.
    def _features(self) -> FeaturesDelta:
        if self.features_delta is None:
            self.features_delta = FeaturesDelta(self.image)
        return self.features_delta

    def _cluster(self) -> ClusterDelta:
        if self.cluster_delta is None:
            self.cluster_delta = ClusterDelta(self.image)
        return self.cluster_delta

    def _topics(self) -> TopicsDelta:
        if self.topics_delta is None:
            self.topics_delta = TopicsDelta(self.image)
        return self.topics_delta

    def _configs(self) -> ConfigurationsDelta:
        if self.configs_delta is None:
            self.configs_delta = ConfigurationsDelta(self.image)
        return self.configs_delta

    def _producer_ids(self) -> ProducerIdsDelta:
        if self.producer_ids_delta is None:
            self.producer_ids_delta = ProducerIdsDelta(self.image)
        return self.producer_ids_delta

    def _scram(self) -> ScramDelta:
        if self.scram_delta is None:
            self.scram_delta = ScramDelta(self.image)
        return self.scram_delta

    def _client_quotas(self) -> ClientQuotasDelta:
        if self.client_quotas_delta is None:
            self.client_quotas_delta = ClientQuotasDelta(self.image)
        return self.client_quotas_delta

    def _acls(self) -> AclsDelta:
        if self.acls_delta is None:
            self.acls_delta = AclsDelta(self.image)
        return self.acls_delta

    def replay(self, record: MetadataRecord) -> None:
        replay = _REPLAY.get(type(record))
        if replay is None:
            raise MetadataImageError(f"no image change defined for {type(record).__name__}")
        replay(self, record)
        self.record_count += 1

    def _replay_topic_record(self, record: MetadataRecord) -> None:
        self._topics().replay(record)

    def _replay_remove_topic(self, record: RemoveTopicRecord) -> None:
        name = self._topics().remove_topic(record.topic_id, record)
        self._configs().delete_resource((TOPIC_RESOURCE, name))

    def _replay_config(self, record: ConfigRecord) -> None:
        self._configs().replay(record)

    def _replay_feature(self, record: FeatureLevelRecord) -> None:
        self._features().replay(record)

    def _replay_broker(self, record: MetadataRecord) -> None:
        self._cluster().replay(record)

    def _replay_producer_ids(self, record: ProducerIdsRecord) -> None:
        self._producer_ids().replay(record)

    def _replay_scram(self, record: UserScramCredentialRecord | RemoveUserScramCredentialRecord) -> None:
        self._scram().replay(record)

    def _replay_client_quota(self, record: ClientQuotaRecord) -> None:
        self._client_quotas().replay(record)

    def _replay_acl(self, record: AccessControlEntryRecord | RemoveAccessControlEntryRecord) -> None:
        self._acls().replay(record)

    def _replay_nothing(self, record: MetadataRecord) -> None:
        pass

    @property
    def is_empty(self) -> bool:
        return self.features_delta is self.cluster_delta is self.topics_delta is self.configs_delta is self.producer_ids_delta is self.scram_delta is self.client_quotas_delta is self.acls_delta is None

    def apply(self, provenance: int | None = None, provenance_epoch: int | None = None) -> MetadataImage:
        """The next image; ``provenance`` is the offset of the last record replayed (default: unchanged)."""
        image = self.image
        topics, topics_by_id = (image.topics, image.topics_by_id) if self.topics_delta is None else self.topics_delta.apply()
        return MetadataImage(
            topics=topics,
            topics_by_id=topics_by_id,
            configs=image.configs if self.configs_delta is None else self.configs_delta.apply(),
            features=image.features if self.features_delta is None else self.features_delta.apply(),
            brokers=image.brokers if self.cluster_delta is None else self.cluster_delta.apply(),
            controllers=image.controllers if self.cluster_delta is None else self.cluster_delta.apply_controllers(),
            next_producer_id=image.next_producer_id if self.producer_ids_delta is None else self.producer_ids_delta.next_producer_id,
            scram_credentials=image.scram_credentials if self.scram_delta is None else self.scram_delta.apply(),
            client_quotas=image.client_quotas if self.client_quotas_delta is None else self.client_quotas_delta.apply(),
            acls=image.acls if self.acls_delta is None else self.acls_delta.apply(),
            provenance=image.provenance if provenance is None else provenance,
            provenance_epoch=image.provenance_epoch if provenance_epoch is None else provenance_epoch,
        )

    @classmethod
    def diff(cls, previous: MetadataImage, image: MetadataImage) -> MetadataDelta:
        """A delta over ``previous`` that leads to ``image``: what a publisher gets when a
        snapshot replaces its image, so it acts on what actually changed. Partitions are
        compared by value; topics that kept their id keep their previous TopicImage as base."""
        delta = cls(previous)
        if previous.topics_by_id != image.topics_by_id:
            topics = delta._topics()
            for topic_id, old in previous.topics_by_id.items():
                new = image.topics_by_id.get(topic_id)
                # Partitions never go away in Kafka; if some did, the topic is a new one under an old id.
                if new is None or new.name != old.name or not old.partitions.keys() <= new.partitions.keys():
                    topics.deleted_topic_ids.add(topic_id)
            for topic_id, new in image.topics_by_id.items():
                old = previous.topics_by_id.get(topic_id)
                if old is new:
                    continue
                if old is None or topic_id in topics.deleted_topic_ids:
                    base = TopicImage(new.name, topic_id)
                    topics.created_topics[new.name] = topic_id
                else:
                    base = old
                topic_delta = TopicDelta(base)
                for index, reg in new.partitions.items():
                    if base.partitions.get(index) != reg:
                        topic_delta.partition_changes[index] = reg
                if topic_delta.partition_changes or base is not old:
                    topics.changed_topics[topic_id] = topic_delta
        if previous.configs != image.configs:
            configs = delta._configs()
            for resource in previous.configs.keys() | image.configs.keys():
                entries = image.configs.get(resource)
                if previous.configs.get(resource) != entries:
                    configs.changes[resource] = (True, dict(entries or {}))
        if previous.features != image.features:
            features = delta._features()
            for name in previous.features.keys() | image.features.keys():
                if previous.features.get(name) != image.features.get(name):
                    features.changes[name] = image.features.get(name)
        if previous.brokers != image.brokers:
            cluster = delta._cluster()
            for broker_id in previous.brokers.keys() | image.brokers.keys():
                if previous.brokers.get(broker_id) != image.brokers.get(broker_id):
                    cluster.changed_brokers[broker_id] = image.brokers.get(broker_id)
        if previous.controllers != image.controllers:
            cluster = delta._cluster()
            for controller_id in previous.controllers.keys() | image.controllers.keys():
                if previous.controllers.get(controller_id) != image.controllers.get(controller_id):
                    cluster.changed_controllers[controller_id] = image.controllers.get(controller_id)
        if previous.next_producer_id != image.next_producer_id:
            delta._producer_ids().next_producer_id = image.next_producer_id
        if previous.scram_credentials != image.scram_credentials:
            delta._scram().credentials = dict(image.scram_credentials)
        if previous.client_quotas != image.client_quotas:
            delta._client_quotas().quotas = {entity: dict(values) for entity, values in image.client_quotas.items()}
        if previous.acls != image.acls:
            delta._acls().acls = dict(image.acls)
        return delta


_TRANSACTION_RECORDS = (BeginTransactionRecord, EndTransactionRecord, AbortTransactionRecord)

_REPLAY: dict[type, Callable[[MetadataDelta, MetadataRecord], None]] = {
    TopicRecord: MetadataDelta._replay_topic_record,
    PartitionRecord: MetadataDelta._replay_topic_record,
    PartitionChangeRecord: MetadataDelta._replay_topic_record,
    RemoveTopicRecord: MetadataDelta._replay_remove_topic,  # type: ignore[dict-item]
    ConfigRecord: MetadataDelta._replay_config,  # type: ignore[dict-item]
    FeatureLevelRecord: MetadataDelta._replay_feature,  # type: ignore[dict-item]
    ProducerIdsRecord: MetadataDelta._replay_producer_ids,  # type: ignore[dict-item]
    RegisterBrokerRecord: MetadataDelta._replay_broker,
    UnregisterBrokerRecord: MetadataDelta._replay_broker,
    FenceBrokerRecord: MetadataDelta._replay_broker,
    UnfenceBrokerRecord: MetadataDelta._replay_broker,
    BrokerRegistrationChangeRecord: MetadataDelta._replay_broker,
    UserScramCredentialRecord: MetadataDelta._replay_scram,  # type: ignore[dict-item]
    RemoveUserScramCredentialRecord: MetadataDelta._replay_scram,  # type: ignore[dict-item]
    ClientQuotaRecord: MetadataDelta._replay_client_quota,  # type: ignore[dict-item]
    AccessControlEntryRecord: MetadataDelta._replay_acl,  # type: ignore[dict-item]
    RemoveAccessControlEntryRecord: MetadataDelta._replay_acl,  # type: ignore[dict-item]
    ClearElrRecord: MetadataDelta._replay_topic_record,
    RegisterControllerRecord: MetadataDelta._replay_broker,
    UnregisterControllerRecord: MetadataDelta._replay_broker,
    NoOpRecord: MetadataDelta._replay_nothing,
    **{t: MetadataDelta._replay_nothing for t in _TRANSACTION_RECORDS},
}


def apply_records(image: MetadataImage, records: Iterable[MetadataRecord]) -> MetadataImage:
    """The image after ``records``, in one delta; provenance advances one offset per record.
    For tests and tools that replay records without a log (no metadata transactions)."""
    delta = MetadataDelta(image)
    count = 0
    for record in records:
        delta.replay(record)
        count += 1
    return delta.apply(image.provenance + count)


__all__ = [
    "AclsDelta",
    "ClientQuotasDelta",
    "ClusterDelta",
    "ConfigurationsDelta",
    "FeaturesDelta",
    "MetadataDelta",
    "ProducerIdsDelta",
    "ScramDelta",
    "apply_records",
    "quota_entity",
]
