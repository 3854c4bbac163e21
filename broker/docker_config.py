"""The container entrypoint: a kbroker node configured as Apache Kafka's docker image configures Kafka.

Every `KAFKA_*` environment variable is a server property: `KAFKA_` stripped, lower-cased, `_` to
`.`, then `___` (now `...`) to `-` and `__` (now `..`) to `_`, so KAFKA_CONTROLLER_QUORUM_VOTERS is
controller.quorum.voters. They are appended to a mounted /mnt/shared/config/server.properties if
there is one; with neither, the node is Kafka's image default, one combined node. Storage is
formatted with CLUSTER_ID unless it already is, then `kbroker serve` replaces this process.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Mapping

from broker.config import ConfigError, load_config, read_properties
from broker.storage_tool import StorageToolError, format_storage

CONFIG_FILE = Path("/etc/kbroker/server.properties")
MOUNTED_CONFIG_FILE = Path("/mnt/shared/config/server.properties")
# Kafka's image default (its configureDefaults); set CLUSTER_ID to your own `kbroker storage random-uuid`.
DEFAULT_CLUSTER_ID = "5L6g3nShT-eMCtK--X86sw"
# Variables Kafka's image reads itself rather than passing on as properties (JVM and log4j settings).
NOT_PROPERTIES = frozenset(
    {
        "KAFKA_VERSION",
        "KAFKA_HEAP_OPTS",
        "KAFKA_LOG4J_OPTS",
        "KAFKA_OPTS",
        "KAFKA_JMX_OPTS",
        "KAFKA_JVM_PERFORMANCE_OPTS",
        "KAFKA_GC_LOG_OPTS",
        "KAFKA_LOG4J_ROOT_LOGLEVEL",
        "KAFKA_LOG4J_LOGGERS",
        "KAFKA_TOOLS_LOG4J_LOGLEVEL",
        "KAFKA_JMX_HOSTNAME",
    }
)
# What Kafka's image runs with no configuration at all: one combined node reachable on localhost:9092.
DEFAULT_PROPERTIES = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093",
    "advertised.listeners": "PLAINTEXT://localhost:9092",
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
    "controller.quorum.voters": "1@localhost:9093",
    "log.dirs": "/var/lib/kbroker/data",
}


class DockerConfigError(Exception):
    """An environment the image cannot turn into a node; one line."""


def property_name(env_key: str) -> str:
    """KAFKA_LOG_DIRS -> log.dirs, KAFKA_A__B -> a_b, KAFKA_A___B -> a-b (Kafka's image, in its order)."""
    return env_key.removeprefix("KAFKA_").lower().replace("_", ".").replace("...", "-").replace("..", "_")


def properties_from_env(env: Mapping[str, str]) -> dict[str, str]:
    """The server properties the KAFKA_* variables give, with the image's rules for listeners."""
    props = {property_name(k): v for k, v in env.items() if k.startswith("KAFKA_") and k not in NOT_PROPERTIES}
    controller_only = props.get("process.roles", "").replace(" ", "") == "controller"
    if controller_only and props.get("advertised.listeners"):
        raise DockerConfigError("KAFKA_ADVERTISED_LISTENERS is not supported on a KRaft controller.")
    if "listeners" not in props and not controller_only and props.get("advertised.listeners"):
        # As Kafka's image: listen on every interface at the advertised ports.
        props["listeners"] = re.sub(r"://[^:]*:", "://0.0.0.0:", props["advertised.listeners"])
    return props


def node_properties(env: Mapping[str, str], mounted: Path | None = None) -> dict[str, str]:
    """A mounted server.properties overlaid with the environment's; the image default when both are empty."""
    props = read_properties(mounted) if mounted is not None and mounted.exists() else {}
    props.update(properties_from_env(env))
    return props or dict(DEFAULT_PROPERTIES)


def cluster_id_from_env(env: Mapping[str, str]) -> str:
    return env.get("CLUSTER_ID") or DEFAULT_CLUSTER_ID


def write_properties(path: Path, props: Mapping[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kbroker-docker", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config-file", type=Path, default=CONFIG_FILE, help="where to write the node's server.properties")
    parser.add_argument("--mounted-config", type=Path, default=MOUNTED_CONFIG_FILE, help="a server.properties to start from, if present")
    args = parser.parse_args(argv)
    try:
        props = node_properties(os.environ, args.mounted_config)
        write_properties(args.config_file, props)
        config = load_config(args.config_file, {})
        format_storage(config, cluster_id_from_env(os.environ), sys.stdout, ignore_formatted=True)
    except (DockerConfigError, ConfigError, StorageToolError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, "-m", "broker", "serve", "--config", str(args.config_file)])


if __name__ == "__main__":
    raise SystemExit(main())
