"""The `kraftcore` command: argument parsing and dispatch to one module per subcommand."""

import argparse
import importlib
import sys

import kraftcore

# Subcommand modules of kraftcore.cli, each with `add_arguments(subparsers)` and
# `run(args) -> exit status`, and the commands each one owns.
COMMAND_MODULES = (
    ("verify", ("verify",)),
    ("metadata_shell", ("metadata-shell",)),
    ("format", ("format", "random-uuid")),
    ("start", ("start",)),
    ("cluster", ("cluster",)),
    ("admin", ("quorum", "topics", "brokers", "configs")),
    ("groups", ("groups",)),
    ("security", ("acls", "scram")),
    ("metadata_watch", ("metadata",)),
)


def _module(name):
    return importlib.import_module(f"kraftcore.cli.{name}")


def build_parser():
    parser = argparse.ArgumentParser(
        prog="kraftcore",
        description="Kafka's KRaft metadata quorum and a Kafka-compatible durable log.",
    )
    parser.add_argument("--version", action="version", version=f"kraftcore {kraftcore.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = sub.add_parser(
        "demo", help="run a local cluster through failover, fencing and snapshots "
        "(--codec: the record-batch codec tour)")
    demo.add_argument("--codec", action="store_true",
                      help="tour the record-batch codec and the log instead of a cluster")
    demo.add_argument("--dir", help="where the demo cluster keeps its files (default: a "
                      "new temporary directory)")
    demo.add_argument("--batches", type=int, default=200, help="batches to encode (default 200)")
    demo.add_argument("--records", type=int, default=1000, help="records per batch (default 1000)")
    demo.add_argument("--seed", type=int, default=7, help="seed of the generated keys and values")
    dump = sub.add_parser(
        "dump-log",
        help="print the batches and records of log segments, snapshots and index files",
        description="Print every batch of .log segments and .checkpoint snapshots (and the "
        "entries of .index / .timeindex files), like Kafka's kafka-dump-log. Exits 1 when a "
        "file is corrupt, after printing what could be read and where the damage is.")
    dump.add_argument("files", nargs="+", metavar="FILE")
    dump.add_argument("--metadata-decoder", "--cluster-metadata-decoder", action="store_true",
                      dest="metadata_decoder",
                      help="decode every record as a KRaft metadata or control record")
    dump.add_argument("--json", action="store_true", help="print one JSON object per line")
    for name, _ in COMMAND_MODULES:
        _module(name).add_arguments(sub)
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if args.command == "demo":
        if not args.codec:
            from kraftcore.cli import demo_cluster

            return demo_cluster.run(args.dir)
        from kraftcore.cli import demo

        return demo.run(args.batches, args.records, args.seed)
    if args.command == "dump-log":
        from kraftcore.cli import dump_log

        return dump_log.run(args.files, args.metadata_decoder, args.json)
    for name, commands in COMMAND_MODULES:
        if args.command in commands:
            return _module(name).run(args)
    parser.error(f"unknown command {args.command}")
    return 2


def entry():
    """The console script: `main`, and a reader that stops reading (`| head`) ends the
    command quietly."""
    try:
        return main()
    except BrokenPipeError:
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(entry())
