"""Kafka's OffsetCheckpointFile: "0", a count, then "<topic> <partition> <offset>" lines.

Used for `recovery-point-offset-checkpoint`, `log-start-offset-checkpoint` and (later)
`replication-offset-checkpoint`. Written to a `.tmp` sibling, fsynced, renamed over the
old file and the directory fsynced, so a crash leaves either the old or the new content.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

VERSION = 0


class CheckpointError(ValueError):
    pass


def write_offset_checkpoint(path: Path, offsets: Mapping[tuple[str, int], int]) -> None:
    lines = [str(VERSION), str(len(offsets))] + [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())]
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def read_offset_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """The offsets in ``path``; {} when it does not exist, CheckpointError when it is malformed.

    An empty file, or one holding only its version, is no entries: Kafka creates every checkpoint
    file empty when it opens it (CheckpointFile's constructor) and its CheckpointReadBuffer reads
    such a file as an empty list, so a Kafka node killed before its first checkpoint leaves these.
    """
    if not path.exists():
        return {}
    lines = path.read_text().splitlines()
    if not lines:
        return {}
    try:
        if int(lines[0]) != VERSION:
            raise CheckpointError(f"{path}: unknown checkpoint version {lines[:1]}")
        if len(lines) == 1:
            return {}
        count = int(lines[1])
        out: dict[tuple[str, int], int] = {}
        for line in lines[2 : 2 + count]:
            topic, partition, offset = line.split()
            out[(topic, int(partition))] = int(offset)
    except (ValueError, IndexError) as e:
        raise CheckpointError(f"{path}: malformed checkpoint: {e}") from None
    if len(out) != count:
        raise CheckpointError(f"{path}: expected {count} entries, found {len(out)}")
    return out


def fsync_file(path: Path) -> None:
    """Make what was written to ``path`` through another descriptor durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(directory: Path) -> None:
    """Make a rename or a new file in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
