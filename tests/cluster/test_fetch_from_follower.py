"""KIP-392: a consumer that names its rack is sent by the leader to an in-sync replica in that
rack (replica.selector.class=RackAwareReplicaSelector) and served there up to the high
watermark; a consumer in no replica's rack, or the leader's, stays on the leader."""

from __future__ import annotations

import datetime
from typing import Any, Iterator

import pytest
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic

from tests.cluster.cluster import KafkaCluster, wait_until
from tests.cluster.test_replication import TIMEOUT_S, create, partition_state, produce, read_all
from tests.integration.helpers import unique_topic
from tests.integration.wire import request

RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


def rack(node_id: int) -> str:
    return f"rack-{node_id}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    c = KafkaCluster(
        tmp_path_factory.mktemp("follower-fetch"),
        combined=3,
        overrides={"replica.selector.class": RACK_AWARE},
        node_overrides={n: {"broker.rack": rack(n)} for n in (1, 2, 3)},
    )
    try:
        yield c.start()
    finally:
        c.close()


def fetch(bootstrap: str, name: str, rack_id: str, partition: int = 0, offset: int = 0) -> Any:
    """A consumer's Fetch v12 of one partition (0) from ``offset`` (0), naming ``rack_id``: its one partition."""
    body = FetchRequest(
        replica_id=-1,
        max_wait=datetime.timedelta(0),
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(
            FetchTopic(
                topic=name,
                partitions=(
                    FetchPartition(partition=partition, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20),
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id=rack_id,
    )
    (part,) = request(bootstrap, body).responses[0].partitions
    return part


def test_the_leader_sends_a_consumer_to_its_rack_and_the_follower_serves_it(cluster: KafkaCluster) -> None:
    name = unique_topic("kip392")
    create(cluster.bootstrap, name)
    wait_until("a full ISR", lambda: len(partition_state(cluster.bootstrap, name)[1]) == 3 or None, TIMEOUT_S)
    acked = produce(cluster.bootstrap, name, [b"f%d" % i for i in range(200)])
    assert len(acked) == 200
    leader, _ = partition_state(cluster.bootstrap, name)
    follower = next(n for n in cluster.brokers if n.node_id != leader)
    # The followers learn the high watermark on their next fetch; the leader redirects only to one
    # holding the consumer's offset.
    redirected = wait_until(
        "a redirect to the follower in the consumer's rack",
        lambda: (p := fetch(cluster.nodes[leader].bootstrap, name, rack(follower.node_id))).preferred_read_replica == follower.node_id and p,
        TIMEOUT_S,
    )
    assert redirected.error_code == 0 and not redirected.records
    served = wait_until("the follower serving all 200", lambda: (p := fetch(follower.bootstrap, name, rack(follower.node_id))).high_watermark == 200 and p, TIMEOUT_S)
    assert served.error_code == 0 and served.preferred_read_replica == -1 and served.records
    # In the leader's own rack, or in none of the replicas', the leader serves.
    for client_rack in (rack(leader), "elsewhere", ""):
        part = fetch(cluster.nodes[leader].bootstrap, name, client_rack)
        assert part.error_code == 0 and part.preferred_read_replica == -1 and part.records
    # A stock client follows the redirect and reads everything.
    records = read_all(cluster.bootstrap, name, 1, 200, {"client.rack": rack(follower.node_id)})
    assert sorted(records) == sorted(acked)
