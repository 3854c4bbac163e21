"""tests/chaos/duplicate_origins.py on segment files written as a broker writes them: batches at
their offsets, one after the other, in a partition directory of each node."""

from __future__ import annotations

from pathlib import Path

from protocol.records import build_batch
from tests.chaos.checker import Read, duplicates
from tests.chaos.duplicate_origins import LATER_EPOCH, NOT_ON_DISK, OTHER_PRODUCER, SAME_EPOCH, duplicate_origins

TOPIC = "queue-1"


def segment(data_dir: Path, partition: int, base: int, *batches: tuple[int, int, int, list[str]]) -> None:
    """One segment file from ``base``: each batch (producer id, epoch, base sequence, values) at the next offsets."""
    out = bytearray()
    offset = base
    for pid, epoch, sequence, values in batches:
        out += build_batch([(None, v.encode(), (), 0) for v in values], base_offset=offset, producer_id=pid, producer_epoch=epoch, base_sequence=sequence, partition_leader_epoch=4)
        offset += len(values)
    directory = data_dir / f"{TOPIC}-{partition}"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{base:020d}.log").write_bytes(bytes(out))


def test_each_kind_of_copy_is_named_from_the_batches_on_disk(tmp_path: Path) -> None:
    node1, node2 = tmp_path / "node1", tmp_path / "node2"
    segment(node1, 0, 0, (7, 2, 100, ["a", "b"]), (9, 0, 5, ["c"]))
    # A later segment holds the re-sent copies: epoch 3 from sequence 0, the same epoch again, another producer.
    segment(node1, 0, 3, (7, 3, 0, ["a", "b"]), (9, 0, 6, ["c"]), (8, 0, 0, ["d"]))
    segment(node2, 1, 0, (10, 0, 1, ["d"]))  # only node 2 holds partition 1
    reads = [Read("drain", 0, o, v) for o, v in enumerate("abc")] + [Read("drain", 0, 3 + o, v) for o, v in enumerate("abcd")]
    reads += [Read("c0", 1, 0, "d"), Read("c0", 0, 9, "e"), Read("c0", 0, 10, "e")]
    origins = duplicate_origins(TOPIC, duplicates(reads), [node1, node2])
    assert origins["kinds"] == {LATER_EPOCH: 2, SAME_EPOCH: 1, OTHER_PRODUCER: 1, NOT_ON_DISK: 1}
    assert {v: o["kind"] for v, o in origins["values"].items()} == {"a": LATER_EPOCH, "b": LATER_EPOCH, "c": SAME_EPOCH, "d": OTHER_PRODUCER, "e": NOT_ON_DISK}
    assert origins["values"]["b"]["copies"] == [
        {"partition": 0, "offset": 1, "producer_id": 7, "producer_epoch": 2, "base_sequence": 100, "leader_epoch": 4},
        {"partition": 0, "offset": 4, "producer_id": 7, "producer_epoch": 3, "base_sequence": 0, "leader_epoch": 4},
    ]
    assert [(c["partition"], c["producer_id"]) for c in origins["values"]["d"]["copies"]] == [(0, 8), (1, 10)]


def test_no_duplicates_reads_no_file(tmp_path: Path) -> None:
    assert duplicate_origins(TOPIC, duplicates([Read("drain", 0, 0, "a")]), [tmp_path / "missing"]) == {"kinds": {}, "values": {}}
