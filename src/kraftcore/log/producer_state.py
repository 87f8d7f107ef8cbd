"""Idempotent producers' state in one partition log (Kafka's `ProducerStateManager`): for each
producer id, its epoch and its last five batches' sequence ranges and offsets, so that a
retried batch is recognised (answered with its original offsets, not written twice) and a
gap in the sequence refused.

What it keeps and checks (Kafka's `ProducerAppendInfo.checkSequence`, KIP-98 / KIP-360):

* a batch of a producer whose epoch is below the one stored is refused
  (`InvalidProducerEpochError`);
* a batch equal (epoch, first and last sequence) to one of the producer's last five is a
  duplicate: `check` returns that batch's base offset;
* in the same epoch, a first sequence that does not follow the last one (last + 1, or 0
  after 2^31 - 1) is refused (`OutOfOrderSequenceError`); so is a new epoch that does not
  start at 0 — unless the producer is unknown (its state was never seen or is gone), which
  is accepted as Kafka accepts it;
* a follower's appends are not checked, only recorded (`update`), so that a new leader
  detects the duplicates of its predecessor's producers.

Snapshots (`write_snapshot` / `read_snapshot`): Kafka's `<offset>.snapshot` file in the
partition directory, holding the state of every producer as of that offset (the log end
offset when written): int16 version 1, uint32 CRC-32C of everything after it, int32 count,
then per producer: int64 producer id, int16 epoch, int32 last sequence, int64 last offset,
int32 offset delta (last - first offset of its last batch), int64 timestamp, int32
coordinator epoch (-1), int64 first offset of an open transaction (-1). Only the last batch
of each producer is in the file, as in Kafka: the four before it are forgotten by a restart.
A snapshot that does not parse or whose CRC is wrong is ignored (the state is rebuilt from
the log, which is always correct, only slower).
"""

import collections
import os
import struct

from kraftcore import codec
from kraftcore.errors import CorruptRecordError, LogError
from kraftcore.layout import BATCH_HEADER, file_prefix, parse_prefix
from kraftcore.log import fileio

__all__ = ["ProducerState", "OutOfOrderSequenceError", "InvalidProducerEpochError",
           "SNAPSHOT_SUFFIX", "BATCHES_KEPT"]

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
BATCHES_KEPT = 5  # Kafka's NUM_BATCHES_TO_RETAIN
INT32_MAX = 2**31 - 1
_HEAD = struct.Struct(">hI")
_ENTRY = struct.Struct(">qhiqiqiq")
_NO_SEQUENCE = -1


class OutOfOrderSequenceError(LogError):
    """A producer's batch does not follow its previous one (OUT_OF_ORDER_SEQUENCE_NUMBER)."""


class InvalidProducerEpochError(LogError):
    """A producer's batch carries an epoch below the one the log holds for it
    (INVALID_PRODUCER_EPOCH: a newer instance of the producer exists)."""


class _Entry:
    __slots__ = ("epoch", "batches", "timestamp")

    def __init__(self, epoch):
        self.epoch = epoch
        self.batches = collections.deque(maxlen=BATCHES_KEPT)  # (first seq, last seq, base, last)
        self.timestamp = -1


def batch_headers(data):
    """[(base offset, last offset, producer id, epoch, base sequence, max timestamp)] of the
    batches in `data` (whole v2 batches, checked already)."""
    view = memoryview(data).cast("B")
    out = []
    pos, end = 0, len(view)
    unpack = BATCH_HEADER.unpack_from
    while pos + BATCH_HEADER.size <= end:
        (base, length, _, _, _, _, last_delta, _, max_ts, pid, epoch, seq,
         _) = unpack(view, pos)
        if length <= 0:
            break  # not a batch: the log's checks refuse it
        out.append((base, base + last_delta, pid, epoch, seq, max_ts, last_delta))
        pos += 12 + length
    return out


