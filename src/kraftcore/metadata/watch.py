"""Following the committed metadata log from outside the quorum, one Fetch answer at a time:
what `kraftcore metadata watch` prints (docs/admin.md, "metadata watch"). This module reads
no socket or clock; `kraftcore.admin.watch` sends the requests and hands the answers here.

`LogFollower` keeps a `MetadataImage` of everything committed so far (a `MetadataLoader`)
and turns each committed batch into `Change`s, the lines of the feed:

* only batches wholly below the high watermark of the answer that carried them are taken,
  so every change is final (the log is never truncated below the high watermark); the next
  Fetch asks for the offset after the last batch taken, with that batch's epoch, and the
  records above the high watermark come again in a later answer;
* each metadata record is told as `kraftcore.metadata.describe.ChangeDescriber` tells it,
  from the image the earlier records left; a record it has no sentence for is shown as its
  type and fields. NoOpRecords and the metadata transaction markers are not shown; the
  records of a transaction appear when its EndTransactionRecord commits (never, if it is
  aborted), as they become part of the image;
* LeaderChange control records (an election's first record) are shown too;
* a snapshot (the leader's log no longer starts at the offset asked for) replaces the
  image; `print_from` below its end offset makes it one summary line.

`print_from` is the first offset whose changes are shown: 0 shows the whole log (from the
start), None waits for the first high watermark an answer carries and shows what commits
after it (the image is built silently up to there).
"""

import json
from typing import NamedTuple

from kraftcore import codec
from kraftcore.errors import MetadataError, ProtocolError
from kraftcore.layout import (BATCH_HEAD, BATCH_HEAD_BYTES, BATCH_LENGTH_MIN, CONTROL_MASK,
                              LOG_OVERHEAD_BYTES)
from kraftcore.metadata import records as R
from kraftcore.metadata.describe import ChangeDescriber
from kraftcore.metadata.image import METADATA_VERSION
from kraftcore.metadata.loader import MetadataLoader
from kraftcore.raft import control as C
from kraftcore.raft.types import CommittedBatch

__all__ = ["Change", "LogFollower", "SnapshotChunks", "SNAPSHOT"]

SNAPSHOT = "SNAPSHOT"  # the type of a snapshot's summary line
_QUIET = frozenset((R.NoOpRecord, R.BeginTransactionRecord, R.EndTransactionRecord,
                    R.AbortTransactionRecord))


class Change(NamedTuple):
    """One line of the feed: a committed record (or a snapshot's summary) and its sentence.
    `type` is Kafka's name of the record type (PARTITION_CHANGE_RECORD), of the control
    record type (LEADER_CHANGE), or SNAPSHOT; `data` the record's fields as Kafka's JSON
    names them (as `dump-log --json` prints them)."""

    offset: int
    epoch: int
    timestamp: int
    type: str
    version: object  # the record's version; None for a snapshot summary
    sentence: str
    data: dict

    def text(self):
        return f"offset {self.offset}, epoch {self.epoch}: {self.sentence}"

    def doc(self):
        """The JSON object `--json` prints."""
        return {"offset": self.offset, "epoch": self.epoch, "timestamp": self.timestamp,
                "type": self.type, "version": self.version, "change": self.sentence,
                "data": self.data}


def _fields_text(data):
    return json.dumps(data, separators=(", ", ": "), sort_keys=False)


def _control_sentence(type_id, name, msg):
    if type_id == C.LEADER_CHANGE:
        voters = sorted(v.voter_id for v in msg.voters)
        granting = sorted(v.voter_id for v in msg.granting_voters)
        text = f"node {msg.leader_id} leads the quorum (voters {voters}"
        return text + (f", elected by {granting})" if granting else ")")
    if type_id == C.KRAFT_VOTERS:
        return f"quorum voters {sorted(v.voter_id for v in msg.voters)}"
    if type_id == C.KRAFT_VERSION:
        return f"kraft.version {msg.k_raft_version}"
    return name if msg is None else f"{name} {_fields_text(msg.to_json(msg.decoded_version))}"


