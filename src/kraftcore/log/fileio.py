"""Every system call the log makes on its files, in one place.

Keeping them here gives the log a single seam: tests replace these functions to inject a
full disk or an I/O error at an exact call, and the rest of `kraftcore.log` never calls `os`
for file data directly. Every function raises `OSError` unchanged; the log decides what a
failure means.
"""

import errno
import os

# fdatasync flushes the data and the metadata needed to read it back (the size), which is
# what a log append needs; macOS has only fsync.
_sync = getattr(os, "fdatasync", os.fsync)


def pwrite_all(fd, data, position):
    """Write all of `data` at `position`, looping over short writes (a nearly full disk).
    `data` is a bytes-like object, or a list or tuple of them written back to back with
    `pwritev` (a log append writes a batch header it patched followed by the rest of the
    caller's bytes, without copying them into one buffer first)."""
    if isinstance(data, (list, tuple)):
        # the common case written out here: this runs on every log append
        if _HAS_PWRITEV and 0 < len(data) <= _IOV_MAX:
            done = os.pwritev(fd, data, position)
            if done != sum(map(len, data)):
                _pwritev_rest(fd, data, position, done)
        else:
            _pwritev_rest(fd, data, position, 0)
        return
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, position)
        if written <= 0:  # pragma: no cover - the kernel reports an error instead
            raise OSError(f"write of {len(view)} bytes made no progress")
        view = view[written:]
        position += written


def _pwritev_rest(fd, buffers, position, done):
    """The rest of `pwrite_all` of pieces (bytes, bytearray or memoryviews of bytes: `len`
    is their size) once a first `pwritev` wrote `done` bytes of them short (or none, with
    more than IOV_MAX pieces)."""
    views = [view for view in (memoryview(b).cast("B") for b in buffers) if view]
    first = 0  # views[first:] are still to be written, less the `done` bytes written
    position += done
    while first < len(views) and done >= len(views[first]):
        done -= len(views[first])
        first += 1
    if done:
        views[first] = views[first][done:]
    if not _HAS_PWRITEV:  # pragma: no cover - every POSIX system Python supports has it
        for view in views[first:]:
            pwrite_all(fd, view, position)
            position += len(view)
        return
    while first < len(views):
        chunk = views[first:first + _IOV_MAX]
        written = os.pwritev(fd, chunk, position)
        if written <= 0:  # pragma: no cover - the kernel reports an error instead
            raise OSError(f"write of {sum(len(v) for v in chunk)} bytes made no progress")
        position += written
        while first < len(views) and written >= len(views[first]):
            written -= len(views[first])
            first += 1
        if written:  # a short write ended inside views[first]
            views[first] = views[first][written:]


_HAS_PWRITEV = hasattr(os, "pwritev")
try:
    _IOV_MAX = max(16, min(1024, os.sysconf("SC_IOV_MAX")))
except (AttributeError, ValueError, OSError):  # pragma: no cover
    _IOV_MAX = 16


def pread(fd, size, position):
    """Read up to `size` bytes at `position` (fewer at the end of the file)."""
    return os.pread(fd, size, position)


def sync(fd):
    """Make everything written to `fd` durable."""
    _sync(fd)


def truncate(fd, size):
    os.ftruncate(fd, size)


def preallocate(fd, size):
    """Reserve `size` bytes of disk for a file, where the platform can (posix_fallocate)."""
    if hasattr(os, "posix_fallocate"):
        os.posix_fallocate(fd, 0, size)


def open_file(path, create=False, exclusive=True):
    """Open for reading and writing; with `create` a missing file is created (and with
    `exclusive` an existing one is an error)."""
    flags = os.O_RDWR | getattr(os, "O_CLOEXEC", 0)
    if create:
        flags |= os.O_CREAT | (os.O_EXCL if exclusive else 0)
    return os.open(path, flags, 0o644)


def close(fd):
    os.close(fd)


def file_size(fd):
    return os.fstat(fd).st_size


def sync_dir(path):
    """Make the directory's entries (created, renamed, deleted files) durable."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def unlink(path):
    os.unlink(path)


def rename(src, dst):
    """Rename `src` to `dst`; an existing `dst` is an error, never replaced."""
    if os.path.lexists(dst):
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), dst)
    os.rename(src, dst)


def copy(src, dst, chunk_bytes=1 << 20):
    """Copy the file `src` to the new file `dst` (which must not exist): write
    `<dst>.tmp`, fsync it, rename it to `dst`, so that a crash leaves no partial `dst`
    (the caller syncs the directory)."""
    tmp = f"{dst}.tmp"
    fd_in = os.open(src, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        fd_out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC
                         | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            position = 0
            while True:
                data = os.pread(fd_in, chunk_bytes, position)
                if not data:
                    break
                pwrite_all(fd_out, data, position)
                position += len(data)
            os.fsync(fd_out)
        finally:
            os.close(fd_out)
    finally:
        os.close(fd_in)
    rename(tmp, dst)


def write_atomic(path, data, sync=True):
    """Replace `path` with `data` so that a crash leaves either the old or the new content:
    write `<path>.tmp`, fsync it, rename it over `path`, fsync the directory. With
    `sync=False` nothing is fsynced: the rename still replaces the file whole for readers,
    but a crash may leave the old content, or an empty or partial file — only for files
    whose loss the reader recovers from (it rebuilds them)."""
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        pwrite_all(fd, data, 0)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync:
        sync_dir(os.path.dirname(os.path.abspath(path)))
