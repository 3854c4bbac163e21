"""KIP-1191's dead-letter queue through a share-partition leader's death, on three combined nodes
with cuttable inter-broker links: a record REJECTed while its DLQ write cannot land (the leader's
link to the DLQ partition's only replica is cut) stays ARCHIVING at the share coordinator; with the
leader SIGKILLed before the write is given up on, the next leader loads it ARCHIVING, writes it to
the DLQ and archives it: one DLQ record, with Kafka 4.4's headers, the record never delivered again
and the group's start offset past it.

The scenario is benchmarks/share_group_dlq.py's ``dlq_through_leader_kill``; Kafka 4.4 did the same
on it (one DLQ record, written by the new leader; see that module). Every wait is bounded.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from benchmarks.share_group_dlq import dlq_through_leader_kill
from tests.cluster.cluster import KafkaCluster
from tests.cluster.test_replication import FAST_FAILOVER
from tests.integration.test_features import await_finalized


def test_a_rejected_record_reaches_the_dlq_once_through_a_leader_kill(tmp_path: Path) -> None:
    cluster = KafkaCluster(tmp_path / "dlq", combined=3, overrides=dict(FAST_FAILOVER), proxy_inter_broker=True)
    try:
        cluster.start()
        await_finalized(cluster.bootstrap, "share.version", 2)
        address = {n: f"127.0.0.1:{node.port}" for n, node in cluster.nodes.items()}
        group, topic, outcome = dlq_through_leader_kill(cluster, address.__getitem__, lambda n: cluster.nodes[n].kill(), uuid.uuid4().hex[:8])
        print(outcome.line())
        assert outcome.dlq_records == [
            [
                ("__dlq.errors.topic", topic.encode()),
                ("__dlq.errors.partition", b"0"),
                ("__dlq.errors.offset", b"0"),
                ("__dlq.errors.group", group.encode()),
                ("__dlq.errors.delivery.count", b"1"),
                ("__dlq.errors.message", b"Offset rejected by client."),
            ]
        ], outcome
        assert not outcome.redelivered, outcome
        # ARCHIVED once the DLQ write landed: the start offset moves past the record.
        assert outcome.passed, outcome
    finally:
        cluster.close()
