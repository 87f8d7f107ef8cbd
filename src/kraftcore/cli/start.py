"""`kraftcore start FILE [--set KEY=VALUE ...]`: run one node in the foreground.

Reads the node's properties (`kraftcore.runtime.config.NodeConfig`), checks that its
directories are formatted (`kraftcore format`) and takes the cluster id from them, then
runs `kraftcore.runtime.node.Node` until SIGTERM or Ctrl-C: a broker first goes through its
controlled shutdown, a leading controller resigns. Logs go to stderr, or with `--log-file`
to a file rotated by size (`kraftcore.runtime.process_log`), as text lines or, with
`--log-format json`, one JSON object per line. A configuration or
format problem is one line, `kraftcore start: error: ...`, and exit status 1; a node that
stops on a failure (its storage, a safety check or any error in the Raft core or a role:
fail-stop) exits with 1 too. Once the node has started, the process's
garbage collector is tuned for a server (`kraftcore.runtime.collector`).
"""

import asyncio
import logging
import sys

from kraftcore.errors import ConfigError, KraftcoreError, LogGapError
from kraftcore.runtime import process_log


def add_arguments(sub):
    start = sub.add_parser(
        "start", help="run a node (controller, broker or both) in the foreground",
        description="Run the node described by a Kafka-style properties file until SIGTERM "
        "or Ctrl-C. Format its directories first with 'kraftcore format'.")
    start.add_argument("config", metavar="FILE", help="the node's properties file")
    start.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       dest="overrides", help="override one property (repeatable)")
    start.add_argument("--log-level", default="INFO",
                       choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    start.add_argument("--log-format", default="text", choices=("text", "json"),
                       help="text lines (default), or one JSON object per line with the "
                       "keys time, level, node, logger and message")
    start.add_argument("--set-aside-past-gap", action="store_true",
                       help="open a metadata log with a gap in its segments up to the gap, "
                       "renaming the segment files past it to <name>.stray (the node then "
                       "fetches the rest from the quorum's leader); without it such a log "
                       "refuses to open")
    start.add_argument("--log-file", metavar="PATH",
                       help="append the log (and anything else the process prints) to PATH, "
                       "rotated by size, instead of stderr")
    start.add_argument("--log-file-max-bytes", type=int, metavar="BYTES",
                       dest="log_file_bytes_max", default=process_log.LOG_FILE_BYTES_MAX_DEFAULT,
                       help="rotate the log file when it would pass this size (default "
                       "%(default)s)")
    start.add_argument("--log-file-backups", type=int, metavar="N",
                       default=process_log.LOG_FILE_BACKUPS_DEFAULT,
                       help="how many rotated files PATH.1 .. PATH.N to keep (default "
                       "%(default)s)")


def run(args, *, err=None):
    from kraftcore.log.meta_properties import check_formatted
    from kraftcore.runtime import collector
    from kraftcore.runtime.config import NodeConfig, parse_override
    from kraftcore.runtime.node import Node

    err = err or sys.stderr
    if args.log_file is not None:
        try:
            process_log.check_settings(args.log_file_bytes_max, args.log_file_backups)
        except ValueError as exc:
            err.write(f"kraftcore start: error: {exc}\n")
            return 1
    try:
        config = NodeConfig.from_file(args.config)
        if args.overrides:
            config = config.with_overrides(dict(parse_override(o) for o in args.overrides))
        cluster_id = check_formatted(config)
    except (ConfigError, KraftcoreError, OSError) as exc:
        err.write(f"kraftcore start: error: {exc}\n")
        return 1
    level = getattr(logging, args.log_level)
    formatter = process_log.formatter(args.log_format, config.node_id)
    if args.log_file is None:
        handler = logging.StreamHandler(err)
        handler.setFormatter(formatter)
        logging.basicConfig(level=level, handlers=[handler])
    else:
        try:
            process_log.use_log_file(args.log_file, args.log_file_bytes_max,
                                     args.log_file_backups, level=level,
                                     formatter=formatter)
        except (ValueError, OSError) as exc:
            err.write(f"kraftcore start: error: --log-file {args.log_file}: {exc}\n")
            return 1
    try:
        # This process is the node's own: tune its garbage collector once the image is
        # loaded (kraftcore.runtime.collector).
        node = Node(config, cluster_id, set_aside_past_gap=args.set_aside_past_gap)
        return asyncio.run(node.run(started=collector.settle))
    except LogGapError as exc:
        err.write(f"kraftcore start: error: {exc}. For this node: start it once with "
                  "--set-aside-past-gap\n")
        return 1
    except KraftcoreError as exc:
        err.write(f"kraftcore start: error: {exc}\n")
        return 1
