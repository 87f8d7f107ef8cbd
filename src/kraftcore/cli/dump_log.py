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

Files are read by `kraftcore.log.reader`, whose damage rules this command reports:
corruption does not stop the dump early without saying so: what could be read is printed,
then the position and reason of the damage, and the command exits 1. Exit 2 is a usage
error or a file that cannot be opened; 0 means every file was read whole and valid.
Zeros after the last batch (a log that preallocates or prefills writes them ahead of its
data) end a dump with a line saying where and how many (`Zeros in FILE at byte N: …`), not
damage; no more zeros than a cut-short batch header could start with are a torn header
(damage, `Found N invalid bytes at the end …`). A file of zeros with no batch at all, or
zeros followed by anything else, is damage. Batches are read from the base offset the file
name gives (`<20 digits>.log`), else from the first batch's, and their offsets must increase:
a batch whose offsets go back is damage. An empty file is valid: it holds no batch.
"""

import json
import os
import struct

from kraftcore import codec
from kraftcore.errors import ProtocolError, UnsupportedVersionError
from kraftcore.layout import (BOOTSTRAP_CHECKPOINT_FILE, CODEC_NAMES, COMPRESSION_CODEC_MASK,
                              LOG_SUFFIX, TIME_INDEX_SUFFIX, parse_segment_name,
                              parse_snapshot_name)
from kraftcore.log import reader
from kraftcore.metadata import records
from kraftcore.raft import control

_CONTROL_LABELS = {
    control.LEADER_CHANGE: "LeaderChange", control.SNAPSHOT_HEADER: "SnapshotHeader", control.SNAPSHOT_FOOTER: "SnapshotFooter",
    control.KRAFT_VERSION: "KRaftVersion", control.KRAFT_VOTERS: "KRaftVoters",
}


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
        "compressCodec": CODEC_NAMES.get(attributes & COMPRESSION_CODEC_MASK,
                                         f"unknown({attributes & COMPRESSION_CODEC_MASK})"),
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


def _dump_batches(path, p, metadata_decoder):
    """Dump every batch of a segment or snapshot file; returns the `reader.Damage` where
    the batches stop (a ZEROS one for zeros written ahead of the data), None at the end."""
    for item in reader.read_file(path, contiguous=False):
        if isinstance(item, reader.Damage):
            return item
        (batch,) = codec.decode_batches(item.data, verify=False)
        fields = _batch_fields(batch)
        fields["position"] = item.position
        p.emit(_batch_line(fields), {"batch": fields})
        if metadata_decoder:
            _dump_records(batch, p)
    return None


def _dump_index(path, base_offset, p):
    """Dump the entries of an `.index` or `.timeindex` file; returns its damage or None."""
    timeindex = path.endswith(TIME_INDEX_SUFFIX)
    for item in reader.read_index_file(path, base_offset):
        if isinstance(item, reader.Damage):
            return item
        if timeindex:
            timestamp, offset = item
            p.emit(f"timestamp: {timestamp} offset: {offset}",
                   {"timestamp": timestamp, "offset": offset})
        else:
            offset, position = item
            p.emit(f"offset: {offset} position: {position}",
                   {"offset": offset, "position": position})
    return None


def dump_file(path, p, metadata_decoder):
    name = os.path.basename(path)
    size = os.stat(path).st_size
    p.emit(f"Dumping {path}", {"file": path, "sizeBytes": size})
    segment = parse_segment_name(name)
    snapshot = parse_snapshot_name(name)
    if segment and segment[1] != LOG_SUFFIX:
        damage = _dump_index(path, segment[0], p)
    else:
        if segment:
            p.emit(f"Log starting offset: {segment[0]}", {"logStartingOffset": segment[0]})
        elif snapshot:
            offset, epoch = snapshot
            p.emit(f"Snapshot end offset: {offset}, epoch: {epoch}",
                   {"snapshotEndOffset": offset, "snapshotEpoch": epoch})
        elif name == BOOTSTRAP_CHECKPOINT_FILE:
            p.emit("KRaft bootstrap snapshot", {"bootstrapSnapshot": True})
        damage = _dump_batches(path, p, metadata_decoder)
    if damage is not None and damage.kind == reader.ZEROS and damage.position > 0:
        # Not damage, but said: the bytes past the last batch are not silently skipped.
        p.emit(f"Zeros in {path} at byte {damage.position}: {damage.reason}",
               {"file": path, "position": damage.position,
                "zeroBytes": size - damage.position, "reason": damage.reason})
    elif damage is not None:
        p.problem(f"Corruption in {path} at byte {damage.position}: {damage.reason}",
                  {"file": path, "position": damage.position, "reason": damage.reason})


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
