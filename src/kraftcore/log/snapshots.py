"""A directory of KRaft snapshot files in Kafka's layout (kafka-facts §4.4).

Names (all in one directory, Kafka keeps them inside `__cluster_metadata-0`):

    <endOffset, 20 digits>-<epoch, 10 digits>.checkpoint            a complete snapshot
    <endOffset>-<epoch>-<random hex>.checkpoint.part                 one being written
    <endOffset>-<epoch>.checkpoint.deleted                           one being deleted

e.g. `00000000000000001000-0000000005.checkpoint` is snapshot id (end offset 1000, epoch 5).

Invariants this module keeps:

* A `.checkpoint` file is complete and immutable. It appears only by an atomic rename of a
  `.part` file that was written whole, fsynced and made read-only; the directory is then
  fsynced so that the rename survives a crash (Kafka's `FileRawSnapshotWriter.freeze`).
  So a crash leaves either no snapshot or the whole one, never part of it.
* A deletion renames the file to `.checkpoint.deleted` first and then unlinks it, so a
  crash in between never leaves a file that looks like a complete snapshot but is being
  removed.
* Opening the directory deletes every leftover `.part` and `.deleted` file and lists the
  complete snapshots sorted by id (end offset, then epoch). A file that ends in
  `.checkpoint` but does not parse as a snapshot name is left alone and reported in
  `skipped_files` (it is not ours to delete: an operator may have put it there).

Every failed system call raises `StorageError` with the operating system's errno.
"""

import os
import stat
import threading

from kraftcore.errors import StorageError
from kraftcore.layout import (BATCH_HEADER_BYTES, DELETED_SUFFIX, INT32_MAX, INT64_MAX,
                              LOG_OVERHEAD_BYTES,
                              OFFSET_AND_LENGTH, SNAPSHOT_DELETED_SUFFIX, SNAPSHOT_PART_SUFFIX,
                              SNAPSHOT_SUFFIX, parse_snapshot_name, parse_snapshot_stem,
                              snapshot_stem)
from kraftcore.limits import SNAPSHOT_FIRST_BATCH_BYTES_MAX
from kraftcore.log import fileio
from kraftcore.types import SnapshotId

READ_ONLY_MODE = stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH  # 0o444


def _snapshot_id(snapshot_id):
    return snapshot_id if type(snapshot_id) is SnapshotId else SnapshotId(*snapshot_id)


def _check_id(snapshot_id):
    end_offset, epoch = snapshot_id
    if type(end_offset) is not int or not 0 <= end_offset <= INT64_MAX:
        raise ValueError(f"a snapshot's end offset must be an int64 >= 0, got {end_offset!r}")
    if type(epoch) is not int or not 0 <= epoch <= INT32_MAX:
        raise ValueError(f"a snapshot's epoch must be an int32 >= 0, got {epoch!r}")


def file_stem(snapshot_id):
    """`<endOffset 20 digits>-<epoch 10 digits>`, the part every snapshot file name shares."""
    snapshot_id = _snapshot_id(snapshot_id)
    _check_id(snapshot_id)
    return snapshot_stem(snapshot_id.end_offset, snapshot_id.epoch)


def file_name(snapshot_id):
    """The file name of a complete snapshot, e.g. `00000000000000001000-0000000005.checkpoint`
    for SnapshotId(1000, 5). A negative or out-of-range id is a ValueError."""
    return file_stem(snapshot_id) + SNAPSHOT_SUFFIX


def parse_file_name(name):
    """The SnapshotId a complete snapshot's file name holds. Anything else (a `.part` or
    `.deleted` file, wrong digit counts, another suffix) is a ValueError saying what a
    snapshot file name looks like."""
    parsed = parse_snapshot_name(os.path.basename(name))
    if parsed is None:
        raise ValueError(
            f"{name!r} is not a snapshot file name: expected <end offset, 20 digits>-"
            "<epoch, 10 digits>.checkpoint, e.g. 00000000000000001000-0000000005.checkpoint")
    end_offset, epoch = parsed
    if end_offset > INT64_MAX or epoch > INT32_MAX:
        raise ValueError(f"{name!r}: end offset {end_offset} or epoch {epoch} is out of range "
                         "(int64 offset, int32 epoch)")
    return SnapshotId(end_offset, epoch)


