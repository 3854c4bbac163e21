"""Broker configuration: Kafka's property names, read from server.properties and overrides."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, Mapping, NamedTuple

import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from broker.channel_builders import node_links_problem
from broker.kafka_config_defs import KAFKA_BROKER_CONFIGS
from broker.security.sasl_config import sasl_listener_problem
from broker.security.standard_authorizer import STANDARD_AUTHORIZER_CLASS, parse_super_users
from broker.ssl_factory import SslConfigError, check_ssl_config
from storage.log_cleaner import CleanerConfig

LONG_MAX = 9223372036854775807
log = structlog.get_logger(__name__)

BROKER_ROLE = "broker"
CONTROLLER_ROLE = "controller"
# In the order of Kafka's SecurityProtocol ids (0-3), which registrations carry.
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# What client listeners may use.
SERVED_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
WILDCARD_HOSTS = ("0.0.0.0", "::", "")
LISTENER_PREFIX = "listener.name."
# The node id of the zero-config node (`make run`): the only node that may leave node.id out.
ZERO_CONFIG_NODE_ID = 1


class ConfigError(Exception):
    """A bad broker configuration; the message is one line naming the key."""


class Listener(BaseModel):
    name: str
    host: str
    port: int


class QuorumVoter(NamedTuple):
    """One entry of controller.quorum.voters: `node_id@host:port`."""

    node_id: int
    host: str
    port: int


_HOST = r"(\[[^\]]*\]|[^:\[\]@,\s]*)"


def parse_listeners(value: str) -> list[Listener]:
    """Kafka's listener list; names are upper-cased as Kafka's ListenerName does, an empty host binds every interface."""
    listeners = []
    for item in filter(None, (s.strip() for s in value.split(","))):
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)://" + _HOST + r":(\d+)", item)
        if not m or int(m.group(3)) > 65535:
            raise ValueError(f"'{item}' is not NAME://HOST:PORT")
        host = m.group(2).strip("[]") or "0.0.0.0"
        listeners.append(Listener(name=m.group(1).upper(), host=host, port=int(m.group(3))))
    return listeners


def parse_quorum_voters(value: str) -> list[QuorumVoter]:
    voters = []
    for item in filter(None, (s.strip() for s in value.split(","))):
        m = re.fullmatch(r"(\d+)@" + _HOST + r":(\d+)", item)
        if not m or not m.group(2) or int(m.group(3)) > 65535:
            raise ValueError(f"'{item}' is not ID@HOST:PORT")
        voters.append(QuorumVoter(int(m.group(1)), m.group(2).strip("[]"), int(m.group(3))))
    ids = [v.node_id for v in voters]
    for node_id in ids:
        if ids.count(node_id) > 1:
            raise ValueError(f"voter id {node_id} appears more than once")
    return voters


def parse_host_ports(value: str) -> list[tuple[str, int]]:
    """controller.quorum.bootstrap.servers: HOST:PORT, comma-separated."""
    servers = []
    for item in filter(None, (s.strip() for s in value.split(","))):
        m = re.fullmatch(_HOST + r":(\d+)", item)
        if not m or not m.group(1) or int(m.group(2)) > 65535:
            raise ValueError(f"'{item}' is not HOST:PORT")
        servers.append((m.group(1).strip("[]"), int(m.group(2))))
    return servers


def parse_protocol_map(value: str) -> dict[str, str]:
    """listener.security.protocol.map: NAME:PROTOCOL, comma-separated."""
    mapping: dict[str, str] = {}
    for item in filter(None, (s.strip() for s in value.split(","))):
        name, sep, protocol = item.partition(":")
        if not sep or not name.strip():
            raise ValueError(f"'{item}' is not LISTENER_NAME:SECURITY_PROTOCOL")
        protocol = protocol.strip().upper()
        if protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"Invalid security protocol `{protocol}`; one of {', '.join(SECURITY_PROTOCOLS)} is expected")
        mapping[name.strip().upper()] = protocol
    return mapping


def parse_roles(value: str) -> frozenset[str]:
    roles = [r.strip() for r in value.split(",") if r.strip()]
    if not roles or not set(roles) <= {BROKER_ROLE, CONTROLLER_ROLE} or len(set(roles)) != len(roles):
        raise ValueError("must be broker, controller, or broker,controller")
    return frozenset(roles)


CORDONED_ALL = "*"  # cordoned.log.dirs' value that cordons every log dir


def _names(value: str) -> list[str]:
    return [n.strip() for n in value.split(",") if n.strip()]


def streams_rack_aware_assignment_tags(value: str) -> tuple[str, ...]:
    """A LIST config as Kafka's ConfigDef parses it: empty is none; an empty entry is kept (and refused)."""
    value = value.strip()
    return () if not value else tuple(t.strip() for t in value.split(","))


def _raw(data: Mapping[str, Any], name: str) -> Any:
    """A value as given to BrokerConfig, under its Kafka name or its field name."""
    alias = BrokerConfig.model_fields[name].alias or name
    return data.get(alias, data.get(name))


# Kafka 4.4's ConfigDef ranges of the group.share.* settings (GroupCoordinatorConfig,
# ShareGroupConfig): field -> (at least, no more than).
_SHARE_GROUP_RANGES: dict[str, tuple[int, int | None]] = {
    "group_share_session_timeout_ms": (1, None),
    "group_share_min_session_timeout_ms": (1, None),
    "group_share_max_session_timeout_ms": (1, None),
    "group_share_heartbeat_interval_ms": (1, None),
    "group_share_min_heartbeat_interval_ms": (1, None),
    "group_share_max_heartbeat_interval_ms": (1, None),
    "group_share_max_size": (1, 1000),
    "group_share_record_lock_duration_ms": (1000, 3600000),
    "group_share_min_record_lock_duration_ms": (1000, 30000),
    "group_share_max_record_lock_duration_ms": (30000, 3600000),
    "group_share_delivery_count_limit": (2, 10),
    "group_share_min_delivery_count_limit": (2, 5),
    "group_share_max_delivery_count_limit": (5, 25),
    "group_share_partition_max_record_locks": (100, 10000),
    "group_share_min_partition_max_record_locks": (100, 2000),
    "group_share_max_partition_max_record_locks": (2000, 10000),
    "group_share_max_share_sessions": (1, None),
}


