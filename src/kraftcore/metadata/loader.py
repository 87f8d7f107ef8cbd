"""From committed log to images: `MetadataLoader` turns what the Raft core delivers (a
snapshot to load, committed batches) into a sequence of `MetadataImage`s, and says when the
node should write a snapshot of its image (kafka-facts §4.6, §5.2 "Metadata transactions").

Every node runs one: the standby controllers and the brokers publish its images; the active
controller keeps its committed image with it.

Invariants it keeps:

* batches apply strictly in offset order, without gaps (else `MetadataError`);
* records between a BeginTransactionRecord and its EndTransactionRecord apply together, when
  the End is committed; an AbortTransactionRecord drops them. A published image never holds
  part of a transaction: its `end_offset` stops before an open transaction's Begin;
* control batches (LeaderChange, ...) move the offsets but change nothing else;
* a snapshot is due after `snapshot_interval_bytes` of committed batches, or
  `snapshot_interval_ms` after the previous one (0 turns the timer off) — Kafka's defaults
  (`metadata.log.max.record.bytes.between.snapshots`, `metadata.log.max.snapshot.interval.ms`)
  are 20 MiB and one hour — and only when the image covers everything consumed (no
  transaction open), so that the snapshot ends on a batch boundary.
"""

from kraftcore import codec
from kraftcore.errors import InvalidOffsetError, MetadataError, ProtocolError
from kraftcore.metadata import records as R
from kraftcore.metadata.delta import MetadataDelta
from kraftcore.metadata.image import EMPTY_IMAGE
from kraftcore.metadata.snapshot import encode_snapshot, load_snapshot

__all__ = ["MetadataLoader", "SNAPSHOT_INTERVAL_BYTES_DEFAULT", "SNAPSHOT_INTERVAL_MS_DEFAULT"]

# Kafka's defaults of metadata.log.max.record.bytes.between.snapshots and
# metadata.log.max.snapshot.interval.ms (kafka-facts §4.6).
SNAPSHOT_INTERVAL_BYTES_DEFAULT = 20 * 1024 * 1024
SNAPSHOT_INTERVAL_MS_DEFAULT = 60 * 60 * 1000

_BEGIN = R.BeginTransactionRecord
_END = R.EndTransactionRecord
_ABORT = R.AbortTransactionRecord
_MARKERS = frozenset((_BEGIN, _END, _ABORT))
_NOOP = R.NoOpRecord
# The framed values of a NoOpRecord at each of its versions (it has no fields): a batch of
# only these is counted without being decoded (leaders append NoOps to keep the log moving,
# and `RaftDriver.append` beside the active controller may append nothing else).
_NOOP_VALUES = frozenset(R.encode_values([_NOOP()], version)[0]
                         for version in range(_NOOP.valid_versions[0],
                                              _NOOP.valid_versions[1] + 1))


