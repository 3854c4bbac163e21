"""What a node's log directory holds, for `kbroker storage info`: read as kbroker's start-up reads it, never written.

After the part that kafka-storage.sh prints, `storage info` says per directory what kbroker found
there, one fact a line: whether the last shutdown was clean (`.kafka_cleanshutdown` and its
brokerEpoch), the partitions and their log start and end offsets, the internal topics, the
metadata log (its newest snapshot, its log end, quorum-state, the voters), which software wrote
the files when a file says so, and what a start of kbroker would recover, redo or refuse.

Only the files' names and sizes and a few small files are read, plus each log's last segment
from its last index entry on (at most ``HEADER_BUDGET`` batch headers): a directory of many
partitions is described in a moment. ``verbose`` reads every segment whole, checking each
batch's CRC as recovery would.

Which software wrote the files is said only from files that carry it: kbroker's producer-state
snapshots end with its "kbrk" trailer (storage/producer_state_snapshot.py) and its log cleaner
leaves `.swapend` files; Apache Kafka's snapshots of producers have no trailer. A snapshot of no
producer looks the same from both, and the metadata log's Raft snapshots carry no mark; so does
the `.lock` file both hold in each directory while they run (storage/file_lock.py; removed when
they stop cleanly), whose holder, if any, is named.

Nothing here opens a file for writing: every reader used is one that only reads (the index,
checkpoint, epoch, partition.metadata, snapshot and quorum-state readers of the storage and
Raft layers), so the directory's bytes and modification times are as they were.
"""

from __future__ import annotations

import fcntl
import json
import mmap
import os
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path

from kio.schema.k_raft_version_record.v0.data import KRaftVersionRecord
from kio.schema.voters_record.v0.data import VotersRecord

from protocol.record_batch import InvalidBatch, is_crc_valid, read_header
from protocol.records import InvalidRecordError, iter_records
from raft.control_records import decode_control_record
from raft.file_quorum_state_store import DATA_VERSION, FileQuorumStateStore, QuorumStateFileError
from raft.file_snapshots import list_snapshot_paths, snapshot_file_name
from raft.kafka_metadata_log import METADATA_PARTITION, METADATA_TOPIC
from raft.voter_set import VoterSet
from storage.abstract_index import CorruptIndexError
from storage.checkpoints import CheckpointError, read_offset_checkpoint
from storage.cleaner_checkpoint import CLEANER_OFFSET_CHECKPOINT
from storage.errors import KafkaStorageError
from storage.file_lock import LOCK_FILE_NAME as LOCK_FILE
from storage.leader_epoch_cache import LEADER_EPOCH_CHECKPOINT_FILE, LeaderEpochCache
from storage.local_log import FUTURE_DIR_SUFFIX, SWAP_END_FILE_SUFFIX, parse_topic_partition
from storage.log_manager import CLEAN_SHUTDOWN_FILE, DELETE_DIR_SUFFIX, HIGH_WATERMARK_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT
from storage.log_segment import (
    CLEANED_FILE_SUFFIX,
    DELETED_FILE_SUFFIX,
    INDEX_FILE_SUFFIX,
    LOG_FILE_SUFFIX,
    SWAP_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
    scan_batches,
)
from storage.offset_index import OffsetIndex
from storage.partition_metadata import PARTITION_METADATA_FILE, PartitionMetadataFile, uuid_to_kafka_string
from storage.producer_state_snapshot import TRAILER_MAGIC, CorruptSnapshotError, decode_snapshot, list_snapshots, snapshot_path
from storage.time_index import TimeIndex

