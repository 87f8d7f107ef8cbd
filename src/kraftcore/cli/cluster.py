"""`kraftcore cluster up | down`: a local multi-process cluster on 127.0.0.1, run by
`kraftcore.runtime.local_cluster` (which says what `up` and `down` do); this module parses
the arguments and prints the supervisor's progress lines.

Exit status: 0 when every node stopped cleanly; 1 when a node did not, or the cluster could
not be started or stopped (one line on stderr); 2 without an action.
"""

import sys

from kraftcore.errors import KraftcoreError


def add_arguments(sub):
    cluster = sub.add_parser("cluster", help="run a local multi-process cluster",
                             description="Start (up) or stop (down) a cluster of kraftcore "
                             "processes on 127.0.0.1.")
    actions = cluster.add_subparsers(dest="cluster_command", metavar="ACTION")
    start = actions.add_parser("up", help="format and start a cluster; Ctrl-C stops it")
    start.add_argument("--controllers", type=int, default=3)
    start.add_argument("--brokers", type=int, default=3)
    start.add_argument("--dir", required=True, help="where the nodes keep their files")
    start.add_argument("--combined", action="store_true",
                       help="nodes 1..N are controllers and brokers at once")
    start.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       dest="overrides", help="a property for every node (repeatable)")
    stop = actions.add_parser("down", help="stop the cluster running in --dir")
    stop.add_argument("--dir", required=True)


def run(args, *, err=None):
    # Imported here, not above: every `kraftcore` command builds this module's parser.
    from kraftcore.runtime.config import parse_override
    from kraftcore.runtime.local_cluster import down, up

    err = err or sys.stderr
    try:
        if args.cluster_command == "up":
            overrides = [parse_override(text) for text in args.overrides]
            return up(args.dir, args.controllers, args.brokers, args.combined, overrides,
                      out=lambda line: print(line, flush=True))
        if args.cluster_command == "down":
            return down(args.dir)
        err.write("kraftcore cluster: error: choose an action: up or down\n")
        return 2
    except (KraftcoreError, OSError) as exc:
        err.write(f"kraftcore cluster: error: {exc}\n")
        return 1
