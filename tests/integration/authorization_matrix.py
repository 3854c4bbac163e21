"""The authorization matrix: each API a client can send, spoken on the wire over SASL_SSL with
SCRAM-SHA-512, as five principals, against any broker (kbroker or Apache Kafka 4.4) configured
alike. Its answer is every error code of every response, so two brokers can be compared.

The principals, each with its own resources per case (``<scenario>.<case>.topic``/``.group``/``.txn``):
- ``none``: no ACL at all;
- ``allowed``: exactly the ACLs the case needs (literal names; the cluster for cluster operations);
- ``denied``: ALLOW ALL on its resources and a DENY of each operation the case needs;
- ``prefixed``: the ACLs the case needs, as PREFIXED ACLs on ``<scenario>.<case>.``;
- ``super``: a super user.
A broker runs with ``allow.everyone.if.no.acl.found=false``; the setup (topics, ACLs, SCRAM users)
goes through a PLAINTEXT listener whose ``User:ANONYMOUS`` is a super user too.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import hashlib
import hmac
import os
import socket
import ssl
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kio.schema.add_offsets_to_txn.v3 import request as add_offsets
from kio.schema.add_partitions_to_txn.v3 import request as add_partitions
from kio.schema.alter_client_quotas.v1 import request as alter_quotas
from kio.schema.alter_partition_reassignments.v0 import request as alter_reassignments
from kio.schema.consumer_group_describe.v0 import request as cg_describe
from kio.schema.consumer_group_heartbeat.v0 import request as cg_heartbeat
from kio.schema.create_acls.v3 import request as create_acls
from kio.schema.create_partitions.v3 import request as create_partitions
from kio.schema.create_topics.v7 import request as create_topics
from kio.schema.delete_acls.v3 import request as delete_acls
from kio.schema.delete_groups.v2 import request as delete_groups
from kio.schema.delete_records.v2 import request as delete_records
from kio.schema.delete_topics.v6 import request as delete_topics
from kio.schema.describe_acls.v3 import request as describe_acls
from kio.schema.describe_client_quotas.v1 import request as describe_quotas
from kio.schema.describe_cluster.v1 import request as describe_cluster
from kio.schema.describe_configs.v4 import request as describe_configs
from kio.schema.describe_groups.v5 import request as describe_groups
from kio.schema.describe_log_dirs.v4 import request as describe_log_dirs
from kio.schema.describe_producers.v0 import request as describe_producers
from kio.schema.describe_topic_partitions.v0 import request as describe_topic_partitions
from kio.schema.describe_transactions.v0 import request as describe_transactions
from kio.schema.describe_user_scram_credentials.v0 import request as describe_scram
from kio.schema.elect_leaders.v2 import request as elect_leaders
from kio.schema.end_txn.v3 import request as end_txn
from kio.schema.fetch.v12 import request as fetch
from kio.schema.find_coordinator.v4 import request as find_coordinator
from kio.schema.heartbeat.v4 import request as heartbeat
from kio.schema.incremental_alter_configs.v1 import request as incremental_alter_configs
from kio.schema.init_producer_id.v4 import request as init_producer_id
from kio.schema.join_group.v9 import request as join_group
from kio.schema.leave_group.v5 import request as leave_group
from kio.schema.list_groups.v4 import request as list_groups
from kio.schema.list_offsets.v7 import request as list_offsets
from kio.schema.list_partition_reassignments.v0 import request as list_reassignments
from kio.schema.list_transactions.v0 import request as list_transactions
from kio.schema.metadata.v12 import request as metadata
from kio.schema.offset_commit.v8 import request as offset_commit
from kio.schema.offset_delete.v0 import request as offset_delete
from kio.schema.offset_fetch.v8 import request as offset_fetch
from kio.schema.offset_for_leader_epoch.v4 import request as offset_for_leader_epoch
from kio.schema.produce.v9 import request as produce
from kio.schema.sasl_authenticate.v2 import request as sasl_authenticate
from kio.schema.sasl_handshake.v1 import request as sasl_handshake
from kio.schema.sync_group.v5 import request as sync_group
from kio.schema.txn_offset_commit.v3 import request as txn_offset_commit
from kio.schema.write_txn_markers.v1 import request as write_txn_markers

from broker.wire_client import encode_request, recv_exact, request
from protocol.api_keys import response_header_version, response_schema
from tests.integration.certificates import TestCA
from tests.integration.test_bad_input import record_batch

SCENARIOS = ("none", "allowed", "denied", "prefixed", "super")
USERS = {"none": "nina", "allowed": "alice", "denied": "dave", "prefixed": "paul", "super": "admin"}
PASSWORD = "matrix-secret"
SUPER_USERS = "User:ANONYMOUS;User:admin"
TIMEOUT_S = 30.0
SECOND = datetime.timedelta(seconds=10)

TOPIC, NEW_TOPIC, GROUP, TXN, CLUSTER = "topic", "new-topic", "group", "txn", "cluster"
_RESOURCE_TYPES = {TOPIC: ResourceType.TOPIC, NEW_TOPIC: ResourceType.TOPIC, GROUP: ResourceType.GROUP, TXN: ResourceType.TRANSACTIONAL_ID, CLUSTER: ResourceType.BROKER}
_OPERATIONS = {op.name: op for op in AclOperation}


@dataclass(frozen=True)
class Names:
    topic: str
    group: str
    txn: str
    new_topic: str


@dataclass(frozen=True)
class Case:
    name: str
    # (resource kind, operation name) the principal needs for the request to pass authorization.
    needs: tuple[tuple[str, str], ...]
    build: Callable[[Names], Any]
    # The case needs its topic to exist.
    topic: bool = True


def _batch() -> bytes:
    return record_batch([(b"k", b"v")], int(time.time() * 1000))


def _p(cls: Any, **kw: Any) -> Any:
    return cls(**kw)


CASES: tuple[Case, ...] = (
    Case("metadata", ((TOPIC, "DESCRIBE"),), lambda n: metadata.MetadataRequest(topics=(metadata.MetadataRequestTopic(topic_id=None, name=n.topic),), allow_auto_topic_creation=False, include_topic_authorized_operations=True)),
    Case("metadata-auto-create", ((NEW_TOPIC, "DESCRIBE"), (NEW_TOPIC, "CREATE")), lambda n: metadata.MetadataRequest(topics=(metadata.MetadataRequestTopic(topic_id=None, name=n.new_topic),), allow_auto_topic_creation=True, include_topic_authorized_operations=False), topic=False),
    Case("produce", ((TOPIC, "WRITE"),), lambda n: produce.ProduceRequest(transactional_id=None, acks=1, timeout=SECOND, topic_data=(produce.TopicProduceData(name=n.topic, partition_data=(produce.PartitionProduceData(index=0, records=_batch()),)),))),
    Case("fetch", ((TOPIC, "READ"),), lambda n: fetch.FetchRequest(cluster_id=None, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1, topics=(fetch.FetchTopic(topic=n.topic, partitions=(fetch.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20),)),), forgotten_topics_data=(), rack_id="")),
    Case("fetch-as-follower", ((CLUSTER, "CLUSTER_ACTION"),), lambda n: fetch.FetchRequest(cluster_id=None, replica_id=7, max_wait=datetime.timedelta(0), min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1, topics=(fetch.FetchTopic(topic=n.topic, partitions=(fetch.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20),)),), forgotten_topics_data=(), rack_id="")),
    Case("list-offsets", ((TOPIC, "DESCRIBE"),), lambda n: list_offsets.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(list_offsets.ListOffsetsTopic(name=n.topic, partitions=(list_offsets.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1),)),))),
    Case("offset-for-leader-epoch", ((TOPIC, "DESCRIBE"),), lambda n: offset_for_leader_epoch.OffsetForLeaderEpochRequest(replica_id=-1, topics=(offset_for_leader_epoch.OffsetForLeaderTopic(topic=n.topic, partitions=(offset_for_leader_epoch.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=0),)),))),
    Case("delete-records", ((TOPIC, "DELETE"),), lambda n: delete_records.DeleteRecordsRequest(topics=(delete_records.DeleteRecordsTopic(name=n.topic, partitions=(delete_records.DeleteRecordsPartition(partition_index=0, offset=0),)),), timeout=SECOND)),
    Case("describe-producers", ((TOPIC, "READ"),), lambda n: describe_producers.DescribeProducersRequest(topics=(describe_producers.TopicRequest(name=n.topic, partition_indexes=(0,)),))),
    Case("describe-topic-partitions", ((TOPIC, "DESCRIBE"),), lambda n: describe_topic_partitions.DescribeTopicPartitionsRequest(topics=(describe_topic_partitions.TopicRequest(name=n.topic),), response_partition_limit=100, cursor=None)),
    Case("create-topics", ((NEW_TOPIC, "CREATE"),), lambda n: create_topics.CreateTopicsRequest(topics=(create_topics.CreatableTopic(name=n.new_topic, num_partitions=1, replication_factor=1, assignments=(), configs=()),), timeout=SECOND, validate_only=False), topic=False),
    Case("delete-topics", ((TOPIC, "DELETE"),), lambda n: delete_topics.DeleteTopicsRequest(topics=(delete_topics.DeleteTopicState(name=n.topic, topic_id=None),), timeout=SECOND)),
    Case("create-partitions", ((TOPIC, "ALTER"),), lambda n: create_partitions.CreatePartitionsRequest(topics=(create_partitions.CreatePartitionsTopic(name=n.topic, count=2, assignments=None),), timeout=SECOND, validate_only=False)),
    Case("describe-topic-configs", ((TOPIC, "DESCRIBE_CONFIGS"),), lambda n: describe_configs.DescribeConfigsRequest(resources=(describe_configs.DescribeConfigsResource(resource_type=2, resource_name=n.topic, configuration_keys=("retention.ms",)),), include_synonyms=False, include_documentation=False)),
    Case("alter-topic-configs", ((TOPIC, "ALTER_CONFIGS"),), lambda n: incremental_alter_configs.IncrementalAlterConfigsRequest(resources=(incremental_alter_configs.AlterConfigsResource(resource_type=2, resource_name=n.topic, configs=(incremental_alter_configs.AlterableConfig(name="retention.ms", config_operation=0, value="3600000"),)),), validate_only=False)),
    Case("describe-broker-configs", ((CLUSTER, "DESCRIBE_CONFIGS"),), lambda n: describe_configs.DescribeConfigsRequest(resources=(describe_configs.DescribeConfigsResource(resource_type=4, resource_name="1", configuration_keys=("log.retention.ms",)),), include_synonyms=False, include_documentation=False), topic=False),
    Case("alter-broker-configs", ((CLUSTER, "ALTER_CONFIGS"),), lambda n: incremental_alter_configs.IncrementalAlterConfigsRequest(resources=(incremental_alter_configs.AlterConfigsResource(resource_type=4, resource_name="", configs=(incremental_alter_configs.AlterableConfig(name="leader.replication.throttled.rate", config_operation=0, value="1048576"),)),), validate_only=True), topic=False),
    Case("find-group-coordinator", ((GROUP, "DESCRIBE"),), lambda n: find_coordinator.FindCoordinatorRequest(key_type=0, coordinator_keys=(n.group,)), topic=False),
    Case("find-txn-coordinator", ((TXN, "DESCRIBE"),), lambda n: find_coordinator.FindCoordinatorRequest(key_type=1, coordinator_keys=(n.txn,)), topic=False),
    Case("join-group", ((GROUP, "READ"),), lambda n: join_group.JoinGroupRequest(group_id=n.group, session_timeout=datetime.timedelta(seconds=10), rebalance_timeout=datetime.timedelta(seconds=10), member_id="", group_instance_id=None, protocol_type="consumer", protocols=(join_group.JoinGroupRequestProtocol(name="range", metadata=b""),), reason=None), topic=False),
    Case("sync-group", ((GROUP, "READ"),), lambda n: sync_group.SyncGroupRequest(group_id=n.group, generation_id=1, member_id="nobody", group_instance_id=None, protocol_type="consumer", protocol_name="range", assignments=()), topic=False),
    Case("heartbeat", ((GROUP, "READ"),), lambda n: heartbeat.HeartbeatRequest(group_id=n.group, generation_id=1, member_id="nobody", group_instance_id=None), topic=False),
    Case("leave-group", ((GROUP, "READ"),), lambda n: leave_group.LeaveGroupRequest(group_id=n.group, members=(leave_group.MemberIdentity(member_id="nobody", group_instance_id=None, reason=None),)), topic=False),
    Case("offset-commit", ((GROUP, "READ"), (TOPIC, "READ")), lambda n: offset_commit.OffsetCommitRequest(group_id=n.group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None, topics=(offset_commit.OffsetCommitRequestTopic(name=n.topic, partitions=(offset_commit.OffsetCommitRequestPartition(partition_index=0, committed_offset=0, committed_leader_epoch=-1, committed_metadata=""),)),))),
    Case("offset-fetch", ((GROUP, "DESCRIBE"), (TOPIC, "DESCRIBE")), lambda n: offset_fetch.OffsetFetchRequest(groups=(offset_fetch.OffsetFetchRequestGroup(group_id=n.group, topics=(offset_fetch.OffsetFetchRequestTopics(name=n.topic, partition_indexes=(0,)),)),), require_stable=False)),
    Case("offset-delete", ((GROUP, "DELETE"), (TOPIC, "READ")), lambda n: offset_delete.OffsetDeleteRequest(group_id=n.group, topics=(offset_delete.OffsetDeleteRequestTopic(name=n.topic, partitions=(offset_delete.OffsetDeleteRequestPartition(partition_index=0),)),))),
    Case("describe-groups", ((GROUP, "DESCRIBE"),), lambda n: describe_groups.DescribeGroupsRequest(groups=(n.group,), include_authorized_operations=False), topic=False),
    Case("delete-groups", ((GROUP, "DELETE"),), lambda n: delete_groups.DeleteGroupsRequest(groups_names=(n.group,)), topic=False),
    Case("list-groups", (), lambda n: list_groups.ListGroupsRequest(states_filter=()), topic=False),
    Case("consumer-group-heartbeat", ((GROUP, "READ"), (TOPIC, "DESCRIBE")), lambda n: cg_heartbeat.ConsumerGroupHeartbeatRequest(group_id=n.group, member_id="", member_epoch=0, instance_id=None, rack_id=None, rebalance_timeout=datetime.timedelta(seconds=10), subscribed_topic_names=(n.topic,), server_assignor=None, topic_partitions=())),
    Case("consumer-group-describe", ((GROUP, "DESCRIBE"),), lambda n: cg_describe.ConsumerGroupDescribeRequest(group_ids=(n.group,), include_authorized_operations=False), topic=False),
    Case("init-producer-id-transactional", ((TXN, "WRITE"),), lambda n: init_producer_id.InitProducerIdRequest(transactional_id=n.txn, transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1, producer_epoch=-1), topic=False),
    Case("init-producer-id-idempotent", ((CLUSTER, "IDEMPOTENT_WRITE"),), lambda n: init_producer_id.InitProducerIdRequest(transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1, producer_epoch=-1), topic=False),
    Case("add-partitions-to-txn", ((TXN, "WRITE"), (TOPIC, "WRITE")), lambda n: add_partitions.AddPartitionsToTxnRequest(v3_and_below_transactional_id=n.txn, v3_and_below_producer_id=1, v3_and_below_producer_epoch=0, v3_and_below_topics=(add_partitions.AddPartitionsToTxnTopic(name=n.topic, partitions=(0,)),))),
    Case("add-offsets-to-txn", ((TXN, "WRITE"), (GROUP, "READ")), lambda n: add_offsets.AddOffsetsToTxnRequest(transactional_id=n.txn, producer_id=1, producer_epoch=0, group_id=n.group), topic=False),
    Case("end-txn", ((TXN, "WRITE"),), lambda n: end_txn.EndTxnRequest(transactional_id=n.txn, producer_id=1, producer_epoch=0, committed=False), topic=False),
    Case("txn-offset-commit", ((TXN, "WRITE"), (GROUP, "READ"), (TOPIC, "READ")), lambda n: txn_offset_commit.TxnOffsetCommitRequest(transactional_id=n.txn, group_id=n.group, producer_id=1, producer_epoch=0, generation_id=-1, member_id="", group_instance_id=None, topics=(txn_offset_commit.TxnOffsetCommitRequestTopic(name=n.topic, partitions=(txn_offset_commit.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=0, committed_leader_epoch=-1, committed_metadata=""),)),))),
    Case("describe-transactions", ((TXN, "DESCRIBE"),), lambda n: describe_transactions.DescribeTransactionsRequest(transactional_ids=(n.txn,)), topic=False),
    Case("list-transactions", (), lambda n: list_transactions.ListTransactionsRequest(state_filters=(), producer_id_filters=()), topic=False),
    Case("write-txn-markers", ((CLUSTER, "CLUSTER_ACTION"),), lambda n: write_txn_markers.WriteTxnMarkersRequest(markers=(write_txn_markers.WritableTxnMarker(producer_id=1, producer_epoch=0, transaction_result=False, topics=(write_txn_markers.WritableTxnMarkerTopic(name=n.topic, partition_indexes=(0,)),), coordinator_epoch=0),))),
    Case("describe-acls", ((CLUSTER, "DESCRIBE"),), lambda n: describe_acls.DescribeAclsRequest(resource_type_filter=2, resource_name_filter=n.topic, pattern_type_filter=3, principal_filter=None, host_filter=None, operation=1, permission_type=1), topic=False),
    Case("create-acls", ((CLUSTER, "ALTER"),), lambda n: create_acls.CreateAclsRequest(creations=(create_acls.AclCreation(resource_type=2, resource_name=n.new_topic, resource_pattern_type=3, principal="User:somebody", host="*", operation=3, permission_type=3),)), topic=False),
    Case("delete-acls", ((CLUSTER, "ALTER"),), lambda n: delete_acls.DeleteAclsRequest(filters=(delete_acls.DeleteAclsFilter(resource_type_filter=2, resource_name_filter=n.new_topic, pattern_type_filter=3, principal_filter=None, host_filter=None, operation=1, permission_type=1),)), topic=False),
    Case("describe-cluster", ((CLUSTER, "DESCRIBE"),), lambda n: describe_cluster.DescribeClusterRequest(include_cluster_authorized_operations=True, endpoint_type=1), topic=False),
    Case("describe-log-dirs", ((CLUSTER, "DESCRIBE"),), lambda n: describe_log_dirs.DescribeLogDirsRequest(topics=(describe_log_dirs.DescribableLogDirTopic(topic=n.topic, partitions=(0,)),))),
    Case("elect-leaders", ((CLUSTER, "ALTER"),), lambda n: elect_leaders.ElectLeadersRequest(election_type=0, topic_partitions=(elect_leaders.TopicPartitions(topic=n.topic, partitions=(0,)),), timeout=SECOND)),
    Case("alter-partition-reassignments", ((CLUSTER, "ALTER"),), lambda n: alter_reassignments.AlterPartitionReassignmentsRequest(timeout=SECOND, topics=(alter_reassignments.ReassignableTopic(name=n.topic, partitions=(alter_reassignments.ReassignablePartition(partition_index=0, replicas=None),)),))),
    Case("list-partition-reassignments", ((CLUSTER, "DESCRIBE"),), lambda n: list_reassignments.ListPartitionReassignmentsRequest(timeout=SECOND, topics=None), topic=False),
    Case("describe-client-quotas", ((CLUSTER, "DESCRIBE_CONFIGS"),), lambda n: describe_quotas.DescribeClientQuotasRequest(components=(), strict=False), topic=False),
    Case("alter-client-quotas", ((CLUSTER, "ALTER_CONFIGS"),), lambda n: alter_quotas.AlterClientQuotasRequest(entries=(alter_quotas.EntryData(entity=(alter_quotas.EntityData(entity_type="user", entity_name=n.group),), ops=(alter_quotas.OpData(key="producer_byte_rate", value=1024.0, remove=False),)),), validate_only=True), topic=False),
    Case("describe-user-scram-credentials", ((CLUSTER, "DESCRIBE"),), lambda n: describe_scram.DescribeUserScramCredentialsRequest(users=(describe_scram.UserName(name="admin"),)), topic=False),
)


# -- a SCRAM-SHA-512 client over TLS ------------------------------------------------------------


class SecureConnection:
    def __init__(self, bootstrap: str, ca_file: str, user: str, password: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        context = ssl.create_default_context(cafile=ca_file)
        context.check_hostname = False
        raw = socket.create_connection((host, int(port)), timeout=TIMEOUT_S)
        self.sock = context.wrap_socket(raw)
        self._correlation = 0
        handshake = self.request(sasl_handshake.SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
        if handshake.error_code:
            raise ConnectionError(f"SaslHandshake: {handshake.error_code}")
        nonce = base64.b64encode(os.urandom(18)).decode()
        first_bare = f"n={user},r={nonce}"
        server_first = self._authenticate(f"n,,{first_bare}".encode()).decode()
        fields = dict(part.split("=", 1) for part in server_first.split(","))
        salted = hashlib.pbkdf2_hmac("sha512", password.encode(), base64.b64decode(fields["s"]), int(fields["i"]))
        without_proof = f"c={base64.b64encode(b'n,,').decode()},r={fields['r']}"
        auth_message = f"{first_bare},{server_first},{without_proof}".encode()
        client_key = hmac.new(salted, b"Client Key", "sha512").digest()
        signature = hmac.new(hashlib.sha512(client_key).digest(), auth_message, "sha512").digest()
        proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
        self._authenticate(f"{without_proof},p={proof}".encode())

    def _authenticate(self, token: bytes) -> bytes:
        answer = self.request(sasl_authenticate.SaslAuthenticateRequest(auth_bytes=token))
        if answer.error_code:
            raise ConnectionError(f"SaslAuthenticate: {answer.error_code} {answer.error_message}")
        return bytes(answer.auth_bytes)

    def request(self, body: Any) -> Any:
        self._correlation += 1
        api_key, version = int(body.__api_key__), int(body.__version__)
        self.sock.sendall(encode_request(body, self._correlation, "authorization-matrix"))
        (size,) = struct.unpack(">i", recv_exact(self.sock, 4))
        frame = memoryview(recv_exact(self.sock, size)).toreadonly()
        offset = 4 + (1 if response_header_version(api_key, version) >= 1 else 0)
        from kio.serial import entity_reader

        response, _ = entity_reader(response_schema(api_key, version))(frame, offset)
        return response

    def close(self) -> None:
        self.sock.close()


# -- running it ---------------------------------------------------------------------------------


def names(scenario: str, case: Case) -> Names:
    base = f"{scenario}.{case.name}"
    return Names(topic=f"{base}.topic", group=f"{base}.group", txn=f"{base}.txn", new_topic=f"{base}.new")


def _acl(kind: str, name: str, pattern: ResourcePatternType, principal: str, operation: str, permission: AclPermissionType) -> AclBinding:
    resource_name = "kafka-cluster" if kind == CLUSTER else name
    if kind == CLUSTER:
        pattern = ResourcePatternType.LITERAL
    return AclBinding(_RESOURCE_TYPES[kind], resource_name, pattern, principal, "*", _OPERATIONS[operation], permission)


def _resource(n: Names, kind: str) -> str:
    return {TOPIC: n.topic, NEW_TOPIC: n.new_topic, GROUP: n.group, TXN: n.txn, CLUSTER: "kafka-cluster"}[kind]


def acls_for(scenario: str, case: Case) -> list[AclBinding]:
    n = names(scenario, case)
    principal = f"User:{USERS[scenario]}"
    allow, deny = AclPermissionType.ALLOW, AclPermissionType.DENY
    out: list[AclBinding] = []
    if scenario == "allowed":
        out += [_acl(kind, _resource(n, kind), ResourcePatternType.LITERAL, principal, op, allow) for kind, op in case.needs]
    elif scenario == "prefixed":
        prefix = f"{scenario}.{case.name}."
        out += [_acl(kind, prefix, ResourcePatternType.PREFIXED, principal, op, allow) for kind, op in case.needs]
    elif scenario == "denied":
        for kind, op in case.needs:
            out.append(_acl(kind, _resource(n, kind), ResourcePatternType.LITERAL, principal, "ALL", allow))
            out.append(_acl(kind, _resource(n, kind), ResourcePatternType.LITERAL, principal, op, deny))
    return out


def setup(bootstrap: str) -> None:
    """Through the PLAINTEXT super-user listener: SCRAM users, the cases' topics and ACLs, and the
    coordinators' internal topics in place (so no answer depends on their creation)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    upserts = [UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), PASSWORD.encode()) for user in USERS.values()]
    for future in admin.alter_user_scram_credentials(upserts).values():
        future.result(TIMEOUT_S)
    topics = [NewTopic(names(s, c).topic, 1, 1) for s in SCENARIOS for c in CASES if c.topic]
    for future in admin.create_topics(topics, operation_timeout=TIMEOUT_S).values():
        future.result(TIMEOUT_S)
    bindings = list(dict.fromkeys(acl for s in SCENARIOS for c in CASES for acl in acls_for(s, c)))
    for future in admin.create_acls(bindings).values():
        future.result(TIMEOUT_S)
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY)
    deadline = time.monotonic() + TIMEOUT_S
    # CreateAcls answers once the controller has the ACLs; the broker applies them a moment later.
    while len(admin.describe_acls(everything).result(TIMEOUT_S)) < len(bindings):
        if time.monotonic() > deadline:
            raise TimeoutError("the broker never listed every ACL")
        time.sleep(0.1)
    for key_type in (0, 1):
        while request(bootstrap, find_coordinator.FindCoordinatorRequest(key_type=key_type, coordinator_keys=("matrix-setup",))).coordinators[0].error_code:
            if time.monotonic() > deadline:
                raise TimeoutError("no coordinator")
            time.sleep(0.2)


