"""The chaos bench's timeout profiles keep what the faults mean: a pause outlasts every session."""

from __future__ import annotations

import dataclasses

import pytest

from broker.config import load_config
from tests.chaos.profile import PROFILES


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_a_pause_outlasts_the_broker_group_and_raft_sessions(name: str) -> None:
    profile = PROFILES[name]
    assert profile.pause_ms > max(profile.session_ms, profile.member_session_ms, profile.quorum_fetch_timeout_ms)
    assert profile.heartbeat_ms < profile.session_ms and profile.member_heartbeat_ms < profile.member_session_ms


def test_a_profile_whose_pause_would_not_outlast_a_session_is_refused() -> None:
    with pytest.raises(ValueError, match="outlast"):
        dataclasses.replace(PROFILES["fast"], pause_ms=PROFILES["fast"].member_session_ms)


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_the_overrides_are_broker_properties(name: str, tmp_path: object) -> None:
    config = load_config(None, {**PROFILES[name].overrides(), "log.dirs": str(tmp_path)})
    assert config.broker_session_timeout_ms == PROFILES[name].session_ms
    assert config.group_min_session_timeout_ms == PROFILES[name].member_session_ms
