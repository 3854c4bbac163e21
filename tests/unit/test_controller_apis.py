"""ControllerApis: every version of the controller listener's own APIs, on an in-memory quorum;
NOT_CONTROLLER where the ControllerChannel looks for it while this controller is not active."""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.controller.controller_apis import CONTROLLER_CLUSTER_OPERATIONS, CONTROLLER_ENDPOINT_TYPE, ControllerApis
from broker.controller.quorum_controller import QuorumController
from broker.controller_channel import is_not_controller
from broker.metadata.metadata_records import FeatureLevelRecord
from protocol.api_keys import CONTROLLER_APIS, ApiKey, request_schema
from protocol.entities import build, nested
from protocol.headers import RequestHeader
from protocol.messages import encode_body
from tests.unit.quorum_controller_fakes import CLUSTER_ID, Clock, FakeQuorum, Node, run, settle

RAFT_APIS = {
    ApiKey.VOTE,
    ApiKey.BEGIN_QUORUM_EPOCH,
    ApiKey.END_QUORUM_EPOCH,
    ApiKey.DESCRIBE_QUORUM,
    ApiKey.FETCH,
    ApiKey.FETCH_SNAPSHOT,
    ApiKey.ADD_RAFT_VOTER,
    ApiKey.REMOVE_RAFT_VOTER,
    ApiKey.UPDATE_RAFT_VOTER,
}


@dataclass(frozen=True)
class Ctx:
    version: int
    # A client's header: (Incremental)AlterConfigs ask whether a broker forwarded the request.
    header: RequestHeader = RequestHeader(0, 0, 0, "adminclient-1", 0)


def versions(key: ApiKey) -> range:
    r = CONTROLLER_APIS[key]
    return range(r.min_version, r.max_version + 1)


def request(key: ApiKey, version: int, **fields: Any) -> Any:
    schema = request_schema(key, version)
    return build(schema, **fields)


def create_topics(version: int, *names: str) -> Any:
    schema = request_schema(ApiKey.CREATE_TOPICS, version)
    topic_cls = nested(schema, "CreatableTopic")
    topics = tuple(build(topic_cls, name=n, num_partitions=1, replication_factor=1, assignments=(), configs=()) for n in names)
    return build(schema, topics=topics, timeout=datetime.timedelta(seconds=5), validate_only=False)


def delete_topics(version: int, *names: str) -> Any:
    schema = request_schema(ApiKey.DELETE_TOPICS, version)
    if version >= 6:
        state_cls = nested(schema, "DeleteTopicState")
        return build(schema, topics=tuple(build(state_cls, name=n, topic_id=None) for n in names), timeout=datetime.timedelta(seconds=5))
    return build(schema, topic_names=names, timeout=datetime.timedelta(seconds=5))


def create_partitions(version: int, *names: str) -> Any:
    schema = request_schema(ApiKey.CREATE_PARTITIONS, version)
    topic_cls = nested(schema, "CreatePartitionsTopic")
    return build(schema, topics=tuple(build(topic_cls, name=n, count=2, assignments=None) for n in names), timeout=datetime.timedelta(seconds=5), validate_only=False)


def alter_configs(key: ApiKey, version: int, *names: str) -> Any:
    schema = request_schema(key, version)
    resource_cls = nested(schema, "AlterConfigsResource")
    config_cls = nested(schema, "AlterableConfig")
    configs = (build(config_cls, name="retention.ms", value="1000", config_operation=0),)
    return build(schema, resources=tuple(build(resource_cls, resource_type=2, resource_name=n, configs=configs) for n in names), validate_only=False)


def broker_registration(version: int, broker_id: int, cluster_id: str = CLUSTER_ID) -> Any:
    schema = request_schema(ApiKey.BROKER_REGISTRATION, version)
    listener_cls = nested(schema, "Listener")
    feature_cls = nested(schema, "Feature")
    return build(
        schema,
        broker_id=broker_id,
        cluster_id=cluster_id,
        incarnation_id=uuid.UUID(int=broker_id + 1),
        listeners=(build(listener_cls, name="PLAINTEXT", host="127.0.0.1", port=9092 + broker_id, security_protocol=0),),
        features=(
            build(feature_cls, name="metadata.version", min_supported_version=7, max_supported_version=33),
            build(feature_cls, name="eligible.leader.replicas.version", min_supported_version=0, max_supported_version=1),
            build(feature_cls, name="group.version", min_supported_version=0, max_supported_version=1),
            build(feature_cls, name="share.version", min_supported_version=0, max_supported_version=2),
            build(feature_cls, name="streams.version", min_supported_version=0, max_supported_version=1),
            build(feature_cls, name="transaction.version", min_supported_version=0, max_supported_version=2),
        ),
        rack=None,
        is_migrating_zk_broker=False,
        log_dirs=(uuid.UUID(int=0x1000 + broker_id),),
        previous_broker_epoch=-1,
    )


