"""`kbroker storage format` and the KIP-853 bootstrap checkpoint (snapshot 0-0 of __cluster_metadata-0)."""

from __future__ import annotations

import io
import random
import uuid
from pathlib import Path

import pytest

from broker.config import BrokerConfig, load_config
from broker.storage_tool import StorageToolError, format_storage
from raft.control_records import KRaftVersion
from raft.kafka_metadata_log import KafkaMetadataLog, metadata_log_dir
from raft.kafka_raft_client import KafkaRaftClient
from raft.quorum_state_store import MemoryQuorumStateStore
from raft.raft_config import RaftConfig
from raft.voter_history import BOOTSTRAP_SNAPSHOT_ID, VoterSetHistory
from raft.voter_set import Endpoint, VoterNode, VoterSet
from storage.meta_properties import parse_kafka_uuid, random_directory_id, read_meta_properties

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
CHECKPOINT = "00000000000000000000-0000000000.checkpoint"


class _BytesSerde:
    def encode(self, record: bytes) -> bytes:
        return record

    def decode(self, value: bytes | memoryview) -> bytes:
        return bytes(value)


def controller_config(tmp_path: Path, node_id: int = 1, port: int = 9093, **extra: str) -> BrokerConfig:
    props = {
        "node.id": str(node_id),
        "process.roles": "controller",
        "listeners": f"CONTROLLER://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.bootstrap.servers": f"127.0.0.1:{port}",
        "log.dirs": str(tmp_path / "data"),
        **extra,
    }
    return load_config(None, props)


def formatted(config: BrokerConfig, **options: object) -> str:
    out = io.StringIO()
    format_storage(config, CLUSTER_ID, out, **options)  # type: ignore[arg-type]
    return out.getvalue()


def bootstrap_history(metadata_dir: Path) -> VoterSetHistory | None:
    """The KRaftVersion and voters the checkpoint names; None without one."""
    log = KafkaMetadataLog.open(metadata_log_dir(metadata_dir))
    try:
        snapshot = log.read_snapshot(BOOTSTRAP_SNAPSHOT_ID)
        if snapshot is None:
            return None
        history = VoterSetHistory()
        history.load_snapshot(BOOTSTRAP_SNAPSHOT_ID, snapshot.read(0, snapshot.size_in_bytes()))
        return history
    finally:
        log.close()


def test_standalone_writes_the_bootstrap_checkpoint_with_this_controller_alone(tmp_path: Path) -> None:
    config = controller_config(tmp_path)
    out = formatted(config, standalone=True)
    assert "dynamic metadata voter directory" in out
    assert (metadata_log_dir(config.metadata_dir) / CHECKPOINT).is_file()
    history = bootstrap_history(config.metadata_dir)
    assert history is not None and history.kraft_version == KRaftVersion.KRAFT_VERSION_1
    meta = read_meta_properties(config.metadata_dir)
    assert meta is not None and meta.directory_id is not None
    expected = VoterSet([VoterNode(1, parse_kafka_uuid(meta.directory_id), (Endpoint("CONTROLLER", "127.0.0.1", 9093),))])
    assert history.latest() == expected


def test_initial_controllers_name_every_voter_and_give_this_one_its_directory_id(tmp_path: Path) -> None:
    ids = {n: random_directory_id() for n in (1, 2, 3)}
    spec = ",".join(f"{n}@localhost:{9090 + n}:{d}" for n, d in ids.items())
    config = controller_config(tmp_path, node_id=2, port=9092)
    formatted(config, initial_controllers=spec)
    meta = read_meta_properties(config.metadata_dir)
    assert meta is not None and meta.directory_id == ids[2]
    history = bootstrap_history(config.metadata_dir)
    assert history is not None and history.kraft_version == KRaftVersion.KRAFT_VERSION_1
    assert history.latest() == VoterSet(
        VoterNode(n, parse_kafka_uuid(d), (Endpoint("CONTROLLER", "localhost", 9090 + n),)) for n, d in ids.items()
    )


def test_a_controller_outside_the_initial_voters_gets_the_checkpoint_too(tmp_path: Path) -> None:
    spec = f"1@localhost:9091:{random_directory_id()}"
    config = controller_config(tmp_path, node_id=4, port=9094)
    assert "dynamic metadata directory" in formatted(config, initial_controllers=spec)
    history = bootstrap_history(config.metadata_dir)
    assert history is not None and history.latest() is not None and history.latest().ids() == {1}  # type: ignore[union-attr]


