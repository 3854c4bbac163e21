"""Kafka's offset checkpoint files: "0", a count, then "topic partition offset" lines."""

from __future__ import annotations

import os
from pathlib import Path

VERSION = 0


def write_offset_checkpoint(path: Path, offsets: dict[tuple[str, int], int]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    lines = [str(VERSION), str(len(offsets))] + [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())]
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_offset_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    if not path.exists():
        return {}
    lines = path.read_text().split("\n")
    if len(lines) < 2 or lines[0].strip() != str(VERSION):
        raise ValueError(f"{path}: unknown checkpoint version")
    count = int(lines[1])
    out = {}
    for line in lines[2 : 2 + count]:
        topic, partition, offset = line.split()
        out[(topic, int(partition))] = int(offset)
    if len(out) != count:
        raise ValueError(f"{path}: expected {count} entries, found {len(out)}")
    return out
