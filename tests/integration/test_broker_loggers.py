"""Log levels changed while the broker runs (the broker-loggers resource, KIP-412), as an operator
changes them: with Apache Kafka 4.4's own kafka-configs. The levels take effect at once, are this
process's alone (the resource is answered by the broker it names, never forwarded), and what Kafka
refuses is refused with Kafka 4.4's messages (compared with Kafka's own answers by hand; the
checks' order is in tests/unit/test_logging_controller.py)."""

from __future__ import annotations

from pathlib import Path

from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as incremental_alter_configs

from broker.wire_client import request
from tests.integration.conftest import BrokerProcess
from tests.integration.helpers import create_topic, unique_topic, wait_for
from tests.integration.test_dynamic_broker_configs import kafka_configs, node_id, produce

LOGGER = "broker.replica_manager"


def leadership_logged(broker: BrokerProcess, topic: str) -> bool:
    """Whether the replica manager's debug line about leading ``topic`` is in the broker's log."""
    return any("partition.leader" in line and topic in line for line in broker.log_path.read_text(errors="replace").splitlines())


def alter_loggers(bootstrap: str, node: str, *configs: tuple[str, int, str | None], validate_only: bool = False):  # type: ignore[no-untyped-def]
    body = incremental_alter_configs.IncrementalAlterConfigsRequest(
        resources=(
            incremental_alter_configs.AlterConfigsResource(
                resource_type=8,
                resource_name=node,
                configs=tuple(incremental_alter_configs.AlterableConfig(name=n, config_operation=op, value=v) for n, op, v in configs),
            ),
        ),
        validate_only=validate_only,
    )
    (answer,) = request(bootstrap, body).responses
    return ErrorCode(answer.error_code), answer.error_message


def test_kafkas_kafka_configs_lists_and_changes_log_levels_that_apply_at_once(broker: BrokerProcess, kafka_lib: Path) -> None:
    b = broker
    node = node_id(b.bootstrap)
    listed = kafka_configs(kafka_lib, b.bootstrap, "--entity-type", "broker-loggers", "--entity-name", node, "--describe")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0] == f"Dynamic configs for broker-logger {node} are:"
    assert "  root=INFO sensitive=false synonyms={}" in lines
    assert f"  {LOGGER}=INFO sensitive=false synonyms={{}}" in lines

    quiet = unique_topic("quiet")
    create_topic(b.bootstrap, quiet)
    done = kafka_configs(kafka_lib, b.bootstrap, "--entity-type", "broker-loggers", "--entity-name", node, "--alter", "--add-config", f"{LOGGER}=DEBUG")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"Completed updating config for broker-logger {node}."
    listed = kafka_configs(kafka_lib, b.bootstrap, "--entity-type", "broker-loggers", "--entity-name", node, "--describe")
    assert f"  {LOGGER}=DEBUG sensitive=false synonyms={{}}" in listed.stdout.splitlines()
    assert "  root=INFO sensitive=false synonyms={}" in listed.stdout.splitlines()

    loud = unique_topic("loud")
    create_topic(b.bootstrap, loud)
    assert wait_for(lambda: leadership_logged(b, loud), timeout_s=30)
    assert not leadership_logged(b, quiet)

    done = kafka_configs(kafka_lib, b.bootstrap, "--entity-type", "broker-loggers", "--entity-name", node, "--alter", "--delete-config", LOGGER)
    assert done.returncode == 0, done.stderr
    after = unique_topic("after")
    create_topic(b.bootstrap, after)
    # A produce is answered once the broker leads the partition, after it would have logged so.
    assert produce(b.bootstrap, after, 10) is None
    assert not leadership_logged(b, after)

    # What the tool itself refuses (it checks names against the describe) and what the broker does.
    refused = kafka_configs(kafka_lib, b.bootstrap, "--entity-type", "broker-loggers", "--entity-name", node, "--alter", "--add-config", "no.such.Logger=DEBUG")
    assert refused.returncode == 1 and refused.stderr.strip() == "Invalid broker logger(s): no.such.Logger"
    refused = kafka_configs(kafka_lib, b.bootstrap, "--entity-type", "broker-loggers", "--entity-name", node, "--alter", "--delete-config", "root")
    assert refused.returncode == 1
    assert "InvalidRequestException: Removing the log level of the root logger is not allowed" in refused.stdout + refused.stderr
    refused = kafka_configs(kafka_lib, b.bootstrap, "--entity-type", "broker-loggers", "--entity-name", node, "--alter", "--add-config", f"{LOGGER}=debug")
    assert refused.returncode == 1
    assert (
        f"InvalidConfigurationException: Cannot set the log level of {LOGGER} to debug as it is not a supported log level. "
        "Valid log levels are DEBUG, ERROR, FATAL, INFO, TRACE, WARN"
    ) in refused.stdout + refused.stderr


def test_the_broker_answers_what_the_tool_would_not_send_as_kafka_does(broker: BrokerProcess) -> None:
    b = broker
    node = node_id(b.bootstrap)
    assert alter_loggers(b.bootstrap, node, ("no.such.Logger", 0, "DEBUG")) == (ErrorCode.invalid_config, "Logger no.such.Logger does not exist!")
    assert alter_loggers(b.bootstrap, node, (LOGGER, 2, "DEBUG")) == (ErrorCode.invalid_request, "APPEND operation is not allowed for the BROKER_LOGGER resource")
    assert alter_loggers(b.bootstrap, str(int(node) + 1), (LOGGER, 0, "DEBUG")) == (
        ErrorCode.invalid_request,
        f"Unexpected node id. Expected {node}, but received {int(node) + 1}",
    )
    assert alter_loggers(b.bootstrap, node, (LOGGER, 0, None)) == (ErrorCode.invalid_request, f"Null value not supported for : {LOGGER}")
    assert alter_loggers(b.bootstrap, node, (LOGGER, 0, "DEBUG"), validate_only=True) == (ErrorCode.none, None)
    quiet = unique_topic("validated")
    create_topic(b.bootstrap, quiet)
    assert produce(b.bootstrap, quiet, 10) is None
    assert not leadership_logged(b, quiet)