class MetadataLoader:
    def __init__(self, *, image=EMPTY_IMAGE,
                 snapshot_interval_bytes=SNAPSHOT_INTERVAL_BYTES_DEFAULT,
                 snapshot_interval_ms=SNAPSHOT_INTERVAL_MS_DEFAULT, now_ms=0):
        if snapshot_interval_bytes < 1:
            raise ValueError(f"snapshot_interval_bytes must be positive, not "
                             f"{snapshot_interval_bytes}")
        if snapshot_interval_ms < 0:
            raise ValueError(f"snapshot_interval_ms must be >= 0, not {snapshot_interval_ms}")
        self.image = image
        self.snapshot_interval_bytes = snapshot_interval_bytes
        self.snapshot_interval_ms = snapshot_interval_ms
        # The offset after the last batch consumed (>= image.end_offset).
        self.next_offset = image.end_offset
        # Records of the open transaction, or None; and the offset of its Begin.
        self._transaction = None
        self._transaction_offset = None
        self.bytes_since_snapshot = 0
        self.last_snapshot_ms = now_ms
        self.records_applied = 0
        # The metadata record types of each batch of the last `apply`, in its order: a
        # dict whose keys are the types in order of first appearance (for a caller that
        # must know what a batch held without decoding it again).
        self.applied_types = []
        self.snapshots_written = 0
        self.snapshots_deferred = 0
        # When set, `record_listener(image_before, records)` hears the metadata records
        # each `apply` / `adopt` made part of the state (NoOps left out), with the image
        # they followed: a node's logs and `metadata watch` tell the changes from them.
        self.record_listener = None
        self._heard = None

    @property
    def in_transaction(self):
        return self._transaction is not None

    def load_snapshot(self, snapshot_id, data, now_ms=None):
        """Replace the image with the snapshot's; returns the new image."""
        self.image = load_snapshot(data, snapshot_id)
        self.next_offset = self.image.end_offset
        self._transaction = None
        self._transaction_offset = None
        self.bytes_since_snapshot = 0
        if now_ms is not None:
            self.last_snapshot_ms = now_ms
        return self.image

    def apply(self, commits):
        """Apply committed batches (`kraftcore.raft.types.CommittedBatch`, in order);
        returns the new image (the same object when nothing in them changed the state)."""
        if not commits:
            return self.image
        with R.cyclic_gc_paused():
            return self._apply(commits)

    def _apply(self, commits):
        before = self.image
        self._heard = [] if self.record_listener is not None else None
        try:
            image = self._apply_batches(commits)
        finally:
            heard, self._heard = self._heard, None
        if heard:
            self.record_listener(before, heard)
        return image

    def _apply_batches(self, commits):
        delta = MetadataDelta(self.image)
        end_offset, epoch, timestamp = None, None, None
        self.applied_types = applied_types = []
        for batch in commits:
            if batch.base_offset != self.next_offset:
                raise MetadataError(f"committed batch [{batch.base_offset}, "
                                    f"{batch.last_offset}] arrived when the loader expects "
                                    f"offset {self.next_offset}")
            try:
                decoded = codec.decode_batches(batch.data)
            except ProtocolError as exc:
                raise MetadataError(f"committed batch at {batch.base_offset} does not decode: "
                                    f"{exc}") from None
            batch_timestamp = timestamp
            types = {}
            for b in decoded:
                if not b.is_control:
                    types.update(self._replay_batch(delta, b))
                    batch_timestamp = b.max_timestamp
            applied_types.append(types)
            self.next_offset = batch.last_offset + 1
            self.bytes_since_snapshot += len(batch.data)
            if self._transaction is None:
                end_offset, epoch, timestamp = self.next_offset, batch.epoch, batch_timestamp
            elif self._transaction_offset > batch.base_offset:
                # A transaction began inside this batch: the records before it are applied.
                end_offset, epoch, timestamp = (self._transaction_offset, batch.epoch,
                                                batch_timestamp)
        if end_offset is None and not delta.records:
            return self.image
        self.records_applied += delta.records
        self.image = delta.apply(end_offset, epoch, timestamp)
        return self.image

    def adopt(self, image, batch_bytes, records=()):
        """Take `image` as the committed image: the caller replayed exactly the committed
        batches that end at `image.end_offset - 1` (the active controller, which replayed its
        own records when it wrote them); `records` are theirs, for the `record_listener`."""
        if self._transaction is not None:
            raise MetadataError("cannot adopt an image while a metadata transaction is open")
        if image.end_offset < self.next_offset:
            raise MetadataError(f"cannot adopt an image ending at {image.end_offset}: the "
                                f"loader is at {self.next_offset}")
        before, self.image = self.image, image
        self.next_offset = image.end_offset
        self.bytes_since_snapshot += batch_bytes
        if self.record_listener is not None:
            heard = [r for r in records if type(r) is not _NOOP]
            if heard:
                self.record_listener(before, heard)
        return image

    def _replay_batch(self, delta, batch):
        """Replay one record batch into `delta` (or the open transaction); returns its
        record types (a dict, in order of first appearance)."""
        records = batch.records
        if batch.same_value() in _NOOP_VALUES:  # NoOps only, counted without decoding
            if self._transaction is None:
                delta.replay_no_ops(len(records))
            else:
                self._transaction += [_NOOP()] * len(records)
            return {_NOOP: None}
        values = [r.value for r in records]
        try:
            decoded = R.decode_values(values)
        except ProtocolError as exc:
            raise MetadataError(f"batch at offset {batch.base_offset}: {exc}") from None
        replayed = [record for record, _ in decoded]
        types = dict.fromkeys(map(type, replayed))
        if self._transaction is None and types.keys().isdisjoint(_MARKERS):
            delta.replay_all(replayed)
            if self._heard is not None:
                self._heard += replayed
            return types
        self._replay_with_markers(delta, decoded, records)
        return types

    def _replay_with_markers(self, delta, decoded, records):
        for (record, _), r in zip(decoded, records):
            cls = type(record)
            if cls is _BEGIN:
                if self._transaction is not None:
                    raise MetadataError(f"BeginTransactionRecord at offset {r.offset} inside "
                                        f"the transaction begun at {self._transaction_offset}")
                self._transaction = []
                self._transaction_offset = r.offset
            elif cls is _END or cls is _ABORT:
                if self._transaction is None:
                    raise MetadataError(f"{R.type_name(record)} at offset {r.offset} with no "
                                        "transaction open")
                if cls is _END:
                    delta.replay_all(self._transaction)
                    if self._heard is not None:
                        self._heard += [t for t in self._transaction if type(t) is not _NOOP]
                self._transaction = None
                self._transaction_offset = None
            elif self._transaction is not None:
                self._transaction.append(record)
            else:
                delta.replay(record)
                if self._heard is not None:
                    self._heard.append(record)

    # ------------------------------------------------------------------ snapshots

    def snapshot_due(self, now_ms):
        """Whether the node should snapshot its image now (see the module docstring)."""
        if self._transaction is not None or self.image.end_offset != self.next_offset:
            return False
        if self.image.end_offset <= 0:
            return False
        if self.bytes_since_snapshot >= self.snapshot_interval_bytes:
            return True
        return (self.snapshot_interval_ms > 0 and self.bytes_since_snapshot > 0
                and now_ms - self.last_snapshot_ms >= self.snapshot_interval_ms)

    def on_snapshot(self, now_ms):
        """The node wrote a snapshot of the current image."""
        self.bytes_since_snapshot = 0
        self.last_snapshot_ms = now_ms

    def maybe_snapshot(self, now_ms, create_snapshot):
        """When a snapshot is due, encode the image and hand it to `create_snapshot(end
        offset, data) -> SnapshotId` (the Raft core's, which checks that the offset is
        committed and applied and stores the file). Returns the SnapshotId, or None when none
        is due or the core cannot take it yet (`InvalidOffsetError`: still due, so a later
        call retries)."""
        if not self.snapshot_due(now_ms):
            return None
        image = self.image
        data = encode_snapshot(image)
        try:
            snapshot_id = create_snapshot(image.end_offset, data)
        except InvalidOffsetError:
            self.snapshots_deferred += 1
            return None
        self.on_snapshot(now_ms)
        self.snapshots_written += 1
        return snapshot_id
