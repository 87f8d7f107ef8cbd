"""Starting Spark for `kraftcore verify`: the quiet embedded default and `--master`.

Embedded (`local[*]`, `local[N]`): no UI, no console progress bars, log level ERROR from the
first line (a log4j2 configuration handed to the driver JVM), the driver bound to 127.0.0.1
(`spark.driver.host`, `spark.driver.bindAddress`, `SPARK_LOCAL_IP`), the Python workers
running this interpreter (`PYSPARK_PYTHON`, unless set). What the JVM and the Python
workers print (the JVM's banner, an executor's error) goes to `spark.log` in a private
work directory instead of the terminal; a failure names that file.

On a cluster (`spark://HOST:PORT`, `yarn`, `k8s://...`) the same job runs; the driver is
not bound to 127.0.0.1 (the executors must reach it), the workers need kraftcore with its
`spark` extra installed (and `PYSPARK_PYTHON` pointing at that interpreter), and the
snapshot and log directories must be mounted at the same path on the driver and on every
worker.
"""

import contextlib
import os
import re
import shutil
import socket
import sys
import tempfile
import warnings

from kraftcore.spark.inputs import InputError

__all__ = ["check_master", "is_local", "build_session", "SparkHandle", "LOG4J2"]

_MASTER = re.compile(
    r"^(local(\[(\*|[1-9][0-9]*)(,[1-9][0-9]*)?\])?"
    r"|local-cluster\[[1-9][0-9]*,[1-9][0-9]*,[1-9][0-9]*\]"
    r"|spark://[^\s/:,]+:[0-9]{1,5}(,[^\s/:,]+:[0-9]{1,5})*"
    r"|yarn"
    r"|k8s://\S+)$")

LOG4J2 = """\
# kraftcore verify: Spark logs ERROR and above only, to the JVM's stderr (spark.log).
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
"""


def is_local(master):
    return master == "local" or master.startswith("local[")


def check_master(master, *, connect_timeout_s=3.0):
    """Refuse a `--master` value Spark would not take (InputError, one line). A
    `spark://` master must accept a TCP connection: Spark itself would retry for a minute
    before giving up."""
    if not _MASTER.match(master or ""):
        raise InputError(f"--master {master!r} is not a Spark master URL: use local[*], "
                         "local[N], spark://HOST:PORT, yarn or k8s://URL")
    if master.startswith("spark://"):
        for hostport in master[len("spark://"):].split(","):
            host, _, port = hostport.rpartition(":")
            try:
                with socket.create_connection((host, int(port)), timeout=connect_timeout_s):
                    pass
            except OSError as exc:
                raise InputError(f"cannot reach the Spark master {hostport} "
                                 f"({exc.strerror or exc}): is it running?") from None


@contextlib.contextmanager
def _output_to(path):
    """Point file descriptors 1 and 2 at `path` while a child process is started, so that
    it (the JVM, and the Python workers it forks) writes there for good."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, ValueError, OSError):
            pass
    saved = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for target in (1, 2):
            saved.append((target, os.dup(target)))
            os.dup2(fd, target)
        yield
    finally:
        for target, copy in saved:
            os.dup2(copy, target)
            os.close(copy)
        os.close(fd)


class SparkHandle:
    """A SparkSession started by `build_session`, its work directory and its log."""

    def __init__(self, session, workdir, log_path, owned):
        self.session = session
        self.workdir = workdir
        self.log_path = log_path
        self.owned = owned

    def stop(self, keep_log=False):
        """Stop the session (if this handle started it) and remove the work directory
        (unless `keep_log`)."""
        if self.owned and self.session is not None:
            with contextlib.suppress(Exception):
                self.session.stop()
            self.session = None
        if not keep_log and self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None


def build_session(master="local[*]", *, app_name="kraftcore-verify", quiet=True,
                  conf=None):
    """Start a SparkSession for the verification job; returns a `SparkHandle`.
    `conf`: extra Spark settings (they win over the defaults here)."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    owned = SparkContext._active_spark_context is None
    local = is_local(master)
    workdir = tempfile.mkdtemp(prefix="kraftcore-verify-")
    log_path = os.path.join(workdir, "spark.log")
    log4j = os.path.join(workdir, "log4j2.properties")
    with open(log4j, "w") as f:
        f.write(LOG4J2)
    settings = {
        "spark.app.name": app_name,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{log4j}",
        # The job sets its own Arrow batch size; keep the Python workers between tasks.
        "spark.python.worker.reuse": "true",
    }
    if local:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        settings.update({
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            # Few, small shuffles: Spark's default of 200 partitions is all overhead here.
            "spark.sql.shuffle.partitions": str(max(4, 2 * (os.cpu_count() or 2))),
        })
    settings.update(conf or {})
    builder = SparkSession.builder.master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    with warnings.catch_warnings():
        # pyspark warns that it does not fully support pandas 3 (the job does not use it).
        warnings.filterwarnings("ignore", category=FutureWarning, module="pyspark")
        if quiet:
            with _output_to(log_path):
                session = builder.getOrCreate()
        else:
            session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return SparkHandle(session, workdir, log_path, owned=owned)
