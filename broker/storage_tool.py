"""`kbroker storage`: kafka-storage.sh's `format`, `info` and `random-uuid`, and the start-up storage check.

`format` writes `meta.properties` into every log directory and the metadata log directory of a
node, as Kafka's Formatter does. With the KIP-853 options (`--standalone`, `--initial-controllers`)
the metadata directory also gets the bootstrap checkpoint, snapshot 0-0 of `__cluster_metadata-0`
holding kraft.version 1 and the initial VotersRecord: a node that starts without
controller.quorum.voters learns its voters from it, and an initial voter's directory id is the one
the voter set names. `--no-initial-controllers` writes no checkpoint: that controller starts as an
observer and joins the quorum through add-controller.
"""

from __future__ import annotations

import base64
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence, TextIO

from broker.config import BrokerConfig
from broker.controller.controller_logic import cluster_bootstrap_records
from broker.controller.feature_control_manager import new_cluster_features
from broker.log_dir_inventory import describe_log_dir, duplicate_partitions, render
from broker.metadata import metadata_version as mv
from broker.metadata.bootstrap_directory import write_bootstrap_metadata
from broker.security.scram_parser import ScramParseError, parse_add_scram
from raft.kafka_metadata_log import KafkaMetadataLog, metadata_log_dir
from raft.voter_history import write_bootstrap_checkpoint
from raft.voter_set import Endpoint, VoterNode, VoterSet
from storage.meta_properties import (
    META_PROPERTIES,
    MetaProperties,
    MetaPropertiesError,
    check_cluster_id,
    check_startup,
    directories_of,
    load_ensemble,
    parse_kafka_uuid,
    random_directory_id,
    read_meta_properties,
    verify_ensemble,
    write_meta_properties,
)


class StorageToolError(Exception):
    """Why a storage command cannot go on; one line."""


@dataclass(frozen=True)
class DynamicVoter:
    """One `--initial-controllers` entry: `id@host:port:directory-id` (Kafka's DynamicVoter)."""

    node_id: int
    host: str
    port: int
    directory_id: str


def parse_dynamic_voter(text: str) -> DynamicVoter:
    entry = text.strip()
    m = re.fullmatch(r"(\d+)@(\[[^\]]*\]|[^:\[\]]+):(\d+):(.+)", entry)
    if not m:
        raise StorageToolError(f"'{entry}' is not ID@HOST:PORT:DIRECTORY_ID")
    port = int(m.group(3))
    if port > 65535:
        raise StorageToolError(f"Invalid port {port} in dynamic voter string '{entry}'")
    try:
        directory_id = parse_kafka_uuid(m.group(4))
    except ValueError as e:
        raise StorageToolError(f"Failed to parse directory ID in dynamic voter string '{entry}': {e}") from None
    return DynamicVoter(int(m.group(1)), m.group(2).strip("[]"), port, _uuid_text(directory_id.bytes))


def parse_dynamic_voters(text: str) -> list[DynamicVoter]:
    """Kafka's DynamicVoters.parse: a non-empty comma-separated list, each node id once."""
    voters = [parse_dynamic_voter(item) for item in text.split(",") if item.strip()]
    if not voters:
        raise StorageToolError("No voters given.")
    seen: set[int] = set()
    for voter in voters:
        if voter.node_id in seen:
            raise StorageToolError(f"Node id {voter.node_id} was specified more than once in the dynamic voter set.")
        seen.add(voter.node_id)
    return voters


