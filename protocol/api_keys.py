"""The APIs kbroker serves, their version ranges, and the kio entities behind them.

Ranges are Kafka 4.x's (the lowest versions Kafka 4 still serves up to the highest both
the specs in use and kio know), so current clients and librdkafka 2.0 (kcat 1.7) agree
with us on a version.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from functools import cache
from pkgutil import resolve_name
from typing import cast

from kio.index import load_request_schema, load_response_schema
from kio.static.protocol import RequestPayload, ResponsePayload

from protocol.schema.index import SCHEMAS as OWN_SCHEMAS


class ApiKey(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    VOTE = 52
    BEGIN_QUORUM_EPOCH = 53
    END_QUORUM_EPOCH = 54
    DESCRIBE_QUORUM = 55
    ALTER_PARTITION = 56
    UPDATE_FEATURES = 57
    ENVELOPE = 58
    FETCH_SNAPSHOT = 59
    BROKER_REGISTRATION = 62
    BROKER_HEARTBEAT = 63
    UNREGISTER_BROKER = 64
    ALLOCATE_PRODUCER_IDS = 67
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    CONTROLLER_REGISTRATION = 70
    GET_TELEMETRY_SUBSCRIPTIONS = 71
    PUSH_TELEMETRY = 72
    ASSIGN_REPLICAS_TO_DIRS = 73
    LIST_CONFIG_RESOURCES = 74
    DESCRIBE_TOPIC_PARTITIONS = 75
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    INITIALIZE_SHARE_GROUP_STATE = 83
    READ_SHARE_GROUP_STATE = 84
    WRITE_SHARE_GROUP_STATE = 85
    DELETE_SHARE_GROUP_STATE = 86
    READ_SHARE_GROUP_STATE_SUMMARY = 87
    STREAMS_GROUP_HEARTBEAT = 88
    STREAMS_GROUP_DESCRIBE = 89
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92
    STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE = 93
    ADD_RAFT_VOTER = 80
    REMOVE_RAFT_VOTER = 81
    UPDATE_RAFT_VOTER = 82
    UNREGISTER_CONTROLLER = 94


# For APIs whose every version uses the old, non-flexible encoding.
NEVER_FLEXIBLE = 1 << 15


@dataclass(frozen=True, slots=True)
class ApiRange:
    key: ApiKey
    min_version: int
    max_version: int
    first_flexible: int


SUPPORTED_APIS: dict[int, ApiRange] = {
    r.key: r
    for r in (
        # v12 (KIP-890 part 2): a transactional batch's partition is added to the transaction by its leader.
        # v13 (KIP-516): topics named by topic ID. (Kafka 4.4 also lists v0-2, which kio has no schema
        # for and which Kafka answers only to refuse them.)
        ApiRange(ApiKey.PRODUCE, 3, 13, 9),
        # v18 (KIP-1166): a partition's tagged HighWatermark, which only KRaft's leader reads.
        ApiRange(ApiKey.FETCH, 4, 18, 12),
        # v11 (KIP-1023): timestamp -6, EARLIEST_PENDING_UPLOAD: offset -1 without tiered storage.
        ApiRange(ApiKey.LIST_OFFSETS, 1, 11, 6),
        # v13 (KIP-1102): a top-level error code (REBOOTSTRAP_REQUIRED), none when answered.
        ApiRange(ApiKey.METADATA, 0, 13, 9),
        # v10 (KIP-848): topics named by topic ID.
        ApiRange(ApiKey.OFFSET_COMMIT, 2, 10, 8),
        ApiRange(ApiKey.OFFSET_FETCH, 1, 10, 6),
        ApiRange(ApiKey.FIND_COORDINATOR, 0, 6, 3),
        ApiRange(ApiKey.JOIN_GROUP, 0, 9, 6),
        ApiRange(ApiKey.HEARTBEAT, 0, 4, 4),
        ApiRange(ApiKey.LEAVE_GROUP, 0, 5, 4),
        ApiRange(ApiKey.SYNC_GROUP, 0, 5, 4),
        # v6 (KIP-1043): GROUP_ID_NOT_FOUND with a message for a group that does not exist, not a Dead one.
        ApiRange(ApiKey.DESCRIBE_GROUPS, 0, 6, 5),
        ApiRange(ApiKey.LIST_GROUPS, 0, 5, 3),
        # v5 (KIP-1242): the cluster and node the client means to reach; REBOOTSTRAP_REQUIRED when
        # they are not this node's (protocol/schema/: kio 0.6.5 has no v5).
        ApiRange(ApiKey.API_VERSIONS, 0, 5, 3),
        # Answered by a SASL listener's authenticator until a connection is authenticated; after
        # that, and on other listeners, ILLEGAL_SASL_STATE, as Kafka's KafkaApis answers.
        ApiRange(ApiKey.SASL_HANDSHAKE, 0, 1, NEVER_FLEXIBLE),
        ApiRange(ApiKey.SASL_AUTHENTICATE, 0, 2, 2),
        ApiRange(ApiKey.CREATE_TOPICS, 2, 7, 5),
        ApiRange(ApiKey.DELETE_TOPICS, 1, 6, 4),
        ApiRange(ApiKey.DELETE_RECORDS, 0, 2, 2),
        # Kafka 4.4 marks v6 (KIP-939's two-phase commit) latestVersionUnstable: by default it
        # lists 0-5 and drops the connection on a v6 request, as kbroker does (UNSTABLE_VERSIONS).
        ApiRange(ApiKey.INIT_PRODUCER_ID, 0, 5, 2),
        ApiRange(ApiKey.OFFSET_FOR_LEADER_EPOCH, 2, 4, 4),
        ApiRange(ApiKey.ADD_PARTITIONS_TO_TXN, 0, 5, 3),
        ApiRange(ApiKey.ADD_OFFSETS_TO_TXN, 0, 4, 3),
        # v5 (KIP-890 part 2): every end bumps the producer epoch, which the answer carries.
        ApiRange(ApiKey.END_TXN, 0, 5, 3),
        # kio has no WriteTxnMarkers v0 (Kafka 4 no longer serves it either). v2 (KIP-1228): each
        # marker's transaction version; a TV2 marker's epoch must be above the producer's.
        ApiRange(ApiKey.WRITE_TXN_MARKERS, 1, 2, 1),
        # v5 (KIP-890 part 2): the offsets partition is added to the transaction by the group coordinator.
        # v6 (KIP-1319): topics named by topic ID; GROUP_ID_NOT_FOUND and STALE_MEMBER_EPOCH
        # where older versions say ILLEGAL_GENERATION (protocol/schema/: kio 0.6.5 has no v6).
        ApiRange(ApiKey.TXN_OFFSET_COMMIT, 0, 6, 3),
        # No authorizer yet: SECURITY_DISABLED, as Kafka answers without one (Kafka 4 serves v1-3).
        ApiRange(ApiKey.DESCRIBE_ACLS, 1, 3, 2),
        ApiRange(ApiKey.CREATE_ACLS, 1, 3, 2),
        ApiRange(ApiKey.DELETE_ACLS, 1, 3, 2),
        ApiRange(ApiKey.DESCRIBE_CONFIGS, 1, 4, 4),
        ApiRange(ApiKey.ALTER_CONFIGS, 0, 2, 2),
        # v5 (KIP-1066): IsCordoned per log dir.
        ApiRange(ApiKey.DESCRIBE_LOG_DIRS, 1, 5, 2),
        # One log dir per node: a replica is always in the dir it names already (docs/configuration.md).
        ApiRange(ApiKey.ALTER_REPLICA_LOG_DIRS, 1, 2, 2),
        ApiRange(ApiKey.CREATE_PARTITIONS, 0, 3, 2),
        # v3: a per-group ErrorMessage (protocol/schema/: kio 0.6.5 has no v3).
        ApiRange(ApiKey.DELETE_GROUPS, 0, 3, 2),
        # Forwarded to the active controller, as Kafka's brokers do for kafka-leader-election.sh.
        ApiRange(ApiKey.ELECT_LEADERS, 0, 2, 2),
        # Forwarded to the active controller, as Kafka's brokers do for kafka-reassign-partitions.sh;
        # AlterPartitionReassignments v1 is KIP-860's (Kafka 4.1), newer than the specs in ../shared.
        ApiRange(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, 1, 0),
        ApiRange(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, 0, 0),
        ApiRange(ApiKey.OFFSET_DELETE, 0, 0, NEVER_FLEXIBLE),
        ApiRange(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1, 1),
        # Kept and described, not enforced yet.
        ApiRange(ApiKey.DESCRIBE_CLIENT_QUOTAS, 0, 1, 1),
        # Forwarded to the active controller, as Kafka's brokers do for kafka-configs.sh --entity-type users/clients/ips.
        ApiRange(ApiKey.ALTER_CLIENT_QUOTAS, 0, 1, 1),
        ApiRange(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0, 0),
        # Forwarded to the active controller, as Kafka's brokers do for kafka-configs.sh --entity-type users.
        ApiRange(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, 0, 0),
        # v2 (KIP-1073): IncludeFencedBrokers, and IsFenced per broker.
        ApiRange(ApiKey.DESCRIBE_CLUSTER, 0, 2, 0),
        ApiRange(ApiKey.DESCRIBE_QUORUM, 0, 2, 0),
        # Forwarded to the active controller, as Kafka's brokers do for kafka-metadata-quorum
        # and kafka-cluster.sh unregister. AddRaftVoter v1: AckWhenCommitted, false to be answered
        # once the leader has written the new voter set, before it is committed.
        ApiRange(ApiKey.ADD_RAFT_VOTER, 0, 1, 0),
        ApiRange(ApiKey.REMOVE_RAFT_VOTER, 0, 0, 0),
        ApiRange(ApiKey.UNREGISTER_BROKER, 0, 0, 0),
        # Kafka 4.4's spec lists the broker too: kafka-cluster.sh unregister-controller with
        # --bootstrap-server reaches the active controller through its broker (protocol/schema/).
        ApiRange(ApiKey.UNREGISTER_CONTROLLER, 0, 0, 0),
        # Forwarded to the active controller, as Kafka's brokers do for kafka-features.sh.
        ApiRange(ApiKey.UPDATE_FEATURES, 0, 2, 0),
        ApiRange(ApiKey.DESCRIBE_PRODUCERS, 0, 0, 0),
        ApiRange(ApiKey.DESCRIBE_TRANSACTIONS, 0, 0, 0),
        # v2 (KIP-1152): TransactionalIdPattern, a regular expression the ids must match.
        ApiRange(ApiKey.LIST_TRANSACTIONS, 0, 2, 0),
        ApiRange(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, 1, 0),
        # v1 (KIP-1099): MemberType per member, classic (0) or consumer (1).
        ApiRange(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, 1, 0),
        ApiRange(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, 0, 0),
        # Client metrics (KIP-714, broker/client_metrics_manager.py). Kafka offers 71 and 72 only
        # with a ClientTelemetry metrics reporter; kbroker's own receiver keeps the pushes.
        ApiRange(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0, 0, 0),
        ApiRange(ApiKey.PUSH_TELEMETRY, 0, 0, 0),
        # v1 (KIP-1142, Kafka 4.1): every config resource type, not only client metrics.
        ApiRange(ApiKey.LIST_CONFIG_RESOURCES, 0, 1, 0),
        # KIP-932's share groups, at Kafka 4.4's versions (v0 of ShareGroupHeartbeat/Describe,
        # ShareFetch and ShareAcknowledge, KIP-932's early access, is gone). Below share.version 1
        # they answer UNSUPPORTED_VERSION (broker/group/share_version.py).
        ApiRange(ApiKey.SHARE_GROUP_HEARTBEAT, 1, 1, 0),
        ApiRange(ApiKey.SHARE_GROUP_DESCRIBE, 1, 1, 0),
        # v2 (KIP-1222): ShareAcquireMode and IsRenewAck; acknowledge type 4 (Renew) is refused.
        ApiRange(ApiKey.SHARE_FETCH, 1, 2, 0),
        ApiRange(ApiKey.SHARE_ACKNOWLEDGE, 1, 2, 0),
        # The share coordinator's own APIs, which share partition leaders send: served by every
        # Kafka 4.4 broker too.
        ApiRange(ApiKey.INITIALIZE_SHARE_GROUP_STATE, 0, 0, 0),
        ApiRange(ApiKey.READ_SHARE_GROUP_STATE, 0, 0, 0),
        # v1 (KIP-1226, Kafka 4.2): the delivery-complete count.
        ApiRange(ApiKey.WRITE_SHARE_GROUP_STATE, 0, 1, 0),
        ApiRange(ApiKey.DELETE_SHARE_GROUP_STATE, 0, 0, 0),
        ApiRange(ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, 0, 1, 0),
        # v1 (KIP-1226): each share partition's lag.
        ApiRange(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, 1, 0),
        ApiRange(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, 0, 0),
        ApiRange(ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, 0, 0),
        # KIP-1071's streams groups (broker/handlers/streams_groups.py). v1 (KIP-1331): the heartbeat's
        # AcceptableRecoveryLag and TopologyDescriptionRequired, the describe's topology description
        # status and assignor name (protocol/schema/: kio 0.6.5 has no v1). Below streams.version 1
        # they answer UNSUPPORTED_VERSION (broker/group/streams_version.py).
        ApiRange(ApiKey.STREAMS_GROUP_HEARTBEAT, 0, 1, 0),
        ApiRange(ApiKey.STREAMS_GROUP_DESCRIBE, 0, 1, 0),
        # KIP-1331's push of a member's topology description (protocol/schema/: kio 0.6.5 has none).
        # Like a Kafka 4.4 broker without group.streams.topology.description.plugin.class, kbroker
        # keeps no descriptions and refuses every push (broker/handlers/streams_groups.py).
        ApiRange(ApiKey.STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE, 0, 0, 0),
    )
}


# What a controller listener serves, as Kafka's ControllerApis: the Raft protocol, the brokers'
# registration and heartbeats, the partition leaders' AlterPartition, and the metadata writes
# brokers forward. Vote v2 is KIP-996's pre-vote, newer than the specs in ../shared.
CONTROLLER_APIS: dict[int, ApiRange] = {
    r.key: r
    for r in (
        # v18 (KIP-1166): a follower's HighWatermark behind the leader's is answered at once.
        ApiRange(ApiKey.FETCH, 4, 18, 12),
        SUPPORTED_APIS[ApiKey.API_VERSIONS],
        SUPPORTED_APIS[ApiKey.CREATE_TOPICS],
        SUPPORTED_APIS[ApiKey.DELETE_TOPICS],
        SUPPORTED_APIS[ApiKey.ALTER_CONFIGS],
        SUPPORTED_APIS[ApiKey.CREATE_PARTITIONS],
        SUPPORTED_APIS[ApiKey.INCREMENTAL_ALTER_CONFIGS],
        SUPPORTED_APIS[ApiKey.ELECT_LEADERS],
        SUPPORTED_APIS[ApiKey.ALTER_PARTITION_REASSIGNMENTS],
        SUPPORTED_APIS[ApiKey.LIST_PARTITION_REASSIGNMENTS],
        SUPPORTED_APIS[ApiKey.DESCRIBE_CLUSTER],
        SUPPORTED_APIS[ApiKey.ALTER_USER_SCRAM_CREDENTIALS],
        SUPPORTED_APIS[ApiKey.ALTER_CLIENT_QUOTAS],
        SUPPORTED_APIS[ApiKey.DESCRIBE_ACLS],
        SUPPORTED_APIS[ApiKey.CREATE_ACLS],
        SUPPORTED_APIS[ApiKey.DELETE_ACLS],
        ApiRange(ApiKey.VOTE, 0, 2, 0),
        ApiRange(ApiKey.BEGIN_QUORUM_EPOCH, 0, 1, 1),
        ApiRange(ApiKey.END_QUORUM_EPOCH, 0, 1, 1),
        SUPPORTED_APIS[ApiKey.DESCRIBE_QUORUM],
        ApiRange(ApiKey.FETCH_SNAPSHOT, 0, 1, 0),
        ApiRange(ApiKey.BROKER_REGISTRATION, 0, 4, 0),
        # v2 (KIP-1066): CordonedLogDirs.
        ApiRange(ApiKey.BROKER_HEARTBEAT, 0, 2, 0),
        # The controllers' own registrations (KIP-919); never offered to clients, as in Kafka.
        ApiRange(ApiKey.CONTROLLER_REGISTRATION, 0, 0, 0),
        SUPPORTED_APIS[ApiKey.UNREGISTER_BROKER],
        SUPPORTED_APIS[ApiKey.UNREGISTER_CONTROLLER],
        SUPPORTED_APIS[ApiKey.UPDATE_FEATURES],
        ApiRange(ApiKey.ALLOCATE_PRODUCER_IDS, 0, 0, 0),
        # Partition leaders' ISR changes. Kafka 4 serves v2-3 only, as kio knows them; never
        # offered to clients, as in Kafka.
        ApiRange(ApiKey.ALTER_PARTITION, 2, 3, 0),
        # KIP-858: a broker of several log dirs tells which holds each replica; never offered to clients.
        ApiRange(ApiKey.ASSIGN_REPLICAS_TO_DIRS, 0, 0, 0),
        SUPPORTED_APIS[ApiKey.ADD_RAFT_VOTER],
        SUPPORTED_APIS[ApiKey.REMOVE_RAFT_VOTER],
        ApiRange(ApiKey.UPDATE_RAFT_VOTER, 0, 0, 0),
        # A broker's forwarded request with its client's principal and address.
        ApiRange(ApiKey.ENVELOPE, 0, 0, 0),
        # A SASL controller listener authenticates nodes and tools as a broker listener does.
        SUPPORTED_APIS[ApiKey.SASL_HANDSHAKE],
        SUPPORTED_APIS[ApiKey.SASL_AUTHENTICATE],
    )
}

# APIs Kafka 4.4 serves that kbroker serves only with unstable.api.versions.enable, because its
# implementation is not complete (broker/broker_server.py): none at present.
UNRELEASED_APIS: dict[int, ApiRange] = {}

# Every API kbroker speaks on any listener or sends to another node: framing (header and
# flexibility) is a property of the API and version, whichever listener carries it.
KNOWN_APIS: dict[int, ApiRange] = {**CONTROLLER_APIS, **SUPPORTED_APIS, **UNRELEASED_APIS}


# The versions Kafka 4.4's specs mark latestVersionUnstable, one above the tops here: Kafka serves
# them only with its internal unstable.api.versions.enable=true (default false), and so does
# kbroker (broker/broker_server.py). InitProducerId v6 (kio's codec) is handled as such a Kafka answers it: Enable2Pc
# TRANSACTIONAL_ID_AUTHORIZATION_FAILED, KeepPreparedTxn UNSUPPORTED_VERSION, neither as v5.
UNSTABLE_VERSIONS: dict[int, int] = {ApiKey.INIT_PRODUCER_ID: 6}


def with_unstable_versions(apis: dict[int, ApiRange]) -> dict[int, ApiRange]:
    """``apis`` with the UNSTABLE_VERSIONS tops, the table of a Kafka with unstable.api.versions.enable."""
    raised = {key: ApiRange(key, r.min_version, UNSTABLE_VERSIONS[key], r.first_flexible) for key, r in apis.items() if key in UNSTABLE_VERSIONS}
    return {**apis, **raised}


def is_supported(api_key: int, version: int, apis: dict[int, ApiRange] = SUPPORTED_APIS) -> bool:
    r = apis.get(api_key)
    return r is not None and r.min_version <= version <= r.max_version


def is_known(api_key: int, version: int) -> bool:
    """A version whose request header kbroker can read: one it serves, or an unstable one, whose
    header is read (it is flexible) before the request is refused or, when enabled, served."""
    return is_supported(api_key, version, KNOWN_APIS) or UNSTABLE_VERSIONS.get(api_key) == version


def is_flexible(api_key: int, version: int) -> bool:
    return version >= KNOWN_APIS[api_key].first_flexible


def response_header_version(api_key: int, version: int) -> int:
    # ApiVersions answers with header v0 even when flexible, so a client that does
    # not yet know our versions can still read the reply (KIP-511).
    if api_key == ApiKey.API_VERSIONS:
        return 0
    return 1 if is_flexible(api_key, version) else 0


# Ours (protocol/schema/) where kio has none: the Kafka 4.4 versions kio 0.6.5 lacks.
@cache
def request_schema(api_key: int, version: int) -> type[RequestPayload]:
    own = OWN_SCHEMAS.get((api_key, version))
    if own is not None:
        return cast("type[RequestPayload]", resolve_name(own[0]))
    return load_request_schema(api_key, version)


@cache
def response_schema(api_key: int, version: int) -> type[ResponsePayload]:
    own = OWN_SCHEMAS.get((api_key, version))
    if own is not None:
        return cast("type[ResponsePayload]", resolve_name(own[1]))
    return load_response_schema(api_key, version)
