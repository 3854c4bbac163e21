"""Kafka's `meta.properties`: which cluster and node a log directory belongs to, and the directory's id.

Version 1 (KRaft) holds `cluster.id`, `node.id` and `directory.id`. `kbroker storage format` writes
one into every log directory and the metadata log directory; at start-up every one of them must
be there and agree with each other and with the node's configuration (Kafka's
MetaPropertiesEnsemble), except for the zero-config node, which formats itself.
"""

from __future__ import annotations

import base64
import os
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

import structlog

from storage.checkpoints import fsync_dir

log = structlog.get_logger(__name__)

META_PROPERTIES = "meta.properties"
VERSION = 1
# Kafka's Uuid.randomUuid never returns these two (Uuid.RESERVED), DirectoryId.random none of the first 100.
_RESERVED_UUIDS = 2
_RESERVED_DIRECTORY_IDS = 100


class MetaPropertiesError(ValueError):
    """A missing, unreadable or disagreeing meta.properties; the message is one line naming the file."""


def _random_uuid(reserved_below: int) -> str:
    while True:
        raw = uuid.uuid4().bytes
        text = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        # Kafka skips ids whose text starts with '-': a command line would take them for an option.
        if int.from_bytes(raw, "big") >= reserved_below and not text.startswith("-"):
            return text


def random_kafka_uuid() -> str:
    """A random Uuid as Kafka prints it: 22 characters of URL-safe base64 of 16 bytes (a cluster id)."""
    return _random_uuid(_RESERVED_UUIDS)


def random_directory_id() -> str:
    """Kafka's DirectoryId.random: a Uuid that is none of the 100 reserved directory ids."""
    return _random_uuid(_RESERVED_DIRECTORY_IDS)


def parse_kafka_uuid(text: str) -> uuid.UUID:
    """Kafka's Uuid.fromString: URL-safe base64 (padding optional) of exactly 16 bytes."""
    if len(text) > 24 or not re.fullmatch(r"[A-Za-z0-9_-]+={0,2}", text):
        raise ValueError(f"'{text}' is not a base64 Kafka Uuid")
    raw = base64.urlsafe_b64decode(text.rstrip("=") + "=" * (-len(text.rstrip("=")) % 4))
    if len(raw) != 16:
        raise ValueError(f"'{text}' decodes as {len(raw)} bytes, not the 16 of a Kafka Uuid")
    return uuid.UUID(bytes=raw)


def check_cluster_id(cluster_id: str) -> str:
    """A cluster id must survive a properties file and every protocol string field."""
    if not cluster_id or not re.fullmatch(r"[\x21-\x7e]+", cluster_id) or cluster_id[0] in "#!":
        raise MetaPropertiesError(f"cluster id '{cluster_id}' must be printable ASCII without spaces (`kbroker storage random-uuid` makes one)")
    return cluster_id


@dataclass(frozen=True)
class MetaProperties:
    cluster_id: str
    node_id: int
    directory_id: str
    version: int = VERSION

    def to_properties(self) -> dict[str, str]:
        return {
            "version": str(self.version),
            "cluster.id": self.cluster_id,
            "node.id": str(self.node_id),
            "directory.id": self.directory_id,
        }

    @classmethod
    def from_properties(cls, props: Mapping[str, str], path: Path) -> "MetaProperties":
        """Kafka's MetaProperties.Builder: a KRaft (version 1) file with every field readable."""
        version = props.get("version", "0")
        if version != str(VERSION):
            raise MetaPropertiesError(f"{path} has version {version}: it was written for ZooKeeper mode, and only version {VERSION} (KRaft) is read")
        for key in ("cluster.id", "node.id"):
            if not props.get(key):
                raise MetaPropertiesError(f"{key} was not specified in the v1 file: {path}")
        try:
            node_id = int(props["node.id"])
        except ValueError:
            raise MetaPropertiesError(f"node.id '{props['node.id']}' in {path} is not a number") from None
        directory_id = props.get("directory.id", "")
        if directory_id:
            try:
                parsed = parse_kafka_uuid(directory_id)
            except ValueError as e:
                raise MetaPropertiesError(f"directory.id in {path} is unreadable: {e}") from None
            if parsed.int < _RESERVED_DIRECTORY_IDS:
                raise MetaPropertiesError(f"directory.id {directory_id} in {path} is one of Kafka's reserved directory ids")
        return cls(cluster_id=props["cluster.id"], node_id=node_id, directory_id=directory_id)


