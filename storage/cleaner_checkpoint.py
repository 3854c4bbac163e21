"""Kafka's cleaner-offset-checkpoint: per log dir, the first dirty offset of each compacted partition.

Everything below a partition's offset has been cleaned; the cleaner starts its next pass
there. Same format and atomic write as the other offset checkpoints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import structlog

from storage.checkpoints import CheckpointError, read_offset_checkpoint, write_offset_checkpoint

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"

log = structlog.get_logger(__name__)


class CleanerCheckpoint:
    def __init__(self, log_dir: Path) -> None:
        self.path = log_dir / CLEANER_OFFSET_CHECKPOINT

    def read(self) -> dict[tuple[str, int], int]:
        try:
            return read_offset_checkpoint(self.path)
        except (CheckpointError, OSError) as e:
            # Kafka starts over then: every compacted log is cleaned again from its start.
            log.warning("log_cleaner.checkpoint_unreadable", file=str(self.path), error=str(e))
            return {}

    def write(self, offsets: Mapping[tuple[str, int], int]) -> None:
        write_offset_checkpoint(self.path, offsets)
