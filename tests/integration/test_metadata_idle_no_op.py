"""KIP-835 on a real single node: while nothing else is written, the active controller's
NoOpRecord every metadata.max.idle.interval.ms keeps the metadata high watermark moving
(DescribeQuorum, as `kbroker metadata-quorum describe --status` prints it), and the
last-applied-record lag gauges stay near that interval."""

from __future__ import annotations

import io
import re
import time

from broker.metadata_quorum_command import describe_status
from tests.integration.conftest import StartBroker
from tests.integration.test_prometheus_metrics import scrape, value
from tests.ports import free_ports

IDLE_MS = 500
WATCH_S = 4.0


def high_watermark(bootstrap: str) -> int:
    out = io.StringIO()
    describe_status(bootstrap, out)
    found = re.search(r"^HighWatermark:\s+(\d+)$", out.getvalue(), re.MULTILINE)
    assert found is not None, out.getvalue()
    return int(found.group(1))


def test_an_idle_node_keeps_its_metadata_high_watermark_moving(broker_factory: StartBroker) -> None:
    (metrics_port,) = free_ports(1)
    b = broker_factory({"metrics.listener": f"http://127.0.0.1:{metrics_port}", "metadata.max.idle.interval.ms": str(IDLE_MS)})
    start, started = high_watermark(b.bootstrap), time.monotonic()
    time.sleep(WATCH_S)
    advanced = high_watermark(b.bootstrap) - start
    elapsed = time.monotonic() - started
    # Nothing else writes once the node's broker is unfenced: the NoOpRecords (one per interval,
    # about eight here) move it. Asserted loosely, so that a busy machine's scheduling cannot fail it.
    assert advanced >= 2, (advanced, elapsed)
    samples = scrape(metrics_port)
    for name in ("kafka_server_brokermetadatametrics_last_applied_record_lag_ms", "kafka_controller_kafkacontroller_lastappliedrecordlagms"):
        lag = value(samples, name)
        # Near the interval on a node that follows the log; a node that stopped would grow without bound.
        assert lag is not None and 0 <= lag < 20 * IDLE_MS, (name, lag)
    applied = value(samples, "kafka_server_brokermetadatametrics_last_applied_record_offset")
    committed = value(samples, "kafka_controller_kafkacontroller_lastcommittedrecordoffset")
    assert applied is not None and committed is not None and applied >= start + advanced - 2 and committed >= applied - 2
