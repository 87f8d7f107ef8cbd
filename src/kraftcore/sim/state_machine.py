"""The simulated state machine each node runs over its committed log, and its snapshots.

`StateMachine` applies committed batches strictly in offset order (a gap or an overlap is a
`SimViolation`): data batches are decoded and each record value is folded into a running
CRC-32 `digest` and counted; control batches are skipped but still advance `next_offset`.
So `(next_offset, count, digest)` names the state after a committed prefix of the log, and
two nodes that applied the same committed records agree on it.

Snapshots use Kafka's snapshot layout (kafka-facts §4.4): a control batch holding a
SnapshotHeaderRecord, then data, then a control batch holding a SnapshotFooterRecord. The
data is one batch with a single record whose value is `SNAPSHOT_MAGIC`, the state
`(next_offset, count, digest)` as three big-endian integers, and optional padding (so that
snapshots span several FetchSnapshot chunks). `decode_snapshot` checks all of that back.
"""

import struct
import zlib

from kraftcore import codec
from kraftcore.errors import CorruptRecordError, ProtocolError
from kraftcore.raft.control import (
    SNAPSHOT_FOOTER, SNAPSHOT_HEADER, SnapshotFooterRecord, SnapshotHeaderRecord,
    decode_control_record, encode_control_batch)

SNAPSHOT_MAGIC = b"kraftcore-sim-state"
_STATE = struct.Struct(">qqI")


class SimViolation(Exception):
    """An invariant of the simulation does not hold; the message says which and where."""


def encode_snapshot(next_offset, count, digest, *, epoch, timestamp, padding_bytes=0):
    """Snapshot bytes for the state `(next_offset, count, digest)`."""
    header = encode_control_batch(
        [SnapshotHeaderRecord(version=0, last_contained_log_timestamp=timestamp)],
        base_offset=0, leader_epoch=epoch, timestamp=timestamp)
    value = SNAPSHOT_MAGIC + _STATE.pack(next_offset, count, digest) + b"\0" * padding_bytes
    data = codec.encode_batch([value], timestamp=timestamp, base_offset=1, leader_epoch=epoch)
    footer = encode_control_batch([SnapshotFooterRecord(version=0)], base_offset=2,
                                  leader_epoch=epoch, timestamp=timestamp)
    return header + data + footer


def decode_snapshot(data):
    """`(next_offset, count, digest)` from snapshot bytes; `SimViolation` when the bytes are
    not a snapshot written by `encode_snapshot`."""
    try:
        batches = codec.decode_batches(data)
    except (CorruptRecordError, ProtocolError) as exc:
        raise SimViolation(f"snapshot bytes do not decode: {exc}") from None
    if len(batches) != 3:
        raise SimViolation(f"a snapshot holds 3 batches, found {len(batches)}")
    header, body, footer = batches
    for batch, want in ((header, SNAPSHOT_HEADER), (footer, SNAPSHOT_FOOTER)):
        if not batch.is_control or len(batch.records) != 1:
            raise SimViolation(f"snapshot batch at offset {batch.base_offset} is not a single "
                               "control record")
        record = batch.records[0]
        type_id, name, _ = decode_control_record(record.key, record.value)
        if type_id != want:
            raise SimViolation(f"snapshot control record at offset {record.offset} is {name}")
    if body.is_control or len(body.records) != 1:
        raise SimViolation("the snapshot's data batch must hold exactly one data record")
    value = body.records[0].value
    start = len(SNAPSHOT_MAGIC)
    if value is None or not value.startswith(SNAPSHOT_MAGIC) or len(value) < start + _STATE.size:
        raise SimViolation("the snapshot's data record is not a simulator state")
    return _STATE.unpack_from(value, start)


class StateMachine:
    """The state after applying a committed prefix of the log (see the module docstring)."""

    __slots__ = ("next_offset", "count", "digest", "records_since_snapshot", "loaded_snapshot")

    def __init__(self):
        self.next_offset = 0
        self.count = 0
        self.digest = 0
        self.records_since_snapshot = 0
        self.loaded_snapshot = None

    def load_snapshot(self, snapshot_id, data):
        """Replace the state with a snapshot's; its end offset must be where it says."""
        next_offset, count, digest = decode_snapshot(data)
        if next_offset != snapshot_id.end_offset:
            raise SimViolation(f"snapshot {snapshot_id} holds the state at offset {next_offset}")
        self.next_offset, self.count, self.digest = next_offset, count, digest
        self.records_since_snapshot = 0
        self.loaded_snapshot = snapshot_id

    def apply(self, batch):
        """Apply one `CommittedBatch`; returns the data records as `[(offset, value)]`."""
        if batch.base_offset != self.next_offset:
            raise SimViolation(
                f"committed batch [{batch.base_offset}, {batch.last_offset}] delivered when the "
                f"state machine expects offset {self.next_offset}")
        if batch.last_offset < batch.base_offset:
            raise SimViolation(f"committed batch with last offset {batch.last_offset} < base "
                               f"offset {batch.base_offset}")
        applied = []
        if not batch.control:
            decoded = codec.decode_batches(batch.data)
            if len(decoded) != 1:
                raise SimViolation(f"committed batch at {batch.base_offset} holds "
                                   f"{len(decoded)} batches")
            decoded = decoded[0]
            if decoded.is_control or decoded.base_offset != batch.base_offset \
                    or decoded.last_offset != batch.last_offset:
                raise SimViolation(f"committed batch at {batch.base_offset} does not match its "
                                   f"bytes ({decoded!r})")
            digest = self.digest
            crc32 = zlib.crc32
            for record in decoded.records:
                digest = crc32(record.value, digest)
                applied.append((record.offset, record.value))
            self.digest = digest
            self.count += len(applied)
            self.records_since_snapshot += len(applied)
        self.next_offset = batch.last_offset + 1
        return applied

    def snapshot(self, *, epoch, timestamp, padding_bytes=0):
        """Snapshot bytes of the current state."""
        self.records_since_snapshot = 0
        return encode_snapshot(self.next_offset, self.count, self.digest, epoch=epoch,
                               timestamp=timestamp, padding_bytes=padding_bytes)
