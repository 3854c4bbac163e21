"""The streams groups wired into a ``__consumer_offsets`` shard: records through the coordinator's
codec and back (a load), the group id shared with the other group types, offset commits and
fetches of streams members (Kafka 4.4's StreamsGroup.validateOffsetCommit/Fetch), ListGroups and
DeleteGroups, the feature gate, the group configs and the broker's group.streams.* settings."""

from __future__ import annotations

import pytest

from broker.config import BrokerConfig
from broker.controller.feature_control_manager import BROKER_SUPPORTED_FEATURES, new_cluster_features, supported_features
from broker.group.group_coordinator_shard import GroupCoordinatorShard
from broker.group.group_metadata_manager import GroupConfig
from broker.group.offset_metadata_manager import PartitionCommit
from broker.group.streams_group_configs import StreamsGroupBounds, StreamsGroupConfigs
from broker.group.share_group_manager import ShareGroupHeartbeat
from broker.group.streams_version import streams_groups_enabled
from broker.group_coordinator import _decode, _encode
from broker.group.streams_group import Record
from broker.group.streams_group_manager import StreamsGroupHeartbeat, StreamsGroupHeartbeatResponse
from tests.unit.test_streams_group import ALL_TOPICS, GROUP, beat, join, owned

UNKNOWN_MEMBER_ID, UNSUPPORTED_VERSION, NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, STALE_MEMBER_EPOCH = 25, 35, 68, 69, 113


def shard() -> GroupCoordinatorShard:
    """A shard whose streams groups assign at once (no initial rebalance delay or assignment interval)."""
    s = GroupCoordinatorShard(GroupConfig(), offset_metadata_max_bytes=4096, offsets_retention_ms=7 * 86_400_000)
    s.streams_groups.initial_rebalance_delay_ms = s.streams_groups.assignment_interval_ms = 0
    return s


def run(s: GroupCoordinatorShard, request: StreamsGroupHeartbeat, written: list[Record] | None = None) -> StreamsGroupHeartbeatResponse:
    result = s.streams_groups.heartbeat(request, ALL_TOPICS, 0)
    assert result.response is not None and result.response.error_code == 0, result.response
    if written is not None:
        written.extend(result.records)
    return result.response


def test_records_round_trip_through_the_coordinator_codec_and_rebuild_the_group() -> None:
    s = shard()
    written: list[Record] = []
    a = run(s, join("a", "p1"), written)
    run(s, join("b", "p2"), written)
    run(s, beat("a", a.member_epoch, owned(a.active_tasks)), written)
    loaded = shard()
    for offset, (key, value) in enumerate(written):
        encoded_key, encoded_value = _encode(key, value)
        decoded = _decode(encoded_key, encoded_value)
        assert (decoded.key, decoded.value) == (key, value)
        loaded.replay(decoded.key, decoded.value, offset)
    assert loaded.streams_groups.groups[GROUP] == s.streams_groups.groups[GROUP]
    assert [(g.group_id, g.protocol_type, g.group_type) for g in loaded.list_groups(set(), {"STREAMS"})] == [(GROUP, "streams", "streams")]
    assert loaded.list_groups({"empty"}, set()) == []
    assert loaded.members_of(GROUP) == {"a", "b"}


def test_a_group_id_belongs_to_one_group_type() -> None:
    s = shard()
    run(s, join("a", "p1"))
    share = s.share_groups.heartbeat(ShareGroupHeartbeat(GROUP, "m", 0, None, ("input",)), ALL_TOPICS, 0)
    assert share.response is not None and (share.response.error_code, share.response.error_message) == (GROUP_ID_NOT_FOUND, f"Group {GROUP} is not a share group.")
    assert s.snapshot_before_commit(GROUP) is None
    other = shard()
    other.share_groups.heartbeat(ShareGroupHeartbeat(GROUP, "m", 0, None, ("input",)), ALL_TOPICS, 0)
    refused = other.streams_groups.heartbeat(join("a", "p1"), ALL_TOPICS, 0)
    assert refused.response is not None and (refused.response.error_code, refused.response.error_message) == (GROUP_ID_NOT_FOUND, f"Group {GROUP} is not a streams group.")


def commit(s: GroupCoordinatorShard, member_id: str, epoch: int, topic: str, partition: int, version: int = 9) -> int:
    errors, _ = s.offsets.commit(GROUP, epoch, member_id, None, -1, [PartitionCommit(topic, partition, 5, -1, None)], version, 0)
    return errors[0][1]


