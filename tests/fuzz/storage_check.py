"""After a fuzz run: the broker's log holds no traceback, and every partition log is intact.

The partition check is what recovery does to a segment, restated independently of storage/:
every batch is magic 2 with a valid CRC32C, offsets only go up, and the file ends at a batch
boundary (or in zeros, if segments were preallocated).
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import crc32c

_HEAD = struct.Struct(">qiib")  # base offset, batch length, partition leader epoch, magic
_CRC = struct.Struct(">I")
_LOG_OVERHEAD = 12
_CRC_START = 21
_LAST_OFFSET_DELTA = struct.Struct(">i")


def log_problems(path: Path) -> list[str]:
    data = path.read_bytes()
    problems = []
    position, next_offset = 0, None
    while position + _LOG_OVERHEAD <= len(data):
        base_offset, length, _, magic = _HEAD.unpack_from(data, position)
        if length == 0 and not any(data[position:]):
            break  # a preallocated segment's unused tail
        end = position + _LOG_OVERHEAD + length
        where = f"{path}: batch at byte {position}"
        if length < 49 or end > len(data):
            problems.append(f"{where}: length {length} runs past the end of the file ({len(data)} bytes)")
            break
        if magic != 2:
            problems.append(f"{where}: magic {magic}")
        (crc,) = _CRC.unpack_from(data, position + 17)
        if crc32c.crc32c(data[position + _CRC_START : end]) != crc:
            problems.append(f"{where}: CRC mismatch")
        if next_offset is not None and base_offset < next_offset:
            problems.append(f"{where}: base offset {base_offset} below the previous batch's next offset {next_offset}")
        (delta,) = _LAST_OFFSET_DELTA.unpack_from(data, position + 23)
        next_offset = base_offset + delta + 1
        position = end
    if 0 < len(data) - position < _LOG_OVERHEAD and any(data[position:]):
        problems.append(f"{path}: {len(data) - position} torn bytes at the end")
    return problems


def partition_log_problems(data_dir: Path) -> list[str]:
    problems = []
    for path in sorted(data_dir.rglob("*.log")):
        problems += log_problems(path)
    return problems


def traceback_events(events: list[dict[str, Any]]) -> list[str]:
    """Log lines at error level or above, or carrying a traceback."""
    found = []
    for event in events:
        line = event.get("line", "")
        if event.get("level") in ("error", "critical") or "exception" in event or "Traceback" in line:
            found.append(str(event)[:4000])
    return found
