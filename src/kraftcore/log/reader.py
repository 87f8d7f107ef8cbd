"""Reading record batches out of files, with one set of damage rules: the batches of a
segment or snapshot file, of a buffer, and of a log directory's segments in offset order.
Log recovery (`kraftcore.log.segment`, `kraftcore.log.log`), `kraftcore dump-log`, the
metadata shell's directory loader and the Spark job's log replay all judge damage here.

`read_index_file` reads the entries of an `.index` or `.timeindex` file the same way.

Reading is read-only (files are opened O_RDONLY, never locked, cut or written) and in
bounded memory (a file is read in chunks of `READ_CHUNK_BYTES`, or one batch when a batch
is larger). Batches are checked by the same native kernel call recovery makes
(`codec.scan_batches`: framing, CRC-32C and, unless told otherwise, every record; offsets
continuing from the file's base offset without a gap; with `strict_epochs`, leader epochs
that never go back). Where the batches stop, the bytes left are judged, in this order:

* ZEROS: every byte to the end of the file is zero: space a log writes ahead of its data
  (preallocated or prefilled). Unless the log is known to write such zeros, no more zeros
  than a batch header cut short could start with (its base offset's high bytes, then its
  length's) are a TORN header instead. Recovery trims a zero tail; readers end there.
* TORN: the file ends inside a batch (fewer bytes than a header, or than the length a
  plausible header declares): a write cut short. Recovery cuts it.
* CORRUPT: a bad magic, framing, record or codec, or zeros followed by other bytes.
* CRC: a whole batch whose CRC-32C does not match its bytes (a bit flip).
* JUMP: a sound batch whose offsets do not continue the ones before it.
* EPOCH: a sound batch whose leader epoch is below the previous batch's (`strict_epochs`).
* GAP (a log directory only): a segment that does not start where the one before ends
  (offsets missing, or two segments claiming the same offsets), or that follows a segment
  damaged before its end; and, when the caller knows where the log starts, a first
  segment that starts above it (the segments before it are missing). Only the last
  segment may end in a torn or damaged tail.
* STRAY (a log directory only, not fatal): a segment file that is not part of the log: one
  that holds no batch while its base offset lies inside the segment before it, or one
  whose first batch is sound but starts at another offset than its name says (a copy, a
  file renamed by hand). Recovery sets such files aside (`<name>.stray`); a reader is told
  (position 0, the file, why) and reads on without it.

A file read alone (`read_file`) whose name gives no base offset (not `<20 digits>.log`, e.g.
a renamed copy or a snapshot) is read from the base offset its first batch names.
"""

import itertools
import os
from typing import NamedTuple

from kraftcore import codec
from kraftcore.errors import CorruptRecordError, InvalidAppendError, UnsupportedCompressionError
from kraftcore.layout import (BATCH_HEAD, BATCH_HEADER_BYTES, BATCH_LENGTH_MIN,
                              BATCH_LENGTH_OFFSET,
                              CONTROL_MASK, CRC_START_OFFSET, LOG_OVERHEAD_BYTES, LOG_SUFFIX,
                              MAGIC, MAGIC_OFFSET, OFFSET_AND_LENGTH, OFFSET_INDEX_ENTRY,
                              TIME_INDEX_ENTRY, TIME_INDEX_SUFFIX, parse_prefix,
                              parse_segment_name)

TORN = "torn"
ZEROS = "zeros"
CORRUPT = "corrupt"
CRC = "crc"
JUMP = "jump"
EPOCH = "epoch"
GAP = "gap"
STRAY = "stray"

# Bytes read from a file at a time (more when one batch is larger).
READ_CHUNK_BYTES = 4 << 20
# No index entries are built while reading.
_NO_INDEX_INTERVAL_BYTES = 1 << 62
_SCAN_ERRORS = (CorruptRecordError, InvalidAppendError, UnsupportedCompressionError)


class LogBatch(NamedTuple):
    """One whole, checked batch of a file: its offsets, leader epoch, whether it is a
    control batch, its bytes, where it starts in the file, and the file. (The first five
    fields are those of `kraftcore.raft.types.CommittedBatch`.)"""

    base_offset: int
    last_offset: int
    epoch: int
    control: bool
    data: bytes
    position: int
    file: str = None


