"""`kraftcore metadata watch`: committed metadata changes of a running quorum, printed as
they commit (docs/admin.md, "metadata watch"). `kraftcore.admin.watch.MetadataWatch`
follows the log; this module parses the arguments and prints.

    kraftcore metadata watch --bootstrap-controller HOST:PORT [--from-beginning] [--json]
                             [--max-records N] [--timeout-ms MS] [--poll-interval-ms MS]

stdout holds the changes, one a line: `offset 1240, epoch 5: orders-2 leader 4 -> 5, ISR
[4, 5, 6] -> [5, 6]`, or with --json one object per line (offset, epoch, timestamp, type,
version, change, data). stderr holds what the watch itself does (the leader it follows,
a leader change) and errors, one line each.

Exit status: 0 stopped by --max-records or Ctrl-C / SIGTERM; 1 no leader answered within
--timeout-ms at the start, the bootstrap refused the connection, or records that do not
apply; 2 a usage error.
"""

import asyncio
import json
import signal
import sys

from kraftcore.cli.admin import (EXIT_FAILED, EXIT_OK, EXIT_USAGE, CommandError,
                                 add_command_config, command_options, parse_address)
from kraftcore.errors import KraftcoreError

__all__ = ["add_arguments", "run"]

PROG = "kraftcore metadata watch"
TIMEOUT_MS_DEFAULT = 30_000
POLL_INTERVAL_MS_DEFAULT = 100


def add_arguments(sub):
    metadata = sub.add_parser("metadata", help="follow the metadata log of a running quorum",
                              description="The committed metadata log of a running quorum.")
    actions = metadata.add_subparsers(dest="action", metavar="ACTION", required=True)
    watch = actions.add_parser(
        "watch", help="print committed metadata changes as they commit",
        description="Follow the quorum's leader as a reader (Fetch with replica id -1) and "
        "print each committed metadata change as it commits: 'offset N, epoch E: "
        "sentence'. Follows leader changes. By default only what commits from now on.")
    watch.add_argument("--bootstrap-controller", required=True, metavar="HOST:PORT",
                       help="a controller's listener; the watch finds the leader from there")
    watch.add_argument("--from-beginning", action="store_true",
                       help="print the whole log (a snapshot it starts with as one line), "
                       "then what commits")
    watch.add_argument("--json", action="store_true",
                       help="one JSON object per change: offset, epoch, timestamp, type, "
                       "version, change, data")
    watch.add_argument("--max-records", type=int, default=None, metavar="N",
                       help="stop after printing N changes")
    watch.add_argument("--timeout-ms", type=int, default=TIMEOUT_MS_DEFAULT, metavar="MS",
                       help="give up if no leader answers within this long at the start "
                       f"(default {TIMEOUT_MS_DEFAULT})")
    add_command_config(watch)
    watch.add_argument("--poll-interval-ms", type=int, default=POLL_INTERVAL_MS_DEFAULT,
                       metavar="MS", help="ask the leader again after this long when "
                       f"nothing new has committed (default {POLL_INTERVAL_MS_DEFAULT})")
    return sub


def _check_usage(args):
    for option, value in (("--timeout-ms", args.timeout_ms),
                          ("--poll-interval-ms", args.poll_interval_ms)):
        if value < 1:
            raise CommandError(f"{option} must be >= 1, not {value}", EXIT_USAGE)
    if args.max_records is not None and args.max_records < 1:
        raise CommandError(f"--max-records must be >= 1, not {args.max_records}", EXIT_USAGE)


def run(args, out=None, err=None):
    """Run `metadata watch` with parsed `args`; returns the exit status."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    try:
        _check_usage(args)
        address = parse_address(args.bootstrap_controller)
        return asyncio.run(_main(args, address, out, err))
    except CommandError as exc:
        print(f"{PROG}: error: {exc}", file=err, flush=True)
        return exc.exit_code
    except KeyboardInterrupt:  # Ctrl-C: the lines printed are whole; nothing to undo
        return EXIT_OK


async def _main(args, address, out, err):
    from kraftcore.admin.watch import MetadataWatch

    def note(text):
        print(f"{PROG}: {text}", file=err, flush=True)

    printed = 0

    def emit(change):
        nonlocal printed
        line = json.dumps(change.doc()) if args.json else change.text()
        print(line, file=out, flush=True)
        printed += 1
        return args.max_records is None or printed < args.max_records

    watch = MetadataWatch(address, from_beginning=args.from_beginning,
                          timeout_ms=args.timeout_ms, poll_interval_ms=args.poll_interval_ms,
                          note=note, connection_options=command_options(args))
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    try:  # SIGTERM stops the watch as Ctrl-C does
        loop.add_signal_handler(signal.SIGTERM, task.cancel)
    except (NotImplementedError, RuntimeError):  # not the main thread, or no signals here
        pass
    try:
        await watch.run(emit)
    except KraftcoreError as exc:  # AdminError, MetadataError
        raise CommandError(exc, EXIT_FAILED) from None
    except asyncio.CancelledError:
        pass
    finally:
        try:
            loop.remove_signal_handler(signal.SIGTERM)
        except (NotImplementedError, RuntimeError):
            pass
    return EXIT_OK
