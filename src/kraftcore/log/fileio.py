"""Every system call the log makes on its files, in one place.

Keeping them here gives the log a single seam: tests replace these functions to inject a
full disk or an I/O error at an exact call, and the rest of `kraftcore.log` never calls `os`
for file data directly. Every function raises `OSError` unchanged; the log decides what a
failure means.
"""

import os

# fdatasync flushes the data and the metadata needed to read it back (the size), which is
# what a log append needs; macOS has only fsync.
_sync = getattr(os, "fdatasync", os.fsync)


def pwrite_all(fd, data, position):
    """Write all of `data` at `position`, looping over short writes (a nearly full disk)."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, position)
        if written <= 0:  # pragma: no cover - the kernel reports an error instead
            raise OSError(f"write of {len(view)} bytes made no progress")
        view = view[written:]
        position += written


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


def write_atomic(path, data):
    """Replace `path` with `data` so that a crash leaves either the old or the new content:
    write `<path>.tmp`, fsync it, rename it over `path`, fsync the directory."""
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        pwrite_all(fd, data, 0)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    sync_dir(os.path.dirname(os.path.abspath(path)))
