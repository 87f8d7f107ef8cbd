"""`kraftcore verify`: check many KRaft snapshot files at once with Spark
(`kraftcore.spark`; docs/verify.md).

    kraftcore verify --snapshots DIR [DIR ...] [--logs [DIR ...]] [--master URL]
                     [--output report.json] [--export DIR] [--quiet]

Exit status: 0 when every check holds (a summary is printed), 1 when there are violations
(each printed with its file and record), 2 for a user error (a missing directory, no
`.checkpoint` file, a bad `--master`, the `spark` extra not installed; one line on stderr,
no traceback), 3 when Spark itself fails (one line naming Spark's log file), 130 when
interrupted.

While it runs, a progress line on stderr says what it is doing (a line per phase when
stderr is not a terminal); `--quiet` turns it off.
"""

import contextlib
import os
import sys
import threading
import time
import traceback

__all__ = ["add_arguments", "run", "ProgressLine"]

EXIT_OK, EXIT_VIOLATIONS, EXIT_USAGE, EXIT_SPARK, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def add_arguments(sub):
    verify = sub.add_parser(
        "verify",
        help="check KRaft snapshot files of many nodes at once, with Spark",
        description="Decode every .checkpoint snapshot under the given node directories with "
        "Spark (embedded local[*] by default) and check them: batch CRCs, SnapshotHeader "
        "first and SnapshotFooter last, the same snapshot id identical on every node, "
        "(with --logs) each snapshot equal to its node's metadata log replayed to its end "
        "offset, leaders in their ISR, ISRs within the replicas, replicas registered, "
        "unique topics, epochs never decreasing. Exit 0 when all hold, 1 with the "
        "violations otherwise, 2 for a usage error. Needs the spark extra: "
        "pip install 'kraftcore[spark]'.")
    verify.add_argument("--snapshots", nargs="+", required=True, metavar="DIR",
                        help="one directory per node; every .checkpoint file below it is one "
                        "of that node's snapshots")
    verify.add_argument("--logs", nargs="*", metavar="DIR",
                        help="also replay each node's metadata log (.log segments) and compare "
                        "every snapshot with it: one directory per --snapshots DIR, in the "
                        "same order, or none when each node's log is in its snapshot "
                        "directory")
    verify.add_argument("--master", default="local[*]",
                        help="Spark master: local[*] (default, embedded, bound to 127.0.0.1), "
                        "local[N], spark://HOST:PORT, yarn, k8s://URL")
    verify.add_argument("--output", metavar="FILE",
                        help="write the full report (every violation) as JSON")
    verify.add_argument("--export", metavar="DIR",
                        help="write the snapshots, brokers, topics, partitions, configs and "
                        "violations tables as Parquet under DIR/<table>/ (replacing them)")
    verify.add_argument("--quiet", "-q", action="store_true", help="no progress line")
    return verify


class ProgressLine:
    """The progress line on `stream`: rewritten in place on a terminal, one line per phase
    otherwise. Callable as `progress(phase, done, total, unit)`, from any thread."""

    def __init__(self, stream, enabled=True):
        self.stream = stream
        self.enabled = enabled
        self.tty = enabled and hasattr(stream, "isatty") and stream.isatty()
        self.started = time.monotonic()
        self.lock = threading.Lock()
        self.phase = None
        self.width = 0

    def __call__(self, phase, done=None, total=None, unit=None):
        if not self.enabled:
            return
        with self.lock:
            elapsed = time.monotonic() - self.started
            try:
                if self.tty:
                    text = f"verify: {phase}"
                    if total:
                        text += f"  {done:,}/{total:,} {unit}"
                    text += f"  [{elapsed:.0f} s]"
                    self.stream.write("\r" + text.ljust(self.width))
                    self.width = max(self.width, len(text))
                    self.stream.flush()
                elif phase != self.phase:
                    self.stream.write(f"verify: {phase} [{elapsed:.1f} s]\n")
                    self.stream.flush()
            except (OSError, ValueError):  # stderr closed (a pipe whose reader left)
                self.enabled = False
            self.phase = phase

    def clear(self):
        with self.lock:
            if self.enabled and self.tty and self.width:
                try:
                    self.stream.write("\r" + " " * self.width + "\r")
                    self.stream.flush()
                except (OSError, ValueError):
                    pass
                self.width = 0
            self.enabled = False


