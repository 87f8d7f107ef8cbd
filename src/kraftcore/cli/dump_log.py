"""`kraftcore dump-log`: print the batches (and, with the metadata decoder, the records) of
log segments, snapshots and index files, like Kafka's `kafka-dump-log` (kafka-facts §9.3).

* `<base>.log` segments and `.checkpoint` snapshots (`<end offset>-<epoch>.checkpoint`,
  `bootstrap.checkpoint`) are read batch by batch, one `pread` per batch, so a file of any
  size is dumped in bounded memory.
* `.index` / `.timeindex` files print their entries.
* Each batch prints Kafka's line (`baseOffset: … lastOffset: … count: … position: … crc: …`);
  with `--metadata-decoder` every record follows: metadata records as
  `payload: {"type": …, "version": …, "data": {…}}`, control records by their type.
* `--json` prints one JSON object per line instead (a file header, then one per batch).

Corruption does not stop the dump early without saying so: what could be read is printed,
then the position and reason of the damage, and the command exits 1. Exit 2 is a usage
error or a file that cannot be opened; 0 means every file was read whole and valid.
Zeros after the last batch (a log that preallocates or prefills writes them ahead of its
data) end a dump quietly; a file of zeros with no batch at all, or zeros followed by
anything else, is damage. An empty file is valid: it holds no batch.
"""

import json
import os
import re
import struct

from kraftcore import codec
from kraftcore.errors import (CorruptRecordError, ProtocolError, UnsupportedCompressionError,
                              UnsupportedVersionError)
from kraftcore.metadata import records
from kraftcore.raft import control

LOG_OVERHEAD = 12          # baseOffset int64 + batchLength int32
BATCH_HEADER_BYTES = 61
ZERO_CHECK_CHUNK_BYTES = 1 << 20  # read at a time when checking that a tail is all zeros
CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
_SNAPSHOT_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
_SEGMENT_NAME = re.compile(r"^(\d{20})\.(log|index|timeindex)$")
_CONTROL_LABELS = {
    control.LEADER_CHANGE: "LeaderChange", control.SNAPSHOT_HEADER: "SnapshotHeader", control.SNAPSHOT_FOOTER: "SnapshotFooter",
    control.KRAFT_VERSION: "KRaftVersion", control.KRAFT_VOTERS: "KRaftVoters",
}


class _Damage(Exception):
    """The file cannot be read past `position`."""

    def __init__(self, reason, position):
        super().__init__(reason)
        self.reason = reason
        self.position = position


class _Printer:
    """Text or JSON-lines output; counts the problems found."""

    def __init__(self, as_json, out):
        self.as_json = as_json
        self.out = out
        self.problems = 0

    def emit(self, text, obj):
        if self.as_json:
            self.out.write(json.dumps(obj, separators=(",", ":")) + "\n")
        elif text is not None:
            self.out.write(text + "\n")

    def problem(self, text, obj):
        self.problems += 1
        self.emit(text, dict(obj, error=True))


def _batch_fields(batch):
    attributes = batch.attributes
    return {
        "baseOffset": batch.base_offset, "lastOffset": batch.last_offset,
        "count": batch.records_count, "baseSequence": batch.base_sequence,
        "lastSequence": (batch.base_sequence + batch.last_offset_delta
                         if batch.base_sequence >= 0 else -1),
        "producerId": batch.producer_id, "producerEpoch": batch.producer_epoch,
        "partitionLeaderEpoch": batch.partition_leader_epoch,
        "isTransactional": batch.is_transactional, "isControl": batch.is_control,
        "attributes": attributes, "position": batch.position,
        "timestampType": "LogAppendTime" if batch.timestamp_type else "CreateTime",
        "maxTimestamp": batch.max_timestamp, "size": batch.size_bytes, "magic": batch.magic,
        "compressCodec": CODECS.get(attributes & 0x07, f"unknown({attributes & 0x07})"),
        "crc": batch.crc,
    }