def _uuid_text(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _same_directory(a: Path, b: Path) -> bool:
    return os.path.normpath(os.path.abspath(a)) == os.path.normpath(os.path.abspath(b))


def standalone_voter(config: BrokerConfig) -> DynamicVoter:
    """`--standalone`: this controller alone, at its first advertised controller listener, with a new directory id."""
    if not config.is_controller:
        raise StorageToolError("You can only use --standalone on a controller.")
    listeners = config.advertised_controller_listeners
    if not listeners:
        raise StorageToolError("No controller listeners found.")
    return DynamicVoter(config.node_id, listeners[0].host, listeners[0].port, random_directory_id())


def initial_voter_set(voters: list[DynamicVoter], config: BrokerConfig) -> VoterSet:
    """Kafka's DynamicVoters.toVoterSet: every voter on the first controller listener's name."""
    names = config.controller_listener_name_list
    if not names:
        raise StorageToolError("You must specify the name of the initial controller listener (controller.listener.names).")
    return VoterSet(VoterNode(v.node_id, parse_kafka_uuid(v.directory_id), (Endpoint(names[0], v.host, v.port),)) for v in voters)


def write_dynamic_quorum_snapshot(metadata_dir: Path, voters: VoterSet, time_ms: int) -> None:
    """The bootstrap checkpoint in ``metadata_dir``'s `__cluster_metadata-0`; one already there is kept."""
    log = KafkaMetadataLog.open(metadata_log_dir(metadata_dir))
    try:
        write_bootstrap_checkpoint(log, voters, time_ms)
    finally:
        log.close()


def format_storage(
    config: BrokerConfig,
    cluster_id: str,
    out: TextIO,
    *,
    ignore_formatted: bool = False,
    standalone: bool = False,
    initial_controllers: str | None = None,
    no_initial_controllers: bool = False,
    add_scram: Sequence[str] = (),
    release_version: str | None = None,
) -> None:
    """Kafka's StorageTool format + Formatter: meta.properties in every directory not formatted yet;
    with ``add_scram`` or ``release_version``, the metadata directory's bootstrap.checkpoint too:
    metadata.version at that release (else Kafka 4.4's default, 4.4-IV2) and the features kbroker
    implements at Kafka's defaults for it. A release in development needs unstable.feature.versions.enable."""
    bootstrap_version: int | None = None
    if release_version is not None:
        try:
            bootstrap_version = mv.from_version_string(release_version, unstable=config.unstable_feature_versions_enable).level
        except ValueError as e:
            raise StorageToolError(str(e)) from None
        if bootstrap_version < mv.MINIMUM_VERSION.level:
            raise StorageToolError(f"The metadata.version must be at least {mv.MINIMUM_VERSION.name}")
    try:
        check_cluster_id(cluster_id)
    except MetaPropertiesError as e:
        raise StorageToolError(str(e)) from None
    try:
        scram = [parse_add_scram(text) for text in add_scram]
    except ScramParseError as e:
        raise StorageToolError(str(e)) from None
    voters: list[DynamicVoter] | None = None
    if standalone:
        voters = [standalone_voter(config)]
    elif initial_controllers is not None:
        voters = parse_dynamic_voters(initial_controllers)
    static_voters = bool(config.controller_quorum_voters.strip())
    if voters is not None and static_voters:
        raise StorageToolError(
            "You cannot specify controller.quorum.voters and format the node with --initial-controllers or --standalone: "
            "for a dynamic quorum, use controller.quorum.bootstrap.servers instead."
        )
    if config.is_controller and not static_voters and not config.implicit_quorum and voters is None and not no_initial_controllers:
        raise StorageToolError(
            "Because controller.quorum.voters is not set on this controller, you must specify one of the following: "
            "--standalone, --initial-controllers, or --no-initial-controllers."
        )
    directories = directories_of(config.log_dir_paths, config.metadata_dir)
    try:
        ensemble = load_ensemble(directories)
        verify_ensemble(ensemble, cluster_id, config.node_id)
    except MetaPropertiesError as e:
        raise StorageToolError(str(e)) from None
    formatted = [d for d, meta in ensemble.items() if meta is not None]
    if formatted and not ignore_formatted:
        raise StorageToolError(f"Log directory {formatted[0]} is already formatted. Use --ignore-formatted to ignore this directory and format the others.")
    empty = [d for d, meta in ensemble.items() if meta is None]
    if not empty:
        print("All of the log directories are already formatted.", file=out)
        return
    own_voter = next((v for v in voters or [] if v.node_id == config.node_id), None)
    voter_set = None if voters is None else initial_voter_set(voters, config)
    for directory in empty:
        directory_id = random_directory_id()
        if not _same_directory(directory, config.metadata_dir):
            kind = "data directory"
        elif voters is None:
            kind = "metadata directory"
        elif own_voter is None:
            kind = "dynamic metadata directory"
        else:
            kind, directory_id = "dynamic metadata voter directory", own_voter.directory_id
        print(f"Formatting {kind} {directory} with cluster.id {cluster_id}.", file=out)
        if (scram or bootstrap_version is not None) and kind != "data directory":
            level = mv.LATEST_PRODUCTION.level if bootstrap_version is None else bootstrap_version
            features = new_cluster_features(level)
            try:
                records = [*cluster_bootstrap_records(metadata_version=level, features=features, min_insync_replicas=config.min_insync_replicas), *scram]
                write_bootstrap_metadata(directory, records, int(time.time() * 1000))
            except OSError as e:
                raise StorageToolError(f"Error while writing the bootstrap checkpoint in {directory}: {e.strerror or e}") from None
        if voter_set is not None and kind != "data directory":
            # Before meta.properties, as Kafka does: a directory that is formatted is complete.
            try:
                write_dynamic_quorum_snapshot(directory, voter_set, int(time.time() * 1000))
            except OSError as e:
                raise StorageToolError(f"Error while writing the bootstrap checkpoint in {directory}: {e.strerror or e}") from None
        try:
            write_meta_properties(directory, MetaProperties(cluster_id=cluster_id, node_id=config.node_id, directory_id=directory_id))
        except OSError as e:
            raise StorageToolError(f"Error while writing meta.properties file {directory}: {e.strerror or e}") from None


def storage_info(config: BrokerConfig, out: TextIO, *, verbose: bool = False) -> int:
    """Kafka's `kafka-storage.sh info`: the directories, their metadata, and any problem (exit code 1),
    as Kafka 4.4 prints them; then what kbroker found in each directory (broker/log_dir_inventory.py),
    whose problems (what would stop kbroker, or a broker running on the directory) exit 1 too."""
    problems: list[str] = []
    found: list[Path] = []
    first: MetaProperties | None = None
    for directory in directories_of(config.log_dir_paths, config.metadata_dir):
        if not directory.is_dir():
            problems.append(f"{directory} {'is not a directory' if directory.exists() else 'does not exist'}")
            continue
        found.append(directory)
        try:
            meta = read_meta_properties(directory)
        except MetaPropertiesError as e:
            problems.append(f"Error loading {directory / META_PROPERTIES}: {e}")
            continue
        if meta is None:
            problems.append(f"{directory} is not formatted.")
        elif first is None:
            first = meta
        elif meta.cluster_id != first.cluster_id:
            problems.append("Mismatched cluster IDs between storage directories.")
        elif meta.node_id != first.node_id:
            problems.append("Mismatched node IDs between storage directories.")
    if found:
        print("Found log director" + ("y:" if len(found) == 1 else "ies:"), file=out)
        for directory in found:
            print(f"  {directory}", file=out)
        print("", file=out)
    if first is not None:
        shown = ", ".join(f"{k}={v}" for k, v in sorted(first.to_properties().items()))
        print(f"Found metadata: {{{shown}}}", file=out)
        print("", file=out)
    if problems:
        print("Found problem" + (":" if len(problems) == 1 else "s:"), file=out)
        for problem in problems:
            print(f"  {problem}", file=out)
        print("", file=out)
    inventories = [
        describe_log_dir(
            directory,
            is_log_dir=any(_same_directory(directory, d) for d in config.log_dir_paths),
            is_metadata_dir=_same_directory(directory, config.metadata_dir),
            has_broker=config.is_broker,
            verbose=verbose,
        )
        for directory in found
    ]
    for inventory in inventories:
        print("\n".join(render(inventory)), file=out)
        print("", file=out)
    duplicates = duplicate_partitions(inventories)
    for duplicate in duplicates:
        print(f"problem: {duplicate}", file=out)
    return 1 if problems or duplicates or any(i.problems for i in inventories) else 0


def verify_storage(config: BrokerConfig) -> str:
    """The start-up check of every directory's meta.properties (Kafka's KafkaRaftServer does it first of
    all); the zero-config node formats its own. Returns the cluster id; raises MetaPropertiesError."""
    directories = directories_of(config.log_dir_paths, config.metadata_dir)
    return check_startup(directories, config.node_id, config.cluster_id, may_format=config.implicit_quorum, metadata_dir=config.metadata_dir)