def error_codes(response: Any) -> tuple[tuple[str, int], ...]:
    """Every error code of the response with the path of fields to it, in order."""
    found: list[tuple[str, int]] = []

    def walk(value: Any, path: str) -> None:
        if dataclasses.is_dataclass(value):
            for f in dataclasses.fields(value):
                item = getattr(value, f.name)
                if f.name.endswith("error_code"):
                    found.append((path or ".", int(item)))
                elif f.name == "cluster_authorized_operations" or f.name == "topic_authorized_operations":
                    found.append((f"{path}.{f.name}", int(item)))
                else:
                    walk(item, f"{path}.{f.name}" if path else f.name)
        elif isinstance(value, tuple):
            for item in value:
                walk(item, path)

    walk(response, "")
    return tuple(found)


def run(secure_bootstrap: str, ca_file: str) -> dict[tuple[str, str], tuple[tuple[str, int], ...] | str]:
    """Every case as every principal: its error codes, or how its connection ended."""
    results: dict[tuple[str, str], tuple[tuple[str, int], ...] | str] = {}
    for scenario in SCENARIOS:
        connection = SecureConnection(secure_bootstrap, ca_file, USERS[scenario], PASSWORD)
        try:
            for case in CASES:
                try:
                    results[(scenario, case.name)] = _settled(connection, case.build(names(scenario, case)))
                except (ConnectionError, OSError) as e:
                    results[(scenario, case.name)] = f"closed: {type(e).__name__}"
                    connection.close()
                    connection = SecureConnection(secure_bootstrap, ca_file, USERS[scenario], PASSWORD)
        finally:
            connection.close()
    return results