def heartbeat(version: int, broker_id: int, epoch: int, offset: int, *, shut_down: bool = False) -> Any:
    return request(
        ApiKey.BROKER_HEARTBEAT,
        version,
        broker_id=broker_id,
        broker_epoch=epoch,
        current_metadata_offset=offset,
        want_fence=False,
        want_shut_down=shut_down,
        offline_log_dirs=(),
    )


def every_write() -> list[Any]:
    out: list[Any] = []
    out += [create_topics(v, "a", "b") for v in versions(ApiKey.CREATE_TOPICS)]
    out += [delete_topics(v, "a", "b") for v in versions(ApiKey.DELETE_TOPICS)]
    out += [create_partitions(v, "a") for v in versions(ApiKey.CREATE_PARTITIONS)]
    out += [alter_configs(ApiKey.ALTER_CONFIGS, v, "a") for v in versions(ApiKey.ALTER_CONFIGS)]
    out += [alter_configs(ApiKey.INCREMENTAL_ALTER_CONFIGS, v, "a") for v in versions(ApiKey.INCREMENTAL_ALTER_CONFIGS)]
    out += [broker_registration(v, 4) for v in versions(ApiKey.BROKER_REGISTRATION)]
    out += [heartbeat(v, 4, 10, 10) for v in versions(ApiKey.BROKER_HEARTBEAT)]
    out += [request(ApiKey.UNREGISTER_BROKER, 0, broker_id=4)]
    out += [request(ApiKey.UNREGISTER_CONTROLLER, 0, controller_id=4)]
    out += [request(ApiKey.ALLOCATE_PRODUCER_IDS, 0, broker_id=4, broker_epoch=10)]
    return out


def setup(*node_ids: int) -> tuple[FakeQuorum, dict[int, Node], dict[int, ControllerApis]]:
    quorum = FakeQuorum()
    quorum.auto_commit = True
    clock = Clock()
    nodes = {n: Node(quorum, n, clock) for n in node_ids}
    apis = {n: ControllerApis(node.controller, node.config, CLUSTER_ID, node.raft) for n, node in nodes.items()}
    return quorum, nodes, apis


UNAUTHORIZED_APIS = {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}


def test_the_table_is_the_controller_listener_s_minus_raft_api_versions_sasl_and_envelope() -> None:
    _, _, apis = setup(1)
    assert set(apis[1].handlers()) == set(CONTROLLER_APIS) - RAFT_APIS - UNAUTHORIZED_APIS - {ApiKey.ENVELOPE}


def test_every_controller_api_but_api_versions_and_sasl_has_its_cluster_operation() -> None:
    """As Kafka's ControllerApis: nothing reaches a handler unauthorized once an authorizer is on."""
    assert set(CONTROLLER_CLUSTER_OPERATIONS) == set(CONTROLLER_APIS) - UNAUTHORIZED_APIS


@pytest.mark.parametrize("body", every_write(), ids=lambda b: f"{type(b).__module__.split('.')[2]}-v{b.__version__}")
def test_every_write_answers_not_controller_while_inactive(body: Any) -> None:
    async def scenario() -> None:
        quorum, _, apis = setup(1, 2)
        quorum.elect(2)
        assert not apis[1].is_active
        response = await apis[1].handle(body)
        assert type(response).__api_key__ == body.__api_key__ and response.__version__ == body.__version__
        assert is_not_controller(response)
        encode_body(response)
        via_listener = await apis[1].handlers()[ApiKey(int(body.__api_key__))](Ctx(int(body.__version__)), body)  # type: ignore[arg-type]
        assert via_listener == response

    run(scenario())


@pytest.mark.parametrize("version", [0, 1])
def test_registration_without_log_dirs_is_refused_at_the_current_metadata_version(version: int) -> None:
    async def scenario() -> None:
        quorum, _, apis = setup(1)
        quorum.elect(1)
        refused = await apis[1].handle(broker_registration(version, 5))
        assert refused.error_code == ErrorCode.invalid_registration
        encode_body(refused)

    run(scenario())


