"""KIP-1331's StreamsGroupHeartbeat v1, StreamsGroupDescribe v1 and StreamsGroupTopologyDescriptionUpdate
v0, which kio 0.6.5 lacks (protocol/schema/): their codecs (hypothesis round trips, bytes as a Kafka
4.4 node encoded them), and what they change in the handlers, each answer as a Kafka 4.4 node with
its defaults (no topology description plugin) gave it to the same request."""

from __future__ import annotations

import dataclasses
import datetime
import types
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.streams_group_heartbeat.v0 import request as heartbeat_v0
from kio.static.primitive import i8, i16, i32

from broker.auth_helper import AuthHelper
from broker.group.group_coordinator_shard import GroupCoordinatorShard
from broker.group.group_metadata_manager import GroupConfig
from broker.handlers.streams_groups import StreamsGroupDescribeHandler, StreamsGroupHeartbeatHandler, StreamsGroupTopologyDescriptionUpdateHandler
from broker.kafka_apis import RequestContext
from broker.metadata.metadata_delta import apply_records
from broker.metadata.metadata_image import EMPTY_IMAGE
from broker.metadata.metadata_records import FeatureLevelRecord
from broker.network import ClientInfo
from protocol.api_keys import SUPPORTED_APIS, ApiKey, request_schema, response_schema
from protocol.headers import RequestHeader
from protocol.messages import encode_body
from protocol.schema.streams_group_describe.v1 import request as describe_v1
from protocol.schema.streams_group_describe.v1 import response as describe_response_v1
from protocol.schema.streams_group_heartbeat.v1 import request as heartbeat_v1
from protocol.schema.streams_group_heartbeat.v1 import response as heartbeat_response_v1
from protocol.schema.streams_group_topology_description_update.v0 import request as topology_update_v0
from protocol.schema.streams_group_topology_description_update.v0 import response as topology_update_response_v0
from tests.unit.test_kafka44_schemas import decode, encode

GROUP = "app"
# Whole requests and responses, nested four deep: drawing one is slow on a busy machine.
LARGE_ENTITIES = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]
V1_ENTITIES = (
    heartbeat_v1.StreamsGroupHeartbeatRequest,
    heartbeat_response_v1.StreamsGroupHeartbeatResponse,
    describe_v1.StreamsGroupDescribeRequest,
    describe_response_v1.StreamsGroupDescribeResponse,
)
TOPOLOGY_UPDATE_ENTITIES = (topology_update_v0.StreamsGroupTopologyDescriptionUpdateRequest, topology_update_response_v0.StreamsGroupTopologyDescriptionUpdateResponse)
# What a Kafka 4.4.0 node answered (the body after the response header), streams.version 1:
# a v1 heartbeat with an empty member id (INVALID_REQUEST, AcceptableRecoveryLag -1, an empty
# Status array)...
KAFKA_44_HEARTBEAT_INVALID = bytes.fromhex(
    "00000000" "002a" "19" + b"MemberId can't be empty.".hex() + "01" "00000000" "00000000" "00000000" "ffffffffffffffff" "01" "00" "00" "00" "00" "00000000" "00" "00"
)
# ... and a v1 describe of ("nobody", "") with IncludeTopologyDescription: the empty id first
# (INVALID_GROUP_ID, no message), then GROUP_ID_NOT_FOUND; status 0 and no assignor for both.
KAFKA_44_DESCRIBE_ERRORS = bytes.fromhex(
    "00000000" "03"
    "0018" "00" "01" "01" "00000000" "00000000" "ff" "01" "80000000" "ff" "00" "00" "00"
    "0045" "18" + b"Group nobody not found.".hex() + "07" + b"nobody".hex() + "01" "00000000" "00000000" "ff" "01" "80000000" "ff" "00" "00" "00"
    "00"
)


@pytest.mark.parametrize("api_key", [ApiKey.STREAMS_GROUP_HEARTBEAT, ApiKey.STREAMS_GROUP_DESCRIBE])
def test_v1_is_ours_and_v0_kios(api_key: ApiKey) -> None:
    assert (SUPPORTED_APIS[api_key].min_version, SUPPORTED_APIS[api_key].max_version) == (0, 1)
    for schema in (request_schema(api_key, 1), response_schema(api_key, 1)):
        assert schema.__module__.startswith("protocol.schema.")
        assert (int(schema.__api_key__), int(schema.__version__), schema.__flexible__) == (api_key, 1, True)
    assert request_schema(api_key, 0).__module__.startswith("kio.schema.")