class ProducerState:
    """The producers' state of one log (see the module docstring)."""

    def __init__(self):
        self.producers = {}

    def __len__(self):
        return len(self.producers)

    def check(self, producer_id, epoch, first_seq, record_count):
        """Check a leader's batch before it is appended: the base offset of the batch it
        duplicates, or None when it is new and in order; raises when it is refused."""
        if producer_id < 0:
            return None
        entry = self.producers.get(producer_id)
        if entry is None:
            return None
        last_seq = _last_sequence(first_seq, record_count)
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {producer_id} epoch {epoch} is older than its current epoch "
                f"{entry.epoch}")
        if epoch == entry.epoch:
            for first, last, base, _ in entry.batches:
                if first == first_seq and last == last_seq:
                    return base
        if epoch != entry.epoch:
            if first_seq != 0:
                raise OutOfOrderSequenceError(
                    f"producer {producer_id}: a new epoch {epoch} must start at sequence 0, "
                    f"not {first_seq}")
            return None
        current = entry.batches[-1][1] if entry.batches else _NO_SEQUENCE
        if current == _NO_SEQUENCE:
            if first_seq != 0:
                raise OutOfOrderSequenceError(
                    f"producer {producer_id} epoch {epoch}: first sequence {first_seq}, "
                    "expected 0")
        elif not (first_seq == current + 1 or (first_seq == 0 and current == INT32_MAX)):
            raise OutOfOrderSequenceError(
                f"producer {producer_id} epoch {epoch}: sequence {first_seq} does not follow "
                f"{current}")
        return None

    def update(self, headers):
        """Record appended batches (`batch_headers`)."""
        producers = self.producers
        for base, last, pid, epoch, seq, max_ts, delta in headers:
            if pid < 0:
                continue
            entry = producers.get(pid)
            if entry is None or epoch > entry.epoch:
                entry = producers[pid] = _Entry(epoch)
            elif epoch < entry.epoch:
                continue  # a fenced producer's batch taken by replication: not its state
            entry.batches.append((seq, _last_sequence(seq, delta + 1), base, last))
            entry.timestamp = max(entry.timestamp, max_ts)

    def clear(self):
        self.producers.clear()

    def last_offsets(self):
        """The last offset of each producer's last batch: the batches the log cleaner
        keeps (empty if need be) so that a restart rebuilds every producer's sequence
        (Kafka's `lastRecordsOfActiveProducers`)."""
        return {entry.batches[-1][3] for entry in self.producers.values() if entry.batches}

    # ------------------------------------------------------------------ snapshots

    def encode(self):
        body = bytearray()
        items = sorted(self.producers.items())
        for pid, entry in items:
            if not entry.batches:
                continue
            first, last_seq, base, last = entry.batches[-1]
            body += _ENTRY.pack(pid, entry.epoch, last_seq, last, last - base, entry.timestamp,
                                -1, -1)
        count = len(body) // _ENTRY.size
        tail = count.to_bytes(4, "big", signed=True) + bytes(body)
        return _HEAD.pack(SNAPSHOT_VERSION, codec.crc32c(tail)) + tail

    @classmethod
    def decode(cls, data):
        view = memoryview(data).cast("B")
        if len(view) < 10:
            raise CorruptRecordError("producer snapshot too short", 0)
        version, crc = _HEAD.unpack_from(view, 0)
        if version != SNAPSHOT_VERSION:
            raise CorruptRecordError(f"producer snapshot version {version}, expected 1", 0)
        tail = view[_HEAD.size:]
        if codec.crc32c(tail) != crc:
            raise CorruptRecordError("producer snapshot CRC mismatch", 2)
        (count,) = struct.unpack_from(">i", tail, 0)
        if count < 0 or 4 + count * _ENTRY.size != len(tail):
            raise CorruptRecordError(f"producer snapshot declares {count} entries in "
                                     f"{len(tail)} bytes", _HEAD.size)
        state = cls()
        for i in range(count):
            pid, epoch, last_seq, last, delta, ts, _, _ = _ENTRY.unpack_from(
                tail, 4 + i * _ENTRY.size)
            entry = state.producers[pid] = _Entry(epoch)
            first_seq = last_seq - delta if last_seq >= delta else 0
            entry.batches.append((first_seq, last_seq, last - delta, last))
            entry.timestamp = ts
        return state


def _last_sequence(first_seq, count):
    if first_seq < 0:
        return _NO_SEQUENCE
    return (first_seq + count - 1) % (INT32_MAX + 1)


def snapshot_offsets(directory):
    """Sorted offsets of the producer snapshots in `directory`."""
    out = []
    for name in os.listdir(directory):
        if name.endswith(SNAPSHOT_SUFFIX):
            offset = parse_prefix(name[: -len(SNAPSHOT_SUFFIX)] + ".log")
            if offset is not None:
                out.append(offset)
    return sorted(out)


def write_snapshot(directory, offset, state):
    """Write `state` as of `offset` to `<offset>.snapshot` (atomically), and delete older
    snapshots but the previous one."""
    path = os.path.join(directory, file_prefix(offset) + SNAPSHOT_SUFFIX)
    fileio.write_atomic(path, state.encode())
    for old in snapshot_offsets(directory)[:-2]:
        fileio.unlink(os.path.join(directory, file_prefix(old) + SNAPSHOT_SUFFIX))


def read_snapshot(directory, end_offset):
    """(offset, ProducerState) of the newest readable snapshot at or below `end_offset`, or
    (0, empty state). Snapshots above `end_offset` (the log was truncated below them) are
    deleted."""
    offsets = snapshot_offsets(directory)
    for offset in offsets:
        if offset > end_offset:
            fileio.unlink(os.path.join(directory, file_prefix(offset) + SNAPSHOT_SUFFIX))
    for offset in reversed([o for o in offsets if o <= end_offset]):
        path = os.path.join(directory, file_prefix(offset) + SNAPSHOT_SUFFIX)
        try:
            with open(path, "rb") as f:
                return offset, ProducerState.decode(f.read())
        except (OSError, CorruptRecordError):
            continue
    return 0, ProducerState()
