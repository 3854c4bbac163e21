"""Kafka's FileQuorumStateStore: the election state in ``__cluster_metadata-0/quorum-state``.

One line of JSON in Kafka's QuorumStateData layout plus ``data_version``. Version 1 (written
here) is ``{"leaderId":..,"leaderEpoch":..,"votedId":..,"votedDirectoryId":..,"data_version":1}``
with -1 for no leader or no vote and the all-zero Uuid for no directory; version 0 (older
Kafka) also carries clusterId, appliedOffset and currentVoters, and is read too. A write goes
to ``quorum-state.tmp``, is fsynced, renamed over the file and the folder fsynced: a crash
leaves the old state or the new one, never a mix, and never a vote that was answered but lost.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

from raft.quorum_state_store import ElectionState
from storage.checkpoints import fsync_dir
from storage.partition_metadata import uuid_from_kafka_string, uuid_to_kafka_string

DEFAULT_FILE_NAME = "quorum-state"
DATA_VERSION = "data_version"
LOWEST_SUPPORTED_VERSION = 0
HIGHEST_SUPPORTED_VERSION = 1
_NONE = -1
_ZERO_UUID = uuid.UUID(int=0)  # Kafka's ReplicaKey.NO_DIRECTORY_ID


class QuorumStateFileError(ValueError):
    """The file exists but is not a quorum state this store can read: never treated as "no state",
    since forgetting a vote could let this voter vote twice in one epoch."""


class FileQuorumStateStore:
    def __init__(self, state_file: Path) -> None:
        self.path = state_file
        self._temp = state_file.with_name(state_file.name + ".tmp")

    def read_election_state(self) -> ElectionState | None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        return _decode(text, self.path)

    def write_election_state(self, state: ElectionState) -> None:
        body = json.dumps(_encode(state), separators=(",", ":"))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(self._temp, "w", encoding="utf-8") as f:
                f.write(body)
                f.flush()
                os.fsync(f.fileno())
            os.replace(self._temp, self.path)
            fsync_dir(self.path.parent)
        finally:
            self._temp.unlink(missing_ok=True)

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)
        self._temp.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return f"FileQuorumStateStore({self.path})"


def _encode(state: ElectionState) -> dict[str, object]:
    directory = state.voted_directory_id if state.voted_directory_id is not None else _ZERO_UUID
    return {
        "leaderId": state.leader_id if state.leader_id is not None else _NONE,
        "leaderEpoch": state.epoch,
        "votedId": state.voted_id if state.voted_id is not None else _NONE,
        "votedDirectoryId": uuid_to_kafka_string(directory),
        DATA_VERSION: HIGHEST_SUPPORTED_VERSION,
    }


def _decode(text: str, path: Path) -> ElectionState:
    # Kafka reads the first line only.
    line = text.split("\n", 1)[0]
    if not line.strip():
        raise QuorumStateFileError(f"{path} is empty")
    try:
        data = json.loads(line)
    except json.JSONDecodeError as e:
        raise QuorumStateFileError(f"{path} is not JSON: {e}") from None
    if not isinstance(data, dict):
        raise QuorumStateFileError(f"{path} holds {type(data).__name__}, not a JSON object")
    version = data.get(DATA_VERSION)
    if not isinstance(version, int) or isinstance(version, bool):
        raise QuorumStateFileError(f"{path} has no integer {DATA_VERSION} field")
    if not LOWEST_SUPPORTED_VERSION <= version <= HIGHEST_SUPPORTED_VERSION:
        raise QuorumStateFileError(
            f"{DATA_VERSION} ({version}) of {path} is not within the min ({LOWEST_SUPPORTED_VERSION}) and max ({HIGHEST_SUPPORTED_VERSION}) supported version"
        )
    leader_id = _int_field(data, "leaderId", path)
    epoch = _int_field(data, "leaderEpoch", path)
    voted_id = _int_field(data, "votedId", path)
    directory: uuid.UUID | None = None
    if version >= 1 and voted_id != _NONE:
        text_id = data.get("votedDirectoryId")
        if not isinstance(text_id, str):
            raise QuorumStateFileError(f"{path} has no votedDirectoryId string")
        try:
            directory = uuid_from_kafka_string(text_id)
        except (ValueError, TypeError) as e:
            raise QuorumStateFileError(f"{path}: bad votedDirectoryId: {e}") from None
        if directory == _ZERO_UUID:
            directory = None
    return ElectionState(
        epoch=epoch,
        leader_id=None if leader_id == _NONE else leader_id,
        voted_id=None if voted_id == _NONE else voted_id,
        voted_directory_id=directory,
    )


def _int_field(data: dict[str, object], name: str, path: Path) -> int:
    """QuorumStateData's int32 fields default to -1 when absent."""
    value = data.get(name, _NONE)
    if not isinstance(value, int) or isinstance(value, bool):
        raise QuorumStateFileError(f"{path}: {name} is {value!r}, not an integer")
    return value


__all__ = ["DEFAULT_FILE_NAME", "FileQuorumStateStore", "QuorumStateFileError"]
