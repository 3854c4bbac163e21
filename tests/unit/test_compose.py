"""docker-compose.yml and the image's entrypoint, without Docker: every service's environment goes
through the entrypoint's mapping and must make a valid node of one cluster."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
import yaml

from broker.config import BrokerConfig, ConfigError, load_config
from broker.docker_config import (
    DEFAULT_PROPERTIES,
    DockerConfigError,
    cluster_id_from_env,
    node_properties,
    properties_from_env,
    property_name,
    write_properties,
)
from broker.storage_tool import format_storage
from storage.meta_properties import read_meta_properties

REPO = Path(__file__).resolve().parents[2]


def services() -> dict[str, dict]:  # type: ignore[type-arg]
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]


def environment(service: dict) -> dict[str, str]:  # type: ignore[type-arg]
    return {k: str(v) for k, v in service["environment"].items()}


def service_config(tmp_path: Path, name: str, service: dict) -> BrokerConfig:  # type: ignore[type-arg]
    path = tmp_path / name / "server.properties"
    write_properties(path, node_properties(environment(service)))
    return load_config(path, {})


@pytest.mark.parametrize(
    ("key", "prop"),
    [
        ("KAFKA_NODE_ID", "node.id"),
        ("KAFKA_CONTROLLER_QUORUM_VOTERS", "controller.quorum.voters"),
        ("KAFKA_LISTENER_SECURITY_PROTOCOL_MAP", "listener.security.protocol.map"),
        ("KAFKA_LISTENER_NAME_PLAINTEXT__HOST_SSL_KEY", "listener.name.plaintext_host.ssl.key"),
        ("KAFKA_SOME___DASHED_NAME", "some-dashed.name"),
    ],
)
def test_env_names_map_as_in_kafkas_image(key: str, prop: str) -> None:
    assert property_name(key) == prop


def test_env_mapping_rules() -> None:
    env = {"KAFKA_ADVERTISED_LISTENERS": "PLAINTEXT://node:9092,PLAINTEXT_HOST://localhost:29092", "KAFKA_HEAP_OPTS": "-Xmx1G", "PATH": "/bin"}
    assert properties_from_env(env) == {
        "advertised.listeners": env["KAFKA_ADVERTISED_LISTENERS"],
        "listeners": "PLAINTEXT://0.0.0.0:9092,PLAINTEXT_HOST://0.0.0.0:29092",
    }
    with pytest.raises(DockerConfigError, match="not supported on a KRaft controller"):
        properties_from_env({"KAFKA_PROCESS_ROLES": "controller", "KAFKA_ADVERTISED_LISTENERS": "CONTROLLER://c:9093"})
    assert cluster_id_from_env({}) and cluster_id_from_env({"CLUSTER_ID": "x"}) == "x"


def test_a_mounted_file_is_overlaid_and_no_configuration_is_the_image_default(tmp_path: Path) -> None:
    mounted = tmp_path / "server.properties"
    mounted.write_text("num.partitions=3\nnode.id=9\n")
    assert node_properties({"KAFKA_NODE_ID": "2"}, mounted) == {"num.partitions": "3", "node.id": "2"}
    assert node_properties({}, tmp_path / "absent") == DEFAULT_PROPERTIES
    write_properties(tmp_path / "default.properties", DEFAULT_PROPERTIES)
    config = load_config(tmp_path / "default.properties", {})
    assert [v.node_id for v in config.quorum_voters] == [config.node_id]  # one combined node alone


def test_every_service_is_a_valid_node_of_one_cluster(tmp_path: Path) -> None:
    found = services()
    assert sorted(found) == ["kbroker-1", "kbroker-2", "kbroker-3"]
    configs = {name: service_config(tmp_path, name, s) for name, s in found.items()}
    envs = {name: environment(s) for name, s in found.items()}
    assert len({env["CLUSTER_ID"] for env in envs.values()}) == 1
    assert len({c.controller_quorum_voters for c in configs.values()}) == 1
    assert sorted(c.node_id for c in configs.values()) == [1, 2, 3]
    voters = {v.node_id: (v.host, v.port) for v in next(iter(configs.values())).quorum_voters}
    published: list[int] = []
    advertised: list[tuple[str, int]] = []
    for name, config in configs.items():
        service = found[name]
        assert config.is_broker and config.is_controller and not config.implicit_quorum
        # Its own voter entry is its hostname at its controller port.
        assert voters[config.node_id] == (service["hostname"], config.controller_listeners[0].port)
        assert config.inter_broker_listener.host == service["hostname"]
        ports = [int(p.split(":")[0]) for p in service["ports"]]
        published += ports
        host_listener = [lst for lst in config.advertised_broker_listeners if lst.host == "localhost"]
        assert [lst.port for lst in host_listener] == ports  # the host reaches it where it says
        advertised += [(lst.host, lst.port) for lst in config.advertised_broker_listeners]
        assert [v.split(":")[1] for v in service["volumes"]] == [str(config.data_dir)]
        assert str(config.listener.port) in " ".join(service["healthcheck"]["test"])
        assert re.fullmatch(r"[A-Za-z0-9_-]{22}", envs[name]["CLUSTER_ID"])
    assert len(set(published)) == len(published) == 3
    assert len(set(advertised)) == len(advertised)
    assert configs["kbroker-1"].offsets_topic_replication_factor == 3


def test_every_service_formats_its_storage_with_the_cluster_id(tmp_path: Path) -> None:
    for name, service in services().items():
        env = environment(service)
        config = service_config(tmp_path, name, service).model_copy(update={"log_dirs": str(tmp_path / name / "data")})
        out = io.StringIO()
        format_storage(config, cluster_id_from_env(env), out, ignore_formatted=True)
        format_storage(config, cluster_id_from_env(env), out, ignore_formatted=True)  # a restart
        assert "All of the log directories are already formatted." in out.getvalue()
        meta = read_meta_properties(tmp_path / name / "data")
        assert meta is not None and meta.cluster_id == env["CLUSTER_ID"] and meta.node_id == int(env["KAFKA_NODE_ID"])


def test_the_image_copies_every_package_and_runs_the_entrypoint() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    assert dockerfile.startswith("#") and "FROM python:3.11-slim" in dockerfile
    pyproject = (REPO / "pyproject.toml").read_text()
    include = re.search(r"include = \[(.*)\]", pyproject).group(1)  # type: ignore[union-attr]
    packages = [p.strip(' "*') for p in include.split(",")]
    for package in packages:
        if (REPO / package / "__init__.py").exists() and package != "spark_jobs":
            assert f"COPY {package} ./{package}" in dockerfile, package
    assert 'ENTRYPOINT ["python", "-m", "broker.docker_config"]' in dockerfile
    for service in services().values():
        assert service["build"] == "."


def test_a_bad_environment_is_refused_with_one_line(tmp_path: Path) -> None:
    service = services()["kbroker-2"]
    env = environment(service) | {"KAFKA_NODE_ID": "7"}
    path = tmp_path / "server.properties"
    write_properties(path, node_properties(env))
    with pytest.raises(ConfigError, match="the node id 7 must be included in the set of voters"):
        load_config(path, {})
