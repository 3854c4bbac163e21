"""A new group coordinator does not answer OffsetFetch with a commit its followers do not have.

Kafka's coordinator reads offsets as of the last committed offset of its ``__consumer_offsets``
partition (the timeline at the high watermark; after a load, that is the high watermark it found).
Three combined nodes, brokers reaching each other through proxies: the leader A of a group's
offsets partition appends a commit that replica B copies and replica C, cut off from the other
brokers (but heartbeating to the controller, so it stays in the ISR), cannot. A is killed; the
controller elects B, whose log holds the commit above its high watermark. Until C has it, B's
plain OffsetFetch answers the commit before, and a stable one waits; once C is let through, both
answer the commit. What is deterministic: the ISR holds C for replica.lag.time.max.ms (30 s),
well beyond the failover; the election follows the replica order (first live ISR replica).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Iterator

import pytest

from broker.coordinator.coordinator_partitioner import partition_for
from broker.group_coordinator import GROUP_METADATA_TOPIC
from tests.cluster.cluster import KafkaCluster, leader_id, wait_until
from tests.cluster.test_coordinator_failover import OFFSETS_PARTITIONS, commit_offset, offset_fetch
from tests.cluster.test_replication import admin, create, partition_state
from tests.cluster.test_replication_faults import offset_commit_v8, wait_for_isr
from tests.integration.helpers import unique_topic

TIMEOUT_S = 60.0
LAG_MS = 30000
LOADING = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    c = KafkaCluster(
        tmp_path_factory.mktemp("offset-fetch-committed-view"),
        combined=3,
        proxy_inter_broker=True,
        overrides={
            "broker.session.timeout.ms": "3000",
            "broker.heartbeat.interval.ms": "500",
            "replica.lag.time.max.ms": str(LAG_MS),
            "offsets.topic.replication.factor": "3",
            "replica.socket.timeout.ms": "5000",
        },
    )
    try:
        yield c.start()
    finally:
        c.close()


def replicas(bootstrap: str, partition: int) -> tuple[int, ...]:
    return tuple(admin(bootstrap).list_topics(GROUP_METADATA_TOPIC, timeout=TIMEOUT_S).topics[GROUP_METADATA_TOPIC].partitions[partition].replicas)


def group_led_away_from_the_controller(cluster: KafkaCluster) -> tuple[str, int]:
    """A group whose offsets partition's leader is not the active controller, so that killing it
    fails over the partition alone; and that partition."""
    controller = wait_until("a quorum leader", lambda: leader_id(cluster, 1), TIMEOUT_S)
    for _ in range(200):
        group = unique_topic("committed-view")
        p = partition_for(group, OFFSETS_PARTITIONS)
        if partition_state(cluster.bootstrap, GROUP_METADATA_TOPIC, p)[0] not in (controller, -1):
            return group, p
    raise AssertionError("every offsets partition is led by the controller")


def answered(bootstrap: str, group: str, topic: str, require_stable: bool) -> tuple[int, int, int] | None:
    """The node's OffsetFetch answer, None while it is not (yet) the group's coordinator."""
    result = offset_fetch(bootstrap, group, topic, require_stable)
    return None if result[0] in LOADING else result


def test_a_new_coordinator_answers_a_commit_only_once_its_followers_have_it(cluster: KafkaCluster) -> None:
    topic = unique_topic("committed-view-data")
    create(cluster.bootstrap, topic, min_isr=1)
    commit_offset(cluster.bootstrap, unique_topic("first"), topic, 0)  # creates __consumer_offsets
    group, p = group_led_away_from_the_controller(cluster)
    commit_offset(cluster.bootstrap, group, topic, 5)
    wait_for_isr(cluster, GROUP_METADATA_TOPIC, {1, 2, 3}, p)
    a = partition_state(cluster.bootstrap, GROUP_METADATA_TOPIC, p)[0]
    b, c = [r for r in replicas(cluster.bootstrap, p) if r != a]  # b: the first ISR replica after a
    old = cluster.nodes[a]
    for (x, y), link in cluster.broker_links.items():
        if c in (x, y):
            link.cut()
    results: dict[str, Any] = {}

    def commit() -> None:
        try:
            results["commit"] = offset_commit_v8(old.bootstrap, group, topic, 9)
        except Exception as e:  # noqa: BLE001 - the node is killed under it
            results["commit"] = e

    committing = threading.Thread(target=commit)
    fetching = threading.Thread(target=lambda: results.update(stable=offset_fetch(new.bootstrap, group, topic, require_stable=True)))
    new = cluster.nodes[b]
    committing.start()
    try:
        time.sleep(1.5)  # b has fetched the commit; c cannot, and holds the high watermark below it
        assert committing.is_alive(), f"the commit was answered while a replica in the ISR lacked it: {results}"
        assert offset_fetch(old.bootstrap, group, topic, require_stable=False) == (0, 5, 0)
        old.kill()
        wait_until(f"node {b} leading {GROUP_METADATA_TOPIC}-{p}", lambda: partition_state(new.bootstrap, GROUP_METADATA_TOPIC, p)[0] == b or None, TIMEOUT_S)
        assert wait_until("node b coordinating the group", lambda: answered(new.bootstrap, group, topic, False), TIMEOUT_S) == (0, 5, 0)
        fetching.start()
        time.sleep(1.0)
        assert "stable" not in results, "a stable fetch answered while the loaded commit was not replicated"
        assert offset_fetch(new.bootstrap, group, topic, require_stable=False) == (0, 5, 0)
    finally:
        cluster.heal()
        committing.join(TIMEOUT_S)
    if fetching.ident is not None:
        fetching.join(TIMEOUT_S)
    # The stable fetch may time out (offsets.commit.timeout.ms) before c fetches again after healing.
    assert results["stable"] in ((0, 9, 0), (16, -1, 0))
    wait_until("the commit answered once c has it", lambda: offset_fetch(new.bootstrap, group, topic, require_stable=False) == (0, 9, 0) or None, TIMEOUT_S)
    old.launch()
    old.await_started()
    cluster.await_all_brokers_live(TIMEOUT_S)