def test_offset_commits_and_fetches_of_streams_members() -> None:
    """StreamsGroup.validateOffsetCommit/Fetch: the member's epoch, or an older one for a task it holds since."""
    s = shard()
    a = run(s, join("a", "p1"))
    epoch = a.member_epoch
    assert commit(s, "a", epoch, "input", 0) == 0
    assert commit(s, "a", epoch + 1, "input", 0) == STALE_MEMBER_EPOCH
    assert commit(s, "nobody", epoch, "input", 0) == UNKNOWN_MEMBER_ID
    assert commit(s, "a", epoch, "input", 0, version=8) == UNSUPPORTED_VERSION
    b = run(s, join("b", "p2"))
    # "a" gives up half its tasks and moves to the new epoch, keeping the others.
    mine = owned(a.active_tasks)
    for _ in range(3):
        r = run(s, beat("a", epoch, mine))
        mine = owned(r.active_tasks) if r.active_tasks is not None else mine
        if r.member_epoch == b.member_epoch:
            break
        epoch = r.member_epoch
    assert r.member_epoch == b.member_epoch
    kept = min(mine["0"])
    assert commit(s, "a", a.member_epoch, "input", kept) == 0  # an older epoch, for a task held since then
    assert commit(s, "a", a.member_epoch - 1, "input", kept) == STALE_MEMBER_EPOCH
    assert commit(s, "a", a.member_epoch, "input", min({0, 1, 2, 3} - mine["0"])) == STALE_MEMBER_EPOCH
    assert commit(s, "a", a.member_epoch, "not-in-topology", 0) == STALE_MEMBER_EPOCH
    epoch = b.member_epoch
    assert s.offsets.validate_fetch(GROUP, "a", epoch) == 0
    assert s.offsets.validate_fetch(GROUP, "b", b.member_epoch + 1) == STALE_MEMBER_EPOCH
    assert s.offsets.validate_fetch(GROUP, None, -1) == 0
    assert s.offsets.validate_fetch(GROUP, "nobody", 3) == UNKNOWN_MEMBER_ID


def test_delete_groups_takes_an_empty_streams_group_and_its_offsets() -> None:
    s = shard()
    run(s, join("a", "p1"))
    errors, _ = s.delete_groups([GROUP], 0)
    assert errors == {GROUP: NON_EMPTY_GROUP}
    run(s, beat("a", -1))
    errors, result = s.delete_groups([GROUP], 0)
    assert errors == {GROUP: 0}
    assert result.records and all(value is None for _, value in result.records)


def test_streams_version_is_supported_and_finalized_from_4_2_iv1() -> None:
    """As Kafka 4.4's StreamsVersion: 0-1, SV_1 bootstrapped from 4.2-IV1 (29), with or without
    unstable.feature.versions.enable."""
    assert BROKER_SUPPORTED_FEATURES["streams.version"] == supported_features(unstable=True)["streams.version"] == (0, 1)
    assert [new_cluster_features(level)["streams.version"] for level in (21, 28, 29, 33)] == [0, 0, 1, 1]
    assert not streams_groups_enabled({}) and not streams_groups_enabled({"streams.version": 0})
    assert streams_groups_enabled({"streams.version": 1})


def test_group_configs_are_capped_to_the_broker_bounds() -> None:
    props = {"app": {"streams.session.timeout.ms": "90000", "streams.heartbeat.interval.ms": "6000", "streams.num.standby.replicas": "5"}}
    configs = StreamsGroupConfigs(StreamsGroupBounds.of(BrokerConfig()), lambda g: props.get(g, {}))
    assert (configs.streams_session_timeout_ms("app"), configs.streams_heartbeat_interval_ms("app"), configs.streams_num_standby_replicas("app")) == (60000, 6000, 2)
    assert configs.streams_session_timeout_ms("other") is None


@pytest.mark.parametrize(
    "settings,message",
    [
        ({"group.streams.heartbeat.interval.ms": "45000"}, "group.streams.heartbeat.interval.ms must be less than or equal to group.streams.max.heartbeat.interval.ms"),
        ({"group.streams.session.timeout.ms": "70000"}, "group.streams.session.timeout.ms must be less than or equal to group.streams.max.session.timeout.ms"),
        ({"group.streams.num.standby.replicas": "3"}, "group.streams.num.standby.replicas must be less than or equal to group.streams.max.standby.replicas"),
        ({"group.streams.min.assignment.interval.ms": "20000"}, "group.streams.max.assignment.interval.ms must be greater than or equal to group.streams.min.assignment.interval.ms"),
        ({"group.streams.min.assignment.interval.ms": "2000"}, "group.streams.assignment.interval.ms must be greater than or equal to group.streams.min.assignment.interval.ms"),
        ({"group.streams.assignment.interval.ms": "16000"}, "group.streams.assignment.interval.ms must be less than or equal to group.streams.max.assignment.interval.ms"),
        ({"group.streams.num.warmup.replicas": "21"}, "group.streams.num.warmup.replicas must be less than or equal to group.streams.max.warmup.replicas"),
        ({"group.streams.rack.aware.assignment.tags": "zone,zone"}, "Configuration 'group.streams.rack.aware.assignment.tags' values must not be duplicated."),
        ({"group.streams.initial.rebalance.delay.ms": "-1"}, "greater than or equal to 0"),
    ],
)
def test_broker_streams_settings_are_checked_at_start_up(settings: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BrokerConfig(**settings)  # type: ignore[arg-type]