class Damage(NamedTuple):
    """Where and why the batches of `file` stop. `position` is the byte where the valid
    data ends (the start of the bad batch); `kind` one of the module's kinds; `base_offset`
    what the header there names (-1 when there is no header); `size` the bytes the bad
    batch declares when the file holds all of them (a reader can go on after it), else 0;
    `next_offset` the offset the batches before it end at (-1 when unknown). For a GAP,
    `file` is the segment before the gap and `base_offset` the next segment's base (a gap
    before the first segment: `file` is that segment, `next_offset` where the log starts).
    A STRAY names the file set aside, at position 0, with `base_offset` the offset its
    first batch names (or its base offset when it holds none)."""

    file: str
    position: int
    kind: str
    reason: str
    base_offset: int = -1
    size: int = 0
    next_offset: int = -1


def torn_header_zero_bytes(offset):
    """How many zero bytes a batch header at `offset` can start with: the leading zero
    bytes of its int64 base offset, and when all eight are, up to three of its int32 batch
    length (at least 49). Its magic byte (2) is never zero."""
    head = offset.to_bytes(8, "big", signed=True)
    zeros = len(head) - len(head.lstrip(b"\0"))
    return zeros + 3 if zeros == 8 else zeros


def judge_stop(data, stop, error, *, file=None, next_offset=-1, zero_tail=None,
               zeros_written=False, position_base=0, file_bytes=None):
    """The `Damage` where a scan of `data` stopped at `stop` (the kernel's `error`), with
    the module's rules. `data` holds the file from byte `position_base`; it reaches the end
    of the file unless `file_bytes` (the file's length) says it is longer. `zero_tail`
    says whether every byte from `stop` to the end of the file is zero (worked out from
    `data` when None); `zeros_written` whether the log writes zeros ahead of its data."""
    view = memoryview(data)
    position = position_base + stop
    file_bytes = position_base + len(view) if file_bytes is None else file_bytes
    left = file_bytes - position
    head = bytes(view[stop:stop + BATCH_HEADER_BYTES])
    if zero_tail is None:
        zero_tail = _all_zero(data, stop)
    if zero_tail:
        if zeros_written or left > torn_header_zero_bytes(max(next_offset, 0)):
            if position == 0:
                reason = (f"the file holds {left} zero bytes and no record batch (an empty "
                          "segment of a log that preallocates looks like this too)")
            else:
                reason = f"{left} zero bytes after the last batch (space written ahead of it)"
            return Damage(file, position, ZEROS, reason, -1, 0, next_offset)
    if left < LOG_OVERHEAD_BYTES:
        return Damage(file, position, TORN, f"Found {left} invalid bytes at the end (a "
                      "truncated batch header)", -1, 0, next_offset)
    base, length = OFFSET_AND_LENGTH.unpack_from(head)
    if not any(head[:LOG_OVERHEAD_BYTES]):
        first = _first_nonzero(view, stop, position_base, file)
        return Damage(file, position, CORRUPT, f"{first - position} zero bytes, then a "
                      f"non-zero byte at {first}: not a record batch", -1, 0, next_offset)
    if length < BATCH_LENGTH_MIN:
        return Damage(file, position, CORRUPT, f"batch length {length} is below the minimum "
                      f"{BATCH_LENGTH_MIN}", base, 0, next_offset)
    size = LOG_OVERHEAD_BYTES + length
    if size > left:
        return Damage(file, position, TORN, f"Found {left} invalid bytes at the end (a batch "
                      f"of {size} bytes is cut short)", base, 0, next_offset)
    if head[MAGIC_OFFSET] != MAGIC:
        return Damage(file, position, CORRUPT, f"unsupported record batch magic "
                      f"{head[MAGIC_OFFSET]} (only {MAGIC} is read)", base, size, next_offset)
    fields = BATCH_HEAD.unpack(head[:BATCH_HEAD.size])
    if len(view) - stop >= size:
        computed = codec.crc32c(view[stop + CRC_START_OFFSET:stop + size])
        if computed != fields[4]:
            return Damage(file, position, CRC, f"CRC mismatch: stored {fields[4]:#010x}, "
                          f"computed {computed:#010x}", base, size, next_offset)
    if isinstance(error, UnsupportedCompressionError):
        return Damage(file, position, CORRUPT, str(UnsupportedCompressionError(error.codec)),
                      base, size, next_offset)
    reason = getattr(error, "reason", None) or str(error)
    where = getattr(error, "position", None)
    if where is not None and position_base + where != position:
        reason = f"{reason} (at byte {position_base + where})"
    kind = CORRUPT
    if _sound(view[stop:stop + size]):
        if base < next_offset or (isinstance(error, InvalidAppendError)
                                  and base != next_offset >= 0):
            kind = JUMP
            reason = (f"the offsets jump from {next_offset - 1} to {base}"
                      if base > next_offset else
                      f"the offsets go back from {next_offset - 1} to {base}: the batch at "
                      f"offset {base} repeats offsets below {next_offset} (offsets must "
                      "increase)")
        elif isinstance(error, InvalidAppendError):
            kind = EPOCH
    return Damage(file, position, kind, reason, base, size, next_offset)


