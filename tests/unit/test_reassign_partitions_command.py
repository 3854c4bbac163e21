"""`kbroker reassign-partitions` without a cluster: the JSON formats, --execute's checks, Kafka's
rack-unaware and rack-aware placements for --generate and the throttles --execute computes."""

from __future__ import annotations

import random

import pytest

from broker.reassign_partitions_command import (
    Ongoing,
    ReassignCommandError,
    proposed_move_map,
    throttle_configs,
    assign_replicas,
    assign_replicas_to_brokers,
    check_execute_args,
    format_reassignment_json,
    parse_reassignment,
    parse_topics_to_move,
    rack_alternated_brokers,
)


class StartAtZero(random.Random):
    """Kafka's fixedStartIndex = 0."""

    def randrange(self, *args: object, **kwargs: object) -> int:  # type: ignore[override]
        return 0


def test_placement_is_kafkas_rack_unaware_assignment() -> None:
    # The example in Kafka's AdminUtils: 5 brokers, 10 partitions, 3 replicas, start index 0.
    placed = assign_replicas_to_brokers(10, 3, [0, 1, 2, 3, 4], StartAtZero())
    assert placed[0] == [0, 1, 2] and placed[4] == [4, 0, 1]
    assert placed[5] == [0, 2, 3] and placed[9] == [4, 1, 2]
    assert all(len(set(r)) == 3 for r in placed.values())
    # Leaders spread evenly over the brokers.
    assert sorted(r[0] for r in placed.values()) == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    with pytest.raises(ReassignCommandError, match="Replication factor: 4 larger than available brokers: 3."):
        assign_replicas_to_brokers(1, 4, [2, 3, 4], random.Random(0))


def test_the_json_formats() -> None:
    assert parse_topics_to_move('{"version": 1, "topics": [{"topic": "a"}, {"topic": "b"}]}') == ["a", "b"]
    text = format_reassignment_json({("b", 0): [2, 3], ("a", 1): [4, 2], ("a", 0): [1, 2]})
    assert text == (
        '{"version":1,"partitions":[{"topic":"a","partition":0,"replicas":[1,2],"log_dirs":["any","any"]},'
        '{"topic":"a","partition":1,"replicas":[4,2],"log_dirs":["any","any"]},{"topic":"b","partition":0,"replicas":[2,3],"log_dirs":["any","any"]}]}'
    )
    assert parse_reassignment(text) == [(("a", 0), [1, 2]), (("a", 1), [4, 2]), (("b", 0), [2, 3])]
    assert parse_reassignment('{"partitions": [{"topic": "t", "partition": 0, "replicas": [1]}]}') == [(("t", 0), [1])]
    for bad, message in [
        ("{", "The input string is not a valid JSON"),
        ('{"version": 2, "partitions": []}', "Not supported version field value 2"),
        ('{"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2], "log_dirs": ["any"]}]}', r"Size of replicas list \[1, 2\] is different from size of log dirs list \[any\] for partition t-0"),
    ]:
        with pytest.raises(ReassignCommandError, match=message):
            parse_reassignment(bad)


def test_execute_refuses_what_kafkas_tool_refuses() -> None:
    for parts, message in [
        ([], "Partition reassignment list cannot be empty"),
        ([(("t", 0), [])], "Partition replica list cannot be empty"),
        ([(("t", 0), [1]), (("t", 0), [2])], "Partition reassignment contains duplicate topic partitions: t-0"),
        ([(("t", 0), [1, 1, 2]), (("t", 1), [3, 3])], "Partition replica lists may not contain duplicate entries: t-0 contains multiple entries for 1. t-1 contains multiple entries for 3"),
    ]:
        with pytest.raises(ReassignCommandError, match=message):
            check_execute_args(parts)


def test_throttles_name_the_sources_on_the_leader_side_and_the_new_replicas_on_the_follower_side() -> None:
    moves = proposed_move_map({}, {("t", 0): [2, 3, 4], ("t", 1): [1, 2, 3]}, {("t", 0): [1, 2, 3], ("t", 1): [1, 2, 3]})
    assert throttle_configs(moves) == {"t": ("0:1,0:2,0:3,1:1,1:2,1:3", "0:4")}
    # A move in progress keeps the sources it had before it began.
    in_progress = {("u", 0): Ongoing(replicas=[4, 5, 1], adding=[4, 5], removing=[1])}
    assert proposed_move_map(in_progress, {("u", 0): [5, 6]}, {("u", 0): [4, 5, 1]}) == {("u", 0): ({1}, {5, 6})}


def test_racks_alternate_in_the_broker_list() -> None:
    # Kafka's AdminRackAwareTest: racks by name, brokers of a rack by id.
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated_brokers(racks) == [0, 3, 1, 5, 4, 2]
    assert rack_alternated_brokers({0: "a", 1: "a", 2: "a", 3: "b"}) == [0, 3, 1, 2]


def test_placement_is_kafkas_rack_aware_assignment() -> None:
    # Kafka's AdminRackAwareTest example: 6 brokers in 3 racks, 7 partitions, 3 replicas, start index 0.
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    placed = assign_replicas(7, 3, racks, StartAtZero())
    assert placed == {0: [0, 3, 1], 1: [3, 1, 5], 2: [1, 5, 4], 3: [5, 4, 2], 4: [4, 2, 0], 5: [2, 0, 3], 6: [0, 4, 2]}
    assert all(len({racks[b] for b in r}) == 3 for r in placed.values())


def test_rack_aware_placement_spreads_every_partition_over_the_racks() -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    for seed in range(20):
        placed = assign_replicas(12, 3, racks, random.Random(seed))
        assert all(len({racks[b] for b in r}) == 3 and len(set(r)) == 3 for r in placed.values())
        assert sorted(r[0] for r in placed.values()) == sorted(list(racks) * 2)
    # Fewer racks than replicas: every rack first, then the brokers not yet used.
    two_racks = {1: "a", 2: "a", 3: "b", 4: "b"}
    for r in assign_replicas(8, 3, two_racks, random.Random(3)).values():
        assert len(set(r)) == 3 and {two_racks[b] for b in r} == {"a", "b"}


def test_racks_are_all_or_nothing() -> None:
    with pytest.raises(ReassignCommandError, match="Not all brokers have rack information for replica rack aware assignment."):
        assign_replicas(3, 2, {1: "a", 2: None, 3: "b"}, random.Random(0))
    # None has a rack (or --disable-rack-aware dropped them): the rack-unaware placement.
    assert assign_replicas(10, 3, {0: None, 1: None, 2: None, 3: None, 4: None}, StartAtZero()) == assign_replicas_to_brokers(10, 3, [0, 1, 2, 3, 4], StartAtZero())
