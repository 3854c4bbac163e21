"""A broker's log dirs as the controller sees them: directory ids registered, cordoned and offline.

Every dir of ``log.dirs`` has a directory id in its meta.properties (``kafka-storage format`` writes
one per dir). The broker registers the ids of the dirs online at start-up (Kafka's
LogManager.directoryIdsSet), sends the cordoned ones (KIP-1066) and the ones gone offline since
(KIP-858's OfflineLogDirs) in its heartbeats. Paths are compared resolved: cordoned.log.dirs may
name a dir as ``./data`` that log.dirs names ``data``.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Callable, Iterable

from broker.metadata.metadata_image import PartitionRegistration
from storage.log_manager import LogManager


class BrokerLogDirs:
    def __init__(self, log_manager: LogManager, cordoned_paths: Callable[[], Iterable[Path]], fallback_id: uuid.UUID) -> None:
        self._log_manager = log_manager
        self._cordoned_paths = cordoned_paths
        # The metadata dir's id, for a one-dir node whose meta.properties has none of its own.
        self._fallback_id = fallback_id

    def registered_ids(self) -> list[uuid.UUID]:
        """BrokerRegistration's LogDirs: the ids of the dirs online now."""
        lm = self._log_manager
        ids = [lm.directory_ids[d] for d in lm.live_log_dirs if d in lm.directory_ids]
        return ids or [self._fallback_id]

    def is_cordoned(self, log_dir: Path) -> bool:
        resolved = log_dir.resolve()
        return any(d.resolve() == resolved for d in self._cordoned_paths())

    def cordoned_ids(self) -> tuple[uuid.UUID, ...]:
        return tuple(i for d, i in self._ids() if self.is_cordoned(d))

    def offline_ids(self) -> tuple[uuid.UUID, ...]:
        """BrokerHeartbeat's OfflineLogDirs: the ids of the dirs that went offline since they were read."""
        channel = self._log_manager.failure_channel
        return tuple(i for d, i in self._ids() if channel.has_offline_log_dir(d))

    def _ids(self) -> list[tuple[Path, uuid.UUID]]:
        lm = self._log_manager
        if not lm.directory_ids:
            return [(lm.log_dir, self._fallback_id)]
        return list(lm.directory_ids.items())


def assigned_directory(registration: PartitionRegistration, broker_id: int) -> uuid.UUID | None:
    """The directory id the metadata gives ``broker_id``'s replica (KIP-858), None when it gives none."""
    if broker_id not in registration.replicas or len(registration.directories) != len(registration.replicas):
        return None
    return registration.directories[registration.replicas.index(broker_id)]


__all__ = ["BrokerLogDirs", "assigned_directory"]
