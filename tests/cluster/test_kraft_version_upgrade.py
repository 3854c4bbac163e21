"""A static controller quorum (controller.quorum.voters, kraft.version 0) upgraded to kraft.version 1
with Kafka 4.4's own tools, as a Kafka 4.4 operator would do it:

    kafka-features.sh --bootstrap-server ... upgrade --feature kraft.version=1

Before it, kafka-features describe shows kraft.version finalized at 0 of 0-1 and
kafka-metadata-quorum describe shows voters without directory ids; after it, level 1 and every
voter's directory id (the voters told the leader about themselves with UpdateRaftVoter, and the
upgrade wrote them into the log with KRaftVersionRecord(1)). Then the quorum is dynamic:
kafka-metadata-quorum remove-controller takes a voter out and add-controller brings it back.
The answers are those Kafka 4.4 gives on a KafkaReferenceCluster (benchmarks/apache_kafka.py).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from tests.cluster.cluster import KafkaCluster, wait_until
from tests.kafka_tools import kafka_tool

FEATURES = "org.apache.kafka.tools.FeatureCommand"
QUORUM = "org.apache.kafka.tools.MetadataQuorumCommand"
TIMEOUT_S = 60.0
KRAFT_LINE = re.compile(r"^Feature: kraft\.version\s+SupportedMinVersion: 0\s+SupportedMaxVersion: 1\s+FinalizedVersionLevel: (\d)\s+Epoch: \d+$")
ALL_FAILED = "The update failed for all features since the following feature had an error: "


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    c = KafkaCluster(tmp_path_factory.mktemp("kraft-version-upgrade"), combined=3)
    try:
        c.start()
        c.await_all_brokers_live()
        yield c
    finally:
        c.close()


def tool(lib: Path, main_class: str, *args: str) -> subprocess.CompletedProcess[str]:
    return kafka_tool(lib, main_class, *args)


def ran(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def kraft_level(lib: Path, cluster: KafkaCluster) -> int:
    lines = ran(tool(lib, FEATURES, "--bootstrap-server", cluster.bootstrap, "describe")).splitlines()
    levels = [int(m.group(1)) for m in map(KRAFT_LINE.match, lines) if m]
    assert len(levels) == 1, lines
    return levels[0]


def status(lib: Path, cluster: KafkaCluster) -> dict[str, str]:
    out = ran(tool(lib, QUORUM, "--bootstrap-server", cluster.bootstrap, "describe", "--status"))
    return {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in out.splitlines() if ":" in line)}


def voters(lib: Path, cluster: KafkaCluster) -> list[dict[str, object]]:
    return list(json.loads(status(lib, cluster)["CurrentVoters"]))


def replication_directories(lib: Path, cluster: KafkaCluster) -> dict[int, str]:
    out = ran(tool(lib, QUORUM, "--bootstrap-server", cluster.bootstrap, "describe", "--replication"))
    rows = [line.split() for line in out.splitlines()[1:] if line.strip()]
    return {int(row[0]): row[1] for row in rows if row[-1] in ("Leader", "Follower")}


def test_upgrade_a_static_quorum_to_kraft_version_1_then_change_its_voters(cluster: KafkaCluster, kafka_lib: Path) -> None:
    b = ("--bootstrap-server", cluster.bootstrap)
    # kraft.version 0: finalized 0 of 0-1, voters named by controller.quorum.voters alone.
    assert kraft_level(kafka_lib, cluster) == 0
    assert all("directoryId" not in v for v in voters(kafka_lib, cluster))
    assert set(replication_directories(kafka_lib, cluster).values()) == {"AAAAAAAAAAAAAAAAAAAAAA"}
    # As Kafka 4.4: a "downgrade" to the level it has is no change; past the supported range is refused.
    assert ran(tool(kafka_lib, FEATURES, *b, "downgrade", "--feature", "kraft.version=0")).strip() == "kraft.version was downgraded to 0."
    too_high = tool(kafka_lib, FEATURES, *b, "upgrade", "--feature", "kraft.version=2")
    assert too_high.returncode == 1
    assert re.match(
        "Could not upgrade kraft.version to 2. " + re.escape(ALL_FAILED) + r"Invalid update version 2 for feature kraft.version. Local controller \d only supports versions 0-1",
        too_high.stdout,
    ), too_high.stdout

    # Each follower reports itself to the leader a fetch timeout after following it: until then the
    # upgrade, dry run or not, is refused with Kafka's words.
    def upgrade(*dry_run: str) -> str | None:
        out = tool(kafka_lib, FEATURES, *b, "upgrade", "--feature", "kraft.version=1", *dry_run)
        if out.returncode == 0:
            return out.stdout.strip()
        assert "because not all of the voters support it" in out.stdout, out.stdout + out.stderr
        return None

    assert wait_until("a dry run of the kraft.version upgrade", lambda: upgrade("--dry-run"), TIMEOUT_S, interval_s=1.0) == "kraft.version can be upgraded to 1."
    assert kraft_level(kafka_lib, cluster) == 0
    assert wait_until("the kraft.version upgrade", upgrade, TIMEOUT_S, interval_s=1.0) == "kraft.version was upgraded to 1."
    wait_until("kraft.version 1 on every node", lambda: kraft_level(kafka_lib, cluster) == 1 or None, TIMEOUT_S)
    described = voters(kafka_lib, cluster)
    assert sorted(int(str(v["id"])) for v in described) == [1, 2, 3]
    assert all(isinstance(v.get("directoryId"), str) and v["directoryId"] != "AAAAAAAAAAAAAAAAAAAAAA" for v in described), described
    by_id = {int(str(v["id"])): str(v["directoryId"]) for v in described}
    wait_until("directory ids in --replication", lambda: replication_directories(kafka_lib, cluster) == by_id or None, TIMEOUT_S)
    # Upgrading again changes nothing; going back is refused.
    assert ran(tool(kafka_lib, FEATURES, *b, "upgrade", "--feature", "kraft.version=1")).strip() == "kraft.version was upgraded to 1."
    back = tool(kafka_lib, FEATURES, *b, "downgrade", "--feature", "kraft.version=0")
    assert back.returncode == 1
    assert back.stdout.startswith(
        "Could not downgrade kraft.version to 0. " + ALL_FAILED + "Invalid update version 0 for feature kraft.version. Can't downgrade the version of this feature."
    ), back.stdout

    # kraft.version 1: a voter that is not the leader leaves and comes back.
    leader = int(status(kafka_lib, cluster)["LeaderId"])
    removed = next(node_id for node_id in (1, 2, 3) if node_id != leader)
    at_controller = ("--bootstrap-controller", cluster.controller_bootstrap(leader))
    ran(tool(kafka_lib, QUORUM, *at_controller, "remove-controller", "--controller-id", str(removed), "--controller-directory-id", by_id[removed]))
    wait_until(f"controller {removed} out of the voters", lambda: removed not in {int(str(v["id"])) for v in voters(kafka_lib, cluster)} or None, TIMEOUT_S)

    def added() -> bool | None:
        out = tool(kafka_lib, QUORUM, *at_controller, "--command-config", str(cluster.nodes[removed].config_file), "add-controller")
        # An observer that has not caught up yet is refused (REQUEST_TIMED_OUT): ask again.
        return True if out.returncode == 0 else None

    wait_until(f"controller {removed} added back", added, TIMEOUT_S, interval_s=1.0)
    wait_until(f"controller {removed} a voter again", lambda: removed in {int(str(v["id"])) for v in voters(kafka_lib, cluster)} or None, TIMEOUT_S)
    assert kraft_level(kafka_lib, cluster) == 1
