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

The embedded driver starts fast: it maps a class-data archive of Spark's classes
(`kraftcore.spark.cds`; `SparkHandle.cds` says what a start did), starts from a view of
the Spark installation without MLlib's jar (`kraftcore.spark.home`), whose mere presence
costs every start 2 s of Scala's runtime reflection, lets its C2 compiler wait longer
(`_DRIVER_JIT`), and the Python modules pyspark loads on its first call into the JVM are
imported on a thread while the JVM starts. `spark.driver.extraJavaOptions` given in `conf`
is added after these JVM options (so it can override them); it does not replace them.
"""

import contextlib
import importlib
import os
import re
import shutil
import socket
import sys
import tempfile
import threading
import time
import warnings

from kraftcore.spark import cds as class_data
from kraftcore.spark.home import driver_home, real_home
from kraftcore.spark.inputs import InputError

__all__ = ["check_master", "is_local", "build_session", "SparkHandle", "SparkStartError",
           "LOG4J2"]

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


# The embedded driver's JIT: C2 (the optimising compiler) takes a method only once it ran
# 4-10x as often as HotSpot's defaults say. Spark's start runs a great deal of code a few
# thousand times each; compiled by C2 at the default thresholds, the compiler thread takes
# the second of two cores from C1 and the interpreter. Measured: the session's start 3.7 ->
# 3.1 s, and a whole verify run of 1000 files no slower (33.1 -> 31.5 s).
_DRIVER_JIT = ["-XX:Tier4InvocationThreshold=20000", "-XX:Tier4MinInvocationThreshold=6000",
               "-XX:Tier4CompileThreshold=30000", "-XX:Tier4BackEdgeThreshold=400000"]


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
def _spark_home(path):
    """$SPARK_HOME set to `path` (unless None) while pyspark starts the driver JVM, which
    keeps it (the Python workers it starts get it from there); put back afterwards."""
    if path is None:
        yield
        return
    saved = os.environ.get("SPARK_HOME")
    os.environ["SPARK_HOME"] = path
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("SPARK_HOME", None)
        else:
            os.environ["SPARK_HOME"] = saved


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


def _preload():
    """Import what pyspark imports on its first call into the JVM that carries arguments
    (its py4j converters load `pyspark.testing.utils`, which loads numpy, pandas and
    pyarrow: ~0.35 s), on a thread while the driver JVM starts, instead of after it."""
    with contextlib.suppress(Exception):
        importlib.import_module("pyspark.testing.utils")


class SparkStartError(RuntimeError):
    """Spark did not start. `log_path`: the file the JVM (and Spark) wrote to, kept in
    its work directory for the user to read. The message is the original error's."""

    def __init__(self, error, log_path):
        super().__init__(str(error) or type(error).__name__)
        self.log_path = log_path


class SparkHandle:
    """A SparkSession started by `build_session`, its work directory and its log."""

    def __init__(self, session, workdir, log_path, owned, cds="off", cds_archive=None):
        self.session = session
        self.workdir = workdir
        self.log_path = log_path
        self.owned = owned
        # The driver's class-data archive: "off", "used" (cds_archive), "scheduled" (none
        # yet; the recorder process `cds_recorder` writes cds_archive), "recording" (the
        # recorder's own start: its JVM writes cds_archive as it exits), "rejected" (the
        # JVM refused it; deleted) or "unavailable" (`kraftcore.spark.cds`).
        self.cds = cds
        self.cds_archive = cds_archive
        self.cds_recorder = None  # pid of the recorder this start started
        self.cds_identity = None  # (device, inode) of cds_archive when the JVM got it
        # The Spark home the driver started from: a view of the installation without
        # MLlib, or the installation itself (`kraftcore.spark.home`); None when this
        # call started no driver JVM (a session already there, or not embedded).
        self.spark_home = None
        self._recorder_pipe = None  # the recorder records once this is closed

    def stop(self, keep_log=False):
        """Stop the session (if this handle started it) and remove the work directory
        (unless `keep_log`)."""
        if self.owned and self.session is not None:
            with contextlib.suppress(Exception):
                self.session.stop()
            self.session = None
        if self._recorder_pipe is not None:  # this process is done with Spark: record now
            with contextlib.suppress(OSError):
                self._recorder_pipe.close()
            self._recorder_pipe = None
        if not keep_log and self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None