def test_only_the_metadata_directory_gets_the_checkpoint(tmp_path: Path) -> None:
    config = controller_config(tmp_path, **{"log.dirs": f"{tmp_path / 'a'},{tmp_path / 'b'}", "metadata.log.dir": str(tmp_path / "meta")})
    formatted(config, standalone=True)
    assert (metadata_log_dir(tmp_path / "meta") / CHECKPOINT).is_file()
    for data_dir in ("a", "b"):
        assert (tmp_path / data_dir / "meta.properties").is_file()
        assert not metadata_log_dir(tmp_path / data_dir).exists()


@pytest.mark.parametrize("how", ["no_initial_controllers", "static_voters"])
def test_no_checkpoint_without_an_initial_voter_set(tmp_path: Path, how: str) -> None:
    if how == "static_voters":
        config = controller_config(tmp_path, **{"controller.quorum.voters": "1@127.0.0.1:9093", "controller.quorum.bootstrap.servers": ""})
        formatted(config)
    else:
        config = controller_config(tmp_path)
        formatted(config, no_initial_controllers=True)
    assert (config.metadata_dir / "meta.properties").is_file()
    assert not (metadata_log_dir(config.metadata_dir) / CHECKPOINT).exists()


def test_an_existing_checkpoint_is_kept_when_the_directory_is_formatted_again(tmp_path: Path) -> None:
    config = controller_config(tmp_path)
    formatted(config, standalone=True)
    checkpoint = metadata_log_dir(config.metadata_dir) / CHECKPOINT
    before = checkpoint.read_bytes()
    (config.metadata_dir / "meta.properties").unlink()
    formatted(config, standalone=True)
    assert checkpoint.read_bytes() == before


def test_standalone_on_a_broker_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    broker = load_config(None, {
        "node.id": "5", "process.roles": "broker", "listeners": "PLAINTEXT://127.0.0.1:9092",
        "controller.listener.names": "CONTROLLER", "controller.quorum.bootstrap.servers": "127.0.0.1:9093", "log.dirs": str(tmp_path / "b"),
    })
    with pytest.raises(StorageToolError, match="only use --standalone on a controller"):
        formatted(broker, standalone=True)
    assert not (tmp_path / "b").exists()


def test_a_standalone_controller_leads_a_kraft_version_1_quorum_from_the_checkpoint(tmp_path: Path) -> None:
    config = controller_config(tmp_path)
    formatted(config, standalone=True)
    meta = read_meta_properties(config.metadata_dir)
    assert meta is not None and meta.directory_id is not None
    directory_id = parse_kafka_uuid(meta.directory_id)
    log = KafkaMetadataLog.open(metadata_log_dir(config.metadata_dir))
    try:
        client: KafkaRaftClient[bytes] = KafkaRaftClient(
            node_id=1, directory_id=directory_id, cluster_id=CLUSTER_ID, config=RaftConfig(), log=log,
            store=MemoryQuorumStateStore(), serde=_BytesSerde(), voters=None, bootstrap_servers=[("127.0.0.1", 9093)],
            now_ms=0, rng=random.Random(1),
        )
        assert client.voters.ids() == {1} and client.voters.get(1).directory_id == directory_id  # type: ignore[union-attr]
        now = 0
        while not client.is_leader() and now < 10_000:
            client.poll(now)
            now = max(now + 1, client.next_deadline_ms())
        assert client.is_leader()
    finally:
        log.close()


def test_a_no_initial_controllers_controller_starts_as_an_observer(tmp_path: Path) -> None:
    config = controller_config(tmp_path)
    formatted(config, no_initial_controllers=True)
    log = KafkaMetadataLog.open(metadata_log_dir(config.metadata_dir))
    try:
        client: KafkaRaftClient[bytes] = KafkaRaftClient(
            node_id=1, directory_id=uuid.uuid4(), cluster_id=CLUSTER_ID, config=RaftConfig(), log=log,
            store=MemoryQuorumStateStore(), serde=_BytesSerde(), voters=None, bootstrap_servers=[("127.0.0.1", 9093)],
            now_ms=0, rng=random.Random(1),
        )
        assert len(client.voters) == 0 and client.quorum_state.is_observer()
    finally:
        log.close()