def _batch_line(f):
    horizon = "OptionalLong.empty"
    return (f"baseOffset: {f['baseOffset']} lastOffset: {f['lastOffset']} count: {f['count']} "
            f"baseSequence: {f['baseSequence']} lastSequence: {f['lastSequence']} "
            f"producerId: {f['producerId']} producerEpoch: {f['producerEpoch']} "
            f"partitionLeaderEpoch: {f['partitionLeaderEpoch']} "
            f"isTransactional: {str(f['isTransactional']).lower()} "
            f"isControl: {str(f['isControl']).lower()} deleteHorizonMs: {horizon} "
            f"position: {f['position']} {f['timestampType']}: {f['maxTimestamp']} "
            f"size: {f['size']} magic: {f['magic']} compresscodec: {f['compressCodec']} "
            f"crc: {f['crc']} isvalid: true")


def _record_prefix(record):
    key, value = record.key, record.value
    keys = [k for k, _ in record.headers]
    return (f"| offset: {record.offset} CreateTime: {record.timestamp} "
            f"keySize: {-1 if key is None else len(key)} "
            f"valueSize: {-1 if value is None else len(value)} sequence: -1 "
            f"headerKeys: {keys}")


def _payload(rec, version):
    return {"type": records.type_name(rec), "version": version, "data": rec.to_json(version)}


def _dump_records(batch, p):
    """Print the decoded records of one batch; damage to a record is reported, not fatal."""
    recs = batch.records
    if batch.is_control:
        for record in recs:
            entry = {"offset": record.offset}
            try:
                type_id, name, msg = control.decode_control_record(record.key, record.value)
            except ProtocolError as exc:
                p.problem(f"Error at {record.offset}, skipping. {exc}",
                          dict(entry, reason=str(exc), position=batch.position))
                continue
            entry["controlType"] = name
            if msg is not None:
                entry["data"] = msg.to_json(msg.decoded_version)
            label = _CONTROL_LABELS.get(type_id)
            if label is not None:
                text = f"{_record_prefix(record)} {label} {json.dumps(entry['data'])}"
            elif type_id in (control.ABORT, control.COMMIT):
                text = (f"{_record_prefix(record)} endTxnMarker: {name} "
                        f"coordinatorEpoch: {msg.coordinator_epoch}")
            else:  # a type this reader does not know: show the id the key holds
                raw_type = struct.unpack_from(">h", record.key, 2)[0]
                entry["controlTypeId"] = raw_type
                text = f"{_record_prefix(record)} controlType: {name}({raw_type})"
            p.emit(text, entry)
        return
    values = [r.value for r in recs]
    try:
        decoded = records.decode_values(values)
    except ProtocolError:
        decoded = None  # find the bad ones one by one below
    for i, record in enumerate(recs):
        try:
            rec, version = decoded[i] if decoded else records.decode_values([values[i]])[0]
        except ProtocolError as exc:
            reason = exc.reason.split(": ", 1)[-1]
            p.problem(f"Error at {record.offset}, skipping. {reason} (at byte {exc.position} "
                      "of the value)", {"offset": record.offset, "reason": reason,
                                        "valuePosition": exc.position})
            continue
        payload = _payload(rec, version)
        p.emit(f"{_record_prefix(record)} payload: {json.dumps(payload)}",
               {"offset": record.offset, "payload": payload})


def _read_batches(fd, size, p, metadata_decoder):
    """Dump every batch of an open file of `size` bytes; raises _Damage where it stops."""
    pos = 0
    while pos < size:
        if size - pos < LOG_OVERHEAD:
            raise _Damage(f"Found {size - pos} invalid bytes at the end (a truncated batch "
                          "header)", pos)
        head = os.pread(fd, LOG_OVERHEAD, pos)
        if not any(head):
            _check_zero_tail(fd, pos, size)
            return
        _, batch_length = struct.unpack(">qi", head)
        if batch_length < BATCH_HEADER_BYTES - LOG_OVERHEAD:
            raise _Damage(f"batch length {batch_length} is below the minimum "
                          f"{BATCH_HEADER_BYTES - LOG_OVERHEAD}", pos)
        end = pos + LOG_OVERHEAD + batch_length
        if end > size:
            raise _Damage(f"Found {size - pos} invalid bytes at the end (a batch of "
                          f"{end - pos} bytes is cut short)", pos)
        data = os.pread(fd, end - pos, pos)
        try:
            (batch,) = codec.decode_batches(data)
        except (CorruptRecordError, UnsupportedCompressionError) as exc:
            where = getattr(exc, "position", None)
            raise _Damage(str(exc), pos + (where or 0)) from None
        fields = _batch_fields(batch)
        fields["position"] = pos
        p.emit(_batch_line(fields), {"batch": fields})
        if metadata_decoder:
            _dump_records(batch, p)
        pos = end


