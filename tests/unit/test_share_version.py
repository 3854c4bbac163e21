"""share.version's levels as Kafka 4.4's ShareVersion has them (javap of kafka-server-common 4.4.0)."""

from __future__ import annotations

from broker.group.share_version import SHARE_GROUP_DLQ_LEVEL, SHARE_GROUPS_LEVEL, share_group_dlq_enabled, share_groups_enabled
from broker.metadata import metadata_version as mv


def test_levels_and_what_they_turn_on() -> None:
    assert (SHARE_GROUPS_LEVEL, SHARE_GROUP_DLQ_LEVEL) == (1, 2)
    assert [share_groups_enabled({"share.version": v}) for v in (0, 1, 2)] == [False, True, True]
    assert [share_group_dlq_enabled({"share.version": v}) for v in (0, 1, 2)] == [False, False, True]
    assert not share_groups_enabled({}) and not share_group_dlq_enabled({})


def test_bootstrap_levels_and_dependencies() -> None:
    """SV_1 from 4.2-IV0, SV_2 from 4.4-IV0 (LATEST_PRODUCTION), neither with dependencies."""
    assert mv.default_level("share.version", mv.from_version_string("4.1").level) == 0
    assert mv.default_level("share.version", mv.from_version_string("4.2-IV0").level) == 1
    assert mv.default_level("share.version", mv.from_version_string("4.3").level) == 1
    assert mv.default_level("share.version", mv.from_version_string("4.4-IV0").level) == 2
    assert mv.default_level("share.version", mv.LATEST_PRODUCTION.level) == 2
    assert mv.dependency_error("share.version", 2, {"metadata.version": 7}) is None