def _all_zero(data, start):
    if not isinstance(data, (bytes, bytearray)):
        data = memoryview(data)[start:].tobytes()
        start = 0
    return data.count(0, start) == len(data) - start


def _sound(batch):
    try:
        codec.validate_batches(batch)
    except _SCAN_ERRORS:
        return False
    return True


def _first_nonzero(view, stop, position_base, file):
    """The file position of the first non-zero byte at or after `stop` (in `view`, or
    read from `file` past it)."""
    rest = bytes(view[stop:])
    stripped = rest.lstrip(b"\0")
    if stripped or file is None:
        return position_base + stop + len(rest) - len(stripped)
    at = position_base + len(view)
    with open(file, "rb") as f:
        f.seek(at)
        while True:
            chunk = f.read(READ_CHUNK_BYTES)
            if not chunk:
                return at
            stripped = chunk.lstrip(b"\0")
            if stripped:
                return at + len(chunk) - len(stripped)
            at += len(chunk)


def _scan(data, base_offset, position_base, latest_epoch=-1, expected_offset=-1,
          strict_epochs=False, verify_records=True):
    """`codec.scan_batches` as recovery calls it, stopping at the first bad batch; a batch
    whose codec kraftcore does not read stops it too (returned as the error)."""
    try:
        return codec.scan_batches(
            data, base_offset, position_base, _NO_INDEX_INTERVAL_BYTES, 0, -1, -1, -1,
            latest_epoch, expected_offset=expected_offset, strict_epochs=strict_epochs,
            stop_on_error=True, verify_records=verify_records)
    except UnsupportedCompressionError as exc:
        result = _scan(memoryview(data)[:exc.position], base_offset, position_base,
                       latest_epoch, expected_offset, strict_epochs, verify_records)
        return result._replace(error=exc) if result.error is None else result


def batches_of(data, end, position_base=0, file=None):
    """The `LogBatch`es of the checked bytes `data[:end]` (whole batches back to back)."""
    pos = 0
    while pos < end:
        base, length, epoch, _, _, attributes, delta = BATCH_HEAD.unpack_from(data, pos)
        size = LOG_OVERHEAD_BYTES + length
        yield LogBatch(base, base + delta, epoch, bool(attributes & CONTROL_MASK),
                       bytes(data[pos:pos + size]), position_base + pos, file)
        pos += size


def _zeros_to_end(fd, position, file_bytes):
    at = position
    while at < file_bytes:
        chunk = os.pread(fd, min(READ_CHUNK_BYTES, file_bytes - at), at)
        if not chunk:
            break
        if any(chunk):
            return False
        at += len(chunk)
    return True


