"""`kraftcore start FILE [--set KEY=VALUE ...]`: run one node in the foreground.

Reads the node's properties (`kraftcore.runtime.config.NodeConfig`), checks that its
directories are formatted (`kraftcore format`) and takes the cluster id from them, then
runs `kraftcore.runtime.node.Node` until SIGTERM or Ctrl-C: a broker first goes through its
controlled shutdown, a leading controller resigns. Logs go to stderr. A configuration or
format problem is one line, `kraftcore start: error: ...`, and exit status 1; a node that
stops on a storage failure exits with 1 too. Once the node has started, the process's
garbage collector is tuned for a server (`kraftcore.runtime.collector`).
"""

import asyncio
import logging
import sys

from kraftcore.errors import ConfigError, KraftcoreError


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


def run(args, *, err=None):
    from kraftcore.log.meta_properties import check_formatted
    from kraftcore.runtime import collector
    from kraftcore.runtime.config import NodeConfig, parse_override
    from kraftcore.runtime.node import Node

    err = err or sys.stderr
    try:
        config = NodeConfig.from_file(args.config)
        if args.overrides:
            config = config.with_overrides(dict(parse_override(o) for o in args.overrides))
        cluster_id = check_formatted(config)
    except (ConfigError, KraftcoreError, OSError) as exc:
        err.write(f"kraftcore start: error: {exc}\n")
        return 1
    logging.basicConfig(level=getattr(logging, args.log_level), stream=err,
                        format=f"%(asctime)s node-{config.node_id} %(levelname)s "
                               "%(name)s: %(message)s")
    try:
        # This process is the node's own: tune its garbage collector once the image is
        # loaded (kraftcore.runtime.collector).
        return asyncio.run(Node(config, cluster_id).run(started=collector.settle))
    except KraftcoreError as exc:
        err.write(f"kraftcore start: error: {exc}\n")
        return 1
