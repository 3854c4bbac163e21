"""`kbroker leader-election`: kafka-leader-election.sh's options, checks, JSON file and output,
with the AdminClient replaced (tests/cluster/test_preferred_leaders.py runs it against a cluster)."""

from __future__ import annotations

import concurrent.futures
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition

from broker import client_commands as cc
from broker.cli import main


class FakeAdmin:
    def __init__(self, results: dict[TopicPartition, Any]) -> None:
        self.results = results
        self.calls: list[tuple[ElectionType, list[TopicPartition] | None]] = []

    def elect_leaders(self, election_type: ElectionType, partitions: list[TopicPartition] | None) -> concurrent.futures.Future[Any]:
        self.calls.append((election_type, partitions))
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        future.set_result(self.results)
        return future


@pytest.fixture
def fake_admin(monkeypatch: pytest.MonkeyPatch) -> FakeAdmin:
    client = FakeAdmin({})
    monkeypatch.setattr(cc, "admin", lambda bootstrap: client)
    return client


def test_the_results_are_printed_as_kafka_s_tool_prints_them(fake_admin: FakeAdmin, capsys: pytest.CaptureFixture[str]) -> None:
    fake_admin.results = {
        TopicPartition("b", 0): None,
        TopicPartition("a", 2): None,
        TopicPartition("a", 1): KafkaError(KafkaError.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."),
        TopicPartition("c", 4): KafkaError(KafkaError.PREFERRED_LEADER_NOT_AVAILABLE, "The preferred leader was not available."),
        # Documented as exceptions: taken as well.
        TopicPartition("d", 0): KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, "No such topic as d")),
        TopicPartition("e", 0): KafkaError(KafkaError.REQUEST_TIMED_OUT, "no controller answered"),
    }
    assert main(["leader-election", "--bootstrap-server", "h:1", "--election-type", "PREFERRED", "--all-topic-partitions"]) == 1
    out, err = capsys.readouterr()
    assert fake_admin.calls == [(ElectionType.PREFERRED, None)]
    assert out.splitlines() == [
        "Successfully completed leader election (PREFERRED) for partitions a-2, b-0",
        "Valid replica already elected for partitions a-1",
        "Error completing leader election (PREFERRED) for partition: c-4: "
        "org.apache.kafka.common.errors.PreferredLeaderNotAvailableException: The preferred leader was not available.",
        "Error completing leader election (PREFERRED) for partition: d-0: "
        "org.apache.kafka.common.errors.UnknownTopicOrPartitionException: No such topic as d",
        "Error completing leader election (PREFERRED) for partition: e-0: org.apache.kafka.common.errors.TimeoutException: no controller answered",
    ]
    assert err == "error: 3 replica(s) could not be elected\n"


def test_nothing_to_elect_prints_nothing(fake_admin: FakeAdmin, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["leader-election", "--election-type", "unclean", "--topic", "t", "--partition", "3"]) == 0
    assert fake_admin.calls == [(ElectionType.UNCLEAN, [TopicPartition("t", 3)])]
    assert capsys.readouterr() == ("", "")


def test_a_request_that_fails_as_a_whole(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    class Refusing(FakeAdmin):
        def elect_leaders(self, election_type: ElectionType, partitions: list[TopicPartition] | None) -> concurrent.futures.Future[Any]:
            future: concurrent.futures.Future[Any] = concurrent.futures.Future()
            future.set_exception(KafkaException(KafkaError(KafkaError._TIMED_OUT, "Failed while waiting for controller")))
            return future

    monkeypatch.setattr(cc, "admin", lambda bootstrap: Refusing({}))
    with pytest.raises(SystemExit) as exited:
        main(["leader-election", "--election-type", "preferred", "--all-topic-partitions"])
    assert exited.value.code == 1
    out, err = capsys.readouterr()
    assert out == "Timeout waiting for election results\n" and err == "error: Failed while waiting for controller\n"


def test_the_json_file_names_the_partitions(fake_admin: FakeAdmin, tmp_path: Path) -> None:
    path = tmp_path / "election.json"
    path.write_text('{"partitions": [{"topic": "foo", "partition": 1}, {"topic": "foobar", "partition": 2}]}')
    assert main(["leader-election", "--election-type", "preferred", "--path-to-json-file", str(path)]) == 0
    assert fake_admin.calls == [(ElectionType.PREFERRED, [TopicPartition("foo", 1), TopicPartition("foobar", 2)])]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "Replica election data is empty"),
        ("{}", "Replica election data is empty"),
        ('{"topics": []}', 'Replica election data is missing "partitions" field'),
        ('{"partitions": [{"topic": "a", "partition": 0}, {"topic": "a", "partition": 0}]}', "Replica election data contains duplicate partitions: [a-0]"),
        ('{"partitions": [{"topic": "a"}]}', "Replica election data has an invalid partition entry: KeyError('partition')"),
        ("{partitions", "the replica election data is not JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    ],
)
def test_bad_json_files(text: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cc.parse_election_partitions(text)
    assert exited.value.code == 1 and capsys.readouterr().err == f"error: {message}\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "One and only one of the following options is required: --topic, --all-topic-partitions, --path-to-json-file"),
        (["--all-topic-partitions", "--topic", "t", "--partition", "0"], "One and only one of the following options is required: --topic, --all-topic-partitions, --path-to-json-file"),
        (["--topic", "t"], "Missing required option(s): --partition"),
        (["--all-topic-partitions", "--partition", "0"], "Option --partition is only allowed if --topic is used"),
    ],
)
def test_the_options_are_checked_as_kafka_s_tool_checks_them(args: list[str], message: str, fake_admin: FakeAdmin, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["leader-election", "--election-type", "preferred", *args]) == 2
    assert capsys.readouterr().err == f"error: {message}\n" and fake_admin.calls == []


def test_the_election_type_is_required_and_checked(capsys: pytest.CaptureFixture[str]) -> None:
    for args in (["--all-topic-partitions"], ["--election-type", "random", "--all-topic-partitions"]):
        with pytest.raises(SystemExit) as exited:
            main(["leader-election", *args])
        assert exited.value.code == 2
    assert "--election-type" in capsys.readouterr().err


def test_an_unreadable_json_file(fake_admin: FakeAdmin, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["leader-election", "--election-type", "preferred", "--path-to-json-file", str(tmp_path / "missing.json")])
    assert exited.value.code == 1 and "error: cannot read" in capsys.readouterr().err
