"""Where a node process's own output goes (`kraftcore start --log-file FILE`).

`use_log_file(path, max_bytes, backups, level, node_id)` sends the process's log records to
`path`, rotated by size: once the file would pass `max_bytes`, it becomes `path.1` (the
older ones `path.2` ... `path.<backups>`, the oldest dropped) and a new `path` starts. So a
node that logs a flood of warnings keeps at most `(backups + 1) * max_bytes` of log on disk.

What the process writes outside its loggers (an uncaught traceback, `faulthandler`, a line
a library prints) must not land in a file that was rotated away: file descriptors 1 and 2
are pointed at the current file each time it is opened, so everything the process prints
lands, in order, in the same `path`.
"""

import logging
import logging.handlers
import os

__all__ = ["use_log_file", "check_settings", "LOG_FILE_MAX_BYTES_DEFAULT", "LOG_FILE_BACKUPS_DEFAULT",
           "LOG_FILE_MAX_BYTES_MIN"]

LOG_FILE_MAX_BYTES_DEFAULT = 10 * 1024 * 1024
LOG_FILE_BACKUPS_DEFAULT = 5
# Below this, a rotation would follow every few lines.
LOG_FILE_MAX_BYTES_MIN = 4096


class _RotatingProcessLog(logging.handlers.RotatingFileHandler):
    """A size-rotated log file that also receives the process's stdout and stderr."""

    def _open(self):
        stream = super()._open()
        for fd in (1, 2):
            os.dup2(stream.fileno(), fd)
        return stream


def check_settings(max_bytes, backups):
    """Raise ValueError, saying what is wrong, for a size or a backup count out of range."""
    if not isinstance(max_bytes, int) or max_bytes < LOG_FILE_MAX_BYTES_MIN:
        raise ValueError(f"the log file's size must be at least {LOG_FILE_MAX_BYTES_MIN} "
                         f"bytes, not {max_bytes!r}")
    if not isinstance(backups, int) or backups < 1:
        raise ValueError(f"the log file needs at least 1 backup to rotate into, not "
                         f"{backups!r}")


def use_log_file(path, max_bytes, backups, *, level, node_id):
    """Log to `path` (appended to), rotated at `max_bytes` keeping `backups` older files.
    Raises ValueError for sizes or counts out of range and OSError when `path` cannot be
    opened."""
    check_settings(max_bytes, backups)
    handler = _RotatingProcessLog(path, maxBytes=max_bytes, backupCount=backups)
    handler.setFormatter(logging.Formatter(
        f"%(asctime)s node-{node_id} %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level)
    return handler
