"""MetadataImage: the cluster state at one offset of the metadata log, immutable.

As in Kafka, an image is never changed: a MetadataDelta replays committed records over it
and builds the next image, which shares every topic, partition registration and broker the
records did not touch. Readers (the Metadata request, the controller's decisions, the
coordinators) may therefore hold an image across awaits and see one consistent state. The
maps are read-only views (MappingProxyType), so a stray write fails loudly instead of
silently changing what other readers see.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from broker.security.standard_acl import StandardAcl
from broker.metadata.metadata_records import (
    BrokerEndpoint,
    BrokerFeature,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    RegisterControllerRecord,
)

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
BROKER_LOGGER_RESOURCE = 8
CLIENT_METRICS_RESOURCE = 16
GROUP_RESOURCE = 32

NO_LEADER = -1
NO_LEADER_CHANGE = -2

# Kafka's DirectoryId constants.
MIGRATING_DIR = uuid.UUID(int=0)
UNASSIGNED_DIR = uuid.UUID(int=1)

EMPTY_MAP: Mapping = MappingProxyType({})


class MetadataImageError(RuntimeError):
    """A record that cannot apply to the current image."""


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader_recovery_state: int = 0  # 0 RECOVERED, 1 RECOVERING
    directories: tuple[uuid.UUID, ...] = ()
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()

    @classmethod
    def from_record(cls, record: PartitionRecord) -> PartitionRegistration:
        replicas = tuple(record.replicas)
        return cls(
            replicas=replicas,
            isr=tuple(record.isr),
            leader=record.leader,
            leader_epoch=record.leader_epoch,
            partition_epoch=record.partition_epoch,
            removing_replicas=tuple(record.removing_replicas),
            adding_replicas=tuple(record.adding_replicas),
            leader_recovery_state=record.leader_recovery_state,
            directories=_directories(record.directories, len(replicas)),
            elr=tuple(record.eligible_leader_replicas or ()),
            last_known_elr=tuple(record.last_known_elr or ()),
        )

    def merge(self, change: PartitionChangeRecord) -> PartitionRegistration:
        """Kafka's PartitionRegistration.merge: a new leader bumps the leader epoch, any change the partition epoch."""
        replicas = self.replicas if change.replicas is None else tuple(change.replicas)
        if change.leader == NO_LEADER_CHANGE:
            leader, leader_epoch = self.leader, self.leader_epoch
        else:
            leader, leader_epoch = change.leader, self.leader_epoch + 1
        return PartitionRegistration(
            replicas=replicas,
            isr=self.isr if change.isr is None else tuple(change.isr),
            leader=leader,
            leader_epoch=leader_epoch,
            partition_epoch=self.partition_epoch + 1,
            removing_replicas=self.removing_replicas if change.removing_replicas is None else tuple(change.removing_replicas),
            adding_replicas=self.adding_replicas if change.adding_replicas is None else tuple(change.adding_replicas),
            leader_recovery_state=self.leader_recovery_state if change.leader_recovery_state == -1 else change.leader_recovery_state,
            directories=_directories(change.directories or self.directories, len(replicas)),
            elr=self.elr if change.eligible_leader_replicas is None else tuple(change.eligible_leader_replicas),
            last_known_elr=self.last_known_elr if change.last_known_elr is None else tuple(change.last_known_elr),
        )


def _directories(directories: tuple[uuid.UUID, ...] | None, replica_count: int) -> tuple[uuid.UUID, ...]:
    # Records from before directory assignment (KIP-858) carry none: Kafka reads that as
    # "every replica is in the directory it was in", MIGRATING.
    if not directories:
        return (MIGRATING_DIR,) * replica_count
    return tuple(directories)


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: Mapping[int, PartitionRegistration] = field(default_factory=lambda: EMPTY_MAP)


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    broker_id: int
    epoch: int
    incarnation_id: uuid.UUID
    endpoints: tuple[BrokerEndpoint, ...]
    supported_features: tuple[BrokerFeature, ...]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool
    directories: tuple[uuid.UUID, ...]
    # The log directories the broker cordoned (KIP-1066, metadata.version 4.3-IV0); None: not told.
    cordoned_directories: tuple[uuid.UUID, ...] | None = None

    @classmethod
    def from_record(cls, record: RegisterBrokerRecord) -> BrokerRegistration:
        return cls(
            broker_id=record.broker_id,
            epoch=record.broker_epoch,
            incarnation_id=record.incarnation_id,
            endpoints=tuple(record.end_points),
            supported_features=tuple(record.features),
            rack=record.rack,
            fenced=record.fenced,
            in_controlled_shutdown=record.in_controlled_shutdown,
            directories=tuple(record.log_dirs),
            cordoned_directories=None if record.cordoned_log_dirs is None else tuple(record.cordoned_log_dirs),
        )


