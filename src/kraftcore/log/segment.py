"""One segment of a log: `<base>.log` with its `.index` and `.timeindex` (kafka-facts §3.1–3.4).

A segment owns its three file descriptors and an in-memory copy of both indexes (the files
are written as entries are added, and trimmed when the segment is truncated). It knows how
many bytes of whole batches its `.log` holds (`size`; a preallocated or prefilled file is
longer, its tail zeros), the offset after its last batch, and its max timestamp.

Invariants: `size` is the end of the last whole batch that was written successfully (a
leader's `stamp_append` moves it just before its write, and `write_stamped` puts it back if
the write fails; the log's lock is held throughout); index entries point at batch starts
inside `size` and increase; every offset in the segment fits an int32 relative to
`base_offset`, and its first batch starts at `base_offset` (`misplaced_first_batch` finds
files that break this; the log sets them aside under the names `set_aside_names` gives,
never deletes them) — or, in a compacted log, at or above it: the cleaner removes records,
and a follower's segment starts where its log ended, before the leader's next batch.

A segment the cleaner is writing or swapping in has a `file_suffix` after each file's name
(`.cleaned`, then `.swap`; the log's files have none), and `rename_files` moves its three
files to another suffix, as Kafka's cleaner does. Batch checks and index arithmetic happen in the kernels
(`kraftcore.codec.SegmentState`, which a segment is built on, `scan_batches` and friends);
this module moves bytes between them and the files.
"""

import os

from kraftcore import codec
from kraftcore.errors import CorruptRecordError, UnsupportedCompressionError
from kraftcore.layout import (BATCH_HEAD, BATCH_HEADER_BYTES,
                              INDEX_SUFFIX, LOG_SUFFIX, OFFSET_AND_LENGTH, OFFSET_INDEX_ENTRY,
                              OFFSET_INDEX_ENTRY_BYTES, RELATIVE_OFFSET_MAX, SEGMENT_SUFFIXES,
                              STRAY_SUFFIX, TIME_INDEX_ENTRY, TIME_INDEX_ENTRY_BYTES,
                              TIME_INDEX_SUFFIX, file_prefix, LOG_OVERHEAD_BYTES)
from kraftcore.log import fileio, reader

# Bytes read at a time when walking headers from an index entry to a batch.
READ_CHUNK_BYTES = 64 * 1024
# Bytes read at a time when walking batch headers to the end of a read (`span`).
SPAN_CHUNK_BYTES = 4096


def set_aside_names(directory, base_offset):
    """{suffix: new name} for the files of segment `base_offset` when they are set aside
    (kept, out of the log): `<name>.stray`, or `<name>.<n>.stray` with the first n for
    which none of the three names is taken."""
    prefix = file_prefix(base_offset)
    n = 0
    while True:
        tag = STRAY_SUFFIX if n == 0 else f".{n}{STRAY_SUFFIX}"
        names = {suffix: prefix + suffix + tag for suffix in SEGMENT_SUFFIXES}
        if not any(os.path.lexists(os.path.join(directory, name)) for name in names.values()):
            return names
        n += 1


def misplaced_first_batch(directory, base_offset, batch_bytes_max, gaps_allowed=False):
    """The base offset of the first batch of `<base_offset>.log` in `directory` when that
    batch is whole and sound (framing and CRC) but does not start at `base_offset`, else
    None. Such a file is not a segment of the log whatever its name says (a copy, or a
    file renamed by hand): a segment's first batch starts at its base offset, since a
    segment is created at the log end offset and truncating it to its base removes it.
    With `gaps_allowed` (a compacted log) a first batch above the base offset is in its
    place. Reads the first 12 bytes, and the first batch only when they name another
    offset."""
    fd = fileio.open_file(os.path.join(directory, file_prefix(base_offset) + LOG_SUFFIX))
    try:
        head = fileio.pread(fd, LOG_OVERHEAD_BYTES, 0)
        if len(head) < LOG_OVERHEAD_BYTES:
            return None
        first, length = OFFSET_AND_LENGTH.unpack(head)
        if first == base_offset or (gaps_allowed and first > base_offset) or not (
                BATCH_HEADER_BYTES <= LOG_OVERHEAD_BYTES + length <= batch_bytes_max):
            return None
        data = fileio.pread(fd, LOG_OVERHEAD_BYTES + length, 0)
    finally:
        fileio.close(fd)
    try:
        result = codec.scan_batches(data, first, 0, 1 << 30, 0, verify_records=False,
                                    stop_on_error=True)
    except (CorruptRecordError, UnsupportedCompressionError):
        return None
    return first if result.batches == 1 else None