# Batch headers read per log, from its last index entry, to find its end without --verbose.
HEADER_BUDGET = 20_000
# Partitions whose offsets a topic's line shows without --verbose (empty ones are counted apart).
PARTITIONS_SHOWN = 10
INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state", "__share_group_state")
METADATA_FOLDER = f"{METADATA_TOPIC}-{METADATA_PARTITION}"
# The index readers only read; the size bounds how many entries an append may add.
_READ_ONLY_INDEX_SIZE = 2**31 - 1
# ProducerSnapshot v1: Version int16, Crc uint32, then the count and 46-byte entries (see
# storage/producer_state_snapshot.py); kbroker's trailer follows the entries.
_PRODUCER_ENTRY_COUNT = struct.Struct(">i")
_PRODUCER_ENTRIES_AT = 6
_PRODUCER_ENTRY_SIZE = 46
KAFKA, KBROKER = "Apache Kafka", "kbroker"
# struct flock of Linux (x86-64, arm64): l_type, l_whence, l_start, l_len, l_pid.
_FLOCK = struct.Struct("hhqqi")


@dataclass(frozen=True, slots=True, order=True)
class SegmentFile:
    base_offset: int
    size: int


@dataclass
class LogFacts:
    """One log's segments, offsets and what loading it would do; ``end_exact`` is False when the
    header budget ran out first (the end is then at least ``log_end``)."""

    name: str
    segments: list[SegmentFile]
    log_start: int
    log_end: int
    end_exact: bool
    indexes_to_rebuild: list[str] = field(default_factory=list)
    leftovers: int = 0
    segment_notes: list[str] = field(default_factory=list)  # --verbose: one line per segment


@dataclass
class PartitionFacts:
    topic: str
    partition: int
    log: LogFacts
    recovery_point: int | None  # None when the checkpoint names no recovery point for it
    future: bool = False


@dataclass
class WriterEvidence:
    """The files that say who wrote them."""

    kafka_snapshots: list[str] = field(default_factory=list)  # producer snapshots of producers, no trailer
    kbroker_snapshots: list[str] = field(default_factory=list)  # with kbroker's trailer
    swap_ends: list[str] = field(default_factory=list)  # kbroker's log cleaner
    # (mtime, writer) of the newest snapshot that tells, for the last writer of a mixed directory.
    newest: tuple[int, str] | None = None


@dataclass
class MetadataLogFacts:
    log: LogFacts
    snapshots: list[str]  # frozen snapshot ids, oldest first
    quorum_state: str
    voters: str


@dataclass
class LogDirInventory:
    directory: Path
    facts: list[str]
    recover: list[str]
    problems: list[str]
    partitions: list[PartitionFacts] = field(default_factory=list)