def _storage_error(exc, doing):
    if isinstance(exc, StorageError):
        return exc
    error = StorageError(exc.errno, f"{doing} failed: {exc.strerror or exc}")
    error.__cause__ = exc
    return error


def _random_hex():
    return os.urandom(8).hex()


class SnapshotWriter:
    """A snapshot being written to its `.part` file: `append` chunks, then `freeze()` (make
    it a complete, durable, read-only `.checkpoint`) or `abort()` (delete the part file).
    Once frozen or aborted it takes no more `append` or `freeze` calls (ValueError)."""

    def __init__(self, directory, snapshot_id, part_path):
        self.snapshot_id = snapshot_id
        self._directory = directory
        self.part_path = part_path
        self._size = 0
        self._fd = -1
        self._open = True
        try:
            self._fd = fileio.open_file(part_path, create=True, exclusive=True)
        except OSError as exc:
            self._open = False
            raise _storage_error(exc, f"creating {part_path}") from exc

    @property
    def size(self):
        return self._size

    @property
    def is_open(self):
        return self._open

    def _check_open(self):
        if not self._open:
            raise ValueError(f"the writer of snapshot {self.snapshot_id} is closed "
                             "(frozen or aborted)")

    def append(self, data):
        """Write the next chunk at the end of the part file (not durable until freeze)."""
        self._check_open()
        view = memoryview(data).cast("B")
        try:
            fileio.pwrite_all(self._fd, view, self._size)
        except OSError as exc:
            raise _storage_error(exc, f"writing {self.part_path}") from exc
        self._size += len(view)

    def freeze(self):
        """Make the snapshot complete and durable: fsync, read-only, rename to `.checkpoint`,
        fsync the directory. Returns False (and deletes the part file) when a snapshot of
        this id is stored already: a complete snapshot is immutable and is kept."""
        self._check_open()
        directory = self._directory
        with directory._lock:
            if self.snapshot_id in directory._sizes:
                self.abort()
                return False
            final = directory.path_of(self.snapshot_id)
            renamed = False
            try:
                # read-only first, then the sync covers the data and the file's size
                os.fchmod(self._fd, READ_ONLY_MODE)
                fileio.sync(self._fd)
                fileio.close(self._fd)
                self._fd = -1
                os.rename(self.part_path, final)
                renamed = True
                fileio.sync_dir(directory.path)
            except OSError as exc:
                self.abort()
                if renamed:  # not known durable: take it back rather than half-promise it
                    try:
                        fileio.unlink(final)
                    except OSError:
                        pass
                raise _storage_error(exc, f"freezing snapshot {self.snapshot_id} "
                                          f"in {directory.path}") from exc
            self._close()
            directory._register(self.snapshot_id, self._size)
        return True

    def abort(self):
        """Discard what was written (delete the part file); a no-op once closed."""
        if not self._open:
            return
        self._close()
        try:
            if self._fd >= 0:
                fileio.close(self._fd)
            fileio.unlink(self.part_path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise _storage_error(exc, f"deleting {self.part_path}") from exc
        finally:
            self._fd = -1

    def _close(self):
        self._open = False
        try:
            self._directory._writers.remove(self)
        except ValueError:
            pass

    def __repr__(self):
        state = "open" if self._open else "closed"
        return f"SnapshotWriter({self.snapshot_id}, {self._size} bytes, {state})"


class SnapshotDirectory:
    """The complete snapshots in directory `path` (created if missing), and the writers of
    new ones. Opening cleans up what a crash left (see the module docstring);
    `deleted_files` and `skipped_files` say what it found. `random_suffix()` returns the
    random part of `.part` file names (default: 16 hex digits from `os.urandom`)."""

    def __init__(self, path, *, random_suffix=None):
        self.path = os.path.abspath(path)
        self._random_suffix = random_suffix or _random_hex
        self._lock = threading.RLock()
        self._sizes = {}  # SnapshotId -> size in bytes
        self._ids = []  # sorted
        self._writers = []  # open SnapshotWriters
        self.deleted_files = []  # leftover .part / .deleted files removed on open
        self.skipped_files = []  # .checkpoint files whose names do not parse
        try:
            os.makedirs(self.path, exist_ok=True)
            self._load()
        except OSError as exc:
            raise _storage_error(exc, f"opening the snapshots in {self.path}") from exc

    def _load(self):
        for name in sorted(os.listdir(self.path)):
            if name.endswith((SNAPSHOT_PART_SUFFIX, SNAPSHOT_DELETED_SUFFIX)):
                if parse_snapshot_stem(name) is not None:
                    fileio.unlink(os.path.join(self.path, name))
                    self.deleted_files.append(name)
                else:
                    self.skipped_files.append(name)
            elif name.endswith(SNAPSHOT_SUFFIX):
                try:
                    snapshot_id = parse_file_name(name)
                except ValueError:
                    self.skipped_files.append(name)
                    continue
                self._sizes[snapshot_id] = os.stat(os.path.join(self.path, name)).st_size
        self._ids = sorted(self._sizes)
        if self.deleted_files:
            fileio.sync_dir(self.path)

    def _register(self, snapshot_id, size):
        self._sizes[snapshot_id] = size
        self._ids = sorted(self._sizes)

    # ------------------------------------------------------------------ queries

    def path_of(self, snapshot_id):
        """The path a complete snapshot of this id has (whether or not it exists)."""
        return os.path.join(self.path, file_name(snapshot_id))

    def ids(self):
        """The complete snapshots' ids, oldest (smallest) first."""
        with self._lock:
            return list(self._ids)

    def __contains__(self, snapshot_id):
        return _snapshot_id(snapshot_id) in self._sizes

    def __len__(self):
        return len(self._ids)

    def latest(self):
        """The newest snapshot's id, None when there is none."""
        ids = self._ids
        return ids[-1] if ids else None

    def earliest(self):
        """The oldest snapshot's id, None when there is none."""
        ids = self._ids
        return ids[0] if ids else None

    def size(self, snapshot_id):
        """A complete snapshot's size in bytes, None if there is no such snapshot."""
        return self._sizes.get(_snapshot_id(snapshot_id))

    def total_bytes(self):
        """The size of every complete snapshot together."""
        with self._lock:
            return sum(self._sizes.values())

    def open_writers(self):
        """The writers neither frozen nor aborted."""
        with self._lock:
            return list(self._writers)

    def read(self, snapshot_id, position, bytes_max):
        """Up to `bytes_max` of a snapshot from `position` (not batch aligned); None if there
        is no such snapshot. A position outside [0, size] is a ValueError."""
        snapshot_id = _snapshot_id(snapshot_id)
        size = self._sizes.get(snapshot_id)
        if size is None:
            return None
        if not 0 <= position <= size:
            raise ValueError(f"position {position} is outside snapshot {snapshot_id} "
                             f"of {size} bytes")
        if bytes_max < 0:
            raise ValueError(f"bytes_max must be >= 0, got {bytes_max}")
        count = min(bytes_max, size - position)
        if count == 0:
            return b""
        path = self.path_of(snapshot_id)
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            try:
                chunks = []
                while count:
                    chunk = fileio.pread(fd, count, position)
                    if not chunk:
                        raise StorageError(0, f"{path} ended early: expected {size} bytes "
                                              "(was it changed behind kraftcore's back?)")
                    chunks.append(chunk)
                    count -= len(chunk)
                    position += len(chunk)
            finally:
                fileio.close(fd)
        except OSError as exc:
            raise _storage_error(exc, f"reading {path}") from exc
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def read_all(self, snapshot_id):
        """A complete snapshot's bytes, None if there is no such snapshot."""
        size = self.size(snapshot_id)
        return None if size is None else self.read(snapshot_id, 0, size)

    def mtime_ms(self, snapshot_id):
        """When the snapshot's file was last modified (its freeze), in ms since the epoch;
        None if there is no such snapshot."""
        if snapshot_id not in self:
            return None
        path = self.path_of(snapshot_id)
        try:
            return os.stat(path).st_mtime_ns // 1_000_000
        except OSError as exc:
            raise _storage_error(exc, f"reading the time of {path}") from exc

    def first_batch(self, snapshot_id):
        """The bytes of the snapshot's first record batch, as its framing declares them
        (base offset and length, kafka-facts §2.1; nothing else is checked), or None when
        there is no such snapshot or the file does not start with a whole batch of at most
        `limits.SNAPSHOT_FIRST_BATCH_BYTES_MAX` bytes."""
        size = self.size(snapshot_id)
        if size is None:
            return None
        header = self.read(snapshot_id, 0, min(size, BATCH_HEADER_BYTES))
        if len(header) < BATCH_HEADER_BYTES:
            return None
        first_batch_bytes = LOG_OVERHEAD_BYTES + OFFSET_AND_LENGTH.unpack_from(header)[1]
        if not (BATCH_HEADER_BYTES <= first_batch_bytes
                <= min(size, SNAPSHOT_FIRST_BATCH_BYTES_MAX)):
            return None
        return self.read(snapshot_id, 0, first_batch_bytes)

    # ------------------------------------------------------------------ changes

    def begin(self, snapshot_id):
        """A `SnapshotWriter` for a new snapshot: its bytes go to
        `<id>-<random hex>.checkpoint.part` until `freeze()`."""
        snapshot_id = _snapshot_id(snapshot_id)
        stem = file_stem(snapshot_id)
        with self._lock:
            writer = SnapshotWriter(
                self, snapshot_id,
                os.path.join(self.path, f"{stem}-{self._random_suffix()}{SNAPSHOT_PART_SUFFIX}"))
            self._writers.append(writer)
        return writer

    def write(self, snapshot_id, data):
        """Store a whole snapshot atomically and durably (a part file, fsync, read-only,
        rename, directory fsync). Returns False, keeping the stored one, when a snapshot of
        this id exists already."""
        snapshot_id = _snapshot_id(snapshot_id)
        if snapshot_id in self:
            return False
        writer = self.begin(snapshot_id)
        try:
            writer.append(data)
            return writer.freeze()
        except BaseException:
            writer.abort()
            raise

    def delete(self, snapshot_id, *, sync=True):
        """Delete a complete snapshot: rename it to `.checkpoint.deleted`, unlink that, then
        (with `sync`) fsync the directory. Returns False if there was no such snapshot."""
        snapshot_id = _snapshot_id(snapshot_id)
        with self._lock:
            if snapshot_id not in self._sizes:
                return False
            path = self.path_of(snapshot_id)
            doomed = path + DELETED_SUFFIX
            try:
                os.rename(path, doomed)
                del self._sizes[snapshot_id]
                self._ids.remove(snapshot_id)
                fileio.unlink(doomed)
                if sync:
                    fileio.sync_dir(self.path)
            except OSError as exc:
                raise _storage_error(exc, f"deleting snapshot {snapshot_id}") from exc
        return True

    def delete_before(self, snapshot_id):
        """Delete every snapshot older (smaller) than `snapshot_id`; returns their ids."""
        snapshot_id = _snapshot_id(snapshot_id)
        with self._lock:
            doomed = [old for old in self._ids if old < snapshot_id]
            for old in doomed:
                self.delete(old, sync=False)
            if doomed:
                try:
                    fileio.sync_dir(self.path)
                except OSError as exc:
                    raise _storage_error(exc, f"syncing {self.path}") from exc
        return doomed

    def close(self):
        """Abort every open writer (their part files are deleted)."""
        for writer in self.open_writers():
            writer.abort()

    def __repr__(self):
        return f"SnapshotDirectory({self.path!r}, snapshots={self._ids})"