class Segment(codec.SegmentState):
    """The kernel's `SegmentState` (size, next offset, max timestamp, in-memory indexes)
    plus the segment's files."""

    def __init__(self, directory, base_offset, config, file_suffix=""):
        super().__init__(base_offset)
        self.directory = directory
        self.config = config
        self.file_suffix = file_suffix  # after each file's name: "" in the log
        self.log_fd = self.index_fd = self.time_index_fd = -1
        # Index bytes already in the files. The in-memory copies lead while the segment is
        # active (recovery rebuilds the active segment's indexes from its data anyway);
        # `seal` writes the rest, so an inactive segment's files are complete.
        self.offset_index_written = 0
        self.time_index_written = 0
        self.created_ms = 0
        self.missing_indexes = ()  # index files `open` did not find
        self._synced = None  # (size, file bytes, index bytes written) at the last full sync

    # ------------------------------------------------------------------ files

    def path(self, suffix):
        return os.path.join(self.directory,
                            file_prefix(self.base_offset) + suffix + self.file_suffix)

    @classmethod
    def create(cls, directory, base_offset, config, now_ms, file_suffix=""):
        """New empty segment files (they must not exist), each name followed by
        `file_suffix`. The caller syncs the directory."""
        segment = cls(directory, base_offset, config, file_suffix)
        segment.created_ms = now_ms
        try:
            segment.log_fd = fileio.open_file(segment.path(LOG_SUFFIX), create=True)
            segment.index_fd = fileio.open_file(segment.path(INDEX_SUFFIX), create=True)
            segment.time_index_fd = fileio.open_file(segment.path(TIME_INDEX_SUFFIX), create=True)
            if config.preallocate:
                fileio.preallocate(segment.log_fd, config.segment_bytes)
                segment.file_bytes = fileio.file_size(segment.log_fd)
        except OSError:
            segment.delete()
            raise
        return segment

    @classmethod
    def open(cls, directory, base_offset, config, now_ms):
        """Open existing segment files and read the indexes into memory, without reading
        the `.log` or creating anything: a missing index file is listed in
        `missing_indexes`, and `create_missing_indexes` creates it once the log keeps the
        segment."""
        segment = cls(directory, base_offset, config)
        segment.created_ms = now_ms
        try:
            segment.log_fd = fileio.open_file(segment.path(LOG_SUFFIX))
            segment.file_bytes = segment.size = fileio.file_size(segment.log_fd)
            segment.index_fd, segment.offset_index = _open_index(segment.path(INDEX_SUFFIX))
            segment.time_index_fd, segment.time_index = _open_index(
                segment.path(TIME_INDEX_SUFFIX))
            segment.missing_indexes = tuple(
                suffix for suffix, fd in ((INDEX_SUFFIX, segment.index_fd),
                                          (TIME_INDEX_SUFFIX, segment.time_index_fd))
                if fd < 0)
            segment.offset_index_written = len(segment.offset_index)
            segment.time_index_written = len(segment.time_index)
        except OSError:
            segment.close()
            raise
        return segment

    def create_missing_indexes(self):
        """Create the (empty) index files `open` did not find."""
        if self.index_fd < 0:
            self.index_fd = fileio.open_file(self.path(INDEX_SUFFIX), create=True)
        if self.time_index_fd < 0:
            self.time_index_fd = fileio.open_file(self.path(TIME_INDEX_SUFFIX), create=True)

    def close(self):
        for name in ("log_fd", "index_fd", "time_index_fd"):
            fd = getattr(self, name)
            if fd >= 0:
                setattr(self, name, -1)
                fileio.close(fd)

    def rename_files(self, file_suffix):
        """Give the three files `file_suffix` instead of the one they have (the open
        descriptors stay valid): the indexes first, the `.log` last. The caller syncs the
        directory."""
        prefix = os.path.join(self.directory, file_prefix(self.base_offset))
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, LOG_SUFFIX):
            fileio.rename(prefix + suffix + self.file_suffix, prefix + suffix + file_suffix)
        self.file_suffix = file_suffix

    def delete(self):
        """Close and remove the segment's files (a missing file is fine)."""
        self.close()
        for suffix in SEGMENT_SUFFIXES:
            try:
                fileio.unlink(self.path(suffix))
            except FileNotFoundError:
                pass

    def _file_state(self):
        return (self.size, self.file_bytes, self.offset_index_written, self.time_index_written)

    def mark_synced(self):
        """What the three files hold now is known to be durable (the log just opened or
        recovered the segment), so a full sync before the next change can be skipped."""
        self._synced = self._file_state()

    def sync(self, with_indexes=False):
        """fdatasync the data file (and the index files). A full sync of files unchanged
        since the last one is skipped: closing a broker's thousands of untouched
        partitions costs no disk flush each."""
        state = self._file_state()
        if with_indexes and state == self._synced:
            return
        fileio.sync(self.log_fd)
        if with_indexes:
            fileio.sync(self.index_fd)
            fileio.sync(self.time_index_fd)
            self._synced = state

    # ------------------------------------------------------------------ loading

    def scan(self, latest_epoch, gaps_allowed=False):
        """Rebuild the in-memory state (indexes, end, max timestamp) by scanning the whole
        `.log` (kafka-facts §3.7), writing nothing: `finish_scan` cuts the file after the
        last valid batch and writes the indexes once the log has decided to keep the
        segment. Returns the scan result (`.epochs` the leader epochs it started) and, when
        the scan stopped before the end of the file, the `reader.Damage` saying why: a
        torn, corrupt or misplaced batch, or a zero tail (space preallocated or prefilled
        ahead of the data, not a torn write), judged by `kraftcore.log.reader`'s rules."""
        self.offset_index = bytearray()
        self.time_index = bytearray()
        self.bytes_since_index = 0
        self.max_timestamp = self.offset_of_max_timestamp = self.last_index_timestamp = -1
        data = fileio.pread(self.log_fd, self.file_bytes, 0) if self.file_bytes else b""
        # Stricter than Kafka's recovery, because kraftcore logs never have gaps: offsets
        # must continue without a gap from the segment's base, and leader epochs must not
        # go backwards, so a flipped base offset or epoch (outside the CRC) is caught too.
        # A compacted log's offsets only have to increase (`gaps_allowed`): the cleaner
        # removed the records in between.
        result = codec.scan_batches(
            data, self.base_offset, 0, self.config.index_interval_bytes, 0, -1, -1, -1,
            latest_epoch, expected_offset=-1 if gaps_allowed else self.base_offset,
            strict_epochs=True, stop_on_error=True)
        self._take(result)
        self.size = result.valid_bytes
        self.next_offset = result.next_offset if result.batches else self.base_offset
        damage = None
        if self.size < len(data):
            config = self.config
            damage = reader.judge_stop(
                data, self.size, result.error, file=self.path(LOG_SUFFIX),
                next_offset=self.next_offset,
                zeros_written=bool(config.preallocate or config.prefill_bytes))
        return result, damage

    def finish_scan(self):
        """After `scan`: cut the file after the last valid batch and rewrite the indexes
        (with the final time index entry of an inactive segment)."""
        if self.file_bytes > self.size:
            fileio.truncate(self.log_fd, self.size)
            self.file_bytes = self.size
        self._add_final_time_entry()
        self._rewrite_indexes()

    def load(self):
        """Trust a segment that was closed cleanly: check its indexes (an error string when
        they are damaged, and the caller recovers instead) and find its end from the last
        indexed batch."""
        if self.size and self.missing_indexes:  # Kafka rebuilds a missing index too
            return f"missing index file(s): {', '.join(self.missing_indexes)}"
        relative_max = RELATIVE_OFFSET_MAX
        problem = codec.check_offset_index(self.offset_index, self.size, relative_max)
        problem = problem or codec.check_time_index(self.time_index, relative_max)
        if problem:
            return problem
        try:
            self._load_tail()
        except CorruptRecordError as exc:
            return f"the batches after the last index entry do not read back: {exc}"
        return None

    def _load_tail(self):
        position = 0
        if self.offset_index:
            position = OFFSET_INDEX_ENTRY.unpack_from(
                self.offset_index, len(self.offset_index) - OFFSET_INDEX_ENTRY_BYTES)[1]
        tail = fileio.pread(self.log_fd, self.size - position, position)
        result = codec.scan_batches(
            tail, self.base_offset, position, self.config.index_interval_bytes, 0,
            verify_records=False)
        self.next_offset = result.next_offset if result.batches else self.base_offset
        if self.offset_index and result.batches == 0:
            raise CorruptRecordError("no batch at the last index entry", position)
        last_ts, relative = (-1, 0)
        if self.time_index:
            last_ts, relative = TIME_INDEX_ENTRY.unpack_from(
                self.time_index, len(self.time_index) - TIME_INDEX_ENTRY_BYTES)
        self.last_index_timestamp = last_ts
        if result.max_timestamp > last_ts:
            self.max_timestamp = result.max_timestamp
            self.offset_of_max_timestamp = result.offset_of_max_timestamp
        else:
            self.max_timestamp = last_ts
            self.offset_of_max_timestamp = self.base_offset + relative if last_ts >= 0 else -1
        if self.next_offset - 1 - self.base_offset > RELATIVE_OFFSET_MAX:
            raise CorruptRecordError("offsets overflow the segment", position)

    # ------------------------------------------------------------------ writing

    def append(self, data, result):
        """Write the checked batches `data` (scanned into `result` at position `size`; a
        bytes-like object, or a list of pieces written back to back by one `pwritev`) and
        take their index entries (written to the index files by `seal`). On an OSError the
        segment is put back as it was and the error is raised; if even that fails, the
        OSError carries `rollback_failed`."""
        position = self.size
        end = position + result.valid_bytes
        zeros = self._zeros_after(end)
        if zeros:
            data = [*data, zeros] if isinstance(data, (list, tuple)) else [data, zeros]
        self._write_at(data, position)
        self.size = end
        self.file_bytes = max(self.file_bytes, end + len(zeros))
        self.next_offset = result.next_offset
        self._take(result)

    def write_stamped(self, header, data):
        """Write the batch the last `stamp_append` took: its stamped `header`, then the rest
        of `data`. If the write fails the state goes back to before the `stamp_append`, and
        after an OSError the file is cut back as `append` does."""
        end = self.size
        position = end - len(data)
        pieces = [header, memoryview(data)[len(header):]]
        zeros = self._zeros_after(end)
        if zeros:
            pieces.append(zeros)
        try:
            fileio.pwrite_all(self.log_fd, pieces, position)
        except BaseException as exc:
            self.undo_append()
            if isinstance(exc, OSError):
                self._cut_after(exc, position)
            raise
        if zeros:
            self.file_bytes = end + len(zeros)

    def _zeros_after(self, end):
        """With `prefill_bytes`: the zeros to write after data ending at `end` when that
        data reaches the end of the file (b"" otherwise), up to the segment size. Appends
        then overwrite blocks the file already has, and the fsync after them flushes only
        data, not the file's new size and blocks (on ext4 it takes about half as long)."""
        step = self.config.prefill_bytes
        if not step or end < self.file_bytes:
            return b""
        return bytes(max(0, min(step, self.config.segment_bytes - end)))

    def _write_at(self, data, position):
        try:
            fileio.pwrite_all(self.log_fd, data, position)
        except OSError as exc:
            self._cut_after(exc, position)
            raise

    def _cut_after(self, exc, position):
        """After a failed write at `position`: cut the file back there; if even that fails,
        mark `exc` with `rollback_failed`."""
        try:
            fileio.truncate(self.log_fd, position)
            self.file_bytes = position
        except OSError:
            exc.rollback_failed = True

    def _take(self, result):
        self.offset_index += result.offset_index
        self.time_index += result.time_index
        self.bytes_since_index = result.bytes_since_index
        self.max_timestamp = result.max_timestamp
        self.offset_of_max_timestamp = result.offset_of_max_timestamp
        self.last_index_timestamp = result.last_index_timestamp

    def _add_final_time_entry(self):
        """Kafka's last time index entry of an inactive segment: its max timestamp."""
        if self.max_timestamp > self.last_index_timestamp:
            self.time_index += TIME_INDEX_ENTRY.pack(
                self.max_timestamp, self.offset_of_max_timestamp - self.base_offset)
            self.last_index_timestamp = self.max_timestamp

    def _rewrite_indexes(self):
        self.offset_index_written = self.time_index_written = 0
        for fd in (self.index_fd, self.time_index_fd):
            fileio.truncate(fd, 0)
        self._write_indexes()

    def _write_indexes(self):
        """Write the index entries the files do not have yet."""
        if len(self.offset_index) > self.offset_index_written:
            fileio.pwrite_all(self.index_fd, self.offset_index[self.offset_index_written:],
                              self.offset_index_written)
            self.offset_index_written = len(self.offset_index)
        if len(self.time_index) > self.time_index_written:
            fileio.pwrite_all(self.time_index_fd, self.time_index[self.time_index_written:],
                              self.time_index_written)
            self.time_index_written = len(self.time_index)

    def seal(self):
        """Make the segment inactive (a roll or a close): final time index entry, trim a
        preallocated file to its data, and sync the three files."""
        self._add_final_time_entry()
        self._write_indexes()
        if self.file_bytes > self.size:
            fileio.truncate(self.log_fd, self.size)
            self.file_bytes = self.size
        self.sync(with_indexes=True)

    def truncate_to(self, offset):
        """Drop every batch whose last offset is >= `offset` (a batch holding `offset` goes
        whole). Returns the new next offset of the segment."""
        position = self.position_of(offset)
        if position is None:
            return self.next_offset
        self._synced = None  # a cut must reach the disk even if the size ends as synced
        cut = OFFSET_AND_LENGTH.unpack(self.read_bytes(position, LOG_OVERHEAD_BYTES))[0]
        relative = cut - self.base_offset
        keep = codec.index_search(self.offset_index, OFFSET_INDEX_ENTRY_BYTES, 0, 4, relative - 1) + 1
        time_keep = codec.index_search(self.time_index, TIME_INDEX_ENTRY_BYTES, 8, 4, relative - 1) + 1
        self.offset_index_written = min(self.offset_index_written, keep * OFFSET_INDEX_ENTRY_BYTES)
        self.time_index_written = min(self.time_index_written, time_keep * TIME_INDEX_ENTRY_BYTES)
        fileio.truncate(self.log_fd, position)
        fileio.truncate(self.index_fd, self.offset_index_written)
        fileio.truncate(self.time_index_fd, self.time_index_written)
        fileio.sync(self.log_fd)
        del self.offset_index[keep * OFFSET_INDEX_ENTRY_BYTES:]
        del self.time_index[time_keep * TIME_INDEX_ENTRY_BYTES:]
        self.size = self.file_bytes = position
        self.bytes_since_index = 0
        self.max_timestamp = self.offset_of_max_timestamp = self.last_index_timestamp = -1
        self._load_tail()
        return self.next_offset

    # ------------------------------------------------------------------ reading

    def position_of(self, offset):
        """Byte position of the first batch whose last offset is >= `offset`, None if the
        segment has none. Starts at the offset index's entry and walks batch headers."""
        if offset >= self.next_offset:
            return None
        position = self._indexed_position(offset)
        while position < self.size:
            chunk = self.read_bytes(position, min(READ_CHUNK_BYTES, self.size - position))
            start, _, partial, partial_size = codec.locate_batches(chunk, offset, 1 << 62, 1)
            if start >= 0:
                return position + start
            if partial < 0:
                position += len(chunk)
            elif partial > 0:
                position += partial
            else:  # a batch larger than the chunk starts it: judge it by its header
                if partial_size == 0 or len(chunk) < BATCH_HEAD.size:
                    raise CorruptRecordError("truncated batch header", position)
                base, delta = BATCH_HEAD.unpack_from(chunk)[::6]
                if base + delta >= offset:
                    return position
                position += partial_size
        return None

    def _indexed_position(self, offset):
        slot = codec.index_search(self.offset_index, OFFSET_INDEX_ENTRY_BYTES, 0, 4,
                                  offset - self.base_offset)
        if slot < 0:
            return 0
        return OFFSET_INDEX_ENTRY.unpack_from(self.offset_index,
                                              slot * OFFSET_INDEX_ENTRY_BYTES)[1]

    def read_bytes(self, position, size):
        data = fileio.pread(self.log_fd, size, position)
        if len(data) != size:
            raise CorruptRecordError(
                f"{self.path(LOG_SUFFIX)} ends at {position + len(data)}, "
                f"expected data up to {position + size}", position)
        return data

    def span(self, offset, bytes_max, end_offset):
        """Where the whole batches of a read are: from the one holding `offset`, those that
        end below `end_offset` (next offset <= `end_offset`) and fit in `bytes_max`, except
        that the first batch is taken whole even if larger (Kafka's "at least one batch"
        rule). Returns (position, length, base offset of the first batch, next offset: where
        to read on); length 0 when nothing qualifies.

        Reads batch headers only, never the records: from the batch holding `offset`, a
        jump to the last offset-index entry inside both bounds (the batches before an entry
        end before it), then headers one by one, `SPAN_CHUNK_BYTES` at a time."""
        position = self.position_of(offset)
        if position is None:
            return 0, 0, offset, offset
        chunk_at, chunk = position, b""

        def head(at):  # (base offset, size, last offset) of the batch at `at`
            nonlocal chunk_at, chunk
            if not chunk_at <= at <= chunk_at + len(chunk) - BATCH_HEAD.size:
                chunk_at = at
                chunk = self.read_bytes(at, min(SPAN_CHUNK_BYTES, self.size - at))
                if len(chunk) < BATCH_HEAD.size:
                    raise CorruptRecordError(
                        f"truncated batch header in {self.path(LOG_SUFFIX)}", at)
            base, length = OFFSET_AND_LENGTH.unpack_from(chunk, at - chunk_at)
            size = LOG_OVERHEAD_BYTES + length
            if length < BATCH_HEADER_BYTES - LOG_OVERHEAD_BYTES or at + size > self.size:
                raise CorruptRecordError(
                    f"batch length {length} at position {at} of {self.path(LOG_SUFFIX)} "
                    f"is out of bounds", at)
            return base, size, base + BATCH_HEAD.unpack_from(chunk, at - chunk_at)[6]

        first, size, last = head(position)
        if last >= end_offset:
            return position, 0, offset, offset
        end, next_offset = position + size, last + 1
        limit = position + bytes_max
        index = self.offset_index
        slot = min(codec.index_search(index, OFFSET_INDEX_ENTRY_BYTES, 4, 4, limit),
                   codec.index_search(index, OFFSET_INDEX_ENTRY_BYTES, 0, 4,
                                      min(end_offset - 1 - self.base_offset, RELATIVE_OFFSET_MAX)))
        if slot >= 0:
            indexed = OFFSET_INDEX_ENTRY.unpack_from(index, slot * OFFSET_INDEX_ENTRY_BYTES)[1]
            if indexed > end:
                end, next_offset = indexed, None  # the batch there tells where reading goes on
        while end < self.size:
            base, size, last = head(end)
            if next_offset is None:
                next_offset = base
            if end + size > limit or last >= end_offset:
                break
            end, next_offset = end + size, last + 1
        if next_offset is None:
            next_offset = self.next_offset
        return position, end - position, first, next_offset

    def read(self, offset, bytes_max, end_offset):
        """The bytes of `span(offset, bytes_max, end_offset)`: (memoryview of them, base
        offset of the first batch, next offset); the view is empty when nothing
        qualifies."""
        position, length, first, next_offset = self.span(offset, bytes_max, end_offset)
        if not length:
            return memoryview(b""), offset, offset
        return memoryview(self.read_bytes(position, length)), first, next_offset

    def offset_for_timestamp(self, timestamp):
        """The first offset whose record timestamp is >= `timestamp`, None if none is."""
        if self.max_timestamp < timestamp:
            return None
        slot = codec.index_search(self.time_index, TIME_INDEX_ENTRY_BYTES, 0, 8, timestamp - 1)
        offset = self.base_offset
        if slot >= 0:
            offset += TIME_INDEX_ENTRY.unpack_from(self.time_index,
                                                   slot * TIME_INDEX_ENTRY_BYTES)[1]
        while offset < self.next_offset:
            view, _, next_offset = self.read(offset, READ_CHUNK_BYTES, 1 << 62)
            for batch in codec.decode_batches(view, verify=False):
                if batch.max_timestamp >= timestamp:
                    for record in batch.records:
                        if record.offset >= offset and record.timestamp >= timestamp:
                            return record.offset
            if next_offset <= offset:
                break
            offset = next_offset
        return None



def _open_index(path):
    """(fd, content) of an index file; (-1, empty) if there is none."""
    try:
        fd = fileio.open_file(path)
    except FileNotFoundError:
        return -1, bytearray()
    try:
        size = fileio.file_size(fd)
        content = bytearray(fileio.pread(fd, size, 0)) if size else bytearray()
    except OSError:
        fileio.close(fd)
        raise
    return fd, content
