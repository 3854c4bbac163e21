"""quorum-state: Kafka's JSON (data_version 1, reads 0), written by temp file + fsync + rename + folder fsync."""

from __future__ import annotations

import json
import os
import stat
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raft.file_quorum_state_store import DEFAULT_FILE_NAME, FileQuorumStateStore, QuorumStateFileError
from raft.quorum_state_store import ElectionState


@pytest.fixture
def state_file(tmp_path: Path) -> Path:
    return tmp_path / "__cluster_metadata-0" / DEFAULT_FILE_NAME


def test_no_file_is_no_state(state_file: Path) -> None:
    assert FileQuorumStateStore(state_file).read_election_state() is None


def test_writes_kafkas_version_1_json(state_file: Path) -> None:
    directory = uuid.UUID("27c69a03-c7dc-42dd-9daa-cd494ff3aa81")
    FileQuorumStateStore(state_file).write_election_state(ElectionState(epoch=5, leader_id=None, voted_id=2, voted_directory_id=directory))
    assert state_file.read_text() == '{"leaderId":-1,"leaderEpoch":5,"votedId":2,"votedDirectoryId":"J8aaA8fcQt2dqs1JT_OqgQ","data_version":1}'
    FileQuorumStateStore(state_file).write_election_state(ElectionState(epoch=6, leader_id=1))
    assert json.loads(state_file.read_text()) == {"leaderId": 1, "leaderEpoch": 6, "votedId": -1, "votedDirectoryId": "AAAAAAAAAAAAAAAAAAAAAA", "data_version": 1}


states = st.builds(
    lambda epoch, leader, voted, directory: ElectionState(epoch, leader, voted, directory if voted is not None else None),
    st.integers(min_value=0, max_value=2**31 - 1),
    st.none() | st.integers(min_value=0, max_value=2**31 - 1),
    st.none() | st.integers(min_value=0, max_value=2**31 - 1),
    st.none() | st.uuids().filter(lambda u: u.int != 0),
)


@given(history=st.lists(states, min_size=1, max_size=4))
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_round_trip_through_a_new_store(tmp_path: Path, history: list[ElectionState]) -> None:
    path = tmp_path / "rt" / DEFAULT_FILE_NAME
    for state in history:
        FileQuorumStateStore(path).write_election_state(state)
        assert FileQuorumStateStore(path).read_election_state() == state
    assert [p.name for p in path.parent.iterdir()] == [DEFAULT_FILE_NAME]


def test_reads_kafkas_version_0_file(state_file: Path) -> None:
    state_file.parent.mkdir(parents=True)
    state_file.write_text('{"clusterId":"","leaderId":1,"leaderEpoch":2,"votedId":-1,"appliedOffset":0,"currentVoters":[],"data_version":0}\n')
    assert FileQuorumStateStore(state_file).read_election_state() == ElectionState(epoch=2, leader_id=1)


def test_reads_kafkas_version_1_example(state_file: Path) -> None:
    state_file.parent.mkdir(parents=True)
    state_file.write_text('{"leaderId":-1,"leaderEpoch":2,"votedId":1,"votedDirectoryId":"J8aAPcfLQt2bqs1JT_rMgQ","data_version":1}')
    state = FileQuorumStateStore(state_file).read_election_state()
    assert state is not None
    assert (state.epoch, state.leader_id, state.voted_id) == (2, None, 1)
    assert state.voted_directory_id is not None and state.has_voted() and not state.has_leader()


def test_a_leftover_temp_file_is_ignored_and_replaced(state_file: Path) -> None:
    store = FileQuorumStateStore(state_file)
    store.write_election_state(ElectionState(epoch=3, voted_id=1))
    # A crash after the temp file was written but before the rename: the old state stands.
    temp = state_file.with_name(DEFAULT_FILE_NAME + ".tmp")
    temp.write_text('{"leaderId":9,"leaderEpoch":4,"votedId":-1,"data_ver')
    assert FileQuorumStateStore(state_file).read_election_state() == ElectionState(epoch=3, voted_id=1)
    FileQuorumStateStore(state_file).write_election_state(ElectionState(epoch=4, leader_id=1, voted_id=1))
    assert not temp.exists()
    assert FileQuorumStateStore(state_file).read_election_state() == ElectionState(epoch=4, leader_id=1, voted_id=1)


def test_write_is_durable_before_the_rename_and_the_rename_durable_after(state_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append("fsync dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync file")
        real_fsync(fd)

    def replace(source: str | Path, target: str | Path) -> None:
        events.append("rename")
        assert Path(source).read_text().startswith('{"leaderId":1')  # the new content is in the temp file
        real_replace(source, target)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    FileQuorumStateStore(state_file).write_election_state(ElectionState(epoch=1, leader_id=1))
    assert events == ["fsync file", "rename", "fsync dir"]


def test_failed_write_keeps_the_old_state(state_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = FileQuorumStateStore(state_file)
    store.write_election_state(ElectionState(epoch=7, voted_id=3))

    def failing_replace(source: str | Path, target: str | Path) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError):
        store.write_election_state(ElectionState(epoch=8))
    monkeypatch.undo()
    assert not state_file.with_name(DEFAULT_FILE_NAME + ".tmp").exists()
    assert store.read_election_state() == ElectionState(epoch=7, voted_id=3)


@pytest.mark.parametrize(
    "content",
    [
        "",
        "not json",
        "[1, 2]",
        '{"leaderId":1,"leaderEpoch":2,"votedId":-1}',
        '{"leaderId":1,"leaderEpoch":2,"votedId":-1,"data_version":2}',
        '{"leaderId":"x","leaderEpoch":2,"votedId":-1,"data_version":1}',
        '{"leaderId":-1,"leaderEpoch":2,"votedId":1,"votedDirectoryId":"!!","data_version":1}',
    ],
)
def test_an_unreadable_file_is_an_error_not_an_empty_state(state_file: Path, content: str) -> None:
    state_file.parent.mkdir(parents=True)
    state_file.write_text(content)
    with pytest.raises(QuorumStateFileError):
        FileQuorumStateStore(state_file).read_election_state()


def test_clear_removes_the_file_and_a_temp_file(state_file: Path) -> None:
    store = FileQuorumStateStore(state_file)
    store.write_election_state(ElectionState(epoch=1))
    state_file.with_name(DEFAULT_FILE_NAME + ".tmp").write_text("x")
    store.clear()
    assert list(state_file.parent.iterdir()) == []
    assert store.read_election_state() is None
    store.clear()