@pytest.mark.parametrize("version", range(2, CONTROLLER_APIS[ApiKey.BROKER_REGISTRATION].max_version + 1))
def test_registration_then_heartbeats_unfence(version: int) -> None:
    async def scenario() -> None:
        quorum, nodes, apis = setup(1)
        quorum.elect(1)
        registered = await apis[1].handle(broker_registration(version, 5))
        assert registered.error_code == ErrorCode.none and registered.broker_epoch == quorum.committed[-1].base_offset
        encode_body(registered)
        epoch = int(registered.broker_epoch)
        for hb_version in versions(ApiKey.BROKER_HEARTBEAT):
            behind = await apis[1].handle(heartbeat(hb_version, 5, epoch, epoch - 1))
            assert behind.error_code == ErrorCode.none and behind.is_fenced and not behind.is_caught_up
            encode_body(behind)
        caught_up = await apis[1].handle(heartbeat(1, 5, epoch, epoch))
        assert not caught_up.is_fenced and caught_up.is_caught_up
        assert not nodes[1].loader.image.brokers[5].fenced
        stale = await apis[1].handle(heartbeat(0, 5, epoch + 1, epoch))
        assert stale.error_code == ErrorCode.stale_broker_epoch

    run(scenario())


def test_registration_errors_are_answered_in_the_response() -> None:
    async def scenario() -> None:
        quorum, _, apis = setup(1)
        quorum.elect(1)
        refused = await apis[1].handle(broker_registration(4, 5, cluster_id="another"))
        assert refused.error_code == ErrorCode.inconsistent_cluster_id and refused.broker_epoch == -1

    run(scenario())


def test_forwarded_admin_writes_and_producer_ids() -> None:
    async def scenario() -> None:
        quorum, nodes, apis = setup(1)
        quorum.elect(1)
        epoch = int((await apis[1].handle(broker_registration(4, 1))).broker_epoch)
        await apis[1].handle(heartbeat(1, 1, epoch, quorum.committed[-1].last_offset))
        created = await apis[1].handle(create_topics(7, "events"))
        [result] = created.topics
        assert result.error_code == ErrorCode.none and result.num_partitions == 1
        assert "events" in nodes[1].loader.image.topics
        grown = await apis[1].handle(create_partitions(3, "events"))
        assert grown.results[0].error_code == ErrorCode.none
        altered = await apis[1].handle(alter_configs(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, "events"))
        assert altered.responses[0].error_code == ErrorCode.none
        assert nodes[1].loader.image.topic_config("events") == {"retention.ms": "1000"}
        deleted = await apis[1].handle(delete_topics(6, "events"))
        assert deleted.responses[0].error_code == ErrorCode.none and "events" not in nodes[1].loader.image.topics
        block = await apis[1].handle(request(ApiKey.ALLOCATE_PRODUCER_IDS, 0, broker_id=1, broker_epoch=epoch))
        assert (block.error_code, block.producer_id_start, block.producer_id_len) == (ErrorCode.none, 0, 1000)
        stale = await apis[1].handle(request(ApiKey.ALLOCATE_PRODUCER_IDS, 0, broker_id=1, broker_epoch=epoch + 1))
        assert stale.error_code == ErrorCode.stale_broker_epoch
        gone = await apis[1].handle(request(ApiKey.UNREGISTER_BROKER, 0, broker_id=1))
        assert gone.error_code == ErrorCode.none and 1 not in nodes[1].loader.image.brokers
        for response in (created, grown, altered, deleted, block, gone):
            encode_body(response)

    run(scenario())


def controller_registration(controller_id: int, listener: str = "CONTROLLER", max_metadata_version: int = 33) -> Any:
    schema = request_schema(ApiKey.CONTROLLER_REGISTRATION, 0)
    listener_cls = nested(schema, "Listener")
    feature_cls = nested(schema, "Feature")
    return build(
        schema,
        controller_id=controller_id,
        incarnation_id=uuid.UUID(int=0x2000 + controller_id),
        zk_migration_ready=True,
        listeners=(build(listener_cls, name=listener, host="127.0.0.1", port=19092 + controller_id, security_protocol=0),),
        features=(build(feature_cls, name="metadata.version", min_supported_version=7, max_supported_version=max_metadata_version),),
    )


def test_controller_registration_writes_the_controller_s_registration() -> None:
    async def scenario() -> None:
        quorum, nodes, apis = setup(1, 2)
        quorum.elect(2)
        response = await apis[2].handle(controller_registration(1))
        assert (response.error_code, response.error_message) == (ErrorCode.none, None)
        encode_body(response)
        registered = nodes[1].loader.image.controllers[1]
        # As Kafka's ClusterControlManager.registerController: ZkMigrationReady is never kept.
        assert registered.incarnation_id == uuid.UUID(int=0x2001) and not registered.zk_migration_ready
        assert [(e.name, e.host, e.port) for e in registered.endpoints] == [("CONTROLLER", "127.0.0.1", 19093)]
        assert registered.feature_range("metadata.version") == (7, 33) and registered.feature_range("group.version") == (0, 0)
        assert is_not_controller(await apis[1].handle(controller_registration(1)))

    run(scenario())


