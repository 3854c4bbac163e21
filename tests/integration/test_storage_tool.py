"""`kbroker storage` (kafka-storage.sh) and the start-up storage check of `kbroker serve`, as processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from storage.meta_properties import read_meta_properties
from tests.integration.conftest import REPO, BrokerProcess
from tests.ports import free_port

CLUSTER = "YkPyqKnMQoiOMOHdAoXkEg"
TIMEOUT_S = 60


def kbroker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "broker", *args], cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S)


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def write_config(path: Path, props: dict[str, str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def combined_node(tmp_path: Path, client_port: int = 19092, controller_port: int = 19093) -> dict[str, str]:
    return {
        "node.id": "1",
        "process.roles": "broker,controller",
        "listeners": f"PLAINTEXT://127.0.0.1:{client_port},CONTROLLER://127.0.0.1:{controller_port}",
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "log.dirs": f"{tmp_path / 'data1'},{tmp_path / 'data2'}",
        "metadata.log.dir": str(tmp_path / "meta"),
    }


def test_random_uuid_format_and_info(tmp_path: Path) -> None:
    uuids = {kbroker("storage", "random-uuid").stdout.strip() for _ in range(2)}
    assert len(uuids) == 2 and all(len(u) == 22 for u in uuids)
    config = write_config(tmp_path / "server.properties", combined_node(tmp_path))
    before = kbroker("storage", "info", "--config", str(config))
    assert before.returncode == 1 and f"{tmp_path / 'meta'} does not exist" in before.stdout
    formatted = kbroker("storage", "format", "--cluster-id", CLUSTER, "--config", str(config))
    assert formatted.returncode == 0, formatted.stderr
    assert formatted.stdout.splitlines() == [
        f"Formatting data directory {tmp_path / 'data1'} with cluster.id {CLUSTER}.",
        f"Formatting data directory {tmp_path / 'data2'} with cluster.id {CLUSTER}.",
        f"Formatting metadata directory {tmp_path / 'meta'} with cluster.id {CLUSTER}.",
    ]
    metas = [read_meta_properties(tmp_path / d) for d in ("data1", "data2", "meta")]
    assert {(m.cluster_id, m.node_id) for m in metas if m} == {(CLUSTER, 1)} and len({m.directory_id for m in metas if m}) == 3
    info = kbroker("storage", "info", "-c", str(config))
    assert info.returncode == 0 and f"cluster.id={CLUSTER}" in info.stdout and "Found log directories:" in info.stdout
    again = kbroker("storage", "format", "-t", CLUSTER, "-c", str(config))
    assert "is already formatted. Use --ignore-formatted" in one_error_line(again)
    ignored = kbroker("storage", "format", "-t", CLUSTER, "-c", str(config), "--ignore-formatted")
    assert ignored.returncode == 0 and ignored.stdout.strip() == "All of the log directories are already formatted."
    assert "Invalid cluster.id" in one_error_line(kbroker("storage", "format", "-t", "another", "-c", str(config), "-g"))
    (tmp_path / "data2" / "meta.properties").unlink()
    broken = kbroker("storage", "info", "-c", str(config))
    assert broken.returncode == 1 and f"{tmp_path / 'data2'} is not formatted." in broken.stdout


def test_kip_853_format_options(tmp_path: Path) -> None:
    broker = write_config(
        tmp_path / "broker.properties",
        {"node.id": "4", "process.roles": "broker", "listeners": "PLAINTEXT://127.0.0.1:19092", "controller.quorum.bootstrap.servers": "127.0.0.1:19093", "log.dirs": str(tmp_path / "b")},
    )
    assert "only use --standalone on a controller" in one_error_line(kbroker("storage", "format", "-t", CLUSTER, "-c", str(broker), "--standalone"))
    assert kbroker("storage", "format", "-t", CLUSTER, "-c", str(broker)).returncode == 0
    controller_props = {
        "node.id": "1",
        "process.roles": "controller",
        "listeners": "CONTROLLER://127.0.0.1:19093",
        "controller.quorum.bootstrap.servers": "127.0.0.1:19093",
        "log.dirs": str(tmp_path / "c1"),
    }
    controller = write_config(tmp_path / "c1.properties", controller_props)
    assert "--standalone, --initial-controllers, or --no-initial-controllers" in one_error_line(kbroker("storage", "format", "-t", CLUSTER, "-c", str(controller)))
    initial = "1@127.0.0.1:19093:MvDxzVmcRsaTz33bUuRU6A,2@127.0.0.1:19095:07R5amHmR32VDA6jHkGbTA"
    ok = kbroker("storage", "format", "-t", CLUSTER, "-c", str(controller), "--initial-controllers", initial)
    assert ok.returncode == 0 and "dynamic metadata voter directory" in ok.stdout
    assert read_meta_properties(tmp_path / "c1").directory_id == "MvDxzVmcRsaTz33bUuRU6A"  # type: ignore[union-attr]
    assert "more than once" in one_error_line(kbroker("storage", "format", "-t", CLUSTER, "-c", str(controller), "-I", "1@h:1:MvDxzVmcRsaTz33bUuRU6A,1@h:2:07R5amHmR32VDA6jHkGbTA"))
    alone = write_config(tmp_path / "c3.properties", controller_props | {"node.id": "3", "log.dirs": str(tmp_path / "c3")})
    assert kbroker("storage", "format", "-t", CLUSTER, "-c", str(alone), "--standalone").returncode == 0
    static = write_config(tmp_path / "static.properties", combined_node(tmp_path / "static"))
    assert "cannot specify controller.quorum.voters" in one_error_line(kbroker("storage", "format", "-t", CLUSTER, "-c", str(static), "-s"))


def test_serve_refuses_unformatted_or_disagreeing_storage(tmp_path: Path) -> None:
    config = write_config(tmp_path / "server.properties", combined_node(tmp_path))
    line = one_error_line(kbroker("serve", "--config", str(config)))
    assert "No meta.properties found in" in line and "kbroker storage format" in line
    assert kbroker("storage", "format", "-t", CLUSTER, "-c", str(config)).returncode == 0
    moved = kbroker("serve", "--config", str(config), "--override", "node.id=2", "--override", "controller.quorum.voters=2@127.0.0.1:19093")
    assert "Stored node id 1" in one_error_line(moved)
    assert f"but read {CLUSTER}" in one_error_line(kbroker("serve", "--config", str(config), "--override", "cluster.id=another"))


def test_a_formatted_node_starts_with_its_cluster_id(tmp_path: Path) -> None:
    node = BrokerProcess(tmp_path / "data1")
    props = combined_node(tmp_path, client_port=node.port, controller_port=free_port())
    node.config_file = write_config(tmp_path / "server.properties", props)
    assert kbroker("storage", "format", "-t", CLUSTER, "-c", str(node.config_file)).returncode == 0
    node.start()
    try:
        [started] = node.events_named("broker.started")
        assert started["cluster_id"] == CLUSTER and started["node_id"] == 1
    finally:
        node.stop()


def test_the_zero_config_node_formats_itself_once(tmp_path: Path) -> None:
    node = BrokerProcess(tmp_path / "data")
    node.start()
    try:
        meta = read_meta_properties(tmp_path / "data")
        assert meta is not None and meta.node_id == 1 and len(meta.cluster_id) == 22
        node.restart()
        assert read_meta_properties(tmp_path / "data") == meta
        assert {e["cluster_id"] for e in node.events_named("broker.started")} == {meta.cluster_id}
    finally:
        node.stop()