@pytest.mark.parametrize("schema", V1_ENTITIES + TOPOLOGY_UPDATE_ENTITIES, ids=lambda s: s.__name__)
@settings(max_examples=40, deadline=None, suppress_health_check=LARGE_ENTITIES)
@given(data=st.data())
def test_entities_round_trip(schema: type, data: st.DataObject) -> None:
    entity = data.draw(st.from_type(schema))
    assert decode(schema, encode(entity)) == entity


@settings(max_examples=40, deadline=None, suppress_health_check=LARGE_ENTITIES)
@given(st.from_type(request_schema(ApiKey.STREAMS_GROUP_HEARTBEAT, 0)))
def test_heartbeat_request_v1_is_v0_on_the_wire(v0: Any) -> None:
    """Kafka 4.4's spec: v1 adds no request field, only the answer's."""
    assert encode(heartbeat_v1.StreamsGroupHeartbeatRequest(**{f.name: getattr(v0, f.name) for f in dataclasses.fields(v0)})) == encode(v0)


def test_v1_defaults_are_kafka_44s() -> None:
    assert describe_v1.StreamsGroupDescribeRequest(group_ids=(), include_authorized_operations=False).include_topology_description is False
    described = describe_response_v1.DescribedGroup(error_code=ErrorCode.none, group_id="g", group_state="", group_epoch=i32(0), assignment_epoch=i32(0), members=())
    assert (described.topology_description, described.topology_description_status, described.assignor_name) == (None, 0, None)


# -- the handlers ----------------------------------------------------------------------------------------


class Coordinator:
    """The group coordinator's part the handlers use, over one real shard whose writes always succeed."""

    def __init__(self) -> None:
        self.shard = GroupCoordinatorShard(GroupConfig(), offset_metadata_max_bytes=4096, offsets_retention_ms=7 * 86_400_000)

    def shard_for(self, group_id: str) -> GroupCoordinatorShard:
        return self.shard

    def execute(self, group_id: str, result: Any, before: Any) -> int:
        return ErrorCode.none

    def create_streams_internal_topics(self, topics: Any, timeout_ms: int) -> None:
        pass


def metadata(streams_version: int) -> Any:
    records = [FeatureLevelRecord(name="metadata.version", feature_level=33)]
    if streams_version:
        records.append(FeatureLevelRecord(name="streams.version", feature_level=streams_version))
    return types.SimpleNamespace(image=apply_records(EMPTY_IMAGE, records))


def context(api_key: ApiKey, version: int) -> RequestContext:
    return RequestContext(RequestHeader(api_key, version, 7, "test", 0), ClientInfo("c", "test", "127.0.0.1:5000"))


def heartbeat_request(version: int, member_id: str, epoch: int, join: bool = False) -> Any:
    module = heartbeat_v1 if version else heartbeat_v0
    topology = None
    if join:
        changelog = module.TopicInfo(name=f"{GROUP}-store-changelog", partitions=i32(0), replication_factor=i16(0), topic_configs=())
        sub = module.Subtopology(
            subtopology_id="0", source_topics=("input",), state_changelog_topics=(changelog,), repartition_source_topics=(), copartition_groups=()
        )
        topology = module.Topology(epoch=i32(0), subtopologies=(sub,))
    return module.StreamsGroupHeartbeatRequest(
        group_id=GROUP,
        member_id=member_id,
        member_epoch=i32(epoch),
        endpoint_information_epoch=i32(0),
        rebalance_timeout=datetime.timedelta(seconds=30) if join else datetime.timedelta(milliseconds=-1),
        topology=topology,
        active_tasks=() if join else None,
        standby_tasks=() if join else None,
        warmup_tasks=() if join else None,
        process_id="p1" if join else None,
        client_tags=() if join else None,
        task_offsets=None,
        task_end_offsets=None,
    )


def test_heartbeat_v1_carries_the_recovery_lag_and_never_asks_for_a_description() -> None:
    coordinator = Coordinator()
    handler = StreamsGroupHeartbeatHandler(coordinator, metadata(1))  # type: ignore[arg-type]
    member = str(uuid.uuid4())
    joined = handler(context(ApiKey.STREAMS_GROUP_HEARTBEAT, 1), heartbeat_request(1, member, 0, join=True))
    assert (joined.error_code, joined.member_id, joined.acceptable_recovery_lag, joined.topology_description_required) == (ErrorCode.none, member, 10000, False)
    # v0's AcceptableRecoveryLagLegacy is 0, as Kafka 4.4 leaves it.
    other = handler(context(ApiKey.STREAMS_GROUP_HEARTBEAT, 0), heartbeat_request(0, str(uuid.uuid4()), 0, join=True))
    assert (other.error_code, other.acceptable_recovery_lag) == (ErrorCode.none, 0)
    # A leave (streamsGroupLeave) and an error are answered with the field's default, -1.
    left = handler(context(ApiKey.STREAMS_GROUP_HEARTBEAT, 1), heartbeat_request(1, member, -1))
    assert (left.error_code, left.member_epoch, left.acceptable_recovery_lag, left.status) == (ErrorCode.none, -1, -1, ())
    invalid = handler(context(ApiKey.STREAMS_GROUP_HEARTBEAT, 1), heartbeat_request(1, "", 0, join=True))
    assert encode_body(invalid) == KAFKA_44_HEARTBEAT_INVALID