def test_controller_registration_needs_metadata_version_3_7() -> None:
    async def scenario() -> None:
        quorum = FakeQuorum()
        quorum.auto_commit = True
        node = Node(quorum, 1, Clock())
        # A cluster formatted at 3.6-IV2 (level 14), the last level before KIP-919.
        bootstrap = [FeatureLevelRecord(name="metadata.version", feature_level=14)]
        node.controller = QuorumController(node.config, node.raft, lambda: node.loader.image, CLUSTER_ID, bootstrap=bootstrap)
        apis = ControllerApis(node.controller, node.config, CLUSTER_ID, node.raft)
        quorum.elect(1)
        response = await apis.handle(controller_registration(1))
        assert response.error_code == ErrorCode.unsupported_version
        assert response.error_message == "The current MetadataVersion is too old to support controller registrations."
        describe = request(ApiKey.DESCRIBE_CLUSTER, 1, include_cluster_authorized_operations=False, endpoint_type=CONTROLLER_ENDPOINT_TYPE)
        answer = await apis.handlers()[ApiKey.DESCRIBE_CLUSTER](Ctx(1), describe)  # type: ignore[arg-type]
        assert answer.error_code == ErrorCode.unsupported_version
        assert answer.error_message == "Direct-to-controller communication is not supported with the current MetadataVersion."

    run(scenario())


@dataclass(frozen=True)
class Client:
    listener: str


@dataclass(frozen=True)
class ListenerCtx:
    version: int
    client: Client


def test_describe_cluster_names_the_registered_controllers() -> None:
    async def scenario() -> None:
        quorum, _, apis = setup(1, 2)
        quorum.elect(2)
        await settle()
        handler = apis[1].handlers()[ApiKey.DESCRIBE_CLUSTER]
        body = request(ApiKey.DESCRIBE_CLUSTER, 1, include_cluster_authorized_operations=False, endpoint_type=CONTROLLER_ENDPOINT_TYPE)
        # Before any controller registered: none listed, and the leader with them (-1).
        response = await handler(Ctx(1), body)  # type: ignore[arg-type]
        assert (response.error_code, response.brokers, response.controller_id) == (ErrorCode.none, (), -1)
        for controller_id in (3, 1, 2):
            assert (await apis[2].handle(controller_registration(controller_id))).error_code == ErrorCode.none
        # Controller 4 has no endpoint on the listener asked on: Kafka leaves it out.
        assert (await apis[2].handle(controller_registration(4, listener="OTHER"))).error_code == ErrorCode.none
        response = await handler(ListenerCtx(1, Client("CONTROLLER")), body)  # type: ignore[arg-type]
        assert response.error_code == ErrorCode.none and response.endpoint_type == CONTROLLER_ENDPOINT_TYPE
        assert response.cluster_id == CLUSTER_ID and response.controller_id == 2
        assert [(b.broker_id, b.host, b.port, b.rack) for b in response.brokers] == [
            (1, "127.0.0.1", 19093, None),
            (2, "127.0.0.1", 19094, None),
            (3, "127.0.0.1", 19095, None),
        ]
        encode_body(response)
        other = await handler(ListenerCtx(1, Client("OTHER")), body)  # type: ignore[arg-type]
        assert [b.broker_id for b in other.brokers] == [4] and other.controller_id == -1
        quorum.resign()
        assert (await handler(Ctx(1), body)).controller_id == -1  # type: ignore[arg-type]
        as_broker = request(ApiKey.DESCRIBE_CLUSTER, 1, include_cluster_authorized_operations=False, endpoint_type=1)
        assert (await handler(Ctx(1), as_broker)).error_code == ErrorCode.mismatched_endpoint_type  # type: ignore[arg-type]
        unknown = request(ApiKey.DESCRIBE_CLUSTER, 1, include_cluster_authorized_operations=False, endpoint_type=9)
        assert (await handler(Ctx(1), unknown)).error_code == ErrorCode.unsupported_endpoint_type  # type: ignore[arg-type]
        v0 = request(ApiKey.DESCRIBE_CLUSTER, 0, include_cluster_authorized_operations=False)
        answer = await handler(Ctx(0), v0)  # type: ignore[arg-type]
        assert answer.error_code == ErrorCode.invalid_request
        encode_body(answer)

    run(scenario())