def _snapshot_summary(image):
    brokers = image.brokers
    fenced = sum(1 for b in brokers.values() if b.fenced)
    configs = sum(len(values) for values in image.configs.values())
    parts = [f"{len(brokers)} brokers" + (f" ({fenced} fenced)" if fenced else ""),
             f"{len(image.controllers)} controllers", f"{len(image.topics)} topics",
             f"{image.partition_count()} partitions", f"{configs} configs"]
    level = image.metadata_version()
    if level is not None:
        parts.append(f"{METADATA_VERSION} {level}")
    return ", ".join(parts)


class LogFollower:
    """The committed metadata log, read from Fetch answers (see the module docstring).
    `next_offset` and `last_epoch` are what the next Fetch asks for."""

    def __init__(self, print_from=None):
        if print_from is not None and print_from < 0:
            raise ValueError(f"print_from must be >= 0 or None, not {print_from}")
        # Never asked for a snapshot: the watch keeps its image in memory only.
        self.loader = MetadataLoader(snapshot_interval_ms=0)
        self.print_from = print_from
        self.last_epoch = 0
        # The records of the open metadata transaction:
        # [(record, version, offset, epoch, timestamp)], or None.
        self._transaction = None

    @property
    def image(self):
        return self.loader.image

    @property
    def next_offset(self):
        return self.loader.next_offset

    @property
    def live(self):
        """Whether the image has reached `print_from`: from here on, changes are shown."""
        return self.print_from is not None and self.next_offset >= self.print_from

    def on_high_watermark(self, high_watermark):
        """An answer's high watermark: the first one at or above 0 sets `print_from` when
        it was left to it."""
        if self.print_from is None and high_watermark >= 0:
            self.print_from = high_watermark

    # ------------------------------------------------------------------ records

    def on_records(self, data, high_watermark):
        """The records of a Fetch answer (whole batches from the one holding `next_offset`)
        with its high watermark. Applies the batches wholly below the high watermark, in
        order; returns (their changes to show, number of batches taken). A batch that does
        not follow the last one taken raises `MetadataError`, as does one that does not
        decode or apply."""
        self.on_high_watermark(high_watermark)
        view = memoryview(data or b"")
        changes, taken, pos, total = [], 0, 0, len(view)
        while pos + BATCH_HEAD_BYTES <= total:
            base, length, epoch, _, _, attributes, delta = BATCH_HEAD.unpack_from(view, pos)
            size = length + LOG_OVERHEAD_BYTES
            if length < BATCH_LENGTH_MIN:
                raise MetadataError(f"the leader's answer holds a batch at offset {base} "
                                    f"whose length is {length} bytes")
            if pos + size > total:
                break  # a batch cut short: it comes whole in the next answer
            last = base + delta
            start, pos = pos, pos + size
            if last < self.next_offset:
                continue  # the answer starts at the batch holding next_offset
            if base != self.next_offset:
                raise MetadataError(f"the leader answered a Fetch at offset "
                                    f"{self.next_offset} with a batch at {base}")
            if last >= high_watermark:
                break  # not committed yet
            batch = CommittedBatch(base, last, epoch, bool(attributes & CONTROL_MASK),
                                   bytes(view[start:pos]))
            changes += self._take(batch)
            taken += 1
        return changes, taken

    def _take(self, batch):
        before = self.loader.image
        self.loader.apply([batch])  # checks the batch: order, CRC, records, replay
        self.last_epoch = batch.epoch
        shown = self.print_from is not None and batch.last_offset >= self.print_from
        # What became part of the log's state, in order: control records, and metadata
        # records as (record, version, offset, epoch, timestamp).
        became = []
        for decoded in codec.decode_batches(batch.data):
            epoch = decoded.partition_leader_epoch
            if decoded.is_control:
                if shown:
                    became += [self._control_change(r, epoch) for r in decoded.records]
                continue
            try:
                values = R.decode_values([r.value for r in decoded.records])
            except ProtocolError as exc:  # the loader decoded them: not expected
                raise MetadataError(f"batch at offset {batch.base_offset}: {exc}") from None
            for (record, version), r in zip(values, decoded.records):
                cls = type(record)
                if cls is R.BeginTransactionRecord:
                    self._transaction = []
                elif cls is R.EndTransactionRecord:
                    became += self._transaction or []
                    self._transaction = None
                elif cls is R.AbortTransactionRecord:
                    self._transaction = None
                else:
                    entry = (record, version, r.offset, epoch, r.timestamp)
                    (became if self._transaction is None else self._transaction).append(entry)
        if not shown:
            return []
        describer = ChangeDescriber(before)
        changes = [entry if isinstance(entry, Change) else self._record_change(describer, *entry)
                   for entry in became if entry is not None]
        return [c for c in changes if c is not None]

    @staticmethod
    def _record_change(describer, record, version, offset, epoch, timestamp):
        sentence = describer.describe(record)  # told, so that later records build on it
        if type(record) in _QUIET:
            return None
        data = record.to_json(version)
        name = R.type_name(record)
        if sentence is None:
            sentence = f"{name} {_fields_text(data)}"
        return Change(offset, epoch, timestamp, name, version, sentence, data)

    @staticmethod
    def _control_change(record, epoch):
        try:
            type_id, name, msg = C.decode_control_record(record.key, record.value)
        except ProtocolError as exc:
            raise MetadataError(f"control record at offset {record.offset}: {exc}") from None
        if msg is None:
            return None  # a control type this reader does not know
        version = msg.decoded_version
        return Change(record.offset, epoch, record.timestamp, name, version,
                      _control_sentence(type_id, name, msg), msg.to_json(version))

    # ------------------------------------------------------------------ snapshots

    def on_snapshot(self, snapshot_id, data):
        """A snapshot the leader pointed to, downloaded whole (`SnapshotChunks`): it
        replaces the image, and the log continues at its end offset. Returns the changes to
        show: one summary line when `print_from` is below the snapshot's end (the whole log
        was asked for, or records behind `next_offset` are no longer in the leader's log),
        else none."""
        end, epoch = snapshot_id
        before = self.next_offset
        image = self.loader.load_snapshot(snapshot_id, data)
        self.last_epoch = epoch
        self._transaction = None
        if self.print_from is not None:
            # Offsets this follower had passed are applied again, silently.
            self.print_from = max(self.print_from, before)
        shown = self.print_from is not None and self.print_from < end
        if not shown or end <= 0:
            return []
        covered = f"offsets 0-{end - 1}"
        if before > 0:
            covered += (f", in place of offsets {before}-{end - 1}, which the leader's log "
                        "no longer holds")
        sentence = f"snapshot of {covered}: {_snapshot_summary(image)}"
        doc = {"snapshotId": {"endOffset": end, "epoch": epoch},
               "brokers": sorted(image.brokers),
               "fencedBrokers": sorted(b for b, r in image.brokers.items() if r.fenced),
               "controllers": sorted(image.controllers),
               "topics": sorted(t.name for t in image.topics.values()),
               "partitions": image.partition_count(),
               "features": dict(sorted(image.features.items()))}
        return [Change(end - 1, epoch, image.timestamp_ms, SNAPSHOT, None, sentence, doc)]


class SnapshotChunks:
    """The bytes of one snapshot, fetched in chunks (FetchSnapshot): `position` is where
    the next chunk starts; `add` takes one answer's chunk and returns the whole snapshot
    once its last byte has arrived (else None). A snapshot above `bytes_max` raises
    `MetadataError` (the watch holds it in memory)."""

    def __init__(self, snapshot_id, bytes_max):
        self.snapshot_id = snapshot_id
        self.bytes_max = bytes_max
        self.size = None
        self._parts = []
        self.position = 0

    def add(self, size, position, data):
        if self.size is None:
            if size > self.bytes_max:
                raise MetadataError(f"snapshot {self.snapshot_id.end_offset}-"
                                    f"{self.snapshot_id.epoch} holds {size} bytes, more than "
                                    f"the {self.bytes_max} a watch loads")
            self.size = size
        if size != self.size or position != self.position or not data \
                or position + len(data) > size:
            raise MetadataError(f"the leader sent bytes {position}-{position + len(data)} of "
                                f"a snapshot of {size} bytes when bytes from {self.position} "
                                f"of {self.size} were asked for")
        self._parts.append(bytes(data))
        self.position += len(data)
        if self.position < self.size:
            return None
        return b"".join(self._parts)