# A coordinator still loading its partitions: a client retries, and so does the matrix, so that
# no answer depends on how long a broker takes to load.
_LOADING = {14, 15}


def _settled(connection: SecureConnection, body: Any) -> tuple[tuple[str, int], ...]:
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        codes = error_codes(connection.request(body))
        if not _LOADING.intersection(code for _, code in codes) or time.monotonic() > deadline:
            return codes
        time.sleep(0.2)


def differences(kafka: dict[Any, Any], kbroker: dict[Any, Any]) -> Iterator[str]:
    for key in kafka:
        if kafka[key] != kbroker.get(key):
            yield f"{key[0]:9} {key[1]:32} kafka={kafka[key]} kbroker={kbroker.get(key)}"


# -- Apache Kafka 4.4's answers ------------------------------------------------------------------

RECORDED = Path(__file__).with_name("authorization_matrix_kafka44.json")
JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"


def broker_properties(keystore: Path) -> dict[str, str]:
    """The security configs both brokers run the matrix with (listeners apart)."""
    return {
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": JAAS,
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(keystore),
        "ssl.keystore.password": "store-pw",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": SUPER_USERS,
        "allow.everyone.if.no.acl.found": "false",
        "auto.create.topics.enable": "true",
    }


def certificates(directory: Path) -> tuple[Path, Path]:
    """(the CA file clients trust, the brokers' PKCS12 keystore), made fresh."""
    ca = TestCA()
    return ca.write_ca(directory / "ca.pem"), ca.write_pkcs12_keystore(ca.issue("localhost"), directory / "server.p12", "store-pw")


