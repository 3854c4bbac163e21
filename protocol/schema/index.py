"""Where the entities of this package are, as kio.schema.index maps its own."""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

# (api key, version) -> (request class path, response class path), in pkgutil.resolve_name's form.
SCHEMAS: Mapping[tuple[int, int], tuple[str, str]] = MappingProxyType(
    {
        (18, 5): (
            "protocol.schema.api_versions.v5.request:ApiVersionsRequest",
            "protocol.schema.api_versions.v5.response:ApiVersionsResponse",
        ),
        (28, 6): (
            "protocol.schema.txn_offset_commit.v6.request:TxnOffsetCommitRequest",
            "protocol.schema.txn_offset_commit.v6.response:TxnOffsetCommitResponse",
        ),
        (42, 3): (
            "protocol.schema.delete_groups.v3.request:DeleteGroupsRequest",
            "protocol.schema.delete_groups.v3.response:DeleteGroupsResponse",
        ),
        (88, 1): (
            "protocol.schema.streams_group_heartbeat.v1.request:StreamsGroupHeartbeatRequest",
            "protocol.schema.streams_group_heartbeat.v1.response:StreamsGroupHeartbeatResponse",
        ),
        (89, 1): (
            "protocol.schema.streams_group_describe.v1.request:StreamsGroupDescribeRequest",
            "protocol.schema.streams_group_describe.v1.response:StreamsGroupDescribeResponse",
        ),
        (93, 0): (
            "protocol.schema.streams_group_topology_description_update.v0.request:StreamsGroupTopologyDescriptionUpdateRequest",
            "protocol.schema.streams_group_topology_description_update.v0.response:StreamsGroupTopologyDescriptionUpdateResponse",
        ),
        (94, 0): (
            "protocol.schema.unregister_controller.v0.request:UnregisterControllerRequest",
            "protocol.schema.unregister_controller.v0.response:UnregisterControllerResponse",
        ),
    }
)
