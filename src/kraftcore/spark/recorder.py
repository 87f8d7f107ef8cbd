"""The background process that records the embedded driver's class-data archive.

`build_session` starts it (`python -m kraftcore.spark.recorder`: detached, niced, no
output) at the first start of an installation, which itself runs without an archive: a
JVM recording its classes starts about twice as slow, and a user's command should not pay
for that. Its standard input carries one JSON line, `{"part", "master", "conf"}`, and then
stays open until the process that started Spark is done with it (`SparkHandle.stop`, or
that process's exit): the recorder waits for that end of input (at most
`_STARTER_WAIT_S`, for a starter that lives on), so that it does not compete with the
job of the process that started it.

Then it writes a small sample cluster to a temporary directory, starts Spark with the
same master and conf plus `-XX:ArchiveClassesAtExit=<part>`, runs the `kraftcore verify`
job on the sample (so that the archive holds the job's classes as well as Spark's start),
and closes the driver JVM's standard input, on which the JVM exits and writes the archive;
the recorder waits for that (killing the JVM after `_JVM_EXIT_S`) and exits.

While it lives it touches the `.part` file now and then, which tells later starts that the
archive is on its way (they go without it meanwhile; an untouched claim is taken for
abandoned after `cds._WRITING_S`). The recording proper is cut short after
`_DEADLINE_S`; a JVM that started still writes what it loaded so far. When no archive
comes of it (Spark did not start, the JVM was killed), the claim becomes a `.failed` mark
that holds what went wrong, and no recorder is started for an hour, or longer after
failures in a row (`cds._retry_after`). Exit status: 0 when the archive was written, 1
otherwise.
"""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import traceback

_TOUCH_S = 30.0  # how often the claim is touched (cds._WRITING_S is its limit)
_STARTER_WAIT_S = 600.0  # the longest wait for the end of input (a long-lived starter)
_DEADLINE_S = 900  # the recording, from its start to the JVM's stdin closed
_JVM_EXIT_S = 300.0  # how long the JVM may take to write the archive and exit


class RecordingTimeout(Exception):
    pass


def _keep_claimed(part, done):
    while not done.wait(_TOUCH_S):
        with contextlib.suppress(OSError):
            os.utime(part)


def _wait_for_end_of_input(timeout_s):
    """Until the process that started Spark is done with it (our stdin ends), or
    `timeout_s`: a starter that lives on (a notebook) must not hold the claim forever."""
    ended = threading.Event()

    def read():
        with contextlib.suppress(Exception):
            sys.stdin.buffer.read()
        ended.set()

    threading.Thread(target=read, daemon=True).start()
    ended.wait(timeout_s)


def _ignore_signals():
    """From here on SIGTERM and the deadline are ignored: what is left is clean-up."""
    signal.alarm(0)
    for signum in (signal.SIGTERM, signal.SIGALRM):
        signal.signal(signum, signal.SIG_IGN)


def _on_alarm(signum, frame):
    raise RecordingTimeout(f"the recording took longer than {_DEADLINE_S} s")


def _on_term(signum, frame):
    raise SystemExit(f"stopped by signal {signum}")


def _tail(path, size=16384):
    """The last `size` characters of the text file at `path` ("" when unreadable)."""
    try:
        with open(path, errors="replace") as f:
            return f.read()[-size:]
    except OSError:
        return ""


def _let_the_jvm_write():
    """Close the driver JVM's standard input (it exits on that, writing the archive) and
    wait for it; kill it when it takes longer than `_JVM_EXIT_S`."""
    from pyspark import SparkContext

    jvm = getattr(SparkContext._gateway, "proc", None)
    if jvm is None:
        return
    with contextlib.suppress(OSError):
        jvm.stdin.close()
    try:
        jvm.wait(_JVM_EXIT_S)
    except subprocess.TimeoutExpired:
        jvm.kill()
        jvm.wait()


def record(part, master, conf, spark_home=None):
    """Run the verify job on a sample with the driver's classes recorded to `part` (the
    driver started from `spark_home`, as the start that scheduled it), then let the JVM
    write them."""
    from kraftcore.spark import session as S
    from kraftcore.spark.inputs import discover_nodes
    from kraftcore.spark.job import verify_with_spark
    from kraftcore.spark.sample import write_sample_cluster

    root = tempfile.mkdtemp(prefix="kraftcore-cds-")
    workdir = None
    try:
        cluster = write_sample_cluster(os.path.join(root, "sample"), nodes=2, topics=2,
                                       partitions=2)
        try:
            handle = S.build_session(master, conf=conf, record_to=part,
                                     spark_home=spark_home)
        except S.SparkStartError as exc:  # say what Spark said, keep nothing behind
            workdir = os.path.dirname(exc.log_path)
            raise S.SparkStartError(f"{exc}\n--- spark.log ---\n{_tail(exc.log_path)}",
                                    exc.log_path) from exc
        workdir = handle.workdir
        verify_with_spark(handle.session, discover_nodes(cluster.node_dirs, []),
                          master=master)
    finally:  # the clean-up is not cut short by a signal
        _ignore_signals()
        shutil.rmtree(root, ignore_errors=True)
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
        _let_the_jvm_write()


def main():
    from kraftcore.spark import cds

    with contextlib.suppress(OSError):
        os.nice(19)  # the user's own work comes first
    signal.signal(signal.SIGTERM, _on_term)
    part, done = None, threading.Event()
    why = "the driver JVM exited without writing the archive\n"
    try:
        request = json.loads(sys.stdin.buffer.readline())
        part = request["part"]
        threading.Thread(target=_keep_claimed, args=(part, done), daemon=True).start()
        _wait_for_end_of_input(_STARTER_WAIT_S)
        signal.signal(signal.SIGALRM, _on_alarm)
        signal.alarm(_DEADLINE_S)
        record(part, request["master"], request.get("conf") or {},
               request.get("spark_home"))
    except BaseException:  # SystemExit (SIGTERM) too: the outcome is in the file
        why = traceback.format_exc()
    finally:
        _ignore_signals()
        done.set()
    if part is None:
        return 1
    if cds.has_header(part):
        return 0
    cds.recording_failed(part, why)
    return 1


if __name__ == "__main__":
    sys.exit(main())
