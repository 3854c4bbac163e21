"""VoterSetHistory: the voter sets a dynamic quorum's log names, by offset (KIP-853).

With kraft.version 1 the voters are not configured: they are the latest VotersRecord in the
log, or in the snapshot the log starts from (Kafka's KRaftControlRecordStateMachine). A set
takes effect once it is in the local log, as in Kafka, and goes again if that part of the log
is truncated; the leader allows one change at a time, and only once the previous one is
committed, so any two sets in play differ by one voter and their majorities overlap.

The bootstrap checkpoint (snapshot 0-0 with KRaftVersion and the initial VotersRecord) is what
``kafka-storage format --initial-controllers`` writes; ``write_bootstrap_checkpoint`` makes it.
"""

from __future__ import annotations

from kio.schema.k_raft_version_record.v0.data import KRaftVersionRecord
from kio.schema.voters_record.v0.data import VotersRecord

from protocol.records import iter_batches, iter_records
from raft.control_records import KRaftVersion, build_control_batch, decode_control_record, kraft_version_record, snapshot_footer, snapshot_header
from raft.replicated_log import OffsetAndEpoch, ReplicatedLog
from raft.voter_set import VoterSet

BOOTSTRAP_SNAPSHOT_ID = OffsetAndEpoch(0, 0)


class VoterSetHistory:
    def __init__(self) -> None:
        self._entries: list[tuple[int, VoterSet]] = []
        # By offset too: truncating away an upgrade's KRaftVersionRecord takes the quorum back to the level before it.
        self._kraft_versions: list[tuple[int, KRaftVersion]] = []

    @property
    def kraft_version(self) -> KRaftVersion:
        """The latest kraft.version in the log, committed or not (Kafka's lastKraftVersion); 0 when none is named."""
        return self._kraft_versions[-1][1] if self._kraft_versions else KRaftVersion.KRAFT_VERSION_0

    def latest(self) -> VoterSet | None:
        return self._entries[-1][1] if self._entries else None

    def latest_offset(self) -> int | None:
        return self._entries[-1][0] if self._entries else None

    def as_of(self, offset: int) -> VoterSet | None:
        """The set in force for a snapshot ending at ``offset``: the latest named below it."""
        found = None
        for entry_offset, voters in self._entries:
            if entry_offset < offset:
                found = voters
        return found

    def load_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes | memoryview) -> None:
        """Start over from a snapshot; its control records stand at the offset just below its end."""
        self._entries.clear()
        self._kraft_versions.clear()
        self.scan(data, at_offset=snapshot_id.offset - 1)

    def scan(self, data: bytes | memoryview, at_offset: int | None = None) -> bool:
        """Take in the VotersRecord and KRaftVersion records of the control batches in ``data``; True if the set changed.

        Only batch headers are read for data batches. ``at_offset`` overrides the records' own
        offsets (a snapshot's offsets are its own, not the log's).
        """
        before = self.latest()
        for header, view in iter_batches(data):
            if not header.is_control:
                continue
            for record in iter_records(view, header):
                message = decode_control_record(record).message
                offset = record.offset if at_offset is None else at_offset
                if isinstance(message, VotersRecord):
                    if self._entries and self._entries[-1][0] > offset:
                        raise ValueError(f"VotersRecord at offset {offset} below the last one at {self._entries[-1][0]}")
                    self._entries.append((offset, VoterSet.from_voters_record(message)))
                elif isinstance(message, KRaftVersionRecord):
                    self._kraft_versions.append((offset, KRaftVersion(message.k_raft_version)))
        return self.latest() != before

    def truncate_from(self, offset: int) -> bool:
        """Forget the sets named at or past ``offset`` (the log was truncated there); True if the set changed."""
        before = self.latest()
        while self._entries and self._entries[-1][0] >= offset:
            self._entries.pop()
        while self._kraft_versions and self._kraft_versions[-1][0] >= offset:
            self._kraft_versions.pop()
        return self.latest() != before


def snapshot_control_batch(voters: VoterSet, time_ms: int, base_offset: int, epoch: int) -> bytes:
    """The KRaftVersion and VotersRecord a kraft.version 1 snapshot carries after its header."""
    return build_control_batch([kraft_version_record(KRaftVersion.KRAFT_VERSION_1), voters.to_voters_record()], time_ms, base_offset=base_offset, epoch=epoch)


def write_bootstrap_checkpoint(log: ReplicatedLog, voters: VoterSet, time_ms: int) -> bool:
    """Snapshot 0-0 naming the initial voters (``--initial-controllers``/``--standalone``); False if it exists."""
    writer = log.create_new_snapshot_unchecked(BOOTSTRAP_SNAPSHOT_ID)
    if writer is None:
        return False
    writer.append(build_control_batch([snapshot_header(time_ms)], time_ms, base_offset=0, epoch=0))
    writer.append(snapshot_control_batch(voters, time_ms, base_offset=1, epoch=0))
    writer.append(build_control_batch([snapshot_footer()], time_ms, base_offset=3, epoch=0))
    writer.freeze()
    return True


__all__ = ["BOOTSTRAP_SNAPSHOT_ID", "VoterSetHistory", "snapshot_control_batch", "write_bootstrap_checkpoint"]
