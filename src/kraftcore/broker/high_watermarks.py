"""`HighWatermarks`: a partition leader's high-watermark tracking over many partitions, as
numpy arrays, so that one follower's fetch round over N partitions costs one call whose work
is proportional to the N partitions it names, never to all the partitions the broker leads
(DESIGN.md, "The data plane"; kafka-broker-facts §C.1-C.2).

What it owns, per partition this broker leads (a *slot*, a small integer id that `add`
returns and `remove` frees for reuse):

  * the replica set (broker ids, at most `replicas_max`) and which one is the leader;
  * the leader's log end offset (LEO), fed by `on_leader_append`;
  * every follower's last known LEO, fed by `on_follower_fetch` (a follower's fetch offset
    is its LEO: it asks for the first offset it does not have, Kafka's
    `updateFollowerFetchState`);
  * the maximal ISR (the committed ISR plus pending additions, `set_isr`) and the
    partition's `min.insync.replicas` (`set_min_isr`);
  * the high watermark (HW).

It does not decide ISR changes (shrink / expand through AlterPartition need the clock and
`replica.lag.time.max.ms`: that is the replica manager's job, which hands the result in with
`set_isr`), and it holds no records: no clock, no I/O, no randomness.

The rules (Kafka's `Partition.maybeIncrementLeaderHW` and
`UnifiedLog.maybeIncrementHighWatermark`, facts §C.1), which every call keeps:

  1. candidate = min(leader LEO, LEO of every follower in the maximal ISR). Replicas outside
     the ISR do not hold the HW back. A follower that has never fetched counts with its last
     known LEO, which `add` sets to the HW it was given: until its first fetch it holds the
     HW where it is (any starting value at or below the HW, Kafka's "unknown offset"
     included, gives the same HWs, since none can move it). `follower_end_offset` reports
     -1 for it until that first fetch.
  2. Strict min ISR (KIP-966): the HW does not move while len(ISR) < effective min ISR =
     min(min_isr, len(replicas)). The ISR counts the leader.
  3. The HW never decreases: new HW = max(old HW, candidate). A follower whose LEO goes
     down (it truncated after a divergence) does not lower it.
  4. The HW is always up to date: after every call, for every slot whose ISR is at least
     its effective min ISR, HW >= candidate. So a call returns every move it causes, and
     `add` may already move the HW it was given (an ISR of the leader alone): read
     `high_watermark(slot)` after `add`.
  5. HW <= leader LEO, always: `add` rejects a HW above the leader's LEO, and the leader's
     LEO never goes down (a leader's log only grows; it truncates only as a follower, and
     then it is no longer in this table).
  6. The leader is a replica and a member of its ISR; replica ids are unique in a slot;
     only a follower (a replica that is not the leader) fetches.

One deviation from Kafka, because there is no clock here: Kafka also lets a follower that is
caught up and ISR-eligible, but not yet in the maximal ISR, hold the HW back (so that the HW
does not race ahead of a replica about to join). Here the caller expresses that by adding
the replica to the maximal ISR (`set_isr`) as soon as it sends the AlterPartition.

Bad input raises ValueError or TypeError before anything changes: a call either applies
completely or not at all. Checked: unknown or freed slots, negative offsets, a slot named
twice in one fetch round, a fetching broker that is not a follower of a named slot, more
replicas than `replicas_max`, an ISR that is not a subset of the replicas or lacks the
leader, `min_isr` < 1, a leader LEO that goes down.

Layout: columns first, so that a fetch round reads and writes 1-D arrays (one gather per
replica column, far cheaper in numpy than gathering short rows and reducing along them).
Column c of a slot is its c-th replica, in the order `add` was given them.

  _replica_id[replicas_max, capacity] int32  broker id, -1 in unused columns
  _leo       [replicas_max, capacity] int64  leader column: the leader's LEO; the others:
                                             the follower's last known LEO
  _fetched   [replicas_max, capacity] bool   the follower has fetched at least once
  _member    [replicas_max, capacity] bool   in the maximal ISR (the leader column is)
  _leader_col, _hw, _min_isr, _eff_min_isr, _isr_size, _frozen (len(ISR) < effective min
  ISR), _live: [capacity]

A fetch round gathers the named slots only, in the first `_width` columns (the widest
replica set ever added), so its cost is O(len(slots) * width) whatever the capacity.
Storage grows by doubling; slots are reused last-freed-first.
"""

