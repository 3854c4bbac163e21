"""meta.properties: Kafka's Uuid text, the file, and the start-up check over a node's directories."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storage.log_config import LogConfig
from storage.log_manager import LogManager
from storage.meta_properties import (
    META_PROPERTIES,
    MetaProperties,
    MetaPropertiesError,
    check_cluster_id,
    check_startup,
    directories_of,
    parse_kafka_uuid,
    random_directory_id,
    random_kafka_uuid,
    read_meta_properties,
    write_meta_properties,
)

CLUSTER = "YkPyqKnMQoiOMOHdAoXkEg"


def test_random_uuids_look_like_kafkas() -> None:
    for make in (random_kafka_uuid, random_directory_id):
        for _ in range(200):
            text = make()
            assert len(text) == 22 and not text.startswith("-")
            assert set(text) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
            assert len(parse_kafka_uuid(text).bytes) == 16
    assert len({random_kafka_uuid() for _ in range(100)}) == 100


@given(st.binary(min_size=16, max_size=16))
def test_kafka_uuid_text_round_trips(raw: bytes) -> None:
    text = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    assert parse_kafka_uuid(text).bytes == raw
    assert parse_kafka_uuid(text + "==").bytes == raw


@pytest.mark.parametrize("text", ["", "abc", "YkPyqKnMQoiOMOHdAoXkEgAA", "YkPyqKnMQoiOMOHdAoXkEgAAA", "YkPyqKnMQoiOMOHd+oXkEg", "YkPyqKnMQoiOMOH dAoXkEg"])
def test_kafka_uuid_text_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_kafka_uuid(text)


def test_cluster_ids_must_fit_a_properties_file() -> None:
    assert check_cluster_id("kbroker-test-cluster-0") == "kbroker-test-cluster-0"
    for bad in ("", "with space", "new\nline", "#comment"):
        with pytest.raises(MetaPropertiesError):
            check_cluster_id(bad)


def test_write_then_read(tmp_path: Path) -> None:
    meta = MetaProperties(cluster_id=CLUSTER, node_id=3, directory_id=random_directory_id())
    write_meta_properties(tmp_path / "new" / "dir", meta)
    assert read_meta_properties(tmp_path / "new" / "dir") == meta
    lines = (tmp_path / "new" / "dir" / META_PROPERTIES).read_text().splitlines()
    assert set(lines[1:]) == {"version=1", f"cluster.id={CLUSTER}", "node.id=3", f"directory.id={meta.directory_id}"}
    assert read_meta_properties(tmp_path / "absent") is None
    assert not list((tmp_path / "new" / "dir").glob("*.tmp"))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("broker.id=1\ncluster.id=x\n", "has version 0"),
        ("version=1\nnode.id=1\n", "cluster.id was not specified"),
        ("version=1\ncluster.id=x\n", "node.id was not specified"),
        ("version=1\ncluster.id=x\nnode.id=one\n", "node.id 'one'"),
        ("version=1\ncluster.id=x\nnode.id=1\ndirectory.id=nope\n", "directory.id in"),
        ("version=1\ncluster.id=x\nnode.id=1\ndirectory.id=AAAAAAAAAAAAAAAAAAAAAQ\n", "reserved directory ids"),
    ],
)
def test_unreadable_files_are_refused(tmp_path: Path, body: str, message: str) -> None:
    (tmp_path / META_PROPERTIES).write_text(body)
    with pytest.raises(MetaPropertiesError, match=message):
        read_meta_properties(tmp_path)


def test_directories_of_lists_each_once(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    assert directories_of([b, a, Path(f"{a}/")], a) == [a, b]
    assert directories_of([a], tmp_path / "meta") == [a, tmp_path / "meta"]


def test_an_unformatted_directory_refuses_to_start(tmp_path: Path) -> None:
    with pytest.raises(MetaPropertiesError, match=r"No meta.properties found in .*kbroker storage format"):
        check_startup([tmp_path / "data"], 1)
    assert not (tmp_path / "data").exists()


def test_the_zero_config_node_formats_every_directory(tmp_path: Path) -> None:
    dirs = [tmp_path / "data", tmp_path / "meta"]
    cluster_id = check_startup(dirs, 1, may_format=True)
    metas = [read_meta_properties(d) for d in dirs]
    assert all(m is not None and m.cluster_id == cluster_id and m.node_id == 1 for m in metas)
    assert metas[0].directory_id != metas[1].directory_id  # type: ignore[union-attr]
    assert check_startup(dirs, 1) == cluster_id
    assert check_startup([tmp_path / "other"], 2, CLUSTER, may_format=True) == CLUSTER


def test_a_new_directory_of_a_formatted_zero_config_node_takes_its_cluster_id(tmp_path: Path) -> None:
    cluster_id = check_startup([tmp_path / "a"], 1, may_format=True)
    assert check_startup([tmp_path / "a", tmp_path / "b"], 1, may_format=True) == cluster_id
    assert read_meta_properties(tmp_path / "b").cluster_id == cluster_id  # type: ignore[union-attr]


def test_disagreements_refuse_to_start(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    write_meta_properties(a, MetaProperties(CLUSTER, 1, random_directory_id()))
    with pytest.raises(MetaPropertiesError, match="Stored node id 1 .* doesn't match the configured node.id 2"):
        check_startup([a], 2)
    with pytest.raises(MetaPropertiesError, match=f"expected other, but read {CLUSTER}"):
        check_startup([a], 1, "other")
    write_meta_properties(b, MetaProperties("another", 1, random_directory_id()))
    with pytest.raises(MetaPropertiesError, match="Invalid cluster.id"):
        check_startup([a, b], 1)
    same = read_meta_properties(a)
    write_meta_properties(b, same)  # type: ignore[arg-type]
    with pytest.raises(MetaPropertiesError, match="Duplicate directory id"):
        check_startup([a, b], 1)


def test_log_manager_checks_its_directory_and_the_metadata_directory(tmp_path: Path) -> None:
    manager = LogManager(tmp_path / "data", LogConfig())
    with pytest.raises(MetaPropertiesError, match="No meta.properties found"):
        manager.ensure_meta_properties(1, may_format=False)
    cluster_id = manager.ensure_meta_properties(1, CLUSTER, metadata_log_dir=tmp_path / "meta")
    assert cluster_id == CLUSTER and read_meta_properties(tmp_path / "meta") is not None
    assert manager.ensure_meta_properties(1, may_format=False, metadata_log_dir=tmp_path / "meta") == CLUSTER
    with pytest.raises(MetaPropertiesError, match="No meta.properties found"):
        manager.ensure_meta_properties(1, may_format=False, metadata_log_dir=tmp_path / "elsewhere")
