"""broker/metrics/: each collector over fakes of the state it reads, its output read back with
prometheus_client's own text parser (what Prometheus would store)."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from broker.client_metrics_config import ClientAttributes
from broker.client_metrics_manager import ClientPush
from broker.delayed_operations import Purgatory
from broker.metrics.broker_topic_metrics import BrokerTopicMetricsCollector, BrokerTopicStats
from broker.metrics.client_telemetry_metrics import ClientTelemetryCollector, label_name, prometheus_name
from broker.metrics.consumer_group_lag import ConsumerGroupLagCollector
from broker.metrics.controller_metrics import ControllerMetricsCollector
from broker.metrics.delayed_operation_metrics import DelayedOperationMetricsCollector, purgatory_sizes
from broker.metrics.histogram import RESERVOIR, Histogram, quantiles
from broker.metrics.selector_stats import SelectorStats
from broker.metrics.log_metrics import LogCleanerMetricsCollector, LogFlushStatsCollector
from broker.metrics.raft_metrics import CommitLatency, RaftMetricsCollector
from broker.metrics.replica_manager_metrics import ReplicaManagerMetricsCollector
from broker.metrics.request_metrics import RequestChannelMetrics, RequestMetricsCollector, request_name
from broker.metrics.socket_server_metrics import SocketServerMetricsCollector
from broker.network import TransferMetrics
from protocol.otlp_metrics import MetricPoint
from storage.log_flush_stats import LogFlushStats

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(*collectors: Any) -> Samples:
    registry = CollectorRegistry(auto_describe=False)
    for collector in collectors:
        registry.register(collector)
    text = generate_latest(registry).decode()
    return {(s.name, frozenset(s.labels.items())): s.value for family in text_string_to_metric_families(text) for s in family.samples}


def get(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


# -- histogram -------------------------------------------------------------------------------------


def test_histogram_counts_every_sample_and_keeps_the_latest_for_its_quantiles() -> None:
    h = Histogram()
    for v in range(1, 101):
        h.update(float(v))
    assert (h.count, h.sum, h.max) == (100, 5050.0, 100.0)
    q = dict(h.quantiles())
    assert q[0.5] == pytest.approx(50.5)
    assert q[0.99] == pytest.approx(99.99)  # Yammer's rank q*(n+1), interpolated
    for _ in range(RESERVOIR):
        h.update(7.0)
    assert dict(h.quantiles())[0.999] == 7.0  # the old samples left the reservoir
    assert h.count == 100 + RESERVOIR
    assert quantiles([]) == [(q, 0.0) for q, _ in quantiles([1.0])]


# -- BrokerTopicMetrics ------------------------------------------------------------------------------


def test_broker_topic_metrics_per_topic_and_in_total_which_never_goes_down() -> None:
    stats = BrokerTopicStats()
    alive = {"a", "b"}
    stats.topic("a").messages_in += 3
    stats.topic("a").bytes_in += 300
    stats.topic("b").messages_in += 2
    stats.topic("b").failed_produce_requests += 1
    collector = BrokerTopicMetricsCollector(stats, lambda: alive)
    s = scrape(collector)
    assert get(s, "kafka_server_brokertopicmetrics_messagesin_total", topic="a") == 3
    assert get(s, "kafka_server_brokertopicmetrics_messagesin_total", topic="b") == 2
    assert get(s, "kafka_server_brokertopicmetrics_messagesin_total") == 5
    assert get(s, "kafka_server_brokertopicmetrics_bytesin_total") == 300
    assert get(s, "kafka_server_brokertopicmetrics_failedproducerequests_total", topic="b") == 1
    # "b" is deleted: its series go, the total keeps its records.
    alive.discard("b")
    s = scrape(collector)
    assert get(s, "kafka_server_brokertopicmetrics_messagesin_total", topic="b") is None
    assert get(s, "kafka_server_brokertopicmetrics_messagesin_total") == 5


# -- RequestMetrics -----------------------------------------------------------------------------------


def test_request_names_are_kafkas() -> None:
    assert [request_name(k) for k in (0, 1, 2, 18, 22, 68)] == ["Produce", "Fetch", "ListOffsets", "ApiVersions", "InitProducerId", "ConsumerGroupHeartbeat"]


def test_request_times_come_from_the_requests_timestamps() -> None:
    channel = RequestChannelMetrics()
    timing = channel.start(0, 9, read_at=0.0)
    # read at 0 s, dispatched at 1 ms, handler back at 3 ms, ready at 10 ms, dequeued at 12 ms, sent at 15 ms.
    timing.dispatched_at, timing.local_done_at, timing.ready_at = 0.001, 0.003, 0.010
    timing.dequeued_at, timing.throttle_ms = 0.012, 5
    timing.finish(0.015)
    s = scrape(RequestMetricsCollector(channel))
    assert get(s, "kafka_network_requestmetrics_requests_total", request="Produce", version="9") == 1
    for name, ms in (
        ("requestqueuetimems", 1),
        ("localtimems", 2),
        ("remotetimems", 7),
        ("throttletimems", 5),
        ("responsequeuetimems", 2),
        ("responsesendtimems", 3),
        ("totaltimems", 15),
    ):
        assert get(s, f"kafka_network_requestmetrics_{name}_count", request="Produce") == 1
        assert get(s, f"kafka_network_requestmetrics_{name}_sum", request="Produce") == pytest.approx(ms), name
        assert get(s, f"kafka_network_requestmetrics_{name}", request="Produce", quantile="0.99") == pytest.approx(ms), name


def test_a_fetch_counts_as_fetch_and_as_fetchconsumer_or_fetchfollower() -> None:
    channel = RequestChannelMetrics()
    for replica_id in (-1, 2, -1):
        timing = channel.start(1, 16, read_at=0.0)
        channel.note_fetch(SimpleNamespace(replica_id=replica_id))
        channel.dispatched(timing, 1, answered=True)
        timing.dequeued(0)
        timing.finish(timing.dequeued_at)
    s = scrape(RequestMetricsCollector(channel))
    assert get(s, "kafka_network_requestmetrics_requests_total", request="Fetch", version="16") == 3
    assert get(s, "kafka_network_requestmetrics_requests_total", request="FetchConsumer", version="16") == 2
    assert get(s, "kafka_network_requestmetrics_requests_total", request="FetchFollower", version="16") == 1


def test_an_acks_0_produce_is_counted_with_nothing_sent() -> None:
    channel = RequestChannelMetrics()
    timing = channel.start(0, 9, read_at=0.0)
    channel.dispatched(timing, 0, answered=False)
    timing.finish(timing.local_done_at)
    s = scrape(RequestMetricsCollector(channel))
    assert get(s, "kafka_network_requestmetrics_responsesendtimems_sum", request="Produce") == 0
    assert get(s, "kafka_network_requestmetrics_remotetimems_sum", request="Produce") == 0


# -- the socket server, ReplicaManager, purgatories -------------------------------------------------------


def test_connection_count_per_listener_and_the_sendfile_pair() -> None:
    conns = [SimpleNamespace(closed=False), SimpleNamespace(closed=True), SimpleNamespace(closed=False)]
    servers = [SimpleNamespace(listener="PLAINTEXT", connections=conns, stats=SelectorStats()), SimpleNamespace(listener="SSL", connections=[], stats=SelectorStats())]
    s = scrape(SocketServerMetricsCollector(lambda: servers, TransferMetrics(sendfile_bytes=10, copied_bytes=3)))
    assert get(s, "kafka_server_socket_server_metrics_connection_count", listener="PLAINTEXT", networkProcessor="0") == 2
    assert get(s, "kafka_server_socket_server_metrics_connection_count", listener="SSL", networkProcessor="0") == 0
    assert get(s, "kbroker_network_sendfile_bytes_total") == 10
    assert get(s, "kbroker_network_copied_bytes_total") == 3


def _partition(leader: bool, isr: int, replicas: int, min_isr: int = 2) -> SimpleNamespace:
    log = SimpleNamespace(config=SimpleNamespace(min_insync_replicas=min_isr), parent_dir="/data")
    return SimpleNamespace(is_leader=leader, isr=tuple(range(isr)), replicas=tuple(range(replicas)), log=log)


def test_replica_manager_gauges() -> None:
    partitions = {
        ("t", 0): _partition(True, 3, 3),
        ("t", 1): _partition(True, 2, 3),  # under-replicated, at min ISR
        ("t", 2): _partition(True, 1, 3),  # under min ISR
        ("t", 3): _partition(False, 3, 3),
    }
    rm = SimpleNamespace(partitions=partitions, log_manager=SimpleNamespace(failure_channel=SimpleNamespace(offline_log_dirs=[])), isr_shrinks=4, isr_expands=1)
    s = scrape(ReplicaManagerMetricsCollector(rm))  # type: ignore[arg-type]
    assert get(s, "kafka_server_replicamanager_partitioncount") == 4
    assert get(s, "kafka_server_replicamanager_leadercount") == 3
    assert get(s, "kafka_server_replicamanager_underreplicatedpartitions") == 2
    assert get(s, "kafka_server_replicamanager_underminisrpartitioncount") == 1
    assert get(s, "kafka_server_replicamanager_atminisrpartitioncount") == 1
    assert get(s, "kafka_server_replicamanager_offlinereplicacount") == 0
    assert get(s, "kafka_server_replicamanager_isrshrinks_total") == 4
    assert get(s, "kafka_server_replicamanager_isrexpands_total") == 1
    rm.log_manager.failure_channel.offline_log_dirs = ["/data"]
    assert get(scrape(ReplicaManagerMetricsCollector(rm)), "kafka_server_replicamanager_offlinereplicacount") == 4  # type: ignore[arg-type]


def test_purgatory_size_counts_watches_and_operations() -> None:
    async def run() -> tuple[tuple[int, int], Samples]:
        produce, fetch = Purgatory(), Purgatory()
        waits = [asyncio.ensure_future(fetch.wait([("t", 0), ("t", 1)], 5)), asyncio.ensure_future(produce.wait([("t", 0)], 5))]
        await asyncio.sleep(0)
        sizes = purgatory_sizes(fetch)
        samples = scrape(DelayedOperationMetricsCollector(SimpleNamespace(produce_purgatory=produce, fetch_purgatory=fetch)))  # type: ignore[arg-type]
        fetch.touch(("t", 0))
        produce.touch(("t", 0))
        await asyncio.gather(*waits)
        assert purgatory_sizes(fetch) == (0, 0)
        return sizes, samples

    sizes, s = asyncio.run(run())
    assert sizes == (2, 1)
    assert get(s, "kafka_server_delayedoperationpurgatory_purgatorysize", delayedOperation="Fetch") == 2
    assert get(s, "kafka_server_delayedoperationpurgatory_numdelayedoperations", delayedOperation="Fetch") == 1
    assert get(s, "kafka_server_delayedoperationpurgatory_numdelayedoperations", delayedOperation="Produce") == 1


# -- the controller and Raft ------------------------------------------------------------------------------


def test_controller_gauges_from_the_image() -> None:
    def reg(leader: int, replicas: tuple[int, ...]) -> SimpleNamespace:
        return SimpleNamespace(leader=leader, replicas=replicas)

    image = SimpleNamespace(
        topics={"a": SimpleNamespace(partitions={0: reg(1, (1, 2)), 1: reg(-1, (2, 1))}), "b": SimpleNamespace(partitions={0: reg(2, (1, 2))})},
        brokers={1: SimpleNamespace(fenced=False), 2: SimpleNamespace(fenced=True), 3: SimpleNamespace(fenced=False)},
    )
    active = [True]
    s = scrape(ControllerMetricsCollector(lambda: image, lambda: active[0]))  # type: ignore[arg-type, return-value]
    assert get(s, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert get(s, "kafka_controller_kafkacontroller_globaltopiccount") == 2
    assert get(s, "kafka_controller_kafkacontroller_globalpartitioncount") == 3
    assert get(s, "kafka_controller_kafkacontroller_offlinepartitionscount") == 1
    assert get(s, "kafka_controller_kafkacontroller_preferredreplicaimbalancecount") == 1
    assert get(s, "kafka_controller_kafkacontroller_fencedbrokercount") == 1
    assert get(s, "kafka_controller_kafkacontroller_activebrokercount") == 2
    active[0] = False
    assert get(scrape(ControllerMetricsCollector(lambda: image, lambda: active[0])), "kafka_controller_kafkacontroller_activecontrollercount") == 0  # type: ignore[arg-type, return-value]


def test_commit_latency_is_over_the_last_minute() -> None:
    now = [0.0]
    latency = CommitLatency(clock=lambda: now[0])
    avg, mx = latency.avg_max()
    assert avg != avg and mx != mx  # NaN: nothing committed
    latency.record(10)
    latency.record(30)
    assert latency.avg_max() == (20.0, 30.0)
    now[0] = 45.0
    latency.record(5)
    assert latency.avg_max() == (15.0, 30.0)
    now[0] = 61.0
    assert latency.avg_max() == (5.0, 5.0)


def test_raft_metrics() -> None:
    class LeaderState:
        voted_id = None

    log = SimpleNamespace(end_offset=lambda: 42)
    client = SimpleNamespace(quorum_state=SimpleNamespace(state=LeaderState()), high_watermark=40)
    latency = CommitLatency()
    latency.record(8)
    raft = SimpleNamespace(leader=(3, 7), client=client, node_id=3, metadata_log=log, commit_latency=latency)
    s = scrape(RaftMetricsCollector(raft))  # type: ignore[arg-type]
    assert get(s, "kafka_server_raftmetrics_current_leader") == 3
    assert get(s, "kafka_server_raftmetrics_current_epoch") == 7
    assert get(s, "kafka_server_raftmetrics_current_state", current_state="leader") == 1
    assert get(s, "kafka_server_raftmetrics_high_watermark") == 40
    assert get(s, "kafka_server_raftmetrics_log_end_offset") == 42
    assert get(s, "kafka_server_raftmetrics_commit_latency_avg") == 8
    assert get(s, "kafka_server_raftmetrics_commit_latency_max") == 8


# -- logs -------------------------------------------------------------------------------------------------


def test_log_flush_stats() -> None:
    stats = LogFlushStats()
    for ms in (1.0, 2.0, 3.0):
        stats.update(ms)
    s = scrape(LogFlushStatsCollector(stats))
    assert get(s, "kafka_log_logflushstats_logflushrateandtimems_count") == 3
    assert get(s, "kafka_log_logflushstats_logflushrateandtimems_sum") == 6
    assert get(s, "kafka_log_logflushstats_logflushrateandtimems", quantile="0.5") == 2


def test_log_cleaner_gauges_over_the_latest_cleaning_of_each_thread() -> None:
    def summary(finished: int, elapsed: float, util: float, read: int, written: int) -> SimpleNamespace:
        return SimpleNamespace(finished_ms=finished, stats=SimpleNamespace(elapsed_s=elapsed, map_utilization=util, bytes_read=read, bytes_written=written))

    cleaner = SimpleNamespace(
        summaries={("a", 0): summary(1, 9.0, 0.9, 100, 100), ("b", 0): summary(2, 2.0, 0.25, 100, 50), ("c", 0): summary(3, 1.0, 0.5, 100, 10)},
        config=SimpleNamespace(threads=2),
        checkpoints={},
        _now_ms=lambda: 0,
    )
    s = scrape(LogCleanerMetricsCollector(SimpleNamespace(cleaner=cleaner, all_log_items=lambda: [])))  # type: ignore[arg-type]
    # The two most recent cleanings ("c" and "b") stand for the two threads.
    assert get(s, "kafka_log_logcleaner_max_clean_time_secs") == 2.0
    assert get(s, "kafka_log_logcleaner_max_buffer_utilization_percent") == 50.0
    assert get(s, "kafka_log_logcleaner_cleaner_recopy_percent") == 30.0
    assert get(s, "kafka_log_logcleanermanager_max_dirty_percent") == 0.0
    assert scrape(LogCleanerMetricsCollector(SimpleNamespace(cleaner=None))) == {}  # type: ignore[arg-type]


# -- groups and clients -------------------------------------------------------------------------------------


def test_consumer_lag_is_the_high_watermark_minus_the_committed_offset() -> None:
    offsets = {"g": {("t", 0): SimpleNamespace(offset=120), ("t", 1): SimpleNamespace(offset=5), ("elsewhere", 0): SimpleNamespace(offset=3)}}
    coordinator = SimpleNamespace(shards={7: SimpleNamespace(offsets=SimpleNamespace(offsets=offsets))})
    rm = SimpleNamespace(partitions={("t", 0): SimpleNamespace(high_watermark=200), ("t", 1): SimpleNamespace(high_watermark=5)})
    s = scrape(ConsumerGroupLagCollector(coordinator, rm))  # type: ignore[arg-type]
    assert get(s, "kafka_consumergroup_current_offset", consumergroup="g", topic="t", partition="0") == 120
    assert get(s, "kafka_consumergroup_lag", consumergroup="g", topic="t", partition="0") == 80
    assert get(s, "kafka_consumergroup_lag", consumergroup="g", topic="t", partition="1") == 0
    assert get(s, "kafka_consumergroup_lag_sum", consumergroup="g", topic="t") == 80
    # No replica of it here: the committed offset shows, no lag.
    assert get(s, "kafka_consumergroup_current_offset", consumergroup="g", topic="elsewhere", partition="0") == 3
    assert get(s, "kafka_consumergroup_lag", consumergroup="g", topic="elsewhere", partition="0") is None


def test_client_telemetry_names() -> None:
    assert prometheus_name("org.apache.kafka.producer.record.queue.time.max") == "kafka_client_producer_record_queue_time_max"
    assert prometheus_name("custom.metric-x") == "kafka_client_custom_metric_x"
    assert label_name("node.id") == "node_id"
    assert label_name("client_id") == "attr_client_id"


def test_client_pushes_as_gauges_with_the_client_instance_id() -> None:
    instance = uuid.UUID(int=5)
    points = (
        MetricPoint("org.apache.kafka.producer.record.queue.time.max", "gauge", 12.5),
        MetricPoint("org.apache.kafka.producer.node.request.latency.avg", "gauge", 3.0, attributes=(("node.id", "1"),)),
        MetricPoint("org.apache.kafka.producer.node.request.latency.avg", "gauge", 3.0, attributes=(("node.id", "1"),)),  # repeated: shown once
        MetricPoint("org.apache.kafka.producer.request.latency", "histogram", 40.0, count=4),
    )
    push = ClientPush(instance, ClientAttributes("app", "librdkafka", "2.4.0", "127.0.0.1", "5000"), 0, (), points)
    manager = SimpleNamespace(latest_pushes=lambda now_ms: [push])
    s = scrape(ClientTelemetryCollector(manager, lambda: 0))  # type: ignore[arg-type]
    own = {"client_instance_id": str(instance), "client_id": "app", "client_software_name": "librdkafka", "client_software_version": "2.4.0"}
    assert get(s, "kafka_client_producer_record_queue_time_max", **own) == 12.5
    assert get(s, "kafka_client_producer_node_request_latency_avg", **own, node_id="1") == 3.0
    assert get(s, "kafka_client_producer_request_latency", **own) == 40.0
    assert get(s, "kafka_client_producer_request_latency_count", **own) == 4
