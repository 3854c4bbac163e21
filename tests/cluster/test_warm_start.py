"""A node restarted from a warmed-up interpreter (tests/cluster/warm_start.py) is the same node:
its next process waits, importing, beside the running one, then starts on the same ports and data."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka.admin import AdminClient

from tests.cluster.cluster import KafkaCluster


def test_a_warmed_up_node_restarts_from_its_standby_and_serves(tmp_path: Path) -> None:
    # A short session: the killed node's successor registers once the old registration is fenced.
    cluster = KafkaCluster(tmp_path, combined=1, overrides={"broker.session.timeout.ms": "1000", "broker.heartbeat.interval.ms": "200"}).start()
    try:
        node = cluster.nodes[1]
        node.warm_up()
        standby = node._standby
        assert standby is not None
        time.sleep(1)
        # Waiting for its command line, it has taken no port: the running node still serves.
        assert standby.poll() is None
        assert AdminClient({"bootstrap.servers": node.bootstrap}).list_topics(timeout=10).brokers
        node.stop()
        node.launch()
        assert node.proc is standby
        node.await_started()
        assert AdminClient({"bootstrap.servers": node.bootstrap}).list_topics(timeout=10).brokers
        assert len(node.events_named("broker.started")) == 2
        # A node with no standby starts cold, as before.
        node.kill()
        node.launch()
        assert node.proc is not standby
        node.await_started()
    finally:
        cluster.close()