def read_file(path, *, base_offset=None, contiguous=True, latest_epoch=-1,
              strict_epochs=False, verify_records=True, chunk_bytes=READ_CHUNK_BYTES):
    """Yield the `LogBatch`es of the segment or snapshot file `path`, then, if they stop
    before its end, one `Damage`. `base_offset` (default: the one a segment file's name
    gives, else the one the first batch's header names, else 0) is where the offsets start;
    with `contiguous` the first batch must start there and each follow the one before,
    otherwise offsets only have to increase. `latest_epoch` and `strict_epochs` are
    `scan_batches`'s. An empty file holds no batch."""
    if base_offset is None:
        base_offset = parse_prefix(os.path.basename(path))
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        file_bytes = os.fstat(fd).st_size
        if base_offset is None:
            # No name to go by: the offsets of a batch are checked relative to the base
            # (they must fit an int32 above it), so start at the first batch's.
            head = os.pread(fd, BATCH_LENGTH_OFFSET, 0)  # the int64 base offset
            first = (int.from_bytes(head, "big", signed=True)
                     if len(head) == BATCH_LENGTH_OFFSET else 0)
            base_offset = max(first, 0)
        pos = 0
        next_offset = base_offset
        while pos < file_bytes:
            data = os.pread(fd, min(chunk_bytes, file_bytes - pos), pos)
            if not data:
                break  # the file shrank while it was read
            result = _scan(data, base_offset, pos, latest_epoch,
                           next_offset if contiguous else -1, strict_epochs, verify_records)
            valid = result.valid_bytes
            if result.batches:
                if not contiguous and result.first_offset < next_offset:
                    yield judge_stop(data, 0, CorruptRecordError(
                        f"base offset {result.first_offset} is below {next_offset}, "
                        "offsets must increase", 0), file=path, next_offset=next_offset,
                        position_base=pos, file_bytes=file_bytes, zero_tail=False)
                    return
                yield from batches_of(data, valid, pos, path)
                next_offset = result.next_offset
                if result.epochs:
                    latest_epoch = result.epochs[-1][0]
            if result.error is None:
                pos += valid
                continue
            stop = pos + valid
            left_in_data = len(data) - valid
            if stop + left_in_data < file_bytes:
                # The chunk ended before the file: read on when the batch at the stop
                # goes past the chunk but not past the file.
                need = BATCH_HEADER_BYTES
                if left_in_data >= BATCH_HEADER_BYTES:
                    length = OFFSET_AND_LENGTH.unpack_from(data, valid)[1]
                    plausible = (length >= BATCH_LENGTH_MIN
                                 and data[valid + MAGIC_OFFSET] == MAGIC)
                    need = LOG_OVERHEAD_BYTES + length if plausible else 0
                if left_in_data < need <= file_bytes - stop:
                    if valid == 0:
                        chunk_bytes = need
                    pos = stop
                    continue
            head = data[valid:valid + LOG_OVERHEAD_BYTES]
            zero_tail = (not any(head) and not any(data[valid:])
                         and _zeros_to_end(fd, pos + len(data), file_bytes))
            yield judge_stop(data, valid, result.error, file=path, next_offset=next_offset,
                             zero_tail=zero_tail, position_base=pos, file_bytes=file_bytes)
            return
    finally:
        os.close(fd)


def read_buffer(data, *, file=None, resume=False):
    """Yield the `LogBatch`es of `data` (a snapshot's or a segment's bytes, read whole)
    and a `Damage` where they stop. With `resume`, reading goes on after a damaged batch
    whose length the buffer holds (a bad CRC, magic, record or offset), each yielding a
    `Damage`; offsets then only have to increase within each run of sound batches."""
    view = memoryview(data).cast("B") if not isinstance(data, (bytes, bytearray)) else data
    total = len(view)
    pos = 0
    while pos < total:
        result = _scan(view[pos:], 0, pos)
        yield from batches_of(view[pos:], result.valid_bytes, pos, file)
        if result.error is None:
            return
        damage = judge_stop(view[pos:], result.valid_bytes, result.error, file=file,
                            next_offset=result.next_offset if result.batches else -1,
                            position_base=pos)
        yield damage
        if not resume or damage.size == 0:
            return
        pos = damage.position + damage.size


def read_index_file(path, base_offset):
    """Yield the entries of an `.index` file (`(offset, position)`) or a `.timeindex` file
    (`(timestamp, offset)`) of the segment based at `base_offset`, offsets absolute, up to
    the first all-zero entry after the first (space preallocated past the last entry),
    then a `Damage` when the file ends in part of an entry."""
    timeindex = path.endswith(TIME_INDEX_SUFFIX)
    entry = TIME_INDEX_ENTRY if timeindex else OFFSET_INDEX_ENTRY
    with open(path, "rb") as f:
        data = f.read()
    usable = len(data) - len(data) % entry.size
    for at in range(0, usable, entry.size):
        first, second = entry.unpack_from(data, at)
        if first == 0 and second == 0 and at:
            break
        yield (first, base_offset + second) if timeindex else (base_offset + first, second)
    if usable != len(data):
        yield Damage(path, usable, CORRUPT, f"Found {len(data) - usable} invalid bytes at the "
                     f"end (not a whole {entry.size}-byte entry)")


