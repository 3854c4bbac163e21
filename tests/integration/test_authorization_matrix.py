"""The authorization matrix (tests/integration/authorization_matrix.py) against kbroker, compared
with Apache Kafka 4.4's answers to the same requests from the same principals under the same ACLs
(SASL_SSL, SCRAM-SHA-512, StandardAuthorizer). Kafka's answers were recorded by
`python -m tests.integration.authorization_matrix --record`, which starts Kafka 4.4 from
benchmarks/apache_kafka.py; run without --record it tells whether Kafka still gives them.

Every error code must be Kafka's, except the differences listed here with their reason."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration import authorization_matrix as matrix
from tests.integration.conftest import BrokerProcess
from tests.ports import free_ports

# (principal's scenario, case) -> why kbroker answers otherwise. None of them is an authorization decision.
KNOWN_DIFFERENCES = {
    (scenario, "metadata-auto-create"): "Kafka answers UNKNOWN_TOPIC_OR_PARTITION at once and creates the topic in the background; "
    "kbroker answers once the topic exists, with its partitions (both let the principal create it)"
    for scenario in ("allowed", "prefixed", "super")
}


@pytest.fixture(scope="module")
def kbroker_answers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[tuple[str, str], object]]:
    directory = tmp_path_factory.mktemp("matrix")
    ca_file, keystore = matrix.certificates(directory)
    broker = BrokerProcess(directory / "data")
    (secure_port,) = free_ports(1)
    broker.overrides.update(matrix.broker_properties(keystore) | {"listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SASL_SSL://127.0.0.1:{secure_port}"})
    broker.start()
    try:
        matrix.setup(broker.bootstrap)
        yield matrix.run(f"127.0.0.1:{secure_port}", str(ca_file))
    finally:
        broker.kill()


def test_every_api_answers_each_principal_as_kafka_does(kbroker_answers: dict[tuple[str, str], object]) -> None:
    kafka = matrix.from_json(json.loads(Path(matrix.RECORDED).read_text()))
    assert set(kafka) == set(kbroker_answers), "the recorded matrix is not the matrix the test runs: record it again"
    unexplained = [line for line in matrix.differences(kafka, kbroker_answers) if tuple(line.split()[:2]) not in KNOWN_DIFFERENCES]
    assert not unexplained, "kbroker answers otherwise than Kafka 4.4:\n" + "\n".join(unexplained)
    for key in KNOWN_DIFFERENCES:
        assert kafka[key] != kbroker_answers[key], f"{key} is listed as a difference but kbroker now answers as Kafka: take it off the list"


def test_refusals_are_the_ones_kafka_makes(kbroker_answers: dict[tuple[str, str], object]) -> None:
    """What the matrix covers, said plainly: no principal without its ACL gets through, each one
    with it does, whichever way the ACL is written."""
    refusals = {"TOPIC": 29, "GROUP": 30, "CLUSTER": 31, "TXN": 53}
    for case in matrix.CASES:
        if not case.needs or case.name == "describe-cluster":  # refused as Kafka does: no operations, no error
            continue
        codes = {code for _, code in kbroker_answers[("none", case.name)]}  # type: ignore[union-attr]
        assert codes & set(refusals.values()), f"{case.name} let a principal with no ACL through: {codes}"
        for scenario in ("allowed", "prefixed", "super"):
            granted = {code for _, code in kbroker_answers[(scenario, case.name)]}  # type: ignore[union-attr]
            if case.name == "create-topics" and scenario != "super":
                granted.discard(29)  # the new topic's configs, which it may not describe, are withheld
            assert not granted & set(refusals.values()), f"{case.name} refused {scenario}: {granted}"
