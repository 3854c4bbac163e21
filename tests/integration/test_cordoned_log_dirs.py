"""Cordoned log directories (KIP-1066) on a real node: cordoned.log.dirs set in server.properties,
then changed per broker with IncrementalAlterConfigs, as Kafka 4.4 allows. DescribeLogDirs v5 says
is_cordoned, the controller places no new replica on a broker whose every log dir is cordoned
(INVALID_REPLICATION_FACTOR with Kafka 4.4's message), and metrics.listener shows Kafka's LogManager
gauges as the config changes. The unit side is tests/unit/test_cordoned_log_dirs.py."""

from __future__ import annotations

import datetime
from pathlib import Path

from kio.schema.create_topics.v7 import request as create_topics_v7
from kio.schema.describe_log_dirs.v5 import request as describe_log_dirs_v5
from kio.schema.incremental_alter_configs.v1 import request as incremental_alter_configs
from kio.static.primitive import i16, i32

from tests.integration.conftest import BrokerProcess, StartBroker
from tests.integration.helpers import unique_topic, wait_for
from tests.integration.test_prometheus_metrics import scrape
from tests.integration.wire import request
from tests.ports import free_ports

NONE, INVALID_REPLICATION_FACTOR, INVALID_REQUEST = 0, 38, 42
BROKER = 4
NO_BROKER_LEFT = "Unable to replicate the partition 1 time(s): All brokers are currently fenced, or have all their log directories cordoned."


def is_cordoned(broker: BrokerProcess) -> bool:
    (result,) = request(broker.bootstrap, describe_log_dirs_v5.DescribeLogDirsRequest(topics=None)).results
    return bool(result.is_cordoned)


def create(broker: BrokerProcess) -> tuple[int, str | None]:
    topic = create_topics_v7.CreatableTopic(name=unique_topic("cordon"), num_partitions=i32(1), replication_factor=i16(1), assignments=(), configs=())
    (result,) = request(broker.bootstrap, create_topics_v7.CreateTopicsRequest(topics=(topic,), timeout=datetime.timedelta(seconds=10), validate_only=False)).topics
    return int(result.error_code), result.error_message


def alter(broker: BrokerProcess, resource: str, value: str) -> tuple[int, str | None]:
    config = incremental_alter_configs.AlterableConfig(name="cordoned.log.dirs", config_operation=0, value=value)
    body = incremental_alter_configs.IncrementalAlterConfigsRequest(
        resources=(incremental_alter_configs.AlterConfigsResource(resource_type=BROKER, resource_name=resource, configs=(config,)),), validate_only=False
    )
    (response,) = request(broker.bootstrap, body).responses
    return int(response.error_code), response.error_message


def gauges(metrics_port: int, data_dir: Path) -> tuple[float | None, float | None]:
    """(CordonedLogDirectoryCount, LogDirectoryCordoned of the broker's log dir) as scraped."""
    samples = scrape(metrics_port)
    return (
        samples.get(("kafka_log_logmanager_cordonedlogdirectorycount", frozenset())),
        samples.get(("kafka_log_logmanager_logdirectorycordoned", frozenset({("logDirectory", str(data_dir))}))),
    )


def test_a_cordoned_broker_takes_no_new_replica_static_then_dynamic(broker_factory: StartBroker, tmp_path: Path) -> None:
    data_dir = tmp_path / "broker0" / "data"  # where broker_factory puts its first broker's log.dirs
    (metrics_port,) = free_ports(1)
    broker = broker_factory({"cordoned.log.dirs": str(data_dir), "metrics.listener": f"http://127.0.0.1:{metrics_port}"})
    assert is_cordoned(broker)
    assert gauges(metrics_port, data_dir) == (1, 1)
    # The broker tells the controller in its heartbeats once it caught up.
    assert wait_for(lambda: create(broker) == (INVALID_REPLICATION_FACTOR, NO_BROKER_LEFT))

    assert alter(broker, "1", "") == (NONE, None)
    assert wait_for(lambda: not is_cordoned(broker))
    assert gauges(metrics_port, data_dir) == (0, 0)
    assert wait_for(lambda: create(broker)[0] == NONE)

    # Per broker only, and only its own log.dirs (or "*", every one of them).
    assert alter(broker, "", "*") == (
        INVALID_REQUEST,
        "Cannot update these configs at default cluster level, broker id must be specified: [cordoned.log.dirs]",
    )
    code, message = alter(broker, "1", "/not/a/log/dir")
    assert code == INVALID_REQUEST and message is not None
    assert "All entries in cordoned.log.dirs must be present in log.dirs or log.dir. Missing entries : /not/a/log/dir" in message
    assert not is_cordoned(broker)

    assert alter(broker, "1", "*") == (NONE, None)
    assert wait_for(lambda: is_cordoned(broker))
    assert gauges(metrics_port, data_dir) == (1, 1)
    assert wait_for(lambda: create(broker) == (INVALID_REPLICATION_FACTOR, NO_BROKER_LEFT))
