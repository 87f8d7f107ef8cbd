"""Where a node process's own output goes (`kraftcore start --log-file FILE`).

`use_log_file(path, bytes_max, backups, level, formatter)` sends the process's log records to
`path`, rotated by size: once the file would pass `bytes_max`, it becomes `path.1` (the
older ones `path.2` ... `path.<backups>`, the oldest dropped) and a new `path` starts. So a
node that logs a flood of warnings keeps at most `(backups + 1) * bytes_max` of log on disk.

What the process writes outside its loggers (an uncaught traceback, `faulthandler`, a line
a library prints) must not land in a file that was rotated away: file descriptors 1 and 2
are pointed at the current file each time it is opened, so everything the process prints
lands, in order, in the same `path`.
"""

import datetime
import json
import logging
import logging.handlers
import os

from kraftcore.limits import PROCESS_LOG_FILE_BYTES_MAX_MIN

__all__ = ["use_log_file", "formatter", "check_settings", "LOG_FILE_BYTES_MAX_DEFAULT",
           "LOG_FILE_BACKUPS_DEFAULT"]

LOG_FILE_BYTES_MAX_DEFAULT = 10 * 1024 * 1024
LOG_FILE_BACKUPS_DEFAULT = 5


class _RotatingProcessLog(logging.handlers.RotatingFileHandler):
    """A size-rotated log file that also receives the process's stdout and stderr."""

    def _open(self):
        stream = super()._open()
        for fd in (1, 2):
            os.dup2(stream.fileno(), fd)
        return stream


def check_settings(bytes_max, backups):
    """Raise ValueError, saying what is wrong, for a size or a backup count out of range."""
    if not isinstance(bytes_max, int) or bytes_max < PROCESS_LOG_FILE_BYTES_MAX_MIN:
        raise ValueError(f"the log file's size must be at least {PROCESS_LOG_FILE_BYTES_MAX_MIN} "
                         f"bytes, not {bytes_max!r}")
    if not isinstance(backups, int) or backups < 1:
        raise ValueError(f"the log file needs at least 1 backup to rotate into, not "
                         f"{backups!r}")


class _JsonLines(logging.Formatter):
    """One JSON object per record: time (ISO 8601, UTC, milliseconds), level, node,
    logger, message, and the traceback as `exception` when there is one."""

    def __init__(self, node_id):
        super().__init__()
        self.node_id = node_id

    def format(self, record):
        line = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc)
            .isoformat(timespec="milliseconds"),
            "level": record.levelname, "node": self.node_id, "logger": record.name,
            "message": record.getMessage()}
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def formatter(kind, node_id):
    """The formatter of a node's log: "text" lines or "json" lines."""
    if kind == "json":
        return _JsonLines(node_id)
    if kind == "text":
        return logging.Formatter(f"%(asctime)s node-{node_id} %(levelname)s %(name)s: "
                                 "%(message)s")
    raise ValueError(f"unknown log format {kind!r} (text or json)")


def use_log_file(path, bytes_max, backups, *, level, formatter):
    """Log to `path` (appended to), rotated at `bytes_max` keeping `backups` older files,
    each record written by `formatter`. Raises ValueError for sizes or counts out of range
    and OSError when `path` cannot be opened."""
    check_settings(bytes_max, backups)
    handler = _RotatingProcessLog(path, maxBytes=bytes_max, backupCount=backups)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level)
    return handler
