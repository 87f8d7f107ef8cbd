"""The `kraftcore` command: argument parsing and dispatch to one module per subcommand."""

import argparse
import sys

import kraftcore


def build_parser():
    parser = argparse.ArgumentParser(
        prog="kraftcore",
        description="Kafka's KRaft metadata quorum and a Kafka-compatible durable log.",
    )
    parser.add_argument("--version", action="version", version=f"kraftcore {kraftcore.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = sub.add_parser("demo", help="encode, decode and verify record batches and show the speed")
    demo.add_argument("--batches", type=int, default=200, help="batches to encode (default 200)")
    demo.add_argument("--records", type=int, default=1000, help="records per batch (default 1000)")
    demo.add_argument("--seed", type=int, default=7, help="seed of the generated keys and values")
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if args.command == "demo":
        from kraftcore.cli import demo

        return demo.run(args.batches, args.records, args.seed)
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
