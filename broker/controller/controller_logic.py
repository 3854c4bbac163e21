"""The quorum controller's decisions, sans-IO: a facade over Kafka's control managers.

The managers hold the rules (replication_control_manager, configuration_control_manager,
cluster_control_manager, feature_control_manager, producer_id_control_manager); this
class keeps the calls QuorumController makes today, each returning (records, results).
Nothing here writes or applies anything: the caller appends the records to the metadata
log, applies them to the image once committed, then answers with the results.

``broker_ids`` is the set of brokers the caller considers registered and unfenced:
placement, manual assignments and the replication-factor check all use it. The managers
themselves, given no such list, read registrations and fencing from the image.
"""

from __future__ import annotations

import random
import uuid
from typing import Callable, Collection, Mapping, Sequence

from kio.schema.errors import ErrorCode

from broker.metadata import metadata_version as mv
from broker.controller.cluster_control_manager import DEFAULT_SESSION_TIMEOUT_MS, ClusterControlManager
from broker.controller.configuration_control_manager import (
    LIST_CONFIGS,
    AlterConfigsResult,
    ConfigDefault,
    ConfigOp,
    ConfigurationControlManager,
    ValidateResourceConfig,
    ValidateTopicConfig,
)
from broker.controller.elr_config_records import MIN_INSYNC_REPLICAS, elr_safety_records
from broker.controller.feature_control_manager import (
    ELIGIBLE_LEADER_REPLICAS_FEATURE,
    METADATA_VERSION_FEATURE,
    METADATA_VERSION_LEVEL,
    MINIMUM_METADATA_VERSION_LEVEL,
    FeatureControlManager,
    FeatureUpdateResult,
    FixedKRaftVersion,
    KRaftVersionAccessor,
)
from broker.controller.producer_id_control_manager import PRODUCER_ID_BLOCK_SIZE, ProducerIdControlManager, ProducerIdsExhaustedError
from broker.controller.reassignment_control_manager import ReassignmentControlManager
from broker.controller.replica_placer import StripedReplicaPlacer
from broker.controller.replication_control_manager import (
    BrokerView,
    CreatableTopic,
    CreatePartitionsResult,
    CreateTopicResult,
    DeleteTopicResult,
    ReplicationControlManager,
    topic_name_error,
)
from broker.metadata.metadata_image import BROKER_RESOURCE, MetadataImage
from broker.metadata.metadata_records import BrokerEndpoint, BrokerFeature, ConfigRecord, MetadataRecord, ProducerIdsRecord, RegisterBrokerRecord

TOPIC_ALREADY_EXISTS = 36


class QuorumControllerLogic:
    """The active controller's decisions. It keeps no cluster state: the image is passed in.

    What the managers keep is soft: the placer's random state (a seeded ``rng`` makes
    placement deterministic), the topic id factory (tests pass a deterministic one), and
    the broker sessions of the ClusterControlManager.
    """

    def __init__(
        self,
        *,
        new_topic_id: Callable[[], uuid.UUID] = uuid.uuid4,
        rng: random.Random | None = None,
        list_configs: Collection[str] = LIST_CONFIGS,
        config_default: ConfigDefault | None = None,
        node_id: int | None = None,
        unclean_leader_election_enable: bool = False,
        kraft_version: KRaftVersionAccessor = FixedKRaftVersion(),
        unstable_feature_versions: bool = False,
        quorum_node_ids: Sequence[int] = (),
    ) -> None:
        self.configuration = ConfigurationControlManager(
            list_configs=list_configs,
            config_default=config_default,
            node_id=node_id,
            unclean_leader_election_enable=unclean_leader_election_enable,
        )
        self.features = FeatureControlManager(
            kraft_version=kraft_version, node_id=node_id, unstable_feature_versions=unstable_feature_versions, quorum_node_ids=quorum_node_ids
        )
        self.producer_ids = ProducerIdControlManager()
        self.replication = ReplicationControlManager(
            configuration=self.configuration,
            placer=StripedReplicaPlacer(rng or random.Random(0)),
            new_topic_id=new_topic_id,
        )
        self.reassignment = ReassignmentControlManager(self.configuration)

    def new_cluster_control(self, cluster_id: str, *, session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS) -> ClusterControlManager:
        """The registration and heartbeat manager for ``cluster_id``, sharing these managers."""
        return ClusterControlManager(
            cluster_id=cluster_id, replication=self.replication, features=self.features, session_timeout_ms=session_timeout_ms
        )

    def create_topics(
        self,
        image: MetadataImage,
        topics: Sequence[CreatableTopic],
        *,
        validate_only: bool,
        broker_ids: Sequence[int],
        default_partitions: int,
        default_replication_factor: int,
        validate_config: ValidateTopicConfig,
    ) -> tuple[list[MetadataRecord], list[CreateTopicResult]]:
        """One result per distinct name, in request order (a repeated name gets one INVALID_REQUEST)."""
        result = self.replication.create_topics(
            image,
            topics,
            validate_only=validate_only,
            default_partitions=default_partitions,
            default_replication_factor=default_replication_factor,
            validate_config=validate_config,
            brokers=BrokerView.from_ids(image, broker_ids),
        )
        return result.records, result.response

    def delete_topics(
        self, image: MetadataImage, topics: Sequence[tuple[str | None, uuid.UUID | None]]
    ) -> tuple[list[MetadataRecord], list[DeleteTopicResult]]:
        result = self.replication.delete_topics(image, topics)
        return result.records, result.response

    def create_partitions(
        self,
        image: MetadataImage,
        topics: Sequence[tuple[str, int, Sequence[Sequence[int]] | None]],
        *,
        validate_only: bool,
        broker_ids: Sequence[int],
    ) -> tuple[list[MetadataRecord], list[CreatePartitionsResult]]:
        """Each entry is (name, new total count, one replica list per new partition or None)."""
        result = self.replication.create_partitions(image, topics, validate_only=validate_only, brokers=BrokerView.from_ids(image, broker_ids))
        return result.records, result.response

    def alter_configs(
        self,
        image: MetadataImage,
        resources: Sequence[tuple[int, str, Sequence[ConfigOp]]],
        *,
        incremental: bool,
        validate_only: bool,
        validate_config: ValidateResourceConfig,
        node_id: int | None,
        forwarded: bool = True,
    ) -> tuple[list[MetadataRecord], list[AlterConfigsResult]]:
        result = self.configuration.alter_configs(
            image, resources, incremental=incremental, validate_only=validate_only, validate_config=validate_config, node_id=node_id, forwarded=forwarded
        )
        return list(result.records), result.response

    def update_features(
        self, image: MetadataImage, updates: Mapping[str, int], upgrade_types: Mapping[str, int], *, validate_only: bool
    ) -> tuple[list[MetadataRecord], FeatureUpdateResult]:
        """UpdateFeatures as Kafka's ConfigurationControlManager.updateFeatures: turning eligible
        leader replicas on pins min.insync.replicas cluster-wide first, in the same batch."""
        result = self.features.update_features(image, updates, upgrade_types, validate_only=validate_only)
        if result.response.error_code != ErrorCode.none or validate_only:
            return list(result.records), result.response
        safety = elr_safety_records(image, updates, self.configuration.static_min_insync_replicas())
        return [*safety, *result.records], result.response

    def allocate_producer_ids(
        self, image: MetadataImage, broker_id: int, *, broker_epoch: int = -1, block_size: int = PRODUCER_ID_BLOCK_SIZE
    ) -> ProducerIdsRecord:
        """The next block for ``broker_id``: [record.next_producer_id - block_size, record.next_producer_id).

        No broker epoch check here (the single-node path passes its own registration's);
        ProducerIdControlManager.generate_next_producer_id is the checked AllocateProducerIds.
        """
        return self.producer_ids.next_block_record(image, broker_id, broker_epoch, block_size)