@dataclass(frozen=True, slots=True)
class ControllerRegistration:
    """Kafka's ControllerRegistration (KIP-919): what a RegisterControllerRecord says of a controller."""

    controller_id: int
    incarnation_id: uuid.UUID
    zk_migration_ready: bool
    endpoints: tuple[BrokerEndpoint, ...]
    supported_features: tuple[BrokerFeature, ...]

    @classmethod
    def from_record(cls, record: RegisterControllerRecord) -> ControllerRegistration:
        return cls(
            controller_id=record.controller_id,
            incarnation_id=record.incarnation_id,
            zk_migration_ready=record.zk_migration_ready,
            endpoints=tuple(record.end_points),
            supported_features=tuple(record.features),
        )

    def to_record(self) -> RegisterControllerRecord:
        return RegisterControllerRecord(
            controller_id=self.controller_id,
            incarnation_id=self.incarnation_id,
            zk_migration_ready=self.zk_migration_ready,
            end_points=self.endpoints,
            features=self.supported_features,
        )

    def feature_range(self, name: str) -> tuple[int, int]:
        """The levels of ``name`` this controller supports; (0, 0), Kafka's DISABLED, for one it does not name."""
        for feature in self.supported_features:
            if feature.name == name:
                return (feature.min_supported_version, feature.max_supported_version)
        return (0, 0)


# A client quota entity: (entity type, name or None for the default) pairs, sorted by type.
QuotaEntity = tuple[tuple[str, str | None], ...]


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What UserScramCredentialRecord keeps of a user's password for one mechanism."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


@dataclass(frozen=True, slots=True)
class MetadataImage:
    topics: Mapping[str, TopicImage] = field(default_factory=lambda: EMPTY_MAP)
    topics_by_id: Mapping[uuid.UUID, TopicImage] = field(default_factory=lambda: EMPTY_MAP)
    configs: Mapping[tuple[int, str], Mapping[str, str]] = field(default_factory=lambda: EMPTY_MAP)
    features: Mapping[str, int] = field(default_factory=lambda: EMPTY_MAP)
    brokers: Mapping[int, BrokerRegistration] = field(default_factory=lambda: EMPTY_MAP)
    # Kafka's ClusterImage.controllers: the controllers' registrations (KIP-919), by id.
    controllers: Mapping[int, ControllerRegistration] = field(default_factory=lambda: EMPTY_MAP)
    next_producer_id: int = 0  # the first producer id of the next block to hand out
    # (user, mechanism: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512) -> credential
    scram_credentials: Mapping[tuple[str, int], ScramCredential] = field(default_factory=lambda: EMPTY_MAP)
    client_quotas: Mapping[QuotaEntity, Mapping[str, float]] = field(default_factory=lambda: EMPTY_MAP)
    acls: Mapping[uuid.UUID, StandardAcl] = field(default_factory=lambda: EMPTY_MAP)
    provenance: int = -1  # offset of the last record applied
    provenance_epoch: int = -1  # epoch of the batch holding that record

    @property
    def highest_offset_and_epoch(self) -> tuple[int, int]:
        return (self.provenance, self.provenance_epoch)

    @property
    def is_empty(self) -> bool:
        return not (self.topics or self.configs or self.features or self.brokers or self.controllers or self.next_producer_id or self.scram_credentials or self.client_quotas or self.acls)

    def has_partition(self, topic: str, partition: int) -> bool:
        t = self.topics.get(topic)
        return t is not None and partition in t.partitions

    def topic_config(self, name: str) -> dict[str, str]:
        """The topic's overrides (a copy); the broker defaults fill the rest."""
        return dict(self.configs.get((TOPIC_RESOURCE, name), ()))


EMPTY_IMAGE = MetadataImage()


__all__ = [
    "BROKER_RESOURCE",
    "BrokerRegistration",
    "ControllerRegistration",
    "EMPTY_IMAGE",
    "EMPTY_MAP",
    "MIGRATING_DIR",
    "MetadataImage",
    "MetadataImageError",
    "NO_LEADER",
    "NO_LEADER_CHANGE",
    "PartitionRegistration",
    "QuotaEntity",
    "ScramCredential",
    "TOPIC_RESOURCE",
    "TopicImage",
    "UNASSIGNED_DIR",
]
