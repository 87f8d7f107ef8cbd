"""`kraftcore cluster up | down | kill | stop | start`: a local multi-process cluster on
127.0.0.1, run by `kraftcore.runtime.local_cluster` (which says what each does); this
module parses the arguments and prints the progress lines.

Exit status: `up` 0 once every broker is unfenced (with `--foreground`: once every node
stopped cleanly), 1 when a broker is not unfenced in time or the cluster could not be
started (one line on stderr); `down`, `kill`, `stop`, `start` 0 when done, 1 when they
could not be (one line on stderr); 2 without an action.
"""

import sys

from kraftcore.errors import KraftcoreError


def add_arguments(sub):
    cluster = sub.add_parser("cluster", help="run a local multi-process cluster",
                             description="Start (up), stop (down) and stage failures in a "
                             "cluster of kraftcore processes on 127.0.0.1.")
    actions = cluster.add_subparsers(dest="cluster_command", metavar="ACTION")
    start = actions.add_parser(
        "up", help="format and start a cluster, and return once its brokers are unfenced",
        description="Format and start a cluster under a supervisor process, wait until "
        "every broker is unfenced, and print the nodes with the addresses to paste. "
        "The cluster runs on until 'kraftcore cluster down'.")
    start.add_argument("--controllers", type=int, default=3)
    start.add_argument("--brokers", type=int, default=3)
    start.add_argument("--dir", required=True, help="where the nodes keep their files")
    start.add_argument("--combined", action="store_true",
                       help="nodes 1..N are controllers and brokers at once")
    start.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       dest="overrides", help="a property for every node (repeatable)")
    start.add_argument("--foreground", action="store_true",
                       help="supervise in this process until Ctrl-C or SIGTERM, which stop "
                       "the cluster")
    stop = actions.add_parser("down", help="stop the cluster running in --dir")
    stop.add_argument("--dir", required=True)
    for name, text in (("kill", "SIGKILL one node (the supervisor notes it as asked)"),
                       ("stop", "stop one node with SIGTERM (a broker's controlled "
                        "shutdown; a leading controller resigns)"),
                       ("start", "start a stopped node again under the supervisor")):
        action = actions.add_parser(name, help=text)
        action.add_argument("node", type=int, metavar="NODE", help="the node id")
        action.add_argument("--dir", required=True)
    supervise = actions.add_parser("supervise", help="(run by 'up') the cluster's supervisor")
    supervise.add_argument("--dir", required=True)


def run(args, *, err=None):
    # Imported here, not above: every `kraftcore` command builds this module's parser.
    from kraftcore.runtime.config import parse_override
    from kraftcore.runtime import local_cluster

    err = err or sys.stderr

    def out(line):
        print(line, flush=True)

    try:
        command = args.cluster_command
        if command == "up":
            overrides = [parse_override(text) for text in args.overrides]
            return local_cluster.up(args.dir, args.controllers, args.brokers, args.combined,
                                    overrides, out=out, foreground=args.foreground)
        if command == "down":
            return local_cluster.down(args.dir)
        if command in ("kill", "stop", "start"):
            return local_cluster.node_action(args.dir, command, args.node, out=out)
        if command == "supervise":
            return local_cluster.supervise(args.dir, out=out)
        err.write("kraftcore cluster: error: choose an action: up, down, kill, stop or "
                  "start\n")
        return 2
    except (KraftcoreError, OSError) as exc:
        err.write(f"kraftcore cluster: error: {exc}\n")
        return 1