def cluster_bootstrap_records(
    *, metadata_version: int = METADATA_VERSION_LEVEL, features: Mapping[str, int] | None = None, min_insync_replicas: int = 1
) -> list[MetadataRecord]:
    """What a freshly formatted multi-node cluster's metadata log starts with: the finalized
    feature levels, and with eligible leader replicas on, the cluster-wide min.insync.replicas
    (the formatting node's), as Kafka 4.4's bootstrap records hold it: under ELR that value must
    exist (elr_config_records). Brokers register themselves; the cluster id lives in meta.properties."""
    records: list[MetadataRecord] = list(FeatureControlManager.bootstrap_records(metadata_version, features))
    if (features or {}).get(ELIGIBLE_LEADER_REPLICAS_FEATURE, 0) >= 1:
        records.append(ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="", name=MIN_INSYNC_REPLICAS, value=str(min_insync_replicas)))
    return records


def bootstrap_records(
    node_id: int,
    host: str,
    port: int,
    *,
    listener_name: str = "PLAINTEXT",
    security_protocol: int = 0,
    rack: str | None = None,
    log_dirs: Sequence[uuid.UUID] = (),
    incarnation_id: uuid.UUID | None = None,
    metadata_version: int = METADATA_VERSION_LEVEL,
    features: Mapping[str, int] | None = None,
) -> list[MetadataRecord]:
    """What a freshly formatted single-node cluster's metadata log starts with.

    The feature levels (metadata.version first; none else by default: group.version and
    transaction.version would tell clients the broker speaks KIP-848 and transactions
    v2), then this node's registration, unfenced: with no other broker and no heartbeat
    path, the node registers itself at format time.
    """
    records = cluster_bootstrap_records(metadata_version=metadata_version, features=features)
    records.append(
        RegisterBrokerRecord(
            broker_id=node_id,
            incarnation_id=incarnation_id or uuid.uuid4(),
            broker_epoch=0,
            end_points=(BrokerEndpoint(name=listener_name, host=host, port=port, security_protocol=security_protocol),),
            features=(
                BrokerFeature(
                    name=METADATA_VERSION_FEATURE,
                    min_supported_version=MINIMUM_METADATA_VERSION_LEVEL,
                    max_supported_version=METADATA_VERSION_LEVEL,
                ),
            ),
            record_version=mv.for_level(metadata_version).register_broker_record_version,
            rack=rack,
            fenced=False,
            log_dirs=tuple(log_dirs),
        )
    )
    return records


__all__ = [
    "AlterConfigsResult",
    "CreatableTopic",
    "CreatePartitionsResult",
    "CreateTopicResult",
    "DeleteTopicResult",
    "LIST_CONFIGS",
    "METADATA_VERSION_FEATURE",
    "METADATA_VERSION_LEVEL",
    "PRODUCER_ID_BLOCK_SIZE",
    "ProducerIdsExhaustedError",
    "QuorumControllerLogic",
    "TOPIC_ALREADY_EXISTS",
    "bootstrap_records",
    "cluster_bootstrap_records",
    "topic_name_error",
]