class BrokerConfig(BaseModel):
    """The subset of Kafka's broker configs kbroker acts on, under Kafka's names.

    One departure from Kafka: a combined node given neither controller.quorum.voters nor
    controller.quorum.bootstrap.servers is the zero-config single node (`make run`): its quorum
    is itself alone, node.id defaults to 1, it needs no controller listener and it formats its
    own storage on first start (`implicit_quorum`).
    """

    model_config = ConfigDict(populate_by_name=True, extra="forbid", frozen=True)

    # Kafka's "no node id" is -1, refused once the roles are known; only the zero-config node gets 1.
    node_id: int = Field(-1, alias="node.id", ge=-1)
    process_roles: str = Field("broker,controller", alias="process.roles")
    # Kafka's default is PLAINTEXT://:9092 (every interface); kbroker's stays on loopback.
    listeners: str = Field("PLAINTEXT://127.0.0.1:9092", alias="listeners")
    advertised_listeners: str | None = Field(None, alias="advertised.listeners")
    listener_security_protocol_map: str = Field(
        "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL", alias="listener.security.protocol.map"
    )
    # Kafka has no default; CONTROLLER is what every Kafka example names it.
    controller_listener_names: str = Field("CONTROLLER", alias="controller.listener.names")
    # TLS of the SSL listeners (broker/ssl_factory.py), under Kafka's names and defaults. Kafka's
    # default store type is JKS, which only a JVM reads: kbroker reads PEM and PKCS12 stores.
    ssl_keystore_type: str = Field("JKS", alias="ssl.keystore.type")
    ssl_keystore_location: str | None = Field(None, alias="ssl.keystore.location")
    ssl_keystore_password: str | None = Field(None, alias="ssl.keystore.password")
    ssl_key_password: str | None = Field(None, alias="ssl.key.password")
    ssl_keystore_certificate_chain: str | None = Field(None, alias="ssl.keystore.certificate.chain")
    ssl_keystore_key: str | None = Field(None, alias="ssl.keystore.key")
    ssl_truststore_type: str = Field("JKS", alias="ssl.truststore.type")
    ssl_truststore_location: str | None = Field(None, alias="ssl.truststore.location")
    ssl_truststore_password: str | None = Field(None, alias="ssl.truststore.password")
    ssl_truststore_certificates: str | None = Field(None, alias="ssl.truststore.certificates")
    ssl_client_auth: Literal["none", "requested", "required"] = Field("none", alias="ssl.client.auth")
    ssl_enabled_protocols: str = Field("TLSv1.2,TLSv1.3", alias="ssl.enabled.protocols")
    ssl_protocol: str = Field("TLSv1.3", alias="ssl.protocol")
    # Java's (IANA) suite names; empty: OpenSSL's defaults (broker/ssl_factory.py translates them).
    ssl_cipher_suites: str = Field("", alias="ssl.cipher.suites")
    # Whether this node checks another node's certificate names its host (https) or not (empty).
    ssl_endpoint_identification_algorithm: str = Field("https", alias="ssl.endpoint.identification.algorithm")
    # How an SSL listener names a client by its certificate (broker/security/ssl_principal_mapper.py).
    ssl_principal_mapping_rules: str = Field("DEFAULT", alias="ssl.principal.mapping.rules")
    # SASL of the SASL_PLAINTEXT and SASL_SSL listeners (broker/security/). Kafka's default
    # mechanism is GSSAPI (Kerberos), which kbroker does not serve: a SASL listener names its own.
    sasl_enabled_mechanisms: str = Field("GSSAPI", alias="sasl.enabled.mechanisms")
    # The mechanism this node speaks on its own links to brokers and to controllers.
    sasl_mechanism_inter_broker_protocol: str = Field("GSSAPI", alias="sasl.mechanism.inter.broker.protocol")
    sasl_mechanism_controller_protocol: str = Field("GSSAPI", alias="sasl.mechanism.controller.protocol")
    connection_failed_authentication_delay_ms: int = Field(100, alias="connection.failed.authentication.delay.ms", ge=0)
    sasl_server_max_receive_size: int = Field(524288, alias="sasl.server.max.receive.size", ge=1)
    # KIP-768: signed OAuth tokens, for a listener whose OAUTHBEARER server callback handler is
    # OAuthBearerValidatorCallbackHandler (broker/security/oauthbearer_validator.py).
    sasl_oauthbearer_jwks_endpoint_url: str | None = Field(None, alias="sasl.oauthbearer.jwks.endpoint.url")
    sasl_oauthbearer_jwks_endpoint_refresh_ms: int = Field(3600000, alias="sasl.oauthbearer.jwks.endpoint.refresh.ms", ge=1)
    sasl_oauthbearer_expected_audience: str = Field("", alias="sasl.oauthbearer.expected.audience")
    sasl_oauthbearer_expected_issuer: str | None = Field(None, alias="sasl.oauthbearer.expected.issuer")
    sasl_oauthbearer_sub_claim_name: str = Field("sub", alias="sasl.oauthbearer.sub.claim.name")
    sasl_oauthbearer_scope_claim_name: str = Field("scope", alias="sasl.oauthbearer.scope.claim.name")
    sasl_oauthbearer_clock_skew_seconds: int = Field(30, alias="sasl.oauthbearer.clock.skew.seconds", ge=0)
    # KIP-368: a SASL session's lifetime, after which the client must have re-authenticated (0: never).
    connections_max_reauth_ms: int = Field(0, alias="connections.max.reauth.ms", ge=0)
    # Authorization (broker/security/standard_authorizer.py): empty, every request is allowed;
    # org.apache.kafka.metadata.authorizer.StandardAuthorizer, the ACLs of the metadata log decide.
    authorizer_class_name: str = Field("", alias="authorizer.class.name")
    super_users: str = Field("", alias="super.users")
    allow_everyone_if_no_acl_found: bool = Field(False, alias="allow.everyone.if.no.acl.found")
    # Client quotas' rate (broker/client_quota_manager.py): this many samples of this many seconds.
    quota_window_num: int = Field(11, alias="quota.window.num", ge=1)
    quota_window_size_seconds: int = Field(1, alias="quota.window.size.seconds", ge=1)
    # The controller mutation quota's token bucket (KIP-599): a burst of num × size seconds' worth.
    controller_quota_window_num: int = Field(11, alias="controller.quota.window.num", ge=1)
    controller_quota_window_size_seconds: int = Field(1, alias="controller.quota.window.size.seconds", ge=1)
    # Kafka's listener-prefixed configs, `listener.name.<listener>.<config>` (a SASL listener's
    # `<mechanism>.sasl.jaas.config` among them), by their full names.
    listener_prefixed: dict[str, str] = Field(default_factory=dict)
    # Kafka 4.4's configs kbroker has no implementation for (broker/unimplemented_configs.py), by
    # name as given: accepted, checked against Kafka's type, described, and of no effect.
    no_effect: dict[str, str] = Field(default_factory=dict)
    inter_broker_listener_name: str = Field("PLAINTEXT", alias="inter.broker.listener.name")
    controller_quorum_voters: str = Field("", alias="controller.quorum.voters")
    controller_quorum_bootstrap_servers: str = Field("", alias="controller.quorum.bootstrap.servers")
    controller_quorum_election_timeout_ms: int = Field(1000, alias="controller.quorum.election.timeout.ms", ge=1)
    controller_quorum_fetch_timeout_ms: int = Field(2000, alias="controller.quorum.fetch.timeout.ms", ge=1)
    controller_quorum_election_backoff_max_ms: int = Field(1000, alias="controller.quorum.election.backoff.max.ms", ge=1)
    controller_quorum_request_timeout_ms: int = Field(2000, alias="controller.quorum.request.timeout.ms", ge=1)
    controller_quorum_append_linger_ms: int = Field(25, alias="controller.quorum.append.linger.ms", ge=0)
    controller_quorum_retry_backoff_ms: int = Field(20, alias="controller.quorum.retry.backoff.ms", ge=0)
    metadata_log_dir: str | None = Field(None, alias="metadata.log.dir")
    metadata_log_segment_bytes: int = Field(1073741824, alias="metadata.log.segment.bytes", ge=12)
    metadata_log_segment_ms: int = Field(604800000, alias="metadata.log.segment.ms", ge=1)
    # Kafka's internal floor for metadata.log.segment.bytes; only tests lower it.
    metadata_log_segment_min_bytes: int = Field(8388608, alias="metadata.log.segment.min.bytes", ge=12)
    metadata_log_max_record_bytes_between_snapshots: int = Field(20971520, alias="metadata.log.max.record.bytes.between.snapshots", ge=1)
    metadata_log_max_snapshot_interval_ms: int = Field(3600000, alias="metadata.log.max.snapshot.interval.ms", ge=0)
    metadata_max_retention_bytes: int = Field(104857600, alias="metadata.max.retention.bytes", ge=-1)
    metadata_max_retention_ms: int = Field(604800000, alias="metadata.max.retention.ms", ge=-1)
    metadata_max_idle_interval_ms: int = Field(500, alias="metadata.max.idle.interval.ms", ge=0)
    broker_heartbeat_interval_ms: int = Field(2000, alias="broker.heartbeat.interval.ms", ge=1)
    broker_session_timeout_ms: int = Field(9000, alias="broker.session.timeout.ms", ge=1)
    initial_broker_registration_timeout_ms: int = Field(60000, alias="initial.broker.registration.timeout.ms", ge=1)
    broker_rack: str | None = Field(None, alias="broker.rack")
    controlled_shutdown_enable: bool = Field(True, alias="controlled.shutdown.enable")
    # kbroker's own: the cluster id the zero-config node formats itself with, and that any
    # node's meta.properties must then hold (Kafka takes it only from `kafka-storage format`).
    cluster_id: str | None = Field(None, alias="cluster.id")
    log_dirs: str = Field("./data", alias="log.dirs")
    # KIP-1066: log dirs that take no new replicas; "*" cordons them all. Dynamic, per broker only.
    cordoned_log_dirs: str = Field("", alias="cordoned.log.dirs")
    num_partitions: int = Field(1, alias="num.partitions", ge=1)
    default_replication_factor: int = Field(1, alias="default.replication.factor", ge=1)
    auto_create_topics_enable: bool = Field(True, alias="auto.create.topics.enable")
    delete_topic_enable: bool = Field(True, alias="delete.topic.enable")
    socket_request_max_bytes: int = Field(104857600, alias="socket.request.max.bytes", ge=1)
    queued_max_requests: int = Field(500, alias="queued.max.requests", ge=1)
    # Connection limits (broker/connection_quotas.py), Kafka's names and defaults (Integer.MAX_VALUE:
    # none); max.connections also per listener, as listener.name.<l>.max.connections.
    max_connections: int = Field(2147483647, alias="max.connections", ge=0, le=2147483647)
    max_connections_per_ip: int = Field(2147483647, alias="max.connections.per.ip", ge=0, le=2147483647)
    max_connections_per_ip_overrides: str = Field("", alias="max.connections.per.ip.overrides")

    @field_validator("max_connections_per_ip_overrides")
    @classmethod
    def _connection_overrides(cls, value: str) -> str:
        from broker.connection_quotas import parse_overrides

        parse_overrides(value)
        return value

    @model_validator(mode="after")
    def _connection_limits(self) -> "BrokerConfig":
        """KafkaConfig's checks: a per-IP limit of 0 needs overrides; a listener's max.connections is an INT, at least 0."""
        from broker.connection_quotas import INT_MAX, parse_overrides

        if self.max_connections_per_ip == 0 and not parse_overrides(self.max_connections_per_ip_overrides):
            raise ValueError("max.connections.per.ip can be set to zero only if max.connections.per.ip.overrides property is set.")
        for key, value in self.listener_prefixed.items():
            if key.endswith(".max.connections") and not (re.fullmatch(r"\d+", value.strip()) and int(value) <= INT_MAX):
                raise ValueError(f"Invalid value {value} for configuration {key}: must be an integer from 0 to {INT_MAX}")
        return self

    # Kafka's thread pools and connection creation rate: kbroker serves from one event loop and has
    # none of those pools, so these are accepted, described and dynamically set with Kafka's checks
    # (broker/dynamic_broker_config.py), and change nothing.
    num_io_threads: int = Field(8, alias="num.io.threads", ge=1)
    num_network_threads: int = Field(3, alias="num.network.threads", ge=1)
    background_threads: int = Field(10, alias="background.threads", ge=1)
    num_recovery_threads_per_data_dir: int = Field(2, alias="num.recovery.threads.per.data.dir", ge=1)
    max_connection_creation_rate: int = Field(2147483647, alias="max.connection.creation.rate", ge=0)
    message_max_bytes: int = Field(1048588, alias="message.max.bytes", ge=0)
    # KIP-1191's share group dead-letter queues: the prefix a DLQ topic's name must have (empty: any)
    # and whether a missing DLQ topic is created. Dynamic cluster-wide, as in Kafka.
    errors_deadletterqueue_topic_name_prefix: str = Field("dlq.", alias="errors.deadletterqueue.topic.name.prefix")
    errors_deadletterqueue_auto_create_topics_enable: bool = Field(False, alias="errors.deadletterqueue.auto.create.topics.enable")
    # Kafka's default is 55 MiB. librdkafka parses a whole fetch answer before it hands the
    # application a record, so 50 MB answers (64 partitions at 1 MB each) stall its pipeline:
    # 64 partitions were read at ~650k records/s with 55 MiB and ~1.1M with 4-8 MiB.
    fetch_max_bytes: int = Field(8388608, alias="fetch.max.bytes", ge=1024)
    log_segment_bytes: int = Field(1073741824, alias="log.segment.bytes", ge=14)
    log_roll_ms: int | None = Field(None, alias="log.roll.ms", ge=1)
    log_roll_hours: int = Field(168, alias="log.roll.hours", ge=1)
    log_retention_ms: int | None = Field(None, alias="log.retention.ms", ge=-1)
    log_retention_minutes: int | None = Field(None, alias="log.retention.minutes", ge=-1)
    log_retention_hours: int = Field(168, alias="log.retention.hours", ge=-1)
    log_retention_bytes: int = Field(-1, alias="log.retention.bytes", ge=-1)
    log_retention_check_interval_ms: int = Field(300000, alias="log.retention.check.interval.ms", ge=1)
    log_segment_delete_delay_ms: int = Field(60000, alias="log.segment.delete.delay.ms", ge=0)
    log_index_interval_bytes: int = Field(4096, alias="log.index.interval.bytes", ge=0)
    log_index_size_max_bytes: int = Field(10485760, alias="log.index.size.max.bytes", ge=4)
    log_flush_interval_messages: int = Field(LONG_MAX, alias="log.flush.interval.messages", ge=1)
    log_flush_interval_ms: int | None = Field(None, alias="log.flush.interval.ms", ge=0)
    log_flush_scheduler_interval_ms: int = Field(LONG_MAX, alias="log.flush.scheduler.interval.ms", ge=1)
    log_flush_offset_checkpoint_interval_ms: int = Field(60000, alias="log.flush.offset.checkpoint.interval.ms", ge=1)
    log_message_timestamp_type: Literal["CreateTime", "LogAppendTime"] = Field("CreateTime", alias="log.message.timestamp.type")
    log_cleanup_policy: str = Field("delete", alias="log.cleanup.policy")
    log_cleaner_enable: bool = Field(True, alias="log.cleaner.enable")
    log_cleaner_threads: int = Field(1, alias="log.cleaner.threads", ge=0)
    log_cleaner_backoff_ms: int = Field(15000, alias="log.cleaner.backoff.ms", ge=0)
    log_cleaner_dedupe_buffer_size: int = Field(134217728, alias="log.cleaner.dedupe.buffer.size", ge=1048576)
    # Accepted and described; the cleaner reads through the page cache, not a buffer of this size.
    log_cleaner_io_buffer_size: int = Field(524288, alias="log.cleaner.io.buffer.size", ge=0)
    log_cleaner_io_buffer_load_factor: float = Field(0.9, alias="log.cleaner.io.buffer.load.factor", gt=0, le=1)
    log_cleaner_io_max_bytes_per_second: float = Field(1.7976931348623157e308, alias="log.cleaner.io.max.bytes.per.second", gt=0)
    log_cleaner_delete_retention_ms: int = Field(86400000, alias="log.cleaner.delete.retention.ms", ge=0)
    log_cleaner_min_compaction_lag_ms: int = Field(0, alias="log.cleaner.min.compaction.lag.ms", ge=0)
    log_cleaner_max_compaction_lag_ms: int = Field(LONG_MAX, alias="log.cleaner.max.compaction.lag.ms", ge=1)
    log_cleaner_min_cleanable_ratio: float = Field(0.5, alias="log.cleaner.min.cleanable.ratio", ge=0, le=1)
    # kbroker's own: where the cleaner copies (measured in benchmarks/compaction_latency.py).
    log_cleaner_executor: Literal["thread", "process"] = Field("process", alias="log.cleaner.executor")
    # Test only: the cleaner sleeps on the event loop at this step of a segment swap.
    log_cleaner_test_swap_pause_ms: int = Field(0, alias="log.cleaner.test.swap.pause.ms", ge=0)
    log_cleaner_test_swap_pause_step: Literal["before_commit", "committed", "old_deleted"] = Field(
        "committed", alias="log.cleaner.test.swap.pause.step"
    )
    compression_type: Literal["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"] = Field("producer", alias="compression.type")
    min_insync_replicas: int = Field(1, alias="min.insync.replicas", ge=1)
    unclean_leader_election_enable: bool = Field(False, alias="unclean.leader.election.enable")
    # Kafka's unstable.feature.versions.enable: feature levels still in development (metadata.version 4.5-IV0) are supported.
    unstable_feature_versions_enable: bool = Field(False, alias="unstable.feature.versions.enable")
    # Kafka's unstable.api.versions.enable (internal, as that one): request versions still in
    # development (InitProducerId 6, KIP-939) are served and listed in ApiVersions.
    unstable_api_versions_enable: bool = Field(False, alias="unstable.api.versions.enable")
    # Preferred leaders: the active controller moves leadership back to each partition's first
    # replica every leader.imbalance.check.interval.seconds. As in Kafka 4, whose KRaft controller
    # never read it, leader.imbalance.per.broker.percentage is no setting: load_config warns and drops it.
    auto_leader_rebalance_enable: bool = Field(True, alias="auto.leader.rebalance.enable")
    leader_imbalance_check_interval_seconds: int = Field(300, alias="leader.imbalance.check.interval.seconds", ge=1)
    # How often the active controller tries an unclean election for leaderless partitions whose topic allows one.
    unclean_leader_election_interval_ms: int = Field(300000, alias="unclean.leader.election.interval.ms", ge=1)
    # The most partitions one DescribeTopicPartitions answer holds, whatever the client asks.
    max_request_partition_size_limit: int = Field(2000, alias="max.request.partition.size.limit", ge=1)
    # Replication (Kafka's names and defaults).
    replica_lag_time_max_ms: int = Field(30000, alias="replica.lag.time.max.ms", ge=1)
    num_replica_fetchers: int = Field(1, alias="num.replica.fetchers", ge=1)
    replica_fetch_max_bytes: int = Field(1048576, alias="replica.fetch.max.bytes", ge=0)
    replica_fetch_response_max_bytes: int = Field(10485760, alias="replica.fetch.response.max.bytes", ge=0)
    replica_fetch_wait_max_ms: int = Field(500, alias="replica.fetch.wait.max.ms", ge=0)
    replica_fetch_min_bytes: int = Field(1, alias="replica.fetch.min.bytes", ge=1)
    replica_fetch_backoff_ms: int = Field(1000, alias="replica.fetch.backoff.ms", ge=0)
    replica_socket_timeout_ms: int = Field(30000, alias="replica.socket.timeout.ms")
    # KIP-392: None (Kafka's default) keeps consumers on the leader; RackAwareReplicaSelector sends
    # a consumer that names its client.rack to an in-sync replica in that rack.
    replica_selector_class: Literal[None, "org.apache.kafka.common.replica.LeaderSelector", "org.apache.kafka.common.replica.RackAwareReplicaSelector"] = Field(
        None, alias="replica.selector.class"
    )
    replica_high_watermark_checkpoint_interval_ms: int = Field(5000, alias="replica.high.watermark.checkpoint.interval.ms", ge=1)
    fetch_purgatory_purge_interval_requests: int = Field(1000, alias="fetch.purgatory.purge.interval.requests")
    max_incremental_fetch_session_cache_slots: int = Field(1000, alias="max.incremental.fetch.session.cache.slots", ge=0)
    group_initial_rebalance_delay_ms: int = Field(3000, alias="group.initial.rebalance.delay.ms", ge=0)
    offsets_topic_num_partitions: int = Field(50, alias="offsets.topic.num.partitions", ge=1)
    # Kafka's default; the zero-config single node (`make run`) takes 1 unless told otherwise,
    # as Kafka's own quickstart server.properties sets (see _internal_topics_of_a_single_node).
    offsets_topic_replication_factor: int = Field(3, alias="offsets.topic.replication.factor", ge=1)
    # How long a coordinator write waits for the partition's followers before it is answered as failed.
    offsets_commit_timeout_ms: int = Field(5000, alias="offsets.commit.timeout.ms", ge=1)
    offsets_topic_segment_bytes: int = Field(104857600, alias="offsets.topic.segment.bytes", ge=14)
    offsets_retention_minutes: int = Field(10080, alias="offsets.retention.minutes", ge=1)
    offsets_retention_check_interval_ms: int = Field(600000, alias="offsets.retention.check.interval.ms", ge=1)
    offset_metadata_max_bytes: int = Field(4096, alias="offset.metadata.max.bytes", ge=0)
    group_min_session_timeout_ms: int = Field(6000, alias="group.min.session.timeout.ms", ge=0)
    group_max_session_timeout_ms: int = Field(1800000, alias="group.max.session.timeout.ms", ge=0)
    group_max_size: int = Field(2**31 - 1, alias="group.max.size", ge=1)
    group_consumer_session_timeout_ms: int = Field(45000, alias="group.consumer.session.timeout.ms", ge=1)
    group_consumer_min_session_timeout_ms: int = Field(45000, alias="group.consumer.min.session.timeout.ms", ge=1)
    group_consumer_max_session_timeout_ms: int = Field(60000, alias="group.consumer.max.session.timeout.ms", ge=1)
    group_consumer_heartbeat_interval_ms: int = Field(5000, alias="group.consumer.heartbeat.interval.ms", ge=1)
    group_consumer_min_heartbeat_interval_ms: int = Field(5000, alias="group.consumer.min.heartbeat.interval.ms", ge=1)
    group_consumer_max_heartbeat_interval_ms: int = Field(15000, alias="group.consumer.max.heartbeat.interval.ms", ge=1)
    group_consumer_max_size: int = Field(2**31 - 1, alias="group.consumer.max.size", ge=1)
    # KIP-932 share groups (ranges in _SHARE_GROUP_RANGES). The min/max pairs bound what a group's
    # own share.* configs may set (broker/share/share_group_configs.py).
    group_share_session_timeout_ms: int = Field(45000, alias="group.share.session.timeout.ms")
    group_share_min_session_timeout_ms: int = Field(45000, alias="group.share.min.session.timeout.ms")
    group_share_max_session_timeout_ms: int = Field(60000, alias="group.share.max.session.timeout.ms")
    group_share_heartbeat_interval_ms: int = Field(5000, alias="group.share.heartbeat.interval.ms")
    group_share_min_heartbeat_interval_ms: int = Field(5000, alias="group.share.min.heartbeat.interval.ms")
    group_share_max_heartbeat_interval_ms: int = Field(15000, alias="group.share.max.heartbeat.interval.ms")
    group_share_max_size: int = Field(200, alias="group.share.max.size")
    group_share_record_lock_duration_ms: int = Field(30000, alias="group.share.record.lock.duration.ms")
    group_share_min_record_lock_duration_ms: int = Field(15000, alias="group.share.min.record.lock.duration.ms")
    group_share_max_record_lock_duration_ms: int = Field(60000, alias="group.share.max.record.lock.duration.ms")
    group_share_delivery_count_limit: int = Field(5, alias="group.share.delivery.count.limit")
    group_share_min_delivery_count_limit: int = Field(2, alias="group.share.min.delivery.count.limit")
    group_share_max_delivery_count_limit: int = Field(10, alias="group.share.max.delivery.count.limit")
    group_share_partition_max_record_locks: int = Field(2000, alias="group.share.partition.max.record.locks")
    group_share_min_partition_max_record_locks: int = Field(100, alias="group.share.min.partition.max.record.locks")
    group_share_max_partition_max_record_locks: int = Field(4000, alias="group.share.max.partition.max.record.locks")
    # The share sessions (ShareFetch) one broker keeps.
    group_share_max_share_sessions: int = Field(2000, alias="group.share.max.share.sessions")
    # KIP-1071 streams groups (Kafka 4.4's GroupCoordinatorConfig). The min/max pairs bound what a
    # group's own streams.* configs may set (broker/group/streams_group_configs.py).
    group_streams_session_timeout_ms: int = Field(45000, alias="group.streams.session.timeout.ms", ge=1)
    group_streams_min_session_timeout_ms: int = Field(45000, alias="group.streams.min.session.timeout.ms", ge=1)
    group_streams_max_session_timeout_ms: int = Field(60000, alias="group.streams.max.session.timeout.ms", ge=1)
    group_streams_heartbeat_interval_ms: int = Field(5000, alias="group.streams.heartbeat.interval.ms", ge=1)
    group_streams_min_heartbeat_interval_ms: int = Field(5000, alias="group.streams.min.heartbeat.interval.ms", ge=1)
    group_streams_max_heartbeat_interval_ms: int = Field(15000, alias="group.streams.max.heartbeat.interval.ms", ge=1)
    group_streams_max_size: int = Field(2**31 - 1, alias="group.streams.max.size", ge=1)
    group_streams_num_standby_replicas: int = Field(0, alias="group.streams.num.standby.replicas", ge=0)
    group_streams_max_standby_replicas: int = Field(2, alias="group.streams.max.standby.replicas", ge=0)
    group_streams_task_offset_interval_ms: int = Field(60000, alias="group.streams.task.offset.interval.ms", ge=1)
    group_streams_min_task_offset_interval_ms: int = Field(15000, alias="group.streams.min.task.offset.interval.ms", ge=1)
    group_streams_acceptable_recovery_lag: int = Field(10000, alias="group.streams.acceptable.recovery.lag", ge=0)
    group_streams_initial_rebalance_delay_ms: int = Field(3000, alias="group.streams.initial.rebalance.delay.ms", ge=0)
    # group.streams.assignment.interval.ms itself is dynamic in Kafka: it stays a config of no_effect
    # here, read (with its dynamic layers) by broker/group/streams_group_configs.py.
    group_streams_min_assignment_interval_ms: int = Field(0, alias="group.streams.min.assignment.interval.ms", ge=0)
    group_streams_max_assignment_interval_ms: int = Field(15000, alias="group.streams.max.assignment.interval.ms", ge=0)
    group_streams_num_warmup_replicas: int = Field(2, alias="group.streams.num.warmup.replicas", ge=0)
    group_streams_max_warmup_replicas: int = Field(20, alias="group.streams.max.warmup.replicas", ge=0)
    group_streams_rack_aware_assignment_tags: str = Field("", alias="group.streams.rack.aware.assignment.tags")
    producer_id_expiration_ms: int = Field(86400000, alias="producer.id.expiration.ms", ge=1)
    producer_id_expiration_check_interval_ms: int = Field(600000, alias="producer.id.expiration.check.interval.ms", ge=1)
    transaction_state_log_num_partitions: int = Field(50, alias="transaction.state.log.num.partitions", ge=1)
    # Kafka's defaults; 1 and 1 on the zero-config single node, as for offsets.topic.replication.factor.
    transaction_state_log_replication_factor: int = Field(3, alias="transaction.state.log.replication.factor", ge=1)
    transaction_state_log_min_isr: int = Field(2, alias="transaction.state.log.min.isr", ge=1)
    transaction_state_log_segment_bytes: int = Field(104857600, alias="transaction.state.log.segment.bytes", ge=14)
    transaction_max_timeout_ms: int = Field(900000, alias="transaction.max.timeout.ms", ge=1)
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = Field(
        10000, alias="transaction.abort.timed.out.transaction.cleanup.interval.ms", ge=1
    )
    transaction_remove_expired_transaction_cleanup_interval_ms: int = Field(
        3600000, alias="transaction.remove.expired.transaction.cleanup.interval.ms", ge=1
    )
    transactional_id_expiration_ms: int = Field(604800000, alias="transactional.id.expiration.ms", ge=1)
    # KIP-890: a partition leader checks a transaction's first batch with its coordinator.
    transaction_partition_verification_enable: bool = Field(True, alias="transaction.partition.verification.enable")
    # Transaction version 2: how long a partition leader retries adding a partition to a transaction
    # whose previous one is still writing its markers, before it answers the producer.
    add_partitions_to_txn_retry_backoff_max_ms: int = Field(100, alias="add.partitions.to.txn.retry.backoff.max.ms", ge=0)
    add_partitions_to_txn_retry_backoff_ms: int = Field(20, alias="add.partitions.to.txn.retry.backoff.ms", ge=1)
    # The share coordinator's __share_group_state (Kafka's ShareCoordinatorConfig); the
    # zero-config node takes 1 and 1, as Kafka's quickstart server.properties sets.
    share_coordinator_state_topic_num_partitions: int = Field(50, alias="share.coordinator.state.topic.num.partitions", ge=1)
    share_coordinator_state_topic_replication_factor: int = Field(3, alias="share.coordinator.state.topic.replication.factor", ge=1, le=32767)
    share_coordinator_state_topic_min_isr: int = Field(2, alias="share.coordinator.state.topic.min.isr", ge=1, le=32767)
    share_coordinator_state_topic_segment_bytes: int = Field(104857600, alias="share.coordinator.state.topic.segment.bytes", ge=1)
    share_coordinator_snapshot_update_records_per_snapshot: int = Field(500, alias="share.coordinator.snapshot.update.records.per.snapshot", ge=0, le=500)
    share_coordinator_write_timeout_ms: int = Field(5000, alias="share.coordinator.write.timeout.ms", ge=1)
    # Internal in Kafka, as these: how often the coordinator prunes __share_group_state
    # (DeleteRecords) and snapshots the share partitions nobody wrote for that long.
    share_coordinator_state_topic_prune_interval_ms: int = Field(300000, alias="share.coordinator.state.topic.prune.interval.ms", ge=1)
    share_coordinator_cold_partition_snapshot_interval_ms: int = Field(300000, alias="share.coordinator.cold.partition.snapshot.interval.ms", ge=1)
    # KIP-714: the largest PushTelemetry payload (compressed) a client may send; GetTelemetrySubscriptions
    # tells the clients. Static, as in Kafka (KafkaConfig reads it once for its ClientMetricsManager).
    telemetry_max_bytes: int = Field(1048576, alias="telemetry.max.bytes", ge=1)
    # The Prometheus endpoint (broker/metrics/, docs/metrics.md): http://HOST:PORT, off when unset.
    metrics_listener: str | None = Field(None, alias="metrics.listener", pattern=r"^http://(\[[^\]]*\]|[^:/\[\]\s]*):\d{1,5}/?$")

    @field_validator("super_users")
    @classmethod
    def _principals(cls, value: str) -> str:
        parse_super_users(value)
        return value

    @field_validator("authorizer_class_name")
    @classmethod
    def _known_authorizer(cls, value: str) -> str:
        if value and value != STANDARD_AUTHORIZER_CLASS:
            raise ValueError(f"authorizer.class.name {value} is not served: kbroker's authorizer is {STANDARD_AUTHORIZER_CLASS}")
        return value

    @field_validator("listeners")
    @classmethod
    def _check_listeners(cls, v: str) -> str:
        listeners = parse_listeners(v)
        if not listeners:
            raise ValueError("at least one listener is required")
        if len({lst.name for lst in listeners}) != len(listeners):
            raise ValueError("each listener must have a different name")
        ports = [lst.port for lst in listeners if lst.port != 0]  # port 0: the OS picks one
        if len(set(ports)) != len(ports):
            raise ValueError("each listener must have a different port")
        return v

    @field_validator("advertised_listeners")
    @classmethod
    def _check_advertised(cls, v: str | None) -> str | None:
        if v is not None:
            listeners = parse_listeners(v)
            if len({lst.name for lst in listeners}) != len(listeners):
                raise ValueError("each listener must have a different name")
            if re.search(r"://0\.0\.0\.0:", v):
                raise ValueError("cannot use the nonroutable meta-address 0.0.0.0; use a routable IP address")
        return v

    @field_validator("listener_security_protocol_map")
    @classmethod
    def _check_protocol_map(cls, v: str) -> str:
        parse_protocol_map(v)
        return v

    @field_validator("controller_quorum_voters")
    @classmethod
    def _check_voters(cls, v: str) -> str:
        parse_quorum_voters(v)
        return v

    @field_validator("controller_quorum_bootstrap_servers")
    @classmethod
    def _check_bootstrap_servers(cls, v: str) -> str:
        parse_host_ports(v)
        return v

    @field_validator("process_roles")
    @classmethod
    def _check_roles(cls, v: str) -> str:
        parse_roles(v)
        return v

    @field_validator("log_cleanup_policy")
    @classmethod
    def _check_cleanup(cls, v: str) -> str:
        policies = {p.strip() for p in v.split(",")}
        if not policies <= {"delete", "compact"}:
            raise ValueError("must be a list of delete and compact")
        return v

    @staticmethod
    def _is_zero_config(data: Mapping[str, Any]) -> bool:
        """Combined roles and no quorum settings: the `make run` node, a cluster of one."""
        try:
            roles = parse_roles(str(_raw(data, "process_roles") or BrokerConfig.model_fields["process_roles"].default))
        except ValueError:
            return False  # process.roles' own check names the problem
        quorum_given = any(str(_raw(data, k) or "").strip() for k in ("controller_quorum_voters", "controller_quorum_bootstrap_servers"))
        return roles == {BROKER_ROLE, CONTROLLER_ROLE} and not quorum_given

    @model_validator(mode="before")
    @classmethod
    def _configs_of_no_effect(cls, data: Any) -> Any:
        """Kafka's configs with no field here go, by name, to no_effect."""
        if not isinstance(data, Mapping) or not any(k in NO_EFFECT_CONFIGS for k in data):
            return data
        given = {str(k): str(v) for k, v in data.items() if k in NO_EFFECT_CONFIGS}
        kept = {k: v for k, v in data.items() if k not in NO_EFFECT_CONFIGS}
        return {**kept, "no_effect": {**dict(kept.get("no_effect") or {}), **given}}

    @field_validator("no_effect")
    @classmethod
    def _no_effect_values(cls, value: dict[str, str]) -> dict[str, str]:
        from broker.unimplemented_configs import problem

        for key in sorted(value):
            found = problem(key, value[key])
            if found:
                raise ValueError(found)
        return value

    @model_validator(mode="before")
    @classmethod
    def _listener_prefixed_configs(cls, data: Any) -> Any:
        if not isinstance(data, Mapping) or not any(str(k).startswith(LISTENER_PREFIX) for k in data):
            return data
        prefixed = {str(k): str(v) for k, v in data.items() if str(k).startswith(LISTENER_PREFIX)}
        return {**{k: v for k, v in data.items() if not str(k).startswith(LISTENER_PREFIX)}, "listener_prefixed": prefixed}

    def ssl_for_listener(self, listener: str) -> "BrokerConfig":
        """This config as a TLS listener sees it: each `listener.name.<listener>.ssl.*` over the
        broker-wide `ssl.*` of the same name (Kafka falls back config by config)."""
        prefix = f"{LISTENER_PREFIX}{listener.lower()}."
        update = {
            _FIELDS_BY_ALIAS[key[len(prefix) :]]: value
            for key, value in self.listener_prefixed.items()
            if key.startswith(prefix + "ssl.") and key[len(prefix) :] in _FIELDS_BY_ALIAS
        }
        return self.model_copy(update=update) if update else self

    def listener_config(self, listener: str, name: str) -> str | None:
        """A config as a listener sees it: `listener.name.<listener>.<name>` over the broker-wide one."""
        prefixed = self.listener_prefixed.get(f"{LISTENER_PREFIX}{listener.lower()}.{name}")
        if prefixed is not None:
            return prefixed
        field = _FIELDS_BY_ALIAS.get(name)
        return None if field is None else getattr(self, field)

    @model_validator(mode="before")
    @classmethod
    def _node_id_of_the_zero_config_node(cls, data: Any) -> Any:
        if not isinstance(data, Mapping) or _raw(data, "node_id") is not None:
            return data
        if cls._is_zero_config(data):
            return {**data, "node.id": ZERO_CONFIG_NODE_ID}
        return data

    @model_validator(mode="before")
    @classmethod
    def _internal_topics_of_the_zero_config_node(cls, data: Any) -> Any:
        """Internal topics Kafka replicates three times could never be created on a cluster of one:
        the zero-config node takes Kafka's quickstart values (1) unless given others."""
        if not isinstance(data, Mapping) or not cls._is_zero_config(data):
            return data
        names = (
            "offsets_topic_replication_factor",
            "transaction_state_log_replication_factor",
            "transaction_state_log_min_isr",
            "share_coordinator_state_topic_replication_factor",
            "share_coordinator_state_topic_min_isr",
        )
        missing = {cls.model_fields[n].alias: 1 for n in names if _raw(data, n) is None}
        return {**data, **missing} if missing else data

    @model_validator(mode="after")
    def _consumer_group_timeouts(self) -> "BrokerConfig":
        """Kafka's GroupCoordinatorConfig checks: each KIP-848 timeout within its bounds."""
        if not self.group_consumer_min_session_timeout_ms <= self.group_consumer_session_timeout_ms <= self.group_consumer_max_session_timeout_ms:
            raise ValueError("group.consumer.session.timeout.ms must be between group.consumer.min.session.timeout.ms and group.consumer.max.session.timeout.ms")
        if not self.group_consumer_min_heartbeat_interval_ms <= self.group_consumer_heartbeat_interval_ms <= self.group_consumer_max_heartbeat_interval_ms:
            raise ValueError(
                "group.consumer.heartbeat.interval.ms must be between group.consumer.min.heartbeat.interval.ms and group.consumer.max.heartbeat.interval.ms"
            )
        if self.group_consumer_heartbeat_interval_ms >= self.group_consumer_session_timeout_ms:
            raise ValueError("group.consumer.heartbeat.interval.ms must be less than group.consumer.session.timeout.ms")
        return self

    @field_validator(*_SHARE_GROUP_RANGES)
    @classmethod
    def _share_group_range(cls, value: int, info: ValidationInfo) -> int:
        """Kafka's ConfigDef range of a group.share.* setting, in its words."""
        assert info.field_name is not None
        low, high = _SHARE_GROUP_RANGES[info.field_name]
        if value < low:
            raise ValueError(f"Value must be at least {low}")
        if high is not None and value > high:
            raise ValueError(f"Value must be no more than {high}")
        return value

    @model_validator(mode="after")
    def _share_group_bounds(self) -> "BrokerConfig":
        """Kafka 4.4's start-up checks, in its order: GroupCoordinatorConfig's (streams and share
        membership), then ShareGroupConfig's (delivery); each value within its min and max."""
        checks = (
            ("group.streams.max.heartbeat.interval.ms", ">=", "group.streams.min.heartbeat.interval.ms"),
            ("group.streams.heartbeat.interval.ms", ">=", "group.streams.min.heartbeat.interval.ms"),
            ("group.streams.heartbeat.interval.ms", "<=", "group.streams.max.heartbeat.interval.ms"),
            ("group.streams.max.session.timeout.ms", ">=", "group.streams.min.session.timeout.ms"),
            ("group.streams.session.timeout.ms", ">=", "group.streams.min.session.timeout.ms"),
            ("group.streams.session.timeout.ms", "<=", "group.streams.max.session.timeout.ms"),
            ("group.streams.heartbeat.interval.ms", "<", "group.streams.session.timeout.ms"),
            ("group.streams.max.assignment.interval.ms", ">=", "group.streams.min.assignment.interval.ms"),
            ("group.streams.assignment.interval.ms", ">=", "group.streams.min.assignment.interval.ms"),
            ("group.streams.assignment.interval.ms", "<=", "group.streams.max.assignment.interval.ms"),
            ("group.streams.num.standby.replicas", "<=", "group.streams.max.standby.replicas"),
            ("group.streams.task.offset.interval.ms", ">=", "group.streams.min.task.offset.interval.ms"),
            ("group.streams.num.warmup.replicas", "<=", "group.streams.max.warmup.replicas"),
            ("group.share.max.heartbeat.interval.ms", ">=", "group.share.min.heartbeat.interval.ms"),
            ("group.share.heartbeat.interval.ms", ">=", "group.share.min.heartbeat.interval.ms"),
            ("group.share.heartbeat.interval.ms", "<=", "group.share.max.heartbeat.interval.ms"),
            ("group.share.max.session.timeout.ms", ">=", "group.share.min.session.timeout.ms"),
            ("group.share.session.timeout.ms", ">=", "group.share.min.session.timeout.ms"),
            ("group.share.session.timeout.ms", "<=", "group.share.max.session.timeout.ms"),
            ("group.share.heartbeat.interval.ms", "<", "group.share.session.timeout.ms"),
            ("group.share.max.delivery.count.limit", ">=", "group.share.delivery.count.limit"),
            ("group.share.delivery.count.limit", ">=", "group.share.min.delivery.count.limit"),
            ("group.share.max.partition.max.record.locks", ">=", "group.share.partition.max.record.locks"),
            ("group.share.partition.max.record.locks", ">=", "group.share.min.partition.max.record.locks"),
            ("group.share.record.lock.duration.ms", ">=", "group.share.min.record.lock.duration.ms"),
            ("group.share.max.record.lock.duration.ms", ">=", "group.share.record.lock.duration.ms"),
            ("group.share.max.share.sessions", ">=", "group.share.max.size"),
        )
        words = {">=": "greater than or equal to", "<=": "less than or equal to", "<": "less than"}
        for left, op, right in checks:
            a, b = self._setting(left), self._setting(right)
            if not (a >= b if op == ">=" else a <= b if op == "<=" else a < b):
                raise ValueError(f"{left} must be {words[op]} {right}")
        return self

    def _setting(self, name: str) -> int:
        """A group setting by its Kafka name: its field, or the value of a config of no_effect."""
        field = _FIELDS_BY_ALIAS.get(name)
        if field is not None:
            return int(getattr(self, field))
        return int(self.no_effect.get(name) or str(KAFKA_BROKER_CONFIGS[name].default))

    @field_validator("group_streams_rack_aware_assignment_tags")
    @classmethod
    def _rack_aware_assignment_tags(cls, value: str) -> str:
        """Kafka's ConfigDef.ValidList.anyNonDuplicateValues(isEmptyAllowed=true, isNullAllowed=false)."""
        tags = streams_rack_aware_assignment_tags(value)
        name = "group.streams.rack.aware.assignment.tags"
        if "" in tags:
            raise ValueError(f"Configuration '{name}' values must not be empty.")
        if len(set(tags)) != len(tags):
            raise ValueError(f"Configuration '{name}' values must not be duplicated.")
        return value

    @model_validator(mode="after")
    def _metadata_segment_floor(self) -> "BrokerConfig":
        if self.metadata_log_segment_bytes < self.metadata_log_segment_min_bytes:
            raise ValueError(f"metadata.log.segment.bytes must be at least {self.metadata_log_segment_min_bytes}")
        return self

    @model_validator(mode="after")
    def _kraft(self) -> "BrokerConfig":
        problem = self._kraft_problem()
        if problem:
            raise ValueError(problem)
        return self

    def _kraft_problem(self) -> str | None:
        """KafkaConfig's checks of roles, listeners and quorum, in its order; the first problem found."""
        if self.node_id < 0:
            return "Missing configuration `node.id`, which is required when `process.roles` is defined (every node of a KRaft cluster has its own)"
        if not self.log_dir_paths:
            return "At least one log directory must be defined via log.dirs or log.dir."
        protocols = self.security_protocol_map
        listeners = self.listener_list
        explicit_advertised = parse_listeners(self.advertised_listeners) if self.advertised_listeners is not None else []
        for lst in listeners + explicit_advertised:
            if lst.name not in protocols:
                return f"No security protocol defined for listener {lst.name} in listener.security.protocol.map"
            if protocols[lst.name] not in SERVED_SECURITY_PROTOCOLS:
                return f"Listener {lst.name} uses security protocol {protocols[lst.name]}: kbroker serves {' and '.join(SERVED_SECURITY_PROTOCOLS)} only"
        for lst in listeners:
            if protocols[lst.name] in ("SSL", "SASL_SSL"):
                try:
                    check_ssl_config(self.ssl_for_listener(lst.name))
                except SslConfigError as e:
                    return str(e)
        for lst in listeners:
            if protocols[lst.name].startswith("SASL_"):
                problem = sasl_listener_problem(self, lst.name)
                if problem:
                    return problem
        controller_names = self.controller_listener_name_list
        listener_names = [lst.name for lst in listeners]
        voter_ids = sorted(v.node_id for v in parse_quorum_voters(self.controller_quorum_voters))
        voters_shown = "{" + ", ".join(map(str, voter_ids)) + "}"
        if not self.implicit_quorum and not voter_ids and not self.controller_quorum_bootstrap_servers.strip():
            return (
                "If using process.roles, either controller.quorum.bootstrap.servers must contain the set of bootstrap "
                "controllers or controller.quorum.voters must contain a parseable set of controllers."
            )
        if self.roles == {BROKER_ROLE}:
            if self.node_id in voter_ids:
                return f"If process.roles contains just the 'broker' role, the node id {self.node_id} must not be included in the set of voters controller.quorum.voters={voters_shown}"
            if not controller_names:
                return "controller.listener.names must contain at least one value when running KRaft with just the broker role"
            if self.controller_listeners:
                return "controller.listener.names must not contain a value appearing in the 'listeners' configuration when running KRaft with just the broker role"
            for name in controller_names:
                if name not in protocols:
                    return f"Controller listener with name {name} defined in controller.listener.names not found in listener.security.protocol.map"
                if protocols[name] not in SERVED_SECURITY_PROTOCOLS:
                    return f"Listener {name} uses security protocol {protocols[name]}: kbroker serves {' and '.join(SERVED_SECURITY_PROTOCOLS)} only"
            advertised_controllers = [lst.name for lst in explicit_advertised if lst.name in controller_names]
            if advertised_controllers:
                return f"advertised.listeners must not contain the controller listener {advertised_controllers[0]} when process.roles=broker"
        if self.is_controller and not self.implicit_quorum:
            if self.roles == {CONTROLLER_ROLE} and len(self.controller_listeners) != len(listeners):
                return "The listeners config must only contain KRaft controller listeners from controller.listener.names when process.roles=controller"
            if voter_ids and self.node_id not in voter_ids:
                return f"If process.roles contains the 'controller' role, the node id {self.node_id} must be included in the set of voters controller.quorum.voters={voters_shown}"
            if not self.controller_listeners:
                return "controller.listener.names must contain at least one value appearing in the 'listeners' configuration when running the KRaft controller role"
            if any(name not in listener_names for name in controller_names):
                return "controller.listener.names must only contain values appearing in the 'listeners' configuration when running the KRaft controller role"
        if self.is_broker:
            advertised = [lst.name for lst in self.advertised_broker_listeners]
            if not advertised:
                return "There must be at least one broker advertised listener. Perhaps all listeners appear in controller.listener.names?"
            if self.inter_broker_listener_name.upper() not in advertised:
                return (
                    "inter.broker.listener.name must be a listener name defined in advertised.listeners. "
                    f"The valid options based on currently configured listeners are {','.join(advertised)}"
                )
            if not set(advertised) <= set(listener_names):
                return (
                    f"advertised.listeners listener names must be equal to or a subset of the ones defined in listeners. "
                    f"Found {','.join(advertised)}. The valid options based on the current configuration are {','.join(listener_names)}"
                )
            cordoned = _names(self.cordoned_log_dirs)
            if CORDONED_ALL in cordoned:
                if len(cordoned) != 1:
                    return f"When cordoned.log.dirs is set to {CORDONED_ALL}, it must not contain other values"
            else:
                missing = [d for d in cordoned if d not in _names(self.log_dirs)]
                if missing:
                    return f"All entries in cordoned.log.dirs must be present in log.dirs or log.dir. Missing entries : {','.join(missing)}"
        return node_links_problem(self)

    # -- roles, listeners and quorum, parsed ---------------------------------------------------------------

    @property
    def roles(self) -> frozenset[str]:
        return parse_roles(self.process_roles)

    @property
    def is_broker(self) -> bool:
        return BROKER_ROLE in self.roles

    @property
    def is_controller(self) -> bool:
        return CONTROLLER_ROLE in self.roles

    @property
    def implicit_quorum(self) -> bool:
        """The zero-config single node: combined, with no controller.quorum.voters nor bootstrap servers."""
        return (
            self.roles == {BROKER_ROLE, CONTROLLER_ROLE}
            and not self.controller_quorum_voters.strip()
            and not self.controller_quorum_bootstrap_servers.strip()
        )

    @property
    def controller_listener_name_list(self) -> list[str]:
        return _names(self.controller_listener_names)

    @property
    def security_protocol_map(self) -> dict[str, str]:
        """Kafka's effective map: left at its default, it maps the controller listeners to PLAINTEXT too."""
        mapping = parse_protocol_map(self.listener_security_protocol_map)
        if "listener_security_protocol_map" not in self.model_fields_set:
            secure = set(SECURITY_PROTOCOLS) - {"PLAINTEXT"}
            in_use = set(self.controller_listener_name_list) | {lst.name for lst in self.listener_list}
            if not in_use & secure:
                for name in self.controller_listener_name_list:
                    mapping.setdefault(name, "PLAINTEXT")
        return mapping

    @property
    def listener_list(self) -> list[Listener]:
        """Every listener of `listeners`, in order."""
        return parse_listeners(self.listeners)

    @property
    def controller_listeners(self) -> list[Listener]:
        """The listeners named in controller.listener.names, in that order (Raft, registration, heartbeats)."""
        by_name = {lst.name: lst for lst in self.listener_list}
        return [by_name[name] for name in self.controller_listener_name_list if name in by_name]

    @property
    def client_listeners(self) -> list[Listener]:
        """The listeners that are not controller listeners, in order: what a broker serves clients and brokers on."""
        names = set(self.controller_listener_name_list)
        return [lst for lst in self.listener_list if lst.name not in names]

    def _advertised(self) -> list[Listener]:
        """advertised.listeners, else listeners; a wildcard host is advertised as loopback (Kafka refuses 0.0.0.0)."""
        given = parse_listeners(self.advertised_listeners) if self.advertised_listeners is not None else self.listener_list
        return [Listener(name=lst.name, host="127.0.0.1", port=lst.port) if lst.host in WILDCARD_HOSTS else lst for lst in given]

    @property
    def advertised_broker_listeners(self) -> list[Listener]:
        """What this broker puts in its BrokerRegistration: the advertised listeners that are not controller listeners."""
        names = set(self.controller_listener_name_list)
        return [lst for lst in self._advertised() if lst.name not in names]

    @property
    def advertised_controller_listeners(self) -> list[Listener]:
        """Kafka's effective advertised controller listeners: per controller listener name, advertised or else bound."""
        advertised = {lst.name: lst for lst in self._advertised()}
        bound = {lst.name: lst for lst in self.controller_listeners}
        out = []
        for name in self.controller_listener_name_list:
            lst = advertised.get(name) or bound.get(name)
            if lst is not None:
                out.append(Listener(name=lst.name, host="127.0.0.1", port=lst.port) if lst.host in WILDCARD_HOSTS else lst)
        return out

    @property
    def inter_broker_listener(self) -> Listener:
        """The advertised listener other brokers reach this one on (replica fetchers)."""
        for lst in self.advertised_broker_listeners:
            if lst.name == self.inter_broker_listener_name.upper():
                return lst
        raise ConfigError("inter.broker.listener.name: this node has no broker listener of that name")

    @property
    def quorum_voters(self) -> list[QuorumVoter]:
        """controller.quorum.voters; for the zero-config node, itself alone at its controller listener, or at
        port 0 when it has none (a quorum of one is never dialled)."""
        if self.implicit_quorum:
            own = self.advertised_controller_listeners
            return [QuorumVoter(self.node_id, own[0].host if own else "127.0.0.1", own[0].port if own else 0)]
        return parse_quorum_voters(self.controller_quorum_voters)

    @property
    def quorum_bootstrap_servers(self) -> list[tuple[str, int]]:
        return parse_host_ports(self.controller_quorum_bootstrap_servers)

    @property
    def log_dir_paths(self) -> list[Path]:
        return [Path(d) for d in _names(self.log_dirs)]

    @property
    def cordoned_log_dir_paths(self) -> list[Path]:
        """Kafka's cordonedLogDirs: the cordoned entries of log.dirs, all of them for "*"."""
        cordoned = _names(self.cordoned_log_dirs)
        return self.log_dir_paths if CORDONED_ALL in cordoned else [Path(d) for d in cordoned]

    @property
    def metadata_dir(self) -> Path:
        """Where `__cluster_metadata-0` lives: metadata.log.dir, else the first log dir (as Kafka)."""
        return Path(self.metadata_log_dir) if self.metadata_log_dir else self.data_dir

    @property
    def data_dir(self) -> Path:
        return self.log_dir_paths[0]

    @property
    def listener(self) -> Listener:
        """The one client listener the current server binds: the first that is not a controller listener."""
        listeners = self.client_listeners
        if not listeners:
            raise ConfigError("listeners: no listener for clients")
        return listeners[0]

    @property
    def advertised_listener(self) -> Listener:
        own = self.listener
        for lst in self.advertised_broker_listeners:
            if lst.name == own.name:
                return lst
        return Listener(name=own.name, host="127.0.0.1", port=own.port) if own.host in WILDCARD_HOSTS else own

    def topic_defaults(self) -> dict[str, str]:
        """Broker-level defaults for topic configs, keyed by the topic config name."""
        roll_ms = self.log_roll_ms if self.log_roll_ms is not None else self.log_roll_hours * 3600000
        if self.log_retention_ms is not None:
            retention_ms = self.log_retention_ms
        elif self.log_retention_minutes is not None:
            retention_ms = self.log_retention_minutes * 60000
        else:
            retention_ms = self.log_retention_hours * 3600000
        flush_ms = self.log_flush_interval_ms if self.log_flush_interval_ms is not None else self.log_flush_scheduler_interval_ms
        return {
            "segment.bytes": str(self.log_segment_bytes),
            "segment.ms": str(roll_ms),
            "retention.ms": str(retention_ms),
            "retention.bytes": str(self.log_retention_bytes),
            "file.delete.delay.ms": str(self.log_segment_delete_delay_ms),
            "index.interval.bytes": str(self.log_index_interval_bytes),
            "segment.index.bytes": str(self.log_index_size_max_bytes),
            "flush.messages": str(self.log_flush_interval_messages),
            "flush.ms": str(flush_ms),
            "message.timestamp.type": self.log_message_timestamp_type,
            "cleanup.policy": self.log_cleanup_policy,
            "delete.retention.ms": str(self.log_cleaner_delete_retention_ms),
            "min.compaction.lag.ms": str(self.log_cleaner_min_compaction_lag_ms),
            "max.compaction.lag.ms": str(self.log_cleaner_max_compaction_lag_ms),
            "min.cleanable.dirty.ratio": str(self.log_cleaner_min_cleanable_ratio),
            "max.message.bytes": str(self.message_max_bytes),
            "compression.type": self.compression_type,
            "min.insync.replicas": str(self.min_insync_replicas),
            "unclean.leader.election.enable": str(self.unclean_leader_election_enable).lower(),
        }

    def effective_topic_config(self, overrides: Mapping[str, str | None]) -> dict[str, str]:
        """A topic's whole configuration: this node's topic defaults with the topic's overrides on top."""
        from storage.log_config import LogConfig

        props: dict[str, str] = dict(self.topic_defaults())
        props.update({k: v for k, v in overrides.items() if v is not None})
        return LogConfig.from_properties(props).to_properties()

    def cleaner_config(self) -> CleanerConfig:
        """The log cleaner's settings; log.cleaner.threads=0 turns it off as log.cleaner.enable=false does."""
        return CleanerConfig(
            enable=self.log_cleaner_enable and self.log_cleaner_threads > 0,
            threads=max(self.log_cleaner_threads, 1),
            backoff_ms=self.log_cleaner_backoff_ms,
            dedupe_buffer_size=self.log_cleaner_dedupe_buffer_size,
            io_buffer_load_factor=self.log_cleaner_io_buffer_load_factor,
            io_max_bytes_per_second=self.log_cleaner_io_max_bytes_per_second,
            executor=self.log_cleaner_executor,
            test_swap_pause_ms=self.log_cleaner_test_swap_pause_ms,
            test_swap_pause_step=self.log_cleaner_test_swap_pause_step,
        )

    def as_properties(self) -> dict[str, str | None]:
        out: dict[str, str | None] = {**self.listener_prefixed, **self.no_effect}
        for name, info in type(self).model_fields.items():
            if name in ("listener_prefixed", "no_effect"):
                continue
            value = getattr(self, name)
            key = info.alias or name
            out[key] = None if value is None else (str(value).lower() if isinstance(value, bool) else str(value))
        return out


