"""A full disk for one node: its log dir on a small tmpfs, filled until ENOSPC.

Mount before the node's storage is formatted (KafkaCluster.start formats), fill while it runs,
free and unmount once it has stopped. ``mount`` returns False where the machine refuses a mount
(not root, no CAP_SYS_ADMIN, a container without it): the caller reports the fault as not run.

With tests/cluster/cluster.py, no hook is needed: a node's log dir is created by the format step
of ``KafkaCluster.start``, so ``FullDisk(cluster.nodes[n].data_dir, mb).mount()`` goes between
building the cluster and starting it, and ``unmount`` after ``cluster.close()``. The node's own
log file and config sit beside the log dir, off the tmpfs.

The node reacts as Kafka's broker with a single log dir: its first write that meets ENOSPC takes
the dir offline (KAFKA_STORAGE_ERROR for what touches it) and the process halts with exit code 1;
``free`` then a restart brings it back through log recovery.
"""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

FILLER = ".full-disk-filler"
CHUNK = 1 << 20


class FullDisk:
    def __init__(self, log_dir: Path, size_mb: int) -> None:
        self.log_dir = log_dir
        self.size_mb = size_mb
        self.mounted = False

    @property
    def filler(self) -> Path:
        return self.log_dir / FILLER

    def mount(self) -> bool:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        if any(self.log_dir.iterdir()):
            raise RuntimeError(f"{self.log_dir} is not empty: mount before the node's storage is formatted")
        try:
            done = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={self.size_mb}m", "tmpfs", str(self.log_dir)], capture_output=True, timeout=30
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
        self.mounted = done.returncode == 0
        return self.mounted

    def fill(self) -> None:
        """Write the filler until the filesystem refuses a byte; the node's next write gets ENOSPC."""
        if not self.mounted:
            raise RuntimeError(f"{self.log_dir} is not on the tmpfs: filling it would fill the machine's disk")
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            chunk = b"\0" * CHUNK
            while True:
                try:
                    os.write(fd, chunk)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    if len(chunk) == 1:
                        return
                    # Then smaller writes: the last pages of the filesystem go too.
                    chunk = chunk[: len(chunk) // 16 or 1]
        finally:
            os.close(fd)

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def unmount(self) -> None:
        if self.mounted:
            subprocess.run(["umount", str(self.log_dir)], check=True, capture_output=True, timeout=30)
            self.mounted = False


__all__ = ["FullDisk"]
