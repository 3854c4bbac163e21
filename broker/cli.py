"""`kbroker`: serve a node, or act as a Kafka client against any broker."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def _serve(args: argparse.Namespace) -> int:
    import uvloop

    from broker.config import ConfigError, load_config
    from broker.log_setup import setup_logging
    from storage.file_lock import DirLockError
    from storage.meta_properties import MetaPropertiesError

    setup_logging()
    overrides: dict[str, str] = {}
    for item in args.override or []:
        if "=" not in item:
            print(f"error: --override expects key=value, got '{item}'", file=sys.stderr)
            return 2
        key, value = item.split("=", 1)
        overrides[key.strip()] = value.strip()
    try:
        config = load_config(Path(args.config) if args.config else None, overrides)
        # Imported once the configuration is known good: a refusal is quick.
        from broker.server import serve

        uvloop.run(serve(config))
    except (ConfigError, MetaPropertiesError, DirLockError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def _storage(args: argparse.Namespace) -> int:
    from broker.config import ConfigError, load_config
    from broker.storage_tool import StorageToolError, format_storage, storage_info
    from storage.meta_properties import random_kafka_uuid

    if args.action == "random-uuid":
        print(random_kafka_uuid())
        return 0
    try:
        config = load_config(Path(args.config), {})
        if args.action == "info":
            return storage_info(config, sys.stdout, verbose=args.verbose)
        format_storage(
            config,
            args.cluster_id,
            sys.stdout,
            ignore_formatted=args.ignore_formatted,
            standalone=args.standalone,
            initial_controllers=args.initial_controllers,
            no_initial_controllers=args.no_initial_controllers,
            add_scram=args.add_scram or [],
            release_version=args.release_version,
        )
    except (ConfigError, StorageToolError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def _metadata_quorum(args: argparse.Namespace) -> int:
    from broker import metadata_quorum_command as mq
    from broker.config import ConfigError, load_config
    from storage.meta_properties import MetaPropertiesError, parse_kafka_uuid, read_meta_properties

    bootstrap = args.bootstrap_controller or args.bootstrap_server
    try:
        if args.action == "describe":
            if args.replication:
                mq.describe_replication(bootstrap, args.human_readable, sys.stdout)
            else:
                mq.describe_status(bootstrap, sys.stdout, controller=args.bootstrap_controller is not None)
        elif args.action == "add-controller":
            config = load_config(Path(args.command_config), {})
            meta = read_meta_properties(config.metadata_dir)
            if meta is None or not meta.directory_id:
                raise MetaPropertiesError(f"{config.metadata_dir} is not formatted: run `kbroker storage format --no-initial-controllers` first")
            listeners = [(lst.name, lst.host, lst.port) for lst in config.advertised_controller_listeners]
            mq.add_controller(bootstrap, config.node_id, parse_kafka_uuid(meta.directory_id), listeners)
            print(f"Added controller {config.node_id} with directory id {meta.directory_id} and endpoints: {', '.join(f'{n}://{h}:{p}' for n, h, p in listeners)}")
        else:
            mq.remove_controller(bootstrap, args.controller_id, parse_kafka_uuid(args.controller_directory_id))
            print(f"Removed KRaft controller {args.controller_id} with directory id {args.controller_directory_id}")
    except (mq.QuorumCommandError, ConfigError, MetaPropertiesError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def _topics(args: argparse.Namespace) -> int:
    from broker import client_commands as cc

    if args.action == "create":
        cc.topics_create(args.bootstrap_server, args.topic, args.partitions, args.replication_factor, cc.parse_kv(args.config), args.if_not_exists)
    elif args.action == "list":
        cc.topics_list(args.bootstrap_server)
    elif args.action == "describe":
        cc.topics_describe(args.bootstrap_server, args.topic)
    elif args.action == "delete":
        cc.topics_delete(args.bootstrap_server, _required(args.topic, "topic"))
    elif args.action == "alter":
        cc.topics_alter(args.bootstrap_server, _required(args.topic, "topic"), args.partitions_to, cc.parse_kv(args.config), args.delete_config or [])
    return 0


def _configs(args: argparse.Namespace) -> int:
    from broker import client_commands as cc

    if args.action == "describe":
        cc.configs_describe(args.bootstrap_server, args.entity_type, args.entity_name)
    else:
        ok = cc.configs_alter(args.bootstrap_server, args.entity_type, args.entity_name, cc.parse_kv(args.add_config), args.delete_config or [])
        return 0 if ok else 1
    return 0


def _produce(args: argparse.Namespace) -> int:
    from broker import client_commands as cc

    cc.produce(args.bootstrap_server, args.topic, args.key_separator, cc.parse_kv(args.header), args.partition, extra=cc.parse_kv(args.producer_property))
    return 0


def _consume(args: argparse.Namespace) -> int:
    from broker import client_commands as cc

    cc.consume(args.bootstrap_server, args.topic, args.from_beginning, args.partition, args.offset, args.max_messages, args.timeout_ms, args.print_key, args.key_separator)
    return 0


def _groups(args: argparse.Namespace) -> int:
    from broker import client_commands as cc

    if args.action == "list":
        cc.groups_list(args.bootstrap_server, args.state)
        return 0
    if args.action == "describe":
        if args.members and args.state is not None:
            print("error: --members and --state are mutually exclusive", file=sys.stderr)
            return 2
        cc.groups_describe(args.bootstrap_server, args.group, args.all_groups, members=args.members, state=args.state is not None, verbose=args.verbose)
        return 0
    if args.action == "delete":
        cc.groups_delete(args.bootstrap_server, args.group, args.all_groups)
        return 0
    scenarios = [(name, getattr(args, name.replace("-", "_"))) for name in cc.RESET_SCENARIOS]
    chosen = [(name, value) for name, value in scenarios if value is not None and value is not False]
    if len(chosen) != 1:
        print("error: reset-offsets needs exactly one of " + ", ".join(f"--{n}" for n in cc.RESET_SCENARIOS), file=sys.stderr)
        return 2
    if args.topic and args.all_topics:
        print("error: --topic and --all-topics are mutually exclusive", file=sys.stderr)
        return 2
    scenario, value = chosen[0]
    cc.groups_reset_offsets(args.bootstrap_server, args.group, args.all_groups, args.topic, args.all_topics, scenario, value, args.execute, args.dry_run)
    return 0


def _leader_election(args: argparse.Namespace) -> int:
    from broker import client_commands as cc

    # kafka-leader-election.sh's checks and messages (usage errors exit 2 here, as in the other commands).
    given = [args.topic is not None, args.all_topic_partitions, args.path_to_json_file is not None]
    if sum(given) != 1:
        print("error: One and only one of the following options is required: --topic, --all-topic-partitions, --path-to-json-file", file=sys.stderr)
        return 2
    if args.topic is not None and args.partition is None:
        print("error: Missing required option(s): --partition", file=sys.stderr)
        return 2
    if args.partition is not None and args.topic is None:
        print("error: Option --partition is only allowed if --topic is used", file=sys.stderr)
        return 2
    partitions: list[tuple[str, int]] | None = None
    if args.path_to_json_file is not None:
        try:
            partitions = cc.parse_election_partitions(Path(args.path_to_json_file).read_text())
        except OSError as e:
            cc.fail(f"cannot read {args.path_to_json_file}: {e.strerror}")
    elif args.topic is not None:
        partitions = [(args.topic, args.partition)]
    return cc.leader_election(args.bootstrap_server, args.election_type, partitions)


def _features(args: argparse.Namespace) -> int:
    from broker import features_command as fc
    from broker.controller.feature_control_manager import UpgradeType

    try:
        if args.action == "describe":
            fc.describe(args.bootstrap_server, sys.stdout)
            return 0
        if args.action == "version-mapping":
            fc.version_mapping(args.release_version, sys.stdout)
            return 0
        if args.action == "upgrade":
            updates = fc.updates_for(args.feature or [], args.metadata, UpgradeType.UPGRADE, args.release_version)
        elif args.action == "downgrade":
            kind = UpgradeType.UNSAFE_DOWNGRADE if args.unsafe else UpgradeType.SAFE_DOWNGRADE
            updates = fc.updates_for(args.feature or [], args.metadata, kind, args.release_version)
        else:
            updates = fc.disables_for(args.feature or [], args.unsafe)
        fc.update(args.bootstrap_server, updates, args.dry_run, sys.stdout, args.action)
    except fc.FeatureCommandError as e:
        print(str(e), file=sys.stderr)
        return 1
    return 0


def _reassign_partitions(args: argparse.Namespace) -> int:
    from broker import reassign_partitions_command as rp

    # kafka-reassign-partitions.sh's option checks (usage errors exit 2 here, as in the other commands).
    actions = [name for name in ("generate", "execute", "verify", "cancel", "list") if getattr(args, name)]
    if len(actions) != 1:
        print("error: Command must include exactly one action: --generate, --execute, --verify, --cancel, --list", file=sys.stderr)
        return 2
    action = actions[0]
    needs = {"generate": ["topics_to_move_json_file", "broker_list"], "execute": ["reassignment_json_file"], "verify": ["reassignment_json_file"], "cancel": ["reassignment_json_file"]}
    for name in needs.get(action, []):
        if getattr(args, name) is None:
            print(f"error: Missing required argument \"[{name.replace('_', '-')}]\"", file=sys.stderr)
            return 2
    allowed = {"generate": {"topics_to_move_json_file", "broker_list"}, "execute": {"reassignment_json_file", "throttle", "additional", "disallow_replication_factor_change"}}
    allowed.update(verify={"reassignment_json_file", "preserve_throttles"}, cancel={"reassignment_json_file", "preserve_throttles"})
    for name in ("topics_to_move_json_file", "broker_list", "reassignment_json_file", "throttle", "additional", "disallow_replication_factor_change", "preserve_throttles"):
        if getattr(args, name) not in (None, False) and name not in allowed.get(action, set()):
            print(f"error: Option \"[{name.replace('_', '-')}]\" can't be used with action \"[{action}]\"", file=sys.stderr)
            return 2

    def read(path: str) -> str:
        try:
            return Path(path).read_text()
        except OSError as e:
            print(f"error: cannot read {path}: {e.strerror}", file=sys.stderr)
            raise SystemExit(1) from None

    try:
        if action == "generate":
            rp.generate(args.bootstrap_server, read(args.topics_to_move_json_file), args.broker_list, sys.stdout, rack_aware=not args.disable_rack_aware)
        elif action == "execute":
            throttle = -1 if args.throttle is None else args.throttle
            rp.execute(
                args.bootstrap_server,
                read(args.reassignment_json_file),
                sys.stdout,
                throttle=throttle,
                additional=args.additional,
                allow_replication_factor_change=not args.disallow_replication_factor_change,
            )
        elif action == "verify":
            rp.verify(args.bootstrap_server, read(args.reassignment_json_file), sys.stdout, preserve_throttles=args.preserve_throttles)
        elif action == "cancel":
            rp.cancel(args.bootstrap_server, read(args.reassignment_json_file), sys.stdout, preserve_throttles=args.preserve_throttles)
        else:
            rp.list_command(args.bootstrap_server, sys.stdout)
    except rp.TerseError as e:
        print(e)
        return 1
    except rp.ReassignCommandError as e:
        print(f"Error: {e}")
        return 1
    except OSError as e:
        print(f"error: no broker answered at {args.bootstrap_server}: {e}", file=sys.stderr)
        return 1
    return 0


def _console(args: argparse.Namespace) -> int:
    from broker.console.server import main as console_main

    return console_main(args.bootstrap_server, args.host, args.port, args.interval)


def _required(value: str | None, name: str) -> str:
    if not value:
        print(f"error: --{name} is required", file=sys.stderr)
        raise SystemExit(2)
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kbroker", description="A Kafka-compatible broker, and Kafka client tools.")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run a broker+controller node")
    serve.add_argument("--config", help="server.properties file")
    serve.add_argument("--override", action="append", metavar="KEY=VALUE", help="override a property (repeatable)")
    serve.set_defaults(func=_serve)

    storage = sub.add_parser("storage", help="format a node's log directories, or show them (like kafka-storage.sh)")
    storage_sub = storage.add_subparsers(dest="action", required=True)
    fmt = storage_sub.add_parser("format", help="write meta.properties into every log directory and the metadata log directory")
    fmt.add_argument("--config", "-c", required=True, help="the node's server.properties")
    fmt.add_argument("--cluster-id", "-t", required=True, help="the cluster id (`kbroker storage random-uuid` makes one)")
    fmt.add_argument("--ignore-formatted", "-g", action="store_true", help="skip directories already formatted instead of failing")
    quorum = fmt.add_mutually_exclusive_group()
    quorum.add_argument("--standalone", "-s", action="store_true", help="a controller that starts a dynamic quorum alone")
    quorum.add_argument("--no-initial-controllers", "-N", action="store_true", help="no initial dynamic quorum (a broker, or a controller added later)")
    quorum.add_argument("--initial-controllers", "-I", metavar="ID@HOST:PORT:DIRECTORY_ID,...", help="the initial voters of a dynamic quorum, the same on every node")
    fmt.add_argument(
        "--add-scram", "-S", action="append", metavar="MECHANISM=[name=USER,password=PASSWORD]", help="a SCRAM credential the new cluster starts with (repeatable)"
    )
    fmt.add_argument("--release-version", "-r", metavar="VERSION", help="the metadata.version a new cluster starts at, as 4.0 or 4.4-IV2 (default: 4.4)")
    info = storage_sub.add_parser("info", help="show the log directories, their meta.properties and what kbroker finds in them")
    info.add_argument("--config", "-c", required=True, help="the node's server.properties")
    info.add_argument("--verbose", "-v", action="store_true", help="read every segment whole (CRCs, exact log ends) instead of names, sizes and the last index entry")
    storage_sub.add_parser("random-uuid", help="print a random cluster id")
    storage.set_defaults(func=_storage)

    mq = sub.add_parser("metadata-quorum", help="describe the KRaft metadata quorum, add or remove a controller (like kafka-metadata-quorum.sh)")
    where = mq.add_mutually_exclusive_group(required=True)
    where.add_argument("--bootstrap-server", help="HOST:PORT of a broker, which forwards to the active controller")
    where.add_argument("--bootstrap-controller", help="HOST:PORT of a controller listener")
    mq_sub = mq.add_subparsers(dest="action", required=True)
    describe = mq_sub.add_parser("describe", help="the quorum's status or each replica's position")
    shown = describe.add_mutually_exclusive_group(required=True)
    shown.add_argument("--status", action="store_true")
    shown.add_argument("--replication", action="store_true")
    describe.add_argument("--human-readable", action="store_true", help="--replication: times as 'N ms ago'")
    add = mq_sub.add_parser("add-controller", help="add the controller a config file describes to the voters (KIP-853)")
    add.add_argument("--command-config", required=True, help="the new controller's server.properties (formatted with --no-initial-controllers)")
    remove = mq_sub.add_parser("remove-controller", help="remove a voter (KIP-853)")
    remove.add_argument("--controller-id", type=int, required=True)
    remove.add_argument("--controller-directory-id", required=True)
    mq.set_defaults(func=_metadata_quorum)

    def client(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, help=f"HOST:PORT (default {DEFAULT_BOOTSTRAP})")
        return p

    topics = client(sub.add_parser("topics", help="create, list, describe, delete or alter topics"))
    topics.add_argument("action", choices=["create", "list", "describe", "delete", "alter"])
    topics.add_argument("topic", nargs="?")
    topics.add_argument("--topic", dest="topic_opt")
    topics.add_argument("--partitions", type=int, default=-1, help="create: partition count (default: broker's num.partitions)")
    topics.add_argument("--partitions-to", type=int, help="alter: new partition count")
    topics.add_argument("--replication-factor", type=int, default=-1)
    topics.add_argument("--config", action="append", metavar="KEY=VALUE")
    topics.add_argument("--delete-config", action="append", metavar="KEY")
    topics.add_argument("--if-not-exists", action="store_true")
    topics.set_defaults(func=_topics)

    configs = client(sub.add_parser("configs", help="describe or alter topic and broker configs"))
    configs.add_argument("action", choices=["describe", "alter"])
    configs.add_argument("--entity-type", choices=["topics", "brokers"], required=True)
    configs.add_argument("--entity-name", required=True)
    configs.add_argument("--add-config", action="append", metavar="K=V[,K=V]")
    configs.add_argument("--delete-config", action="append", metavar="KEY")
    configs.set_defaults(func=_configs)

    produce = client(sub.add_parser("produce", help="produce lines from stdin"))
    produce.add_argument("topic")
    produce.add_argument("--key-separator", help="split each line into key and value at the first SEP")
    produce.add_argument("--header", action="append", metavar="K=V", help="header on every record (repeatable)")
    produce.add_argument("--partition", type=int)
    produce.add_argument("--producer-property", action="append", metavar="K=V", help="librdkafka property (repeatable)")
    produce.set_defaults(func=_produce)

    consume = client(sub.add_parser("consume", help="print records to stdout"))
    consume.add_argument("topic")
    consume.add_argument("--from-beginning", action="store_true")
    consume.add_argument("--partition", type=int)
    consume.add_argument("--offset", type=int)
    consume.add_argument("--max-messages", type=int)
    consume.add_argument("--timeout-ms", type=int, help="exit after this long without reaching --max-messages")
    consume.add_argument("--print-key", action="store_true")
    consume.add_argument("--key-separator", default="\t")
    consume.set_defaults(func=_consume)

    groups = client(sub.add_parser("groups", help="list, describe, delete consumer groups or reset their offsets (like kafka-consumer-groups.sh)"))
    groups.add_argument("action", choices=["list", "describe", "delete", "reset-offsets"])
    which = groups.add_mutually_exclusive_group()
    which.add_argument("--group", action="append", metavar="GROUP", help="the group (repeatable)")
    which.add_argument("--all-groups", action="store_true", help="describe/delete/reset-offsets: every group")
    groups.add_argument("--state", nargs="?", const="", metavar="STATE[,STATE]", help="list: show states, or only groups in these states; describe: the group's state")
    groups.add_argument("--members", action="store_true", help="describe: one row per member")
    groups.add_argument("--verbose", action="store_true", help="describe --members: the assignment too")
    groups.add_argument("--topic", action="append", metavar="TOPIC[:P,P]", help="reset-offsets: a topic, or some of its partitions (repeatable)")
    groups.add_argument("--all-topics", action="store_true", help="reset-offsets: every topic the group has offsets for")
    groups.add_argument("--to-earliest", action="store_true")
    groups.add_argument("--to-latest", action="store_true")
    groups.add_argument("--to-current", action="store_true")
    groups.add_argument("--to-offset", type=int, metavar="N")
    groups.add_argument("--shift-by", type=int, metavar="N")
    groups.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss", help="first offset at or after this time (no zone: local time)")
    mode = groups.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="reset-offsets: only print the plan (the default)")
    mode.add_argument("--execute", action="store_true", help="reset-offsets: commit the new offsets")
    groups.set_defaults(func=_groups)

    election = client(sub.add_parser("leader-election", help="elect preferred or unclean partition leaders (like kafka-leader-election.sh)"))
    election.add_argument("--election-type", required=True, type=str.lower, choices=["preferred", "unclean"])
    election.add_argument("--all-topic-partitions", action="store_true", help="every partition that needs the election")
    election.add_argument("--topic", help="the topic of the one partition to elect (with --partition)")
    election.add_argument("--partition", type=int)
    election.add_argument("--path-to-json-file", metavar="FILE", help='the partitions: {"partitions": [{"topic": "t", "partition": 0}, ...]}')
    election.set_defaults(func=_leader_election)

    features = client(sub.add_parser("features", help="describe, upgrade, downgrade or disable the cluster's feature levels (like kafka-features.sh)"))
    features_sub = features.add_subparsers(dest="action", required=True)
    features_sub.add_parser("describe", help="each feature's supported range and finalized level")
    for action, text in (("upgrade", "raise finalized levels"), ("downgrade", "lower finalized levels"), ("disable", "set features to level 0")):
        p = features_sub.add_parser(action, help=text)
        p.add_argument("--feature", action="append", metavar="NAME=LEVEL" if action != "disable" else "NAME", help="repeatable")
        if action != "disable":
            p.add_argument("--metadata", metavar="VERSION", help="metadata.version by release, as 4.4 or 4.4-IV1")
            p.add_argument("--release-version", metavar="VERSION", help="metadata.version and every feature at that release's defaults")
        if action != "upgrade":
            p.add_argument("--unsafe", action="store_true", help="an unsafe (lossy) downgrade")
        p.add_argument("--dry-run", action="store_true", help="validate only")
    mapping = features_sub.add_parser("version-mapping", help="the feature levels a release version sets")
    mapping.add_argument("--release-version", metavar="VERSION", help="default: the latest production release")
    features.set_defaults(func=_features, unsafe=False, metadata=None, release_version=None)

    reassign = client(sub.add_parser("reassign-partitions", help="move partitions between brokers (like kafka-reassign-partitions.sh)"))
    for action, text in (
        ("generate", "propose an assignment of --topics-to-move-json-file over --broker-list"),
        ("execute", "start the reassignment of --reassignment-json-file"),
        ("verify", "tell whether the reassignment is done; then clear the throttles"),
        ("cancel", "revert the reassignment's moves in progress"),
        ("list", "list the reassignments in progress"),
    ):
        reassign.add_argument(f"--{action}", action="store_true", help=text)
    reassign.add_argument("--topics-to-move-json-file", metavar="FILE", help='{"version": 1, "topics": [{"topic": "t"}, ...]}')
    reassign.add_argument("--broker-list", metavar="IDS", help="brokers to place the partitions on, as 1,2,3")
    reassign.add_argument("--reassignment-json-file", metavar="FILE", help='{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2]}, ...]}')
    reassign.add_argument("--throttle", type=int, metavar="BYTES", help="throttle the moves to BYTES/s (leader and follower replication rates)")
    reassign.add_argument("--additional", action="store_true", help="execute while other reassignments are in progress")
    reassign.add_argument("--disallow-replication-factor-change", action="store_true", help="refuse moves that change a partition's replica count (KIP-860)")
    reassign.add_argument("--preserve-throttles", action="store_true", help="leave the broker and topic throttles as they are")
    reassign.add_argument("--disable-rack-aware", action="store_true", help="--generate: place replicas without regard to the brokers' racks")
    reassign.set_defaults(func=_reassign_partitions)

    console = client(sub.add_parser("console", help="serve a live web page of the cluster: brokers, quorum, topics, groups and lag, transactions, messages"))
    console.add_argument("--port", type=int, default=8080, help="the page's HTTP port (default 8080; 0 picks a free one)")
    console.add_argument("--host", default="127.0.0.1", help="the address to serve on (default 127.0.0.1)")
    console.add_argument("--interval", type=float, default=1.0, help="seconds between two looks at the cluster (default 1)")
    console.set_defaults(func=_console)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "topic_opt", None):
        args.topic = args.topic_opt
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