def build_session(master="local[*]", *, app_name="kraftcore-verify", quiet=True,
                  conf=None, cds=None, mllib=False, record_to=None, spark_home=None):
    """Start a SparkSession for the verification job; returns a `SparkHandle`.
    `conf`: extra Spark settings (they win over the defaults here). `cds`: whether the
    driver (embedded mode only) uses a class-data archive (`kraftcore.spark.cds`; None:
    unless KRAFTCORE_SPARK_CDS=0). `mllib`: start the embedded driver from the
    Spark installation itself, MLlib included, rather than from its view without MLlib
    (`kraftcore.spark.home`; 2 s slower). `record_to`: the `.part` file the driver JVM
    writes its archive to as it exits, and `spark_home` the Spark home it starts from
    (`kraftcore.spark.recorder`'s start: the same as the start that scheduled it)."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    owned = SparkContext._active_spark_context is None
    local = is_local(master)
    conf = dict(conf or {})
    user_conf = dict(conf)
    workdir = tempfile.mkdtemp(prefix="kraftcore-verify-")
    log_path = os.path.join(workdir, "spark.log")
    log4j = os.path.join(workdir, "log4j2.properties")
    with open(log4j, "w") as f:
        f.write(LOG4J2)
    java_options = [f"-Dlog4j2.configurationFile=file:{log4j}"]
    cds_state, cds_archive, driver_from = "off", None, None
    # A new driver JVM is started only when this process has none yet (and is not run by
    # spark-submit, whose JVM is already there: PYSPARK_GATEWAY_PORT).
    if (local and owned and SparkContext._gateway is None
            and "PYSPARK_GATEWAY_PORT" not in os.environ):
        java_options += _DRIVER_JIT
        driver_from = spark_home or (real_home() if mllib
                                     else driver_home() or real_home())
        if record_to is not None:
            cds_state, cds_archive = "recording", record_to
            java_options += [f"-XX:ArchiveClassesAtExit={record_to}", "-Xlog:cds*=off"]
        elif class_data.wanted(cds) and not class_data.USERS_OWN.search(
                conf.get("spark.driver.extraJavaOptions") or ""):  # not with the user's own
            cds_state, options, cds_archive = class_data.prepare(workdir, conf, driver_from)
            java_options += options
    cds_identity = class_data.identity(cds_archive)
    extra_java_options = conf.pop("spark.driver.extraJavaOptions", None)
    if extra_java_options:
        java_options.append(extra_java_options)
    settings = {
        "spark.app.name": app_name,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.extraJavaOptions": " ".join(java_options),
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
    settings.update(conf)
    builder = SparkSession.builder.master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    with warnings.catch_warnings():
        # pyspark warns that it does not fully support pandas 3 (the job does not use it).
        warnings.filterwarnings("ignore", category=FutureWarning, module="pyspark")
        preload = None
        if SparkContext._gateway is None:  # a JVM to wait for: import meanwhile
            preload = threading.Thread(target=_preload, name="kraftcore-spark-preload",
                                       daemon=True)
            preload.start()
        try:
            started_at = time.time()
            with _spark_home(driver_from), (_output_to(log_path) if quiet
                                     else contextlib.nullcontext()):
                session = builder.getOrCreate()
            session.sparkContext.setLogLevel("ERROR")
        except Exception as exc:
            if cds_state in ("used", "scheduled"):
                # Whatever stopped the JVM, it will not be this archive next time: the
                # next start records a new one. Nor is a recorder started for Spark that
                # does not start.
                class_data.remove(cds_archive)
            raise SparkStartError(exc, log_path) from exc
        except BaseException:  # interrupted: nothing to keep
            if cds_state == "scheduled":
                class_data.remove(cds_archive)
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        finally:
            if preload is not None:  # within the warning filter, whatever happens
                preload.join()
    handle = SparkHandle(session, workdir, log_path, owned=owned, cds=cds_state,
                         cds_archive=cds_archive)
    handle.spark_home = driver_from
    handle.cds_identity = cds_identity
    if cds_state == "used":
        class_data.check_after_start(handle, started_at)
    elif cds_state == "scheduled":  # Spark is up: a recorder, to record once it is stopped
        started = class_data.start_recorder(cds_archive, master, user_conf, driver_from)
        if started is None:
            handle.cds, handle.cds_archive = "unavailable", None
        else:
            handle.cds_recorder, handle._recorder_pipe = started
    return handle