def segment_files(directory):
    """[(base offset, path)] of the `.log` segment files in `directory` (regular files named
    `<20 digits>.log`), in offset order."""
    found = []
    for name in os.listdir(directory):
        parsed = parse_segment_name(name, (LOG_SUFFIX,))
        path = os.path.join(directory, name)
        if parsed is not None and os.path.isfile(path):
            found.append((parsed[0], path))
    return sorted(found)


def gap_between(name, base_offset, next_offset, damage, following_name, following_base):
    """Why segment `name` (offsets [base_offset, next_offset), stopped by `damage` or None)
    is not followed by segment `following_name` based at `following_base`, or None when
    it is. A zero tail is no damage here."""
    if damage is not None and damage.kind != ZEROS:
        return (f"{name} is damaged at byte {damage.position} ({damage.reason}): offsets "
                f"from {next_offset} on cannot be read in it, and the next segment "
                f"{following_name} starts at {following_base}")
    if next_offset < following_base:
        held = ("holds no batch" if next_offset == base_offset
                else f"ends at offset {next_offset - 1}")
        return (f"{name} {held} but the next segment {following_name} starts at "
                f"{following_base}: offsets [{next_offset}, {following_base}) are missing")
    if next_offset > following_base:
        return (f"{name} holds offsets up to {next_offset - 1}, past the base offset "
                f"{following_base} of the next segment {following_name}: the two claim the "
                "same offsets")
    return None


def read_directory(directory, *, start_offset=None, verify_records=True):
    """Yield the `LogBatch`es of the log in `directory` (its `.log` segments), in offset
    order, a STRAY `Damage` for each segment file that is not part of the log (read on
    without it), and at most one other `Damage`, where the log cannot be read further: the
    last segment's own damage (a zero tail is not reported), or a GAP.

    `start_offset` is where the log must start, when the caller knows it (for a metadata
    log, the end offset of the snapshot it is read after): a first segment based above it
    is a GAP before any batch (`file` that segment, `next_offset` the start, `base_offset`
    the segment's base). Without it the first segment is taken as the start: segments
    missing before it cannot be told from segments deleted by retention, and a log start
    offset checkpoint is not read here (`Log.open` reads it; it names where the log starts
    but not the snapshot that covers the offsets below). Every pair of segments is judged,
    those below `start_offset` too (a replay from offset 0 reads them)."""
    segments = segment_files(directory)
    previous = None  # (name, base, next offset, damage, end of its batches) of the last
    latest_epoch = -1
    for index, (base, path) in enumerate(segments):
        name = os.path.basename(path)
        items = read_file(path, base_offset=base, latest_epoch=latest_epoch,
                          strict_epochs=True, verify_records=verify_records)
        first = next(items, None)
        if isinstance(first, Damage) and first.kind == JUMP and first.position == 0:
            yield Damage(path, 0, STRAY, f"{name} is not part of the log: its first batch "
                         f"starts at offset {first.base_offset}, not at the base offset "
                         f"{base} its name says (a copy or a renamed file; recovery sets it "
                         "aside)", first.base_offset)
            continue
        if previous is not None:
            if (first is None or isinstance(first, Damage)) and base < previous[2]:
                yield Damage(path, 0, STRAY, f"{name} is not part of the log: it holds no "
                             f"batch, and its base offset {base} lies inside {previous[0]} "
                             "(recovery sets it aside)", base)
                continue
            gap = gap_between(previous[0], previous[1], previous[2], previous[3], name, base)
            if gap is not None:
                yield Damage(os.path.join(directory, previous[0]), previous[4], GAP, gap,
                             base, 0, previous[2])
                return
        elif start_offset is not None and base > start_offset:
            yield Damage(path, 0, GAP, f"the log must start at offset {start_offset} but "
                         f"its first segment {name} starts at {base}: offsets "
                         f"[{start_offset}, {base}) are missing", base, 0, start_offset)
            return
        next_offset, damage, end = base, None, 0
        for item in itertools.chain([first], items) if first is not None else ():
            if isinstance(item, Damage):
                damage = item
                break
            next_offset = item.last_offset + 1
            end = item.position + len(item.data)
            if item.epoch > latest_epoch:
                latest_epoch = item.epoch
            yield item
        if damage is not None and damage.kind != ZEROS and index == len(segments) - 1:
            yield damage
            return
        previous = (name, base, next_offset, damage, end if damage is None else
                    damage.position)
