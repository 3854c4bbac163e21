"""Kafka's StripedReplicaPlacer: where the replicas of new partitions go.

Goals, in Kafka's priority order: spread each partition's replicas over as many racks as
possible; spread replicas and leaders over the brokers; prefer unfenced brokers. Hard
rules: no broker twice in a partition, and the leader (first replica) is unfenced.

Racks are visited round-robin from a rotating start, one rack per replica, so successive
partitions take "stripes" A,B,C / B,C,A / C,A,B. Inside a rack, brokers are also taken
round-robin (unfenced ones before fenced ones). Each partition is one iteration epoch;
once as many partitions as unfenced brokers have been placed, the racks and the brokers
in them are shuffled so that the next round does not repeat the same replica sets. The
random starting points and shuffles come from the ``random.Random`` passed in, so a
seeded one makes placement deterministic.

What this guarantees (tested): every partition has rf distinct brokers, an unfenced
leader, and min(rf, racks) racks; inside a rack, fenced brokers come only after all its
unfenced ones; with one rack (or none configured), leaders are balanced within one
partition per unfenced broker. With uneven racks Kafka's placer favours rack spread over
leader balance, and so does this one.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True, slots=True)
class UsableBroker:
    """A broker placement may use: registered, not in controlled shutdown, and with a log dir not
    cordoned (KIP-1066)."""

    id: int
    rack: str | None = None
    fenced: bool = False


class InvalidReplicationFactorError(ValueError):
    """The replication factor cannot be met; the message is Kafka's."""


class _BrokerCursor:
    """Kafka's BrokerList: round-robin over sorted brokers, restarted one further along each epoch."""

    __slots__ = ("brokers", "_index", "_offset", "_epoch")

    def __init__(self) -> None:
        self.brokers: list[int] = []
        self._index = 0
        self._offset = 0
        self._epoch = 0

    def initialize(self, rng: random.Random) -> None:
        if self.brokers:
            self.brokers.sort()
            self._offset = rng.randrange(len(self.brokers))

    def shuffle(self, rng: random.Random) -> None:
        rng.shuffle(self.brokers)

    def next(self, epoch: int) -> int | None:
        """The next broker of this epoch, None once every broker was handed out in it."""
        if not self.brokers:
            return None
        if self._epoch != epoch:
            self._epoch = epoch
            self._index = 0
            self._offset = (self._offset + 1) % len(self.brokers)
        if self._index >= len(self.brokers):
            return None
        broker = self.brokers[(self._index + self._offset) % len(self.brokers)]
        self._index += 1
        return broker


class _Rack:
    __slots__ = ("fenced", "unfenced")

    def __init__(self) -> None:
        self.fenced = _BrokerCursor()
        self.unfenced = _BrokerCursor()

    def next(self, epoch: int) -> int | None:
        broker = self.unfenced.next(epoch)
        return broker if broker is not None else self.fenced.next(epoch)


def _rack_key(rack: str | None) -> tuple[bool, str]:
    return (rack is not None, rack or "")  # no rack sorts first, as Kafka's OptionalStringComparator


class _RackList:
    """One placement call's state: the racks, the rack offset and the iteration epoch."""

    def __init__(self, rng: random.Random, brokers: Iterable[UsableBroker]) -> None:
        self._rng = rng
        self._racks: dict[str | None, _Rack] = {}
        self.total = 0
        self.unfenced = 0
        for broker in brokers:
            rack = self._racks.setdefault(broker.rack, _Rack())
            if broker.fenced:
                rack.fenced.brokers.append(broker.id)
            else:
                rack.unfenced.brokers.append(broker.id)
                self.unfenced += 1
            self.total += 1
        for rack in self._racks.values():
            rack.fenced.initialize(rng)
            rack.unfenced.initialize(rng)
        self._names = sorted(self._racks, key=_rack_key)
        self._offset = rng.randrange(len(self._names)) if self._names else 0
        # Kafka resets its one epoch counter at each reshuffle, so a cursor last used in
        # epoch 0 of the previous round is not restarted in epoch 0 of the next, and hands
        # out a fenced broker while an unfenced one of its rack is free. Here the cursors'
        # epoch only grows; the round position alone restarts.
        self._epoch = 0
        self._in_round = 0

    def place(self, replication_factor: int) -> list[int]:
        # A full round (one partition per unfenced broker) is done: reshuffle so the next
        # round pairs brokers differently.
        if self._in_round == self.unfenced and self.unfenced > 1:
            self._rng.shuffle(self._names)
            for rack in self._racks.values():
                rack.fenced.shuffle(self._rng)
                rack.unfenced.shuffle(self._rng)
            self._in_round = 0
        if self._offset == len(self._names):
            self._offset = 0
        count = len(self._names)
        leader_rack = self._offset
        while True:
            leader = self._racks[self._names[leader_rack]].unfenced.next(self._epoch)
            if leader is not None:
                break
            leader_rack = (leader_rack + 1) % count
        replicas = [leader]
        rack_index = self._offset
        skip: int | None = leader_rack
        for _ in range(1, replication_factor):
            broker: int | None = None
            while broker is None:
                if rack_index == skip:
                    skip = None  # the leader's rack gives no second replica until every rack has given one
                else:
                    broker = self._racks[self._names[rack_index]].next(self._epoch)
                rack_index = (rack_index + 1) % count
            replicas.append(broker)
        self._epoch += 1
        self._in_round += 1
        self._offset += 1
        return replicas


class StripedReplicaPlacer:
    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def place(self, num_partitions: int, replication_factor: int, brokers: Iterable[UsableBroker]) -> list[list[int]]:
        """One replica list per partition, leader first; raises InvalidReplicationFactorError."""
        racks = _RackList(self._rng, brokers)
        if replication_factor <= 0:
            raise InvalidReplicationFactorError(
                f"Invalid replication factor {replication_factor}: the replication factor must be positive."
            )
        if racks.unfenced == 0:
            raise InvalidReplicationFactorError("All brokers are currently fenced, or have all their log directories cordoned.")
        if replication_factor > racks.total:
            raise InvalidReplicationFactorError(
                f"The target replication factor of {replication_factor} cannot be reached because only "
                f"{racks.total} broker(s) are registered or some brokers have all their log directories cordoned."
            )
        return [racks.place(replication_factor) for _ in range(num_partitions)]


__all__ = ["InvalidReplicationFactorError", "StripedReplicaPlacer", "UsableBroker"]
