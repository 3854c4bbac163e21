"""BootstrapDirectory: `bootstrap.checkpoint`, the records a new cluster's metadata log starts with.

Kafka's kafka-storage.sh format writes this file into the metadata directory (a snapshot-format
file: a header control batch, the records, a footer) and the first active controller appends its
records to the empty log. kbroker writes it when `storage format` is given something to add to
that start (`--add-scram`), with the feature levels it would otherwise append by itself, so a
controller that finds the file bootstraps from it alone.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from broker.metadata.metadata_records import MetadataRecord, decode_metadata_record
from protocol.records import build_batch, iter_batches, iter_records
from raft.control_records import build_control_batch, snapshot_footer, snapshot_header

BOOTSTRAP_FILE = "bootstrap.checkpoint"


class BootstrapMetadataError(ValueError):
    pass


def write_bootstrap_metadata(metadata_dir: Path, records: Sequence[MetadataRecord], time_ms: int) -> Path:
    """Write the file (atomically: a formatted directory is complete or absent)."""
    path = metadata_dir / BOOTSTRAP_FILE
    data = bytearray(build_control_batch([snapshot_header(time_ms)], time_ms, base_offset=0))
    data += build_batch([(None, r.encode(), (), time_ms) for r in records], base_offset=1)
    data += build_control_batch([snapshot_footer()], time_ms, base_offset=1 + len(records))
    metadata_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".checkpoint.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def read_bootstrap_metadata(metadata_dir: Path) -> list[MetadataRecord] | None:
    """The file's records, or None when the directory has none."""
    path = metadata_dir / BOOTSTRAP_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    records: list[MetadataRecord] = []
    try:
        for header, batch in iter_batches(data):
            if header.is_control:
                continue
            records.extend(decode_metadata_record(r.value) for r in iter_records(batch, header) if r.value is not None)
    except ValueError as e:
        raise BootstrapMetadataError(f"{path}: {e}") from None
    return records