import operator

import numpy as np

__all__ = ["HighWatermarks"]

_INT64_MAX = np.iinfo(np.int64).max
_BROKER_ID_MAX = np.iinfo(np.int32).max
_EMPTY = np.empty(0, dtype=np.int64)
_EMPTY.flags.writeable = False


def _int(value, name):
    """A Python int from an integer-like value (bool refused), else TypeError."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an integer, not a bool")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, not {type(value).__name__}") from None


def _offset(value, name):
    value = _int(value, name)
    if not 0 <= value <= _INT64_MAX:
        raise ValueError(f"{name} must be an offset in [0, 2^63), got {value}")
    return value


def _broker_ids(values, name):
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{name} must be a sequence of broker ids, not {type(values).__name__}")
    ids = [_int(v, f"a broker id in {name}") for v in values]
    for b in ids:
        if not 0 <= b <= _BROKER_ID_MAX:
            raise ValueError(f"{name}: broker id {b} is outside [0, 2^31)")
    if len(set(ids)) != len(ids):
        raise ValueError(f"{name} names a broker more than once: {ids}")
    return ids


def _int_array(values, name):
    """A 1-D int64 array from a sequence or numpy array of integers (TypeError for floats,
    bools and other kinds; ValueError for values outside int64)."""
    try:
        array = np.asarray(values)
    except OverflowError:
        raise ValueError(f"{name} holds a value outside the int64 range") from None
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {array.shape}")
    if array.size == 0:
        return _EMPTY
    kind = array.dtype.kind
    if kind == "i":
        return array.astype(np.int64, copy=False)
    if kind == "u":
        if array.max() > _INT64_MAX:
            raise ValueError(f"{name} holds a value outside the int64 range")
        return array.astype(np.int64)
    if kind == "O" and all(isinstance(v, int) and not isinstance(v, bool) for v in array):
        raise ValueError(f"{name} holds a value outside the int64 range")
    raise TypeError(f"{name} must hold integers, not {array.dtype}")


class HighWatermarks:
    """The high watermarks of the partitions one broker leads; see the module docstring."""

    def __init__(self, replicas_max=8, capacity=1024):
        replicas_max = _int(replicas_max, "replicas_max")
        capacity = _int(capacity, "capacity")
        if replicas_max < 1:
            raise ValueError(f"replicas_max must be >= 1, got {replicas_max}")
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.replicas_max = replicas_max
        self._capacity = 0
        self._high = 0  # slots [0, _high) have been handed out at least once
        self._free = []  # freed slots, reused last-freed-first
        self._count = 0
        self._width = 1  # the widest replica set ever added: columns >= _width are unused
        self._arange = np.arange(0, dtype=np.int64)
        self._allocate(capacity)

    # ------------------------------------------------------------------ storage

    def _allocate(self, capacity):
        old, n, r = self._capacity, self._high, self.replicas_max

        def grow(name, shape, dtype, fill):
            array = np.full(shape, fill, dtype=dtype)
            if old:
                array[..., :n] = getattr(self, name)[..., :n]
            setattr(self, name, array)

        grow("_replica_id", (r, capacity), np.int32, -1)
        grow("_leo", (r, capacity), np.int64, 0)
        grow("_fetched", (r, capacity), np.bool_, False)
        grow("_member", (r, capacity), np.bool_, False)
        grow("_leader_col", capacity, np.int64, 0)
        grow("_hw", capacity, np.int64, 0)
        grow("_min_isr", capacity, np.int64, 1)
        grow("_eff_min_isr", capacity, np.int64, 1)
        grow("_isr_size", capacity, np.int64, 0)
        grow("_frozen", capacity, np.bool_, False)
        grow("_live", capacity, np.bool_, False)
        # flat views for scatters at (column, slot): index = column * capacity + slot
        self._leo_flat = self._leo.reshape(-1)
        self._fetched_flat = self._fetched.reshape(-1)
        self._member_flat = self._member.reshape(-1)
        self._mark = np.zeros(capacity, dtype=np.int64)  # scratch: duplicate detection
        self._capacity = capacity

    def _positions(self, n):
        if len(self._arange) < n:
            self._arange = np.arange(max(n, 2 * len(self._arange)), dtype=np.int64)
        return self._arange[:n]

    def _slot(self, slot):
        slot = _int(slot, "slot")
        if not (0 <= slot < self._high and self._live[slot]):
            raise ValueError(f"unknown slot {slot}: not added, or removed")
        return slot

    def __len__(self):
        return self._count

    # ------------------------------------------------------------------ partitions

    def add(self, replicas, isr, leader_id, leader_end_offset, high_watermark, min_isr):
        """Start tracking a partition this broker leads; returns its slot id. `replicas`
        are broker ids (the leader among them), `isr` the maximal ISR (holding the leader).
        Every follower's last known LEO starts at `high_watermark`. The HW may move at once
        (rule 4 of the module docstring): read it with `high_watermark(slot)`."""
        replicas = _broker_ids(replicas, "replicas")
        if not 1 <= len(replicas) <= self.replicas_max:
            raise ValueError(f"a partition needs 1 to replicas_max={self.replicas_max} "
                             f"replicas, got {len(replicas)}")
        leader_id = _int(leader_id, "leader_id")
        if leader_id not in replicas:
            raise ValueError(f"leader {leader_id} is not one of the replicas {replicas}")
        columns = self._isr_columns(replicas, leader_id, isr)
        leader_end_offset = _offset(leader_end_offset, "leader_end_offset")
        high_watermark = _offset(high_watermark, "high_watermark")
        if high_watermark > leader_end_offset:
            raise ValueError(f"high_watermark {high_watermark} is above the leader's log end "
                             f"offset {leader_end_offset}")
        min_isr = self._check_min_isr(min_isr)

        if self._free:
            slot = self._free.pop()
        else:
            if self._high == self._capacity:
                self._allocate(2 * self._capacity)
            slot = self._high
            self._high += 1
        n = len(replicas)
        leader_col = replicas.index(leader_id)
        self._replica_id[:n, slot] = replicas
        self._replica_id[n:, slot] = -1
        self._leo[:, slot] = high_watermark
        self._leo[leader_col, slot] = leader_end_offset
        self._fetched[:, slot] = False
        self._member[:, slot] = False
        self._member[columns, slot] = True
        self._leader_col[slot] = leader_col
        self._hw[slot] = high_watermark
        self._min_isr[slot] = min_isr
        self._eff_min_isr[slot] = min(min_isr, n)
        self._isr_size[slot] = len(columns)
        self._frozen[slot] = len(columns) < min(min_isr, n)
        self._live[slot] = True
        self._count += 1
        self._width = max(self._width, n)
        self._maybe_increment(slot)
        return slot

    def remove(self, slot):
        """Stop tracking a partition (this broker no longer leads it); its slot id may be
        handed out again by a later `add`."""
        slot = self._slot(slot)
        self._live[slot] = False
        self._replica_id[:, slot] = -1
        self._member[:, slot] = False
        self._fetched[:, slot] = False
        self._count -= 1
        self._free.append(slot)

    def set_isr(self, slot, isr):
        """The leader's maximal ISR changed (committed ISR plus pending additions; it holds
        the leader). Returns the new HW if it moved, else None: a larger ISR can reach the
        effective min ISR, a smaller one can drop the follower that held the HW back."""
        slot = self._slot(slot)
        replicas = self._replicas(slot)
        leader_id = replicas[int(self._leader_col[slot])]
        columns = self._isr_columns(replicas, leader_id, isr)
        self._member[:, slot] = False
        self._member[columns, slot] = True
        self._isr_size[slot] = len(columns)
        self._frozen[slot] = len(columns) < self._eff_min_isr[slot]
        return self._maybe_increment(slot)

    def set_min_isr(self, slot, min_isr):
        """The partition's min.insync.replicas changed. Returns the new HW if it moved
        (a lower minimum can let a frozen HW go), else None."""
        slot = self._slot(slot)
        min_isr = self._check_min_isr(min_isr)
        effective = min(min_isr, len(self._replicas(slot)))
        self._min_isr[slot] = min_isr
        self._eff_min_isr[slot] = effective
        self._frozen[slot] = self._isr_size[slot] < effective
        return self._maybe_increment(slot)

    @staticmethod
    def _check_min_isr(min_isr):
        min_isr = _int(min_isr, "min_isr")
        if min_isr < 1:
            raise ValueError(f"min_isr must be >= 1, got {min_isr}")
        return min_isr

    @staticmethod
    def _isr_columns(replicas, leader_id, isr):
        isr = _broker_ids(isr, "isr")
        outside = [b for b in isr if b not in replicas]
        if outside:
            raise ValueError(f"isr {isr} names brokers {outside} that are not replicas "
                             f"{replicas}")
        if leader_id not in isr:
            raise ValueError(f"isr {isr} must hold the leader {leader_id}")
        return [replicas.index(b) for b in isr]

    # ------------------------------------------------------------------ offsets

    def on_leader_append(self, slot, leader_end_offset):
        """The leader's log grew to `leader_end_offset`. Returns the new HW if it moved
        (only an ISR of the leader alone, or followers already ahead, lets it), else None.
        A leader's LEO never goes down: a lower one raises ValueError."""
        slot = self._slot(slot)
        leader_end_offset = _offset(leader_end_offset, "leader_end_offset")
        col = self._leader_col[slot]
        current = int(self._leo[col, slot])
        if leader_end_offset < current:
            raise ValueError(f"slot {slot}: the leader's log end offset cannot go down "
                             f"({current} -> {leader_end_offset})")
        self._leo[col, slot] = leader_end_offset
        return self._maybe_increment(slot)

    def on_follower_fetch(self, replica_id, slots, fetch_offsets):
        """One fetch round of follower `replica_id` over many partitions: its LEO in each of
        `slots` becomes the fetch offset at the same position of `fetch_offsets` (sequences
        or numpy integer arrays of equal length; a slot at most once). Returns
        (moved_slots, new_hws), two int64 arrays in the order the slots were given: the
        partitions whose HW moved, and their new HW. A follower outside the ISR has its LEO
        recorded but moves nothing. Cost: O(len(slots)), whatever the table's size."""
        rid = _int(replica_id, "replica_id")
        slots = _int_array(slots, "slots")
        offsets = _int_array(fetch_offsets, "fetch_offsets")
        n = len(slots)
        if len(offsets) != n:
            raise ValueError(f"slots and fetch_offsets differ in length ({n} != "
                             f"{len(offsets)})")
        if n == 0:
            return _EMPTY.copy(), _EMPTY.copy()
        self._check_slots(slots)
        if offsets.min() < 0:
            bad = int(np.flatnonzero(offsets < 0)[0])
            raise ValueError(f"fetch offset {int(offsets[bad])} for slot {int(slots[bad])} "
                             f"is negative")
        # Which column of each named slot is this follower: at most one (ids are unique in
        # a slot). cols = sum of c * [column c holds rid]; found = any column holds it.
        w = self._width
        replica_id = self._replica_id
        found = replica_id[0].take(slots) == rid
        cols = np.zeros(n, dtype=np.int64)
        for c in range(1, w):
            here = replica_id[c].take(slots) == rid
            found |= here
            cols[here] = c
        if not found.all():
            missing = slots[~found]
            shown = ", ".join(str(s) for s in missing[:10].tolist())
            more = f" and {len(missing) - 10} more" if len(missing) > 10 else ""
            raise ValueError(f"broker {rid} is not a replica of slot(s) {shown}{more}")
        leading = cols == self._leader_col.take(slots)
        if leading.any():
            raise ValueError(f"broker {rid} is the leader of slot "
                             f"{int(slots[np.argmax(leading)])}, not a follower: a leader "
                             f"does not fetch from itself")

        # Validated: from here on nothing raises.
        at = cols * self._capacity
        at += slots
        self._leo_flat[at] = offsets
        self._fetched_flat[at] = True
        # Only the slots where this follower is in the ISR and the ISR is large enough can
        # move; the others keep their HW (rules 1 and 2).
        can = self._member_flat.take(at)
        can &= ~self._frozen.take(slots)
        if not can.all():
            slots = slots[can]
            if len(slots) == 0:
                return _EMPTY.copy(), _EMPTY.copy()
        candidate = self._candidates(slots)
        moved = candidate > self._hw.take(slots)
        if moved.all():
            self._hw[slots] = candidate
            return slots.copy(), candidate
        moved_slots = slots[moved]
        new_hws = candidate[moved]
        self._hw[moved_slots] = new_hws
        return moved_slots, new_hws

    def _candidates(self, slots):
        """min(LEO of every ISR member) of each slot (the leader included): one gather per
        column, reduced with np.minimum."""
        member, leo = self._member, self._leo
        candidate = np.where(member[0].take(slots), leo[0].take(slots), _INT64_MAX)
        for c in range(1, self._width):
            np.minimum(candidate,
                       np.where(member[c].take(slots), leo[c].take(slots), _INT64_MAX),
                       out=candidate)
        return candidate

    def _check_slots(self, slots):
        """Every slot is live, and none is named twice (O(len(slots)): each position is
        scattered into a scratch row indexed by slot, then read back; a slot named twice
        reads back the later position at the earlier one)."""
        lo, hi = int(slots.min()), int(slots.max())
        if lo < 0 or hi >= self._high:
            bad = lo if lo < 0 else hi
            raise ValueError(f"unknown slot {bad}: not added, or removed")
        live = self._live.take(slots)
        if not live.all():
            raise ValueError(f"unknown slot {int(slots[np.argmin(live)])}: not added, or "
                             f"removed")
        positions = self._positions(len(slots))
        self._mark[slots] = positions
        unique = self._mark.take(slots) == positions
        if not unique.all():
            raise ValueError(f"slot {int(slots[np.argmin(unique)])} is named more than once "
                             f"in one fetch round")

    def _maybe_increment(self, slot):
        """Rules 1-3 for one slot: the new HW if it moved, else None."""
        if self._frozen[slot]:
            return None
        member, leo = self._member, self._leo
        candidate = min(int(leo[c, slot]) for c in range(self._width) if member[c, slot])
        if candidate > self._hw[slot]:
            self._hw[slot] = candidate
            return candidate
        return None

    def _replicas(self, slot):
        return [int(b) for b in self._replica_id[:, slot] if b >= 0]

    # ------------------------------------------------------------------ reads

    def high_watermark(self, slot):
        return int(self._hw[self._slot(slot)])

    def leader_end_offset(self, slot):
        slot = self._slot(slot)
        return int(self._leo[self._leader_col[slot], slot])

    def follower_end_offset(self, slot, replica_id):
        """The follower's LEO as of its last fetch; -1 if it has never fetched."""
        slot = self._slot(slot)
        replica_id = _int(replica_id, "replica_id")
        found = np.flatnonzero(self._replica_id[:, slot] == replica_id)
        if len(found) == 0:
            raise ValueError(f"broker {replica_id} is not a replica of slot {slot}")
        col = int(found[0])
        if col == self._leader_col[slot]:
            raise ValueError(f"broker {replica_id} is the leader of slot {slot}, not a "
                             f"follower (see leader_end_offset)")
        return int(self._leo[col, slot]) if self._fetched[col, slot] else -1

    def replicas(self, slot):
        return self._replicas(self._slot(slot))

    def isr(self, slot):
        """The maximal ISR, in replica order."""
        slot = self._slot(slot)
        return [int(b) for b, m in zip(self._replica_id[:, slot], self._member[:, slot]) if m]

    def min_isr(self, slot):
        return int(self._min_isr[self._slot(slot)])
