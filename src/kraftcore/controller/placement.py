"""Replica placement for new partitions: which brokers hold each replica, leader first
(kafka-facts §8.5, the behaviour of Kafka's `StripedReplicaPlacer`).

Constraints, which every result keeps:

* at most one replica per broker, so the replication factor is at most the number of
  registered brokers (fenced ones count);
* the first replica (the preferred leader) is an unfenced broker.

Goals, in priority order: spread each partition across racks, spread replicas evenly across
brokers, prefer unfenced brokers.

How (striping): brokers are grouped by rack (brokers without a rack form one group, sorted
before the named racks); the racks are sorted, and inside each rack the unfenced and the
fenced brokers form two sorted lists, each with its own round-robin cursor starting at a
random offset. Partition p starts at rack (s + p) mod R, s a random offset. Its leader is the
next unfenced broker of the first rack, from that one on, that has one; the other replicas
come from the following racks in turn (wrapping around, so a rack can give a second replica
once every rack has given one), each rack giving its next unfenced broker not yet in the
partition, or when it has none left its next fenced one. Every cursor advances by one per
broker taken, so consecutive partitions walk through a rack's brokers and every broker
holds the same number of replicas, give or take one, when the racks are alike.

The leader. The striped list starts with an unfenced broker; it stays first unless another
unfenced member of the list leads fewer of the partitions placed so far by this call, in
which case the least-loaded one (earliest in striped order on a tie) moves to the front.
Without that, a rack used as often for followers as for leaders would give its leaderships
to the same broker every time (e.g. replication factor 2 over three racks of two brokers).

With racks A, B, C, brokers A0.. B0.. C0.. and zero offsets: p0 = A0, B0, C0;
p1 = B1, C1, A1; p2 = C2, A2, B2.

Where this differs from Kafka (behaviour, not constraints): Kafka reshuffles racks and
cursors after as many partitions as there are unfenced brokers, to vary the replica sets and
spread leaders statistically; here leaders are balanced by the rule above and the striped
sets repeat with the racks' period. Kafka starts the followers at the rack after the
*starting* rack even when the leader had to come from a later one; here followers start at
the rack after the one that gave the first replica, which keeps the rack spread when the
starting rack has only fenced brokers. Randomness comes only from `rng.randrange`: one draw
for the rack offset, then one per non-empty broker list, racks in sorted order, unfenced
list before fenced.
"""

from kraftcore.errors import ControllerError
from kraftcore.protocol.error_codes import ErrorCode

__all__ = ["StripedReplicaPlacer"]


class _Cursor:
    """A sorted broker list read round-robin from a random start."""

    __slots__ = ("brokers", "position")

    def __init__(self, brokers, rng):
        self.brokers = sorted(brokers)
        self.position = rng.randrange(len(self.brokers)) if self.brokers else 0

    def take(self):
        broker = self.brokers[self.position]
        self.position = (self.position + 1) % len(self.brokers)
        return broker


class _Rack:
    __slots__ = ("unfenced", "fenced", "unfenced_taken", "fenced_taken")

    def __init__(self, unfenced, fenced, rng):
        self.unfenced = _Cursor(unfenced, rng)
        self.fenced = _Cursor(fenced, rng)
        self.unfenced_taken = 0  # taken for the partition being placed
        self.fenced_taken = 0

    def start_partition(self):
        self.unfenced_taken = 0
        self.fenced_taken = 0

    def take_unfenced(self):
        """The next unfenced broker not yet in this partition, or None."""
        if self.unfenced_taken == len(self.unfenced.brokers):
            return None
        self.unfenced_taken += 1
        return self.unfenced.take()

    def take_any(self):
        """The next unfenced broker not yet in this partition, else the next fenced one,
        else None (the rack has given all its brokers to this partition)."""
        broker = self.take_unfenced()
        if broker is None and self.fenced_taken < len(self.fenced.brokers):
            self.fenced_taken += 1
            broker = self.fenced.take()
        return broker


def _rack_order(rack):
    return (rack is not None, rack or "")


class StripedReplicaPlacer:
    """Places replicas as the module doc describes. Stateless: each call starts afresh."""

    def place(self, brokers, partition_count, replication_factor, rng):
        """`partition_count` replica lists of `replication_factor` distinct broker ids, the
        first one unfenced, for brokers given as `(broker_id, rack_or_None, fenced)`.

        Raises `ControllerError` INVALID_REPLICATION_FACTOR (38) when the replication factor
        is below 1, above the number of brokers, or when no broker is unfenced;
        INVALID_PARTITIONS (37) for a negative partition count; ValueError when a broker id
        appears twice. `rng` is a `random.Random` (only `randrange` is used)."""
        by_rack = {}
        seen = set()
        unfenced_count = 0
        for broker_id, rack, fenced in brokers:
            if broker_id in seen:
                raise ValueError(f"broker {broker_id} is listed twice; give each broker once")
            seen.add(broker_id)
            groups = by_rack.setdefault(rack, ([], []))
            groups[1 if fenced else 0].append(broker_id)
            if not fenced:
                unfenced_count += 1
        if replication_factor < 1:
            raise ControllerError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"invalid replication factor {replication_factor}: it must be at least 1")
        if replication_factor > len(seen):
            raise ControllerError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"replication factor {replication_factor} needs {replication_factor} brokers "
                f"but only {len(seen)} are registered; lower it or register more brokers")
        if unfenced_count == 0:
            raise ControllerError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                "no unfenced brokers: a partition's leader must be an unfenced broker; "
                "retry once a broker has registered and caught up")
        if partition_count < 0:
            raise ControllerError(
                ErrorCode.INVALID_PARTITIONS,
                f"invalid partition count {partition_count}: it must not be negative")

        rack_count = len(by_rack)
        start = rng.randrange(rack_count)
        racks = [_Rack(unfenced, fenced, rng)
                 for _, (unfenced, fenced) in sorted(by_rack.items(),
                                                     key=lambda item: _rack_order(item[0]))]
        fenced_ids = {b for _, (_, fenced) in by_rack.items() for b in fenced}
        leaderships = dict.fromkeys(seen, 0)
        placements = []
        for p in range(partition_count):
            for rack in racks:
                rack.start_partition()
            index = (start + p) % rack_count
            first = racks[index].take_unfenced()
            while first is None:  # ends: some rack has an unfenced broker
                index = (index + 1) % rack_count
                first = racks[index].take_unfenced()
            replicas = [first]
            while len(replicas) < replication_factor:  # ends: RF <= number of brokers
                index = (index + 1) % rack_count
                broker = racks[index].take_any()
                if broker is not None:
                    replicas.append(broker)
            # The leader: the unfenced replica that leads the fewest partitions so far,
            # the earliest in striped order on a tie (usually the first one).
            best = 0
            for i in range(1, len(replicas)):
                if (leaderships[replicas[i]] < leaderships[replicas[best]]
                        and replicas[i] not in fenced_ids):
                    best = i
            if best:
                replicas.insert(0, replicas.pop(best))
            leaderships[replicas[0]] += 1
            placements.append(replicas)
        return placements