def describe_log_dir(directory: Path, *, is_log_dir: bool, is_metadata_dir: bool, has_broker: bool, verbose: bool = False) -> LogDirInventory:
    """Everything kbroker found in ``directory``: a log dir of the node (``is_log_dir``), its
    metadata log dir, or both; ``has_broker`` when the node runs a broker (whose LogManager
    keeps the clean-shutdown marker and the checkpoints)."""
    facts: list[str] = []
    recover: list[str] = []
    problems: list[str] = []
    evidence = WriterEvidence()
    names = sorted(os.listdir(directory))
    folders = [n for n in names if (directory / n).is_dir()]
    marker = directory / CLEAN_SHUTDOWN_FILE
    clean = marker.exists()
    if is_log_dir and has_broker:
        facts.append(_shutdown_fact(marker) if clean else _no_shutdown_fact(directory, folders))
    lock_fact = None
    if LOCK_FILE in names:
        holder = _lock_holder(directory / LOCK_FILE)
        if holder is not None:
            problems.append(f"{LOCK_FILE} is locked by process {holder}: a broker is running on this directory")
        held = f"held by process {holder}" if holder is not None else f"left by a broker ({KAFKA} or {KBROKER}) that did not stop cleanly"
        lock_fact = f"{LOCK_FILE}: {held}"

    recovery_points = _checkpoint(directory, RECOVERY_POINT_CHECKPOINT, recover, "every log is recovered from its first segment")
    log_starts = _checkpoint(directory, LOG_START_OFFSET_CHECKPOINT, recover, "each log starts at its first segment")
    _checkpoint(directory, HIGH_WATERMARK_CHECKPOINT, recover, "high watermarks start at 0")
    _checkpoint(directory, CLEANER_OFFSET_CHECKPOINT, recover, "compacted logs are cleaned again from their start")

    partitions: list[PartitionFacts] = []
    deleting, strays = [], []
    metadata: MetadataLogFacts | None = None
    for name in folders:
        folder = directory / name
        if name == METADATA_FOLDER:
            if is_metadata_dir:
                metadata = _metadata_log(folder, evidence, recover, problems, verbose)
            else:
                strays.append(f"{name} (metadata.log.dir is another directory)")
            continue
        if name.endswith(DELETE_DIR_SUFFIX):
            deleting.append(name)
            continue
        try:
            topic, partition = parse_topic_partition(folder)
        except ValueError:
            strays.append(name)
            continue
        key = (topic, partition)
        try:
            log = _log_facts(folder, name, log_starts.get(key, 0), evidence, problems, verbose)
        except OSError as e:
            problems.append(f"kbroker cannot load {name}: {e}")
            continue
        partitions.append(PartitionFacts(topic, partition, log, recovery_points.get(key), future=name.endswith(FUTURE_DIR_SUFFIX)))

    facts.append(_writer_fact(evidence))
    if lock_fact is not None:
        facts.append(lock_fact)
    current = [p for p in partitions if not p.future]
    if is_log_dir or current:
        facts.extend(_partition_facts(current, verbose))
        facts.append(_internal_topics_fact(current))
    futures = [p for p in partitions if p.future]
    if futures:
        facts.append(f"future replicas (moving here from another log dir): {', '.join(p.log.name for p in futures)}")
    if strays:
        facts.append(f"ignored, not partitions: {', '.join(strays)}")
    if metadata is not None:
        facts.extend(_metadata_facts(metadata, verbose))
    elif is_metadata_dir:
        facts.append(f"metadata log: none ({METADATA_FOLDER} is created at the first start)")

    if deleting:
        recover.append(f"remove {_count(deleting, 'deleted partition')} ({_some(deleting)})")
    if is_log_dir and has_broker:
        if clean:
            recover.extend(_past_clean_shutdown(directory, marker, current))
        elif current:
            recover.append(_recovery_fact(current))
    every_log = [p.log for p in partitions]
    rebuilt = [f"{log.name}/{n}" for log in every_log for n in log.indexes_to_rebuild]
    if rebuilt:
        recover.append(f"rebuild the indexes of {_count(rebuilt, 'segment')} ({_some(rebuilt)})")
    leftovers = sum(log.leftovers for log in every_log)
    if leftovers:
        recover.append(f"finish or undo interrupted deletions and cleanings: {leftovers} .deleted, .cleaned, .swap or .tmp files")
    return LogDirInventory(directory, facts, recover, problems, partitions)


def render(inventory: LogDirInventory) -> list[str]:
    """The lines `storage info` prints for one directory."""
    lines = [f"kbroker found in {inventory.directory}:"]
    lines += [f"  {fact}" for fact in inventory.facts]
    lines += [f"  at start, kbroker would: {item}" for item in inventory.recover] or ["  at start, kbroker would recover nothing"]
    lines += [f"  problem: {problem}" for problem in inventory.problems]
    return lines


def duplicate_partitions(inventories: list[LogDirInventory]) -> list[str]:
    """Kafka's loadLog refuses the same partition in two log dirs (a corrupted JBOD); so does kbroker."""
    where: dict[tuple[str, int], list[Path]] = {}
    for inventory in inventories:
        for p in inventory.partitions:
            if not p.future:
                where.setdefault((p.topic, p.partition), []).append(inventory.directory)
    return [
        f"Duplicate log directories for {topic}-{partition} are found in both {dirs[0]} and {dirs[1]}: kbroker would not start"
        for (topic, partition), dirs in sorted(where.items())
        if len(dirs) > 1
    ]


# -- the files --------------------------------------------------------------------------------------------