@pytest.mark.parametrize("version", [0, 1])
def test_heartbeat_below_streams_version_1_is_unsupported(version: int) -> None:
    handler = StreamsGroupHeartbeatHandler(Coordinator(), metadata(0))  # type: ignore[arg-type]
    refused = handler(context(ApiKey.STREAMS_GROUP_HEARTBEAT, version), heartbeat_request(version, str(uuid.uuid4()), 0, join=True))
    assert (refused.error_code, refused.error_message, refused.member_id, refused.status, refused.acceptable_recovery_lag) == (
        ErrorCode.unsupported_version,
        None,
        "",
        (),
        -1 if version else 0,
    )


def describe(handler: StreamsGroupDescribeHandler, version: int, *group_ids: str, include: bool = False) -> Any:
    schema = request_schema(ApiKey.STREAMS_GROUP_DESCRIBE, version)
    fields: dict[str, Any] = {"group_ids": group_ids, "include_authorized_operations": False}
    if version:
        fields["include_topology_description"] = include
    return handler(context(ApiKey.STREAMS_GROUP_DESCRIBE, version), schema(**fields))


def test_describe_v1_says_no_description_is_stored_and_names_the_assignor() -> None:
    coordinator = Coordinator()
    StreamsGroupHeartbeatHandler(coordinator, metadata(1))(context(ApiKey.STREAMS_GROUP_HEARTBEAT, 1), heartbeat_request(1, "a", 0, join=True))  # type: ignore[arg-type]
    handler = StreamsGroupDescribeHandler(coordinator, metadata(1))  # type: ignore[arg-type]
    for include, status in ((False, 0), (True, 1)):
        [group] = describe(handler, 1, GROUP, include=include).groups
        assert (group.error_code, group.group_state, group.topology_description, group.topology_description_status, group.assignor_name) == (
            ErrorCode.none,
            "NotReady",
            None,
            status,
            "sticky",
        )
    [v0] = describe(handler, 0, GROUP).groups
    assert v0.error_code == ErrorCode.none and not hasattr(v0, "assignor_name")
    assert encode_body(describe(handler, 1, "nobody", "", include=True)) == KAFKA_44_DESCRIBE_ERRORS


@pytest.mark.parametrize("version", [0, 1])
def test_describe_below_streams_version_1_is_unsupported_in_request_order(version: int) -> None:
    answer = describe(StreamsGroupDescribeHandler(Coordinator(), metadata(0)), version, "b", "", "a", include=True)  # type: ignore[arg-type]
    assert [(g.group_id, g.error_code, getattr(g, "topology_description_status", 0), getattr(g, "assignor_name", None)) for g in answer.groups] == [
        ("b", ErrorCode.unsupported_version, 0, None),
        ("", ErrorCode.unsupported_version, 0, None),
        ("a", ErrorCode.unsupported_version, 0, None),
    ]


# -- StreamsGroupTopologyDescriptionUpdate v0 ----------------------------------------------------------

# A push as kafka-clients 4.4's StreamsGroupTopologyDescriptionUpdateRequestData serializes it
# (MessageUtil.toByteBufferAccessor at v0): a source and a sink in subtopology "0", and a global
# store fed by a source and a processor.
KAFKA_44_TOPOLOGY_UPDATE_REQUEST = bytes.fromhex(
    "04" + b"app".hex() + "03" + b"m1".hex() + "00000000"
    "02" "02" + b"0".hex() + "03"
    "1a" + b"KSTREAM-SOURCE-0000000000".hex() + "01" "02" "03" + b"in".hex() + "00" "01" "02" "18" + b"KSTREAM-SINK-0000000001".hex() + "00"
    "18" + b"KSTREAM-SINK-0000000001".hex() + "03" "01" "04" + b"out".hex() + "01" "01" "00" "00"
    "02"
    "1a" + b"KSTREAM-SOURCE-0000000002".hex() + "01" "02" "07" + b"global".hex() + "00" "01" "01" "00"
    "19" + b"KTABLE-SOURCE-0000000003".hex() + "02" "01" "00" "02" "0d" + b"global-store".hex() + "01" "00"
    "00" "00" "00"
)
# What a Kafka 4.4.0 node answered (the body after the response header) to a v0 push, whether of
# that description to group "app" or of an empty one with an empty group and member id: with
# streams.version 1 and no topology description plugin (its default), UNSUPPORTED_VERSION with
# GroupCoordinatorService's message...
KAFKA_44_TOPOLOGY_UPDATE_NO_PLUGIN = bytes.fromhex(
    "00000000" "0023" "48" + b"The broker has no streams group topology description plugin configured.".hex() + "00"
)
# ... and once streams.version was downgraded to 0, UNSUPPORTED_VERSION with no message.
KAFKA_44_TOPOLOGY_UPDATE_STREAMS_OFF = bytes.fromhex("00000000" "0023" "00" "00")