def _error(err, message):
    err.write(f"kraftcore verify: error: {message}\n")
    err.flush()


def _check_paths(args):
    from kraftcore.spark.inputs import InputError

    if args.output:
        parent = os.path.dirname(os.path.abspath(args.output))
        if os.path.isdir(args.output):
            raise InputError(f"--output {args.output} is a directory; give a file name")
        if not os.path.isdir(parent):
            raise InputError(f"--output {args.output}: directory {parent} does not exist")
        if not os.access(parent, os.W_OK):
            raise InputError(f"--output {args.output}: cannot write in {parent}")
    if args.export:
        if os.path.exists(args.export) and not os.path.isdir(args.export):
            raise InputError(f"--export {args.export} exists and is not a directory")
        parent = os.path.dirname(os.path.abspath(args.export))
        if not os.path.isdir(parent):
            raise InputError(f"--export {args.export}: directory {parent} does not exist")


def _spark_failure(exc):
    """One line out of a (possibly huge) Spark / Py4J error."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    if any(line.startswith("Traceback") for line in lines):
        # A Python worker's traceback: its last line is the exception.
        line = lines[-1]
    else:
        line = lines[0]
    return line if len(line) <= 300 else line[:297] + "..."


def run(args, *, spark=None, out=None, err=None):
    """Run `kraftcore verify` with parsed `args`; returns the exit status. `spark`: an
    existing SparkSession to use (it is not stopped) instead of starting one."""
    out = out or sys.stdout
    err = err or sys.stderr
    import kraftcore.spark as ks
    from kraftcore.spark.inputs import InputError, discover_nodes

    try:
        missing = ks.missing_requirements()
        if missing:
            raise InputError(f"kraftcore verify needs the spark extra ({', '.join(missing)} "
                             f"not installed): {ks.INSTALL_HINT}")
        from kraftcore.spark.session import check_master

        check_master(args.master)
        if spark is None:
            why = ks.java_missing()
            if why:
                raise InputError(f"Spark needs a Java runtime (17 or later): {why}")
        _check_paths(args)
        nodes = discover_nodes(args.snapshots, args.logs)
    except InputError as exc:
        _error(err, exc)
        return EXIT_USAGE

    from kraftcore.spark.job import verify_with_spark
    from kraftcore.spark.session import SparkStartError, build_session

    progress = ProgressLine(err, enabled=not args.quiet)
    handle = None
    failed = False
    try:
        started = time.monotonic()
        if spark is None:
            progress(f"starting Spark ({args.master})")
            handle = build_session(args.master)
            spark = handle.session
        spark_start = time.monotonic() - started
        report = verify_with_spark(spark, nodes, export_dir=args.export, progress=progress,
                                   master=args.master)
    except KeyboardInterrupt:
        progress.clear()
        _error(err, "interrupted")
        return EXIT_INTERRUPTED
    except Exception as exc:  # the JVM, Py4J or an executor failed
        failed = True
        progress.clear()
        log_path = exc.log_path if isinstance(exc, SparkStartError) else \
            handle.log_path if handle is not None else None
        where = ""
        if log_path is not None:
            with contextlib.suppress(OSError), open(log_path, "a") as log:
                traceback.print_exc(file=log)
            where = f" (details in {log_path})"
        what = "Spark did not start" if isinstance(exc, SparkStartError) else \
            "the Spark job failed"
        _error(err, f"{what}: {_spark_failure(exc)}{where}")
        return EXIT_SPARK
    finally:
        if handle is not None:
            handle.stop(keep_log=failed)
    progress.clear()
    if handle is not None:
        report.timings = {"spark start": spark_start, **report.timings}
    out.write(report.render() + "\n")
    out.flush()
    if args.output:
        try:
            report.write_json(args.output)
        except OSError as exc:
            _error(err, f"cannot write {args.output}: {exc.strerror or exc}")
            return EXIT_USAGE
    return EXIT_OK if report.ok else EXIT_VIOLATIONS