def _shutdown_fact(marker: Path) -> str:
    """Kafka's CleanShutdownFileHandler: {"version":0,"brokerEpoch":N}; the epoch registers as PreviousBrokerEpoch."""
    try:
        epoch = json.loads(marker.read_text()).get("brokerEpoch")
    except (OSError, ValueError, AttributeError):
        epoch = None
    if not isinstance(epoch, int) or isinstance(epoch, bool):
        return f"last shutdown: clean ({CLEAN_SHUTDOWN_FILE}, no brokerEpoch in it)"
    return f"last shutdown: clean ({CLEAN_SHUTDOWN_FILE}, brokerEpoch {epoch})"


def _no_shutdown_fact(directory: Path, folders: list[str]) -> str:
    """No marker: an unclean shutdown, or no broker ran here yet (nothing but what formatting wrote)."""
    ran = any(name != METADATA_FOLDER for name in folders) or any((directory / name).exists() for name in (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT))
    if not ran:
        return f"last shutdown: none recorded (no {CLEAN_SHUTDOWN_FILE}, no partition, no checkpoint)"
    return f"last shutdown: not clean (no {CLEAN_SHUTDOWN_FILE})"


def _lock_holder(path: Path) -> int | None:
    """The process holding Kafka's lock on ``path`` (FileChannel.tryLock, an fcntl lock on Linux), asked
    with F_GETLK, which takes no lock; None when none holds it, or where the question cannot be asked."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        answer = fcntl.fcntl(fd, fcntl.F_GETLK, _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0) + bytes(8))
    except OSError:
        return None
    finally:
        os.close(fd)
    lock_type, _, _, _, pid = _FLOCK.unpack_from(answer)
    return pid if lock_type != fcntl.F_UNLCK else None


def _checkpoint(directory: Path, name: str, recover: list[str], consequence: str) -> dict[tuple[str, int], int]:
    """An offset checkpoint as the LogManager reads it: one it cannot read counts as empty."""
    try:
        return read_offset_checkpoint(directory / name)
    except (CheckpointError, OSError) as e:
        recover.append(f"read {name} as empty, being unreadable ({e}): {consequence}")
        return {}


def _log_facts(folder: Path, name: str, checkpoint_start: int, evidence: WriterEvidence, problems: list[str], verbose: bool) -> LogFacts:
    files = {entry.name: entry.stat().st_size for entry in os.scandir(folder) if entry.is_file()}
    segments = sorted(SegmentFile(int(n[:20]), size) for n, size in files.items() if n.endswith(LOG_FILE_SUFFIX) and _is_offset(n[:-4]))
    leftovers = sum(1 for n in files if n.endswith((DELETED_FILE_SUFFIX, ".tmp", CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX)))
    for n in files:
        if n.endswith(SWAP_END_FILE_SUFFIX):
            evidence.swap_ends.append(f"{name}/{n}")
    try:
        LeaderEpochCache(folder / LEADER_EPOCH_CHECKPOINT_FILE)
        PartitionMetadataFile(folder / PARTITION_METADATA_FILE).read()
    except (KafkaStorageError, OSError) as e:
        problems.append(f"kbroker cannot load {name}: {e}")
    _producer_snapshots(folder, name, evidence)
    rebuild = [f"{segment.base_offset:020d}" for segment in segments if _index_unsound(folder, segment)]
    # LogLoader: the log starts at its checkpointed start or its first segment, whichever is later.
    log_start = max(checkpoint_start, segments[0].base_offset) if segments else checkpoint_start
    log = LogFacts(name, segments, log_start, log_start, True, rebuild, leftovers)
    if not segments:
        return log
    if verbose:
        for segment in segments:
            # The log ends where its last segment does (UnifiedLog's log end offset).
            log.log_end, note = _scan_segment(folder, segment)
            log.segment_notes.append(note)
    else:
        log.log_end, log.end_exact = _cheap_log_end(folder, segments[-1], trust_index=f"{segments[-1].base_offset:020d}" not in rebuild)
    return log


def _is_offset(prefix: str) -> bool:
    return len(prefix) == 20 and prefix.isdigit()


def _index_unsound(folder: Path, segment: SegmentFile) -> bool:
    """LogSegment.sanity_check, on the index readers alone: the loader rebuilds a segment's indexes
    when they are missing or fail it (Kafka's preallocated, untrimmed index files among them)."""
    stem = folder / f"{segment.base_offset:020d}"
    index_path, time_index_path = stem.with_suffix(INDEX_FILE_SUFFIX), stem.with_suffix(TIME_INDEX_FILE_SUFFIX)
    if not (index_path.exists() and time_index_path.exists()):
        return segment.size > 0
    try:
        OffsetIndex(index_path, segment.base_offset, _READ_ONLY_INDEX_SIZE).sanity_check(segment.size)
        TimeIndex(time_index_path, segment.base_offset, _READ_ONLY_INDEX_SIZE).sanity_check()
    except CorruptIndexError:
        return True
    return False


def _cheap_log_end(folder: Path, last: SegmentFile, trust_index: bool) -> tuple[int, bool]:
    """The offset after the last whole batch, read from the last index entry on (UnifiedLog's
    readNextOffset) within HEADER_BUDGET headers; (at least this offset, False) past the budget."""
    stem = folder / f"{last.base_offset:020d}"
    position = 0
    if trust_index:
        position = OffsetIndex(stem.with_suffix(INDEX_FILE_SUFFIX), last.base_offset, _READ_ONLY_INDEX_SIZE).last_entry.position
    fd = os.open(stem.with_suffix(LOG_FILE_SUFFIX), os.O_RDONLY)
    try:
        end = last.base_offset
        for count, (_, header) in enumerate(scan_batches(fd, last.size, position)):
            if count == HEADER_BUDGET:
                return end, False
            end = header.next_offset
        return end, True
    finally:
        os.close(fd)


def _scan_segment(folder: Path, segment: SegmentFile) -> tuple[int, str]:
    """--verbose: every batch of the segment, its CRC checked and its offsets following the last
    (what recovery checks); the segment's end offset and one line about it (none when empty)."""
    path = folder / f"{segment.base_offset:020d}{LOG_FILE_SUFFIX}"
    name = path.name
    if segment.size == 0:
        return segment.base_offset, ""
    batches, position, end, problem = 0, 0, segment.base_offset, ""
    fd = os.open(path, os.O_RDONLY)
    try:
        with mmap.mmap(fd, segment.size, prot=mmap.PROT_READ) as mm:
            view = memoryview(mm)
            try:
                while position < segment.size:
                    try:
                        header = read_header(view, position)
                    except InvalidBatch as e:
                        problem = f"no batch at byte {position} ({e})"
                        break
                    if position + header.size > segment.size:
                        problem = f"a batch cut short at byte {position}"
                        break
                    if header.base_offset < end:
                        problem = f"offset {header.base_offset} at byte {position} does not follow {end - 1}"
                        break
                    if not is_crc_valid(view, header):
                        problem = f"CRC mismatch in the batch at byte {position} (offset {header.base_offset})"
                        break
                    end = header.next_offset
                    batches += 1
                    position += header.size
            finally:
                view.release()
    finally:
        os.close(fd)
    note = f"{name}: {segment.size} bytes, {batches} batch{'' if batches == 1 else 'es'}, offsets {segment.base_offset}..{end}"
    if problem:
        note += f"; {problem}: recovery would cut the {segment.size - position} bytes from there"
    return end, note


def _producer_snapshots(folder: Path, name: str, evidence: WriterEvidence) -> None:
    """Tally who wrote the folder's producer-state snapshots. Read with the header and CRC only:
    kbroker's snapshot always ends with its trailer after the entries, Kafka's never does."""
    for offset in list_snapshots(folder):
        path = snapshot_path(folder, offset)
        try:
            data = path.read_bytes()
            mtime = path.stat().st_mtime_ns
        except OSError:
            continue
        writer = _snapshot_writer(data)
        if writer is None:
            continue
        (evidence.kbroker_snapshots if writer == KBROKER else evidence.kafka_snapshots).append(f"{name}/{path.name}")
        if evidence.newest is None or mtime > evidence.newest[0]:
            evidence.newest = (mtime, writer)


def _snapshot_writer(data: bytes) -> str | None:
    """KBROKER for a snapshot with kbroker's trailer, KAFKA for one of at least one producer
    without it; None when it cannot tell (no producer, or not a snapshot kbroker reads)."""
    try:
        decode_snapshot(data)
    except CorruptSnapshotError:
        return None
    (count,) = _PRODUCER_ENTRY_COUNT.unpack_from(data, _PRODUCER_ENTRIES_AT)
    entries_end = _PRODUCER_ENTRIES_AT + _PRODUCER_ENTRY_COUNT.size + count * _PRODUCER_ENTRY_SIZE
    if data[entries_end : entries_end + len(TRAILER_MAGIC)] == TRAILER_MAGIC:
        return KBROKER
    return KAFKA if count > 0 else None


# -- the metadata log -------------------------------------------------------------------------------------


def _metadata_log(folder: Path, evidence: WriterEvidence, recover: list[str], problems: list[str], verbose: bool) -> MetadataLogFacts:
    log = _log_facts(folder, METADATA_FOLDER, 0, evidence, problems, verbose)
    # Opened as after a crash every time (as Kafka does): its indexes are rebuilt anyway, not news.
    log.indexes_to_rebuild = []
    paths = sorted(list_snapshot_paths(folder), key=lambda p: p.snapshot_id)
    frozen = [p for p in paths if not p.partial and not p.deleted]
    partial = sum(1 for p in paths if p.partial)
    if partial:
        recover.append(f"delete {partial} unfinished metadata snapshot{'' if partial == 1 else 's'} (.checkpoint.part)")
    quorum_state = _quorum_state(folder, problems)
    # Kafka's KRaftControlRecordStateMachine: the newest snapshot's, then the log's, the last one wins.
    batches = _control_batches(frozen[-1].path) if frozen else []
    where = [f"snapshot {snapshot_file_name(frozen[-1].snapshot_id)}"] if frozen else []
    if verbose and log.segments:
        batches += [b for s in log.segments for b in _control_batches(folder / f"{s.base_offset:020d}{LOG_FILE_SUFFIX}")]
        where.append("the log")
    voters = _voters_line(*_voters_of(batches), " and ".join(where)) if where else "voters: no snapshot names them (--verbose reads the log)"
    return MetadataLogFacts(log, [snapshot_file_name(p.snapshot_id) for p in frozen], quorum_state, voters)


def _quorum_state(folder: Path, problems: list[str]) -> str:
    store = FileQuorumStateStore(folder / "quorum-state")
    try:
        state = store.read_election_state()
    except (QuorumStateFileError, OSError) as e:
        problems.append(f"kbroker would not start: {e}")
        return "quorum-state: unreadable"
    if state is None:
        return "quorum-state: none"
    data = json.loads(store.path.read_text(encoding="utf-8").split("\n", 1)[0])
    leader = "none" if state.leader_id is None else str(state.leader_id)
    voted = "none" if state.voted_id is None else str(state.voted_id)
    line = f"quorum-state: data_version {data[DATA_VERSION]}, leader epoch {state.epoch}, leader {leader}, voted for {voted}"
    current = data.get("currentVoters")
    if isinstance(current, list):  # data_version 0 names the voters' ids
        ids = sorted(v.get("voterId") for v in current if isinstance(v, dict) and isinstance(v.get("voterId"), int))
        line += f", voters {', '.join(map(str, ids)) or 'none'}"
    return line


def _control_batches(path: Path) -> list[bytes]:
    """The control batches of a file of record batches (a snapshot, a segment), found by their headers alone."""
    found = []
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        for position, header in scan_batches(fd, size):
            if header.is_control:
                found.append(os.pread(fd, header.size, position))
    finally:
        os.close(fd)
    return found


def _voters_of(batches: list[bytes]) -> tuple[VoterSet | None, int | None]:
    """The last VotersRecord and KRaftVersionRecord in ``batches``."""
    voters, kraft_version = None, None
    for batch in batches:
        try:
            header = read_header(batch)
            for record in iter_records(batch, header):
                message = decode_control_record(record).message
                if isinstance(message, VotersRecord):
                    voters = VoterSet.from_voters_record(message)
                elif isinstance(message, KRaftVersionRecord):
                    kraft_version = int(message.k_raft_version)
        except (InvalidBatch, InvalidRecordError):
            continue
    return voters, kraft_version


def _voters_line(voters: VoterSet | None, kraft_version: int | None, where: str) -> str:
    version = 0 if kraft_version is None else kraft_version
    if voters is None:
        return f"voters: none in {where} (kraft.version {version}: controller.quorum.voters names them)"
    shown = []
    for voter in voters:
        address = voter.address()
        endpoint = f"@{address[0]}:{address[1]}" if address else ""
        directory = f" (directory {uuid_to_kafka_string(voter.directory_id)})" if voter.directory_id else ""
        shown.append(f"{voter.voter_id}{endpoint}{directory}")
    return f"voters ({where}, kraft.version {version}): {', '.join(shown)}"


# -- what to say --------------------------------------------------------------------------------------------


def _writer_fact(evidence: WriterEvidence) -> str:
    kafka, kbroker = [], []
    if evidence.kafka_snapshots:
        kafka.append(f"{_count(evidence.kafka_snapshots, 'producer snapshot')} without kbroker's trailer ({_some(evidence.kafka_snapshots)})")
    if evidence.kbroker_snapshots:
        kbroker.append(f"{_count(evidence.kbroker_snapshots, 'producer snapshot')} with kbroker's trailer ({_some(evidence.kbroker_snapshots)})")
    if evidence.swap_ends:
        kbroker.append(f"{_count(evidence.swap_ends, 'file')} of kbroker's log cleaner ({_some(evidence.swap_ends)})")
    if kafka and kbroker:
        newest = f", the newest producer snapshot by {evidence.newest[1]}" if evidence.newest else ""
        return f"written by: {KAFKA} and {KBROKER}{newest}: {'; '.join(kafka + kbroker)}"
    if kafka or kbroker:
        return f"written by: {KAFKA if kafka else KBROKER}: {'; '.join(kafka or kbroker)}"
    return "written by: unknown (no file tells)"


def _count(items: list[str], noun: str) -> str:
    return f"{len(items)} {noun}{'' if len(items) == 1 else 's'}"


def _some(items: list[str], shown: int = 2) -> str:
    head = ", ".join(items[:shown])
    return head if len(items) <= shown else f"{head}, ..."


def _offsets(log: LogFacts) -> str:
    return f"{log.log_start}..{log.log_end}{'' if log.end_exact else '+'}"


def _partition_facts(partitions: list[PartitionFacts], verbose: bool) -> list[str]:
    by_topic: dict[str, list[PartitionFacts]] = {}
    for p in sorted(partitions, key=lambda p: (p.topic, p.partition)):
        by_topic.setdefault(p.topic, []).append(p)
    size = sum(s.size for p in partitions for s in p.log.segments)
    segments = [s for p in partitions for s in p.log.segments]
    if not partitions:
        return ["partitions: none"]
    lines = [f"partitions: {len(partitions)} in {_count(list(by_topic), 'topic')}, {_count(segments, 'segment')}, {size} bytes"]
    for topic, parts in by_topic.items():
        empty = [p for p in parts if p.log.log_start == p.log.log_end == 0 and p.log.end_exact]
        shown = [f"{p.partition}: {_offsets(p.log)}" for p in parts if p not in empty]
        if len(shown) > PARTITIONS_SHOWN and not verbose:
            shown[PARTITIONS_SHOWN:] = [f"{len(shown) - PARTITIONS_SHOWN} more (--verbose shows them)"]
        if empty:
            shown.append(f"{len(empty)} empty")
        noun = "partition" if len(parts) == 1 else "partitions"
        lines.append(f"topic {topic}: {len(parts)} {noun}, log start..end offsets: {', '.join(shown)}")
        if verbose:
            lines += [f"  {p.log.name}/{note}" for p in parts for note in p.log.segment_notes if note]
    if any(not p.log.end_exact for p in partitions):
        lines.append(f"(+: the log end is further on; only {HEADER_BUDGET} batches were read; --verbose reads them all)")
    return lines


def _internal_topics_fact(partitions: list[PartitionFacts]) -> str:
    counts = {topic: sum(1 for p in partitions if p.topic == topic) for topic in INTERNAL_TOPICS}
    present = [f"{topic} ({counts[topic]} partition{'' if counts[topic] == 1 else 's'})" for topic in INTERNAL_TOPICS if counts[topic]]
    absent = [topic for topic in INTERNAL_TOPICS if not counts[topic]]
    if not present:
        return f"internal topics: none of {', '.join(INTERNAL_TOPICS)}"
    return f"internal topics: {', '.join(present)}" + (f"; absent: {', '.join(absent)}" if absent else "")


def _metadata_facts(metadata: MetadataLogFacts, verbose: bool) -> list[str]:
    log = metadata.log
    lines = [f"metadata log: log start..end offsets {_offsets(log)}, {_count(log.segments, 'segment')}, {sum(s.size for s in log.segments)} bytes"]
    if verbose:
        lines += [f"  {METADATA_FOLDER}/{note}" for note in log.segment_notes if note]
    if metadata.snapshots:
        newest = metadata.snapshots[-1]
        end, epoch = int(newest[:20]), int(newest[21:])
        lines.append(f"metadata snapshots: {len(metadata.snapshots)}, the newest {newest}: end offset {end}, epoch {epoch}")
    else:
        lines.append("metadata snapshots: none")
    lines += [metadata.quorum_state, metadata.voters]
    return lines


def _recovery_fact(partitions: list[PartitionFacts]) -> str:
    """LogLoader after an unclean shutdown: every segment from the one holding the recovery point on is re-validated."""
    segments = 0
    size = 0
    past = 0
    for p in partitions:
        point = p.recovery_point or 0
        first = max((i for i, s in enumerate(p.log.segments) if s.base_offset <= point), default=0)
        tail = p.log.segments[first:]
        segments += len(tail)
        size += sum(s.size for s in tail)
        past += p.log.log_end > point
    return (
        f"recover {len(partitions)} partitions (no clean shutdown): re-validate {segments} segments, {size} bytes, "
        f"from their recovery points ({past} hold data past theirs)"
    )


def _past_clean_shutdown(directory: Path, marker: Path, partitions: list[PartitionFacts]) -> list[str]:
    """The marker says every log was flushed to its end before it was written: data past a recovery
    point, or segment files changed after the marker, would be trusted without recovery."""
    out = []
    past = [
        f"{p.log.name} (recovery point {p.recovery_point}, log end {p.log.log_end})"
        for p in partitions
        if p.recovery_point is not None and p.log.end_exact and p.log.log_end > p.recovery_point
    ]
    if past:
        out.append(f"trust, unchecked since {CLEAN_SHUTDOWN_FILE} is there, data past the recovery point of {_count(past, 'partition')}: {_some(past)}")
    marked = marker.stat().st_mtime_ns
    changed = [
        f"{p.log.name}/{s.base_offset:020d}{LOG_FILE_SUFFIX}"
        for p in partitions
        for s in p.log.segments
        if (directory / p.log.name / f"{s.base_offset:020d}{LOG_FILE_SUFFIX}").stat().st_mtime_ns > marked
    ]
    if changed:
        out.append(f"trust, unchecked since {CLEAN_SHUTDOWN_FILE} is there, {_count(changed, 'segment')} written after it: {_some(changed)}")
    return out


__all__ = ["HEADER_BUDGET", "LogDirInventory", "describe_log_dir", "duplicate_partitions", "render"]
