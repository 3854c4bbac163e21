"""What a read hands the network layer: regions of segment files, sent with ``os.sendfile``."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class FileRegion:
    """``length`` bytes of the open file ``fd`` starting at ``position``.

    The fd stays open after its segment is deleted, for file.delete.delay.ms, so a
    region handed out before a retention pass can still be sent.
    """

    fd: int
    position: int
    length: int


@dataclass(slots=True)
class FetchDataInfo:
    """Kafka's FetchDataInfo: the data found for a fetch starting at ``fetch_offset``.

    The last region may end inside a batch (cut by the fetch's max bytes); clients drop
    such a partial trailing batch. ``first_entry_incomplete`` says the first batch alone
    was larger than the limit and min_one_message was off, so nothing useful was returned.
    """

    fetch_offset: int
    regions: list[FileRegion] = field(default_factory=list)
    first_entry_incomplete: bool = False

    @property
    def size(self) -> int:
        return sum(r.length for r in self.regions)