def run_against_kafka(directory: Path) -> dict[tuple[str, str], Any]:
    """Start a one-node Apache Kafka 4.4 (benchmarks/apache_kafka.py) configured as kbroker is in
    the test, and run the matrix against it."""
    from benchmarks.apache_kafka import KafkaReferenceCluster, fetch_jars

    ca_file, keystore = certificates(directory)
    cluster, secure_port = KafkaReferenceCluster.one_node_with_listener(directory / "kafka", fetch_jars(), "SASL_SSL", broker_properties(keystore))
    node = cluster.nodes[1]
    cluster.start()
    try:
        setup(node.bootstrap)
        return run(f"127.0.0.1:{secure_port}", str(ca_file))
    finally:
        cluster.close()


def to_json(results: dict[tuple[str, str], Any]) -> dict[str, Any]:
    return {f"{scenario} {case}": value if isinstance(value, str) else [list(pair) for pair in value] for (scenario, case), value in results.items()}


def from_json(recorded: dict[str, Any]) -> dict[tuple[str, str], Any]:
    return {tuple(key.split(" ", 1)): value if isinstance(value, str) else tuple(tuple(pair) for pair in value) for key, value in recorded.items()}  # type: ignore[misc]


def main() -> None:
    """`python -m tests.integration.authorization_matrix [--record]`: run the matrix against Apache
    Kafka 4.4 and print where the recorded answers differ, or (--record) record them anew."""
    import argparse
    import json
    import tempfile

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        kafka = run_against_kafka(Path(directory))
    if args.record:
        RECORDED.write_text(json.dumps(to_json(kafka), indent=1, sort_keys=True) + "\n")
        print(f"recorded {len(kafka)} answers in {RECORDED}")
        return
    recorded = from_json(json.loads(RECORDED.read_text()))
    changed = list(differences(recorded, kafka))
    print("\n".join(changed) or f"Kafka gives the {len(kafka)} recorded answers")


if __name__ == "__main__":
    main()