def _check_zero_tail(fd, pos, size):
    """Zeros from `pos` to the end after at least one batch are space the log wrote ahead
    of its data (preallocated or prefilled): the dump ends quietly. Anything else that
    starts with an all-zero header is damage: non-zero bytes after the zeros, or a file
    with no batch at all (only zeros)."""
    at = pos
    while at < size:
        chunk = os.pread(fd, min(ZERO_CHECK_CHUNK_BYTES, size - at), at)
        if not chunk:
            break
        stripped = chunk.lstrip(b"\0")
        if stripped:
            raise _Damage(f"{at + len(chunk) - len(stripped) - pos} zero bytes, then a "
                          f"non-zero byte at {at + len(chunk) - len(stripped)}: not a record "
                          "batch", pos)
        at += len(chunk)
    if pos == 0:
        raise _Damage(f"the file holds {size} zero bytes and no record batch (an empty "
                      "segment of a log that preallocates looks like this too)", 0)


def _dump_index(fd, size, name, p):
    base = int(_SEGMENT_NAME.match(name).group(1))
    timeindex = name.endswith(".timeindex")
    entry_bytes = 12 if timeindex else 8
    data = os.pread(fd, size, 0)
    usable = size - size % entry_bytes
    for at in range(0, usable, entry_bytes):
        if timeindex:
            timestamp, relative = struct.unpack_from(">qi", data, at)
            if timestamp == 0 and relative == 0 and at:
                break  # preallocated space past the last entry
            p.emit(f"timestamp: {timestamp} offset: {base + relative}",
                   {"timestamp": timestamp, "offset": base + relative})
        else:
            relative, position = struct.unpack_from(">ii", data, at)
            if relative == 0 and position == 0 and at:
                break
            p.emit(f"offset: {base + relative} position: {position}",
                   {"offset": base + relative, "position": position})
    if usable != size:
        raise _Damage(f"Found {size - usable} invalid bytes at the end (not a whole "
                      f"{entry_bytes}-byte entry)", usable)


def dump_file(path, p, metadata_decoder):
    name = os.path.basename(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        p.emit(f"Dumping {path}", {"file": path, "sizeBytes": size})
        segment = _SEGMENT_NAME.match(name)
        snapshot = _SNAPSHOT_NAME.match(name)
        try:
            if segment and segment.group(2) != "log":
                _dump_index(fd, size, name, p)
                return
            if segment:
                p.emit(f"Log starting offset: {int(segment.group(1))}",
                       {"logStartingOffset": int(segment.group(1))})
            elif snapshot:
                offset, epoch = int(snapshot.group(1)), int(snapshot.group(2))
                p.emit(f"Snapshot end offset: {offset}, epoch: {epoch}",
                       {"snapshotEndOffset": offset, "snapshotEpoch": epoch})
            elif name == "bootstrap.checkpoint":
                p.emit("KRaft bootstrap snapshot", {"bootstrapSnapshot": True})
            _read_batches(fd, size, p, metadata_decoder)
        except _Damage as damage:
            p.problem(f"Corruption in {path} at byte {damage.position}: {damage.reason}",
                      {"file": path, "position": damage.position, "reason": damage.reason})
    finally:
        os.close(fd)


def run(files, metadata_decoder=False, as_json=False, out=None, err=None):
    """Dump `files`; returns the exit status (0 clean, 1 damage found, 2 unreadable)."""
    import sys

    out = out or sys.stdout
    err = err or sys.stderr
    p = _Printer(as_json, out)
    status = 0
    for path in files:
        try:
            dump_file(path, p, metadata_decoder)
        except BrokenPipeError:
            raise
        except OSError as exc:
            err.write(f"kraftcore dump-log: cannot read {path}: {exc.strerror or exc}\n")
            status = 2
        except UnsupportedVersionError as exc:  # pragma: no cover - defensive
            err.write(f"kraftcore dump-log: {path}: {exc}\n")
            status = 2
    if p.problems and status == 0:
        status = 1
    return status
