"""kraftcore's cache directories for Spark (`$XDG_CACHE_HOME/kraftcore/<name>`, by default
`~/.cache/kraftcore/<name>`) and the lock that lets one process at a time change what is in
one: the driver's class-data archives (`cds`) and the views of the Spark installation
(`home`)."""

import contextlib
import fcntl
import os
import time

__all__ = ["cache_dir", "locked"]


def cache_dir(name):
    """`$XDG_CACHE_HOME/kraftcore/<name>`, absolute (not created here)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"),
                                                             ".cache")
    return os.path.abspath(os.path.join(base, "kraftcore", name))


@contextlib.contextmanager
def locked(directory, wait_s):
    """Hold the lock of `directory` (flock on the directory itself). Raises OSError
    (BlockingIOError) when another process holds it for more than `wait_s`: the caller
    then goes without what the directory would have given it, rather than wait."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.02)
        yield
    finally:
        os.close(fd)  # releases the lock