def read_properties(path: Path) -> dict[str, str]:
    """Java .properties, the subset Kafka's files use: key=value or key:value, # and ! comments."""
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror or e}") from e
    props: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        m = re.match(r"([^=:\s]+)\s*[=:]\s*(.*)$", line)
        if not m:
            raise ConfigError(f"{path}: cannot parse line '{line}'")
        props[m.group(1)] = m.group(2).strip()
    return props


def load_config(path: Path | None, overrides: Mapping[str, str]) -> BrokerConfig:
    props: dict[str, str] = read_properties(path) if path else {}
    props.update(overrides)
    if "log.dir" in props and "log.dirs" not in props:
        props["log.dirs"] = props["log.dir"]  # log.dir itself stays, described as given
    _kafka_aliases(props)
    known = {info.alias for info in BrokerConfig.model_fields.values()} | NO_EFFECT_CONFIGS
    for key in sorted(k for k in set(props) - known if not k.startswith(LISTENER_PREFIX)):
        # Kafka only warns about configs it does not use, so existing files keep working.
        log.warning("config.unknown", key=key, message=f"The configuration '{key}' was supplied but isn't a known config.")
        props.pop(key)
    try:
        return BrokerConfig.model_validate(props)
    except ValidationError as e:
        err = e.errors()[0]
        if not err["loc"]:
            # A rule across several keys: its message names them.
            raise ConfigError(f"Invalid configuration: {err['msg'].removeprefix('Value error, ')}") from None
        if err["loc"][0] == "no_effect":  # the message names the key (broker/unimplemented_configs.py)
            raise ConfigError(err["msg"].removeprefix("Value error, ")) from None
        loc = err["loc"][0]
        value = props.get(str(loc))
        shown = f" '{value}'" if value is not None else ""
        raise ConfigError(f"Invalid value{shown} for configuration {loc}: {err['msg'].removeprefix('Value error, ')}") from None


def _kafka_aliases(props: dict[str, str]) -> None:
    """Kafka's older names for settings kbroker takes under the newer ones: broker.id (node.id) and
    security.inter.broker.protocol (the listener of that name is the inter-broker one)."""
    if "broker.id" in props:
        if "node.id" not in props:
            props["node.id"] = props["broker.id"]
        elif props["node.id"].strip() != props["broker.id"].strip():
            raise ConfigError("You must set `node.id` to the same value as `broker.id`.")
    if "security.inter.broker.protocol" in props:
        if "inter.broker.listener.name" in props:
            raise ConfigError("Only one of inter.broker.listener.name and security.inter.broker.protocol should be set.")
        props["inter.broker.listener.name"] = props["security.inter.broker.protocol"].strip().upper()


_FIELDS_BY_ALIAS = {info.alias: name for name, info in BrokerConfig.model_fields.items() if info.alias}
# Kafka 4.4's broker configs with no BrokerConfig field: kept in BrokerConfig.no_effect.
NO_EFFECT_CONFIGS = frozenset(KAFKA_BROKER_CONFIGS) - frozenset(_FIELDS_BY_ALIAS)