def topology_update(group_id: str = "app", member_id: str = "m1") -> Any:
    m = topology_update_v0
    source = m.TopologyDescriptionNode(name="KSTREAM-SOURCE-0000000000", node_type=i8(1), source_topics=("in",), successors=("KSTREAM-SINK-0000000001",))
    sink = m.TopologyDescriptionNode(name="KSTREAM-SINK-0000000001", node_type=i8(3), sink_topic="out")
    store = m.TopologyDescriptionGlobalStore(
        source=m.TopologyDescriptionNode(name="KSTREAM-SOURCE-0000000002", node_type=i8(1), source_topics=("global",)),
        processor=m.TopologyDescriptionNode(name="KTABLE-SOURCE-0000000003", node_type=i8(2), stores=("global-store",)),
    )
    description = m.TopologyDescription(subtopologies=(m.TopologyDescriptionSubtopology(subtopology_id="0", nodes=(source, sink)),), global_stores=(store,))
    return m.StreamsGroupTopologyDescriptionUpdateRequest(group_id=group_id, member_id=member_id, topology_epoch=i32(0), topology_description=description)


def test_topology_update_v0_is_ours() -> None:
    api_key = ApiKey.STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE
    assert (int(api_key), SUPPORTED_APIS[api_key].min_version, SUPPORTED_APIS[api_key].max_version) == (93, 0, 0)
    for schema in (request_schema(api_key, 0), response_schema(api_key, 0)):
        assert schema.__module__.startswith("protocol.schema.")
        assert (int(schema.__api_key__), int(schema.__version__), schema.__flexible__) == (93, 0, True)


def test_topology_update_request_bytes_are_kafka_44s() -> None:
    assert encode(topology_update()) == KAFKA_44_TOPOLOGY_UPDATE_REQUEST
    assert decode(topology_update_v0.StreamsGroupTopologyDescriptionUpdateRequest, KAFKA_44_TOPOLOGY_UPDATE_REQUEST) == topology_update()


def test_topology_update_is_refused_without_a_plugin_as_kafka_44_refuses_it() -> None:
    """No plugin: the same refusal for any push, an invalid one (empty ids) too, since Kafka checks
    the plugin before the request; below streams.version 1, the API's own refusal."""
    handler = StreamsGroupTopologyDescriptionUpdateHandler(metadata(1))  # type: ignore[arg-type]
    ctx = context(ApiKey.STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE, 0)
    assert encode_body(handler(ctx, topology_update())) == KAFKA_44_TOPOLOGY_UPDATE_NO_PLUGIN
    assert encode_body(handler(ctx, topology_update(group_id="", member_id=""))) == KAFKA_44_TOPOLOGY_UPDATE_NO_PLUGIN
    off = StreamsGroupTopologyDescriptionUpdateHandler(metadata(0))  # type: ignore[arg-type]
    assert encode_body(off(ctx, topology_update())) == KAFKA_44_TOPOLOGY_UPDATE_STREAMS_OFF


def test_topology_update_needs_read_on_the_group() -> None:
    """KafkaApis.handleStreamsGroupTopologyDescriptionUpdate: after streams.version, READ on the
    group, refused as GROUP_AUTHORIZATION_FAILED with no message, before the plugin check."""
    denied: Any = types.SimpleNamespace(authorizer=types.SimpleNamespace(authorize=lambda principal, host, action: False))
    handler = StreamsGroupTopologyDescriptionUpdateHandler(metadata(1), AuthHelper(denied))  # type: ignore[arg-type]
    answer = handler(context(ApiKey.STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE, 0), topology_update())
    assert (answer.error_code, answer.error_message) == (ErrorCode.group_authorization_failed, None)
    off = StreamsGroupTopologyDescriptionUpdateHandler(metadata(0), AuthHelper(denied))  # type: ignore[arg-type]
    assert off(context(ApiKey.STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE, 0), topology_update()).error_code == ErrorCode.unsupported_version
