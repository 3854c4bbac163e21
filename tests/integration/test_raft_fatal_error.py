"""An unexpected error in a node's Raft loop halts the node, as Kafka's raft IO thread does, rather
than leaving it up and silent: a controller that stays leader while its Raft loop is dead answers
no vote, no fetch and no request, and its quorum cannot replace it while it looks alive.

Planted with the internal metadata.log.segment.min.bytes (Kafka's, for tests) below the size of
one batch: the leader's append of the records creating 100 partitions cannot fit a segment."""

from __future__ import annotations

import time

from confluent_kafka.admin import AdminClient, NewTopic

from broker.log_dir_failure_handler import HALT_EXIT_CODE
from tests.integration.conftest import StartBroker

TIMEOUT_S = 60.0


def test_a_raft_loop_that_fails_halts_the_node_with_its_reason(broker_factory: StartBroker) -> None:
    broker = broker_factory({"metadata.log.segment.bytes": "4096", "metadata.log.segment.min.bytes": "4096"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept until the answer is in: it is the handle
    admin.create_topics([NewTopic("wide", 100, 1)], operation_timeout=5, request_timeout=10)
    assert broker.proc is not None
    deadline = time.monotonic() + TIMEOUT_S
    while broker.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert broker.proc.returncode == HALT_EXIT_CODE, f"the node did not halt:\n{broker.tail()}"
    log = broker.log_path.read_text(errors="replace")
    assert '"event": "raft.poll_failed"' in log
    assert "Unexpected error in raft IO thread" in log and '"event": "node.halting"' in log