def read_meta_properties(directory: Path) -> MetaProperties | None:
    """The directory's meta.properties, or None when it has none (the directory is not formatted)."""
    path = directory / META_PROPERTIES
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise MetaPropertiesError(f"cannot read {path}: {e.strerror or e}") from None
    props: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if line and line[0] not in "#!":
            key, sep, value = line.partition("=")
            if sep:
                props[key.strip()] = value.strip()
    return MetaProperties.from_properties(props, path)


def write_meta_properties(directory: Path, meta: MetaProperties) -> None:
    """Create the directory if needed and replace its meta.properties atomically and durably."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / META_PROPERTIES
    body = "#\n" + "".join(f"{k}={v}\n" for k, v in meta.to_properties().items())
    tmp = path.with_name(META_PROPERTIES + ".tmp")
    with open(tmp, "w") as f:
        f.write(body)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(directory)


def directories_of(log_dirs: Iterable[Path], metadata_log_dir: Path) -> list[Path]:
    """Every directory a node formats: its log dirs and its metadata log dir, once each, in a stable order."""
    seen: dict[str, Path] = {}
    for d in [*log_dirs, metadata_log_dir]:
        seen.setdefault(os.path.normpath(os.path.abspath(d)), d)
    return [seen[k] for k in sorted(seen)]


def load_ensemble(directories: Iterable[Path]) -> dict[Path, MetaProperties | None]:
    return {d: read_meta_properties(d) for d in directories}


def verify_ensemble(ensemble: Mapping[Path, MetaProperties | None], cluster_id: str | None, node_id: int) -> str | None:
    """Kafka's MetaPropertiesEnsemble.verify: one cluster id (the expected one when given), this node's
    id, no directory id twice. Returns the cluster id the formatted directories hold, if any."""
    seen_dirs: dict[str, Path] = {}
    for directory, meta in ensemble.items():
        if meta is None:
            continue
        path = directory / META_PROPERTIES
        if cluster_id is None:
            cluster_id = meta.cluster_id
        elif meta.cluster_id != cluster_id:
            raise MetaPropertiesError(f"Invalid cluster.id in {path}: expected {cluster_id}, but read {meta.cluster_id}")
        if meta.node_id != node_id:
            raise MetaPropertiesError(
                f"Stored node id {meta.node_id} in {path} doesn't match the configured node.id {node_id}: "
                "if you moved your data, configure its node id; for a new node, empty its data directories"
            )
        if meta.directory_id:
            other = seen_dirs.setdefault(meta.directory_id, directory)
            if other != directory:
                raise MetaPropertiesError(f"Duplicate directory id {meta.directory_id}: it is the id of {other} and of {directory}")
    return cluster_id


def check_startup(
    directories: list[Path], node_id: int, cluster_id: str | None = None, *, may_format: bool = False, metadata_dir: Path | None = None
) -> str:
    """What a node checks before it opens any log: every directory formatted for this cluster and node.

    ``cluster_id`` is the one the configuration expects, if any. With ``may_format`` (the zero-config
    node only) the unformatted directories are formatted, with the cluster id the others hold, else
    ``cluster_id``, else a new one. Returns the cluster id; raises MetaPropertiesError.

    Given ``metadata_dir``, a log dir other than it whose meta.properties cannot be read is left out,
    as Kafka's errorLogDirs (the LogManager takes it offline), while the metadata log dir and one
    other dir can be: Kafka's REQUIRE_METADATA_LOG_DIR and REQUIRE_AT_LEAST_ONE_VALID.
    """
    ensemble: dict[Path, MetaProperties | None] = {}
    for directory in directories:
        try:
            ensemble[directory] = read_meta_properties(directory)
        except MetaPropertiesError as e:
            if metadata_dir is None or os.path.abspath(directory) == os.path.abspath(metadata_dir):
                raise
            log.error("meta_properties.unreadable", dir=str(directory), error=str(e))
    if not ensemble:
        raise MetaPropertiesError(f"No readable meta.properties files found in {', '.join(map(str, directories))}")
    stored = verify_ensemble(ensemble, cluster_id, node_id)
    missing = [d for d, meta in ensemble.items() if meta is None]
    if missing and not may_format:
        raise MetaPropertiesError(f"No meta.properties found in {missing[0]} (have you run `kbroker storage format` to format the directory?)")
    cluster_id = stored or check_cluster_id(cluster_id or random_kafka_uuid())
    for directory in missing:
        try:
            write_meta_properties(directory, MetaProperties(cluster_id=cluster_id, node_id=node_id, directory_id=random_directory_id()))
        except OSError as e:
            # Before any log is opened: the node refuses to start, in one line, as for an unreadable one.
            raise MetaPropertiesError(f"cannot write {directory / META_PROPERTIES}: {e}") from None
    return cluster_id
