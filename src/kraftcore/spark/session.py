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

Start-up (embedded mode). Most of Spark's start is the driver JVM loading, verifying and
interpreting some 12,000 classes of Spark's jars. The driver therefore gets a class-data
archive (JDK Application Class-Data Sharing, dynamic archive, JDK 13 or later). The first
start of a given installation finds none: it claims the recording (an empty `.part` file,
created with the cache directory locked, so that one start at a time claims), starts
without, and leaves the recording to a detached, niced process
(`kraftcore.spark.recorder`) that waits until this process is done with Spark
(`SparkHandle.stop`, or its exit; at most 10 minutes). The recorder's driver JVM runs with
`-XX:ArchiveClassesAtExit` and writes the classes it loaded to that `.part` file as it
exits (recording makes a start about twice as slow: the user's command does not pay for
it). A later start checks the file (HotSpot writes the archive's header last, so a header
means a complete file), renames it into place and runs with `-XX:SharedArchiveFile`, which
maps the classes instead of loading them.

* Where: `$XDG_CACHE_HOME/kraftcore/spark-cds/` (default `~/.cache/...`), one archive per
  installation, 100-170 MB, named after the Java, pyspark and kraftcore versions and a
  digest of the JVM's files, the Spark jars (names, sizes, times) and what else changes
  the driver's class path; its size is part of its name. Another installation's archive
  is deleted when unused for 30 days.
* An archive that is not whole (its size differs from its name, no header) is deleted
  before the JVM starts (a truncated archive would crash the JVM), and that start has a
  new one recorded; one the JVM refuses (it logs why to `cds.log` in the work directory)
  is deleted after the start (unless another process has put a new one in its place since)
  and leaves a `.failed` mark. A JVM never fails to start for it: an unreadable cache
  directory (or its lock held elsewhere for over 2 s), a path Spark cannot pass to the
  JVM, a Java older than 13, a recorder still at work or class-data options of the user's
  own just mean this start goes without; and a start that fails for whatever reason
  deletes the archive it was given (`SparkStartError` then names the kept log). A recorder
  that ends without an archive (or whose claim is left untouched for `_CDS_WRITING_S`: it
  was killed) leaves a `.failed` mark too. The mark says why and counts the failures in
  a row: no new recorder is started for an hour after the first, then 2, 4, ... and at
  most 128 hours after each further one; an archive the JVM takes clears it.
* Off: `KRAFTCORE_SPARK_CDS=0` (or `build_session(..., cds=False)`); no archive is read
  or written then. `SparkHandle.cds` says what a start did.
* On a quiet 2-vCPU machine: 3.4 s to start without the archive, 2.1 s with it; the
  recorder takes ~30 s of its own in the background (its start 10 s, the job on a small
  sample, the archive written 6-10 s).

Three more things shorten the embedded start. The driver starts from a view of the Spark
installation without MLlib's jar (`kraftcore.spark.home`, `SparkHandle.spark_home`): that
jar alone made every SparkSession start Scala's runtime reflection, 2 s of a start without
the archive. The driver's C2 compiler waits for methods to run 4-10x as often as by default
(`_DRIVER_JIT`), leaving the second core to C1 and the interpreter while Spark sets up. And
the Python modules pyspark loads on its first call into the JVM (numpy, pandas, pyarrow)
are imported on a thread while the JVM starts.

`spark.driver.extraJavaOptions` given in `conf` is added after these JVM options (so it
can override them); it does not replace them.
"""

import contextlib
import hashlib
import importlib
import os
import re
import secrets
import shutil
import socket
import sys
import tempfile
import threading
import time
import warnings

from kraftcore.spark.cache import cache_dir, locked
from kraftcore.spark.home import driver_home, real_home
from kraftcore.spark.inputs import InputError

__all__ = ["check_master", "is_local", "build_session", "SparkHandle", "SparkStartError",
           "LOG4J2", "CDS_ENV", "cds_cache_dir", "wait_for_exit"]

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


# ------------------------------------------------------------------ class-data archive

CDS_ENV = "KRAFTCORE_SPARK_CDS"
_CDS_JAVA_MIN = 13  # -XX:ArchiveClassesAtExit (dynamic archives) came with JDK 13
_CDS_MAGIC = 0xF00BABA8  # the first 4 bytes of a HotSpot dynamic archive, its header
_CDS_SETTLED_S = 1.0  # a .part file with a header, untouched for this long: complete
_CDS_WRITING_S = 600.0  # a claim (.part, no header) untouched this long lost its recorder
_CDS_LOCK_WAIT_S = 2.0  # how long a start waits for the cache directory's lock
_CDS_UNUSED_S = 30 * 86400.0  # other installations' archives unused for this long go
_CDS_RETRY_S = 3600.0  # after a recorder failed, the next one is started this much later
_CDS_RETRY_DOUBLINGS = 7  # twice as late after each failure in a row (at most 128 h)
_CDS_FAILURES = re.compile(r"failures: ([0-9]+)\n")  # the first line of a `.failed` mark
_CDS_USERS_OWN = re.compile(r"-Xshare:off|SharedArchiveFile|ArchiveClassesAtExit")
_CDS_UNSAFE = re.compile(r"[\s'\"\\:,%]")  # Spark splits the options on spaces; ':' lists


def cds_cache_dir():
    """Where the driver's class-data archives are kept."""
    return cache_dir("spark-cds")


def _cds_wanted(cds):
    if cds is not None:
        return bool(cds)
    return os.environ.get(CDS_ENV, "1").strip().lower() not in ("0", "off", "false", "no")


def _java():
    """The java Spark's launcher will run (spark-class: $JAVA_HOME/bin/java, else PATH)."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(java) if java and os.path.isfile(java) else None


def _java_release(java):
    """The `release` file of the JDK `java` belongs to, and the JAVA_VERSION it names
    ("17.0.15", "1.8.0_392"); ("", None) when there is none."""
    java_home = os.path.dirname(os.path.dirname(java))
    try:
        with open(os.path.join(java_home, "release"), encoding="utf-8",
                  errors="replace") as f:
            release = f.read()
    except OSError:
        return "", None
    found = re.search(r'^JAVA_VERSION="?([^"\n]+)', release, re.M)
    return release, found.group(1) if found else None


def _java_feature(version):
    """The feature release of a JAVA_VERSION ("17.0.15" -> 17, "1.8.0_392" -> 8), or None."""
    parts = re.findall(r"\d+", version or "")
    if not parts:
        return None
    return int(parts[1]) if parts[0] == "1" and len(parts) > 1 else int(parts[0])


def _archive_stem(java, conf, spark_home):
    """The archive's name (without its size): versions for people, a digest for the JVM,
    which refuses an archive once its own files, the class path or a jar changed.
    `spark_home`: where the driver starts from (`kraftcore.spark.home`)."""
    import pyspark

    from kraftcore import __version__

    java_home = os.path.dirname(os.path.dirname(java))
    digest = hashlib.sha256()

    def add(*parts):
        digest.update(repr(parts).encode())

    release, java_version = _java_release(java)
    add(release)
    java_version = java_version or "unknown"
    for path in (java, os.path.join(java_home, "lib", "modules"),
                 os.path.join(java_home, "lib", "server", "libjvm.so"),
                 os.path.join(java_home, "lib", "server", "classes.jsa")):
        with contextlib.suppress(OSError):
            st = os.stat(path)
            add(path, st.st_size, st.st_mtime_ns)
    add(os.path.realpath(spark_home))
    with os.scandir(os.path.join(spark_home, "jars")) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            st = entry.stat()
            add(entry.name, st.st_size, st.st_mtime_ns)
    for var in ("SPARK_CONF_DIR", "SPARK_DIST_CLASSPATH", "HADOOP_CONF_DIR",
                "YARN_CONF_DIR", "SPARK_PREPEND_CLASSES", "SPARK_SCALA_VERSION"):
        add(var, os.environ.get(var))
    add((conf or {}).get("spark.driver.extraClassPath"))  # put before Spark's jars
    name = (f"spark-driver-java{java_version}-pyspark{pyspark.__version__}"
            f"-kraftcore{__version__}-{digest.hexdigest()[:16]}")
    return re.sub(r"[^A-Za-z0-9._+-]", "_", name)


def wait_for_exit(pid, timeout_s=600.0):
    """Wait until process `pid` is gone (or a zombie): the recorder of a class-data
    archive, which exits once its JVM has written it (or failed to). Returns whether it
    exited within `timeout_s` (for tests and benchmarks that need the archive written)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        except OSError:  # no /proc
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
        time.sleep(0.2)
    return False


def _has_header(path, size=None):
    """A whole archive: HotSpot's header (written last) and, when known, the right size."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
            whole = size is None or os.fstat(f.fileno()).st_size == size
    except OSError:
        return False
    return whole and len(head) == 4 and int.from_bytes(head, sys.byteorder) == _CDS_MAGIC


def _remove(path):
    with contextlib.suppress(OSError):
        os.remove(path)


def _adopt(part, directory, stem):
    """Put a complete `.part` file in place: flushed, then renamed (never half there)."""
    fd = os.open(part, os.O_RDONLY)
    try:
        os.fsync(fd)
        size = os.fstat(fd).st_size
    finally:
        os.close(fd)
    final = os.path.join(directory, f"{stem}-{size}.jsa")
    os.replace(part, final)
    return final


def _cds_locked(directory):
    """The cache directory's lock: one process at a time looks at its files, claims a
    recording or marks one failed. Raises OSError when another process holds it for more
    than `_CDS_LOCK_WAIT_S`: a start then goes without the archive rather than wait."""
    return locked(directory, _CDS_LOCK_WAIT_S)


def _failures(mark):
    """How many recordings in a row failed, by the `.failed` mark `mark` (0: none)."""
    try:
        with open(mark, encoding="utf-8", errors="replace") as f:
            found = _CDS_FAILURES.match(f.readline())
    except FileNotFoundError:
        return 0
    except OSError:  # there, but unreadable: one failure, and the mark is written anew
        return 1
    return int(found.group(1)) if found else 1


def _retry_after(failures):
    """How long after its last failure a recording is tried again."""
    return _CDS_RETRY_S * 2 ** min(max(failures - 1, 0), _CDS_RETRY_DOUBLINGS)


def _mark_failed(stem_path, why):
    """Write `<stem>.failed` (under the lock): no recorder for this installation for
    `_retry_after` the failures in a row so far (this one included); the file says why."""
    mark = stem_path + ".failed"
    failures = _failures(mark) + 1
    draft = f"{mark}.{os.getpid()}.tmp"  # whole or not there: the count survives a kill
    with open(draft, "w", encoding="utf-8", errors="replace") as f:
        f.write(f"failures: {failures}\n{why}")
    os.replace(draft, mark)


def _prepare_cds(workdir, conf, spark_home):
    """The class-data options of a driver JVM started from `spark_home`: `(state,
    options, archive)`. `state` is "used" (`archive` is mapped), "scheduled" (none yet:
    this start goes without, and `archive` is the claimed `.part` file a recorder is to
    write) or "unavailable"."""
    java = _java()
    directory = cds_cache_dir()
    if java is None or _CDS_UNSAFE.search(directory + workdir):
        return "unavailable", [], None
    feature = _java_feature(_java_release(java)[1])
    if feature is None or feature < _CDS_JAVA_MIN:
        return "unavailable", [], None  # older JVMs refuse the options, and would not start
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        stem = _archive_stem(java, conf, spark_home)
        with _cds_locked(directory):
            return _cds_state(directory, stem, workdir)
    except OSError:
        return "unavailable", [], None


def _cds_state(directory, stem, workdir):
    """`_prepare_cds` with the directory locked."""
    now = time.time()
    ready, parts, failed = None, [], False
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        try:
            age = now - os.stat(path).st_mtime
        except OSError:
            continue
        if name.startswith(stem + "-") and name.endswith(".jsa"):
            size = name[len(stem) + 1:-len(".jsa")]
            if ready is None and size.isdigit() and _has_header(path, int(size)):
                ready = path
            else:  # a second one, or not whole: the JVM could crash on a short file
                _remove(path)
        elif name.startswith(stem + ".") and name.endswith(".part"):
            parts.append((path, age))
        elif name == stem + ".failed":  # kept until an archive is had: it counts
            failed |= age < _retry_after(_failures(path))
        elif name.endswith(".failed"):  # another installation's: its count, for a while
            if age > _CDS_UNUSED_S:
                _remove(path)
        elif age > _CDS_UNUSED_S or (age > _CDS_WRITING_S and not _has_header(path)):
            _remove(path)  # another installation's, unused for long, or abandoned
    writing = False
    for part, age in parts:
        if _has_header(part):  # written: taken once settled; a second one goes
            if ready is None and age >= _CDS_SETTLED_S:
                ready = _adopt(part, directory, stem)
            elif ready is None:
                writing = True
            else:
                _remove(part)
        elif age > _CDS_WRITING_S:  # untouched for long: its recorder is gone
            _remove(part)
            _mark_failed(os.path.join(directory, stem),
                         f"the recorder of {os.path.basename(part)} stopped without "
                         "writing the archive (killed, or the machine stopped)\n")
            failed = True
        else:  # its recorder is at work (it touches the file now and then)
            writing = True
    if ready is not None:
        os.utime(ready)  # its last use: what the clean-up of unused archives goes by
        log = os.path.join(workdir, "cds.log")
        return "used", [f"-XX:SharedArchiveFile={ready}", "-Xlog:cds*=off",
                        f"-Xlog:cds*=warning:file={log}"], ready
    if writing or failed:  # being recorded right now, or failed lately: go without
        return "unavailable", [], None
    # Claim the recording: the .part file the recorder's JVM will write. The other starts
    # go without until it is done.
    part = os.path.join(directory, f"{stem}.{os.getpid()}-{secrets.token_hex(4)}.part")
    os.close(os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    return "scheduled", [], part


def recording_failed(part, why):
    """The recorder of `part` ends without an archive: its claim becomes a `.failed` mark
    holding `why` (text), which keeps the next starts from starting a new recorder for
    `_retry_after` the failures in a row. Nothing is marked when the archive was written after all, or when the
    claim is gone (a start found it abandoned and marked it)."""
    stem_path = part.rsplit(".", 2)[0]  # <stem>.<pid>-<token>.part
    with contextlib.suppress(OSError), _cds_locked(os.path.dirname(part)):
        if _has_header(part):
            return
        os.remove(part)
        _mark_failed(stem_path, why)


def _start_recorder(part, master, conf, spark_home):
    """Start `kraftcore.spark.recorder` for `part`, detached (its own session, no
    terminal, niced). It waits until the returned pipe is closed (`SparkHandle.stop`, or
    this process's exit): returns `(pid, pipe)`, or None when it could not start (the
    claim is then dropped). Never raises: the archive must not fail a start."""
    import json
    import subprocess

    recorder = None
    try:
        request = json.dumps({"part": part, "master": master, "conf": conf,
                              "spark_home": spark_home}, default=str)
        recorder = subprocess.Popen(
            [sys.executable or "python3", "-m", "kraftcore.spark.recorder"],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, close_fds=True)  # this cwd: relative paths in conf
        # the conf through a pipe, not argv: it may hold what `ps` must not show
        recorder.stdin.write(request.encode() + b"\n")
        recorder.stdin.flush()
        # Reaped when it ends, should this process still be running then.
        threading.Thread(target=recorder.wait, name="kraftcore-cds-recorder",
                         daemon=True).start()
    except Exception:
        if recorder is not None:
            recorder.kill()
            recorder.wait()
        _remove(part)
        return None
    return recorder.pid, recorder.stdin


def _identity(path):
    """(device, inode) of the file at `path`, or None."""
    try:
        st = os.stat(path) if path else None
    except OSError:
        return None
    return None if st is None else (st.st_dev, st.st_ino)


def _check_cds(handle, started_at):
    """After the start: drop an archive the JVM refused (it said why in cds.log) — the
    file it was given, not one another process has put in its place since — and mark the
    installation failed with the JVM's reasons (a refusal that comes from the settings
    would otherwise have a new archive recorded every other start). An archive the JVM
    took ends the failures in a row: their mark goes, unless it was written since this
    start began (another start's JVM, with other settings, refused it meanwhile)."""
    log = os.path.join(handle.workdir, "cds.log")
    archive = handle.cds_archive
    stem_path = archive.rsplit("-", 1)[0]  # <stem>-<size>.jsa
    mark = stem_path + ".failed"
    with contextlib.suppress(OSError):
        if os.path.getsize(log) == 0:
            if os.path.exists(mark):
                with _cds_locked(os.path.dirname(archive)):
                    if os.stat(mark).st_mtime < started_at:
                        _remove(mark)
            return
        handle.cds = "rejected"
        with open(log, encoding="utf-8", errors="replace") as f:
            why = "the driver JVM refused the archive:\n" + f.read(64 * 1024)
        with _cds_locked(os.path.dirname(archive)):
            if _identity(archive) == handle._cds_identity:
                _remove(archive)
                _mark_failed(stem_path, why)


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
        # JVM refused it; deleted) or "unavailable" (see the module's docstring).
        self.cds = cds
        self.cds_archive = cds_archive
        self.cds_recorder = None  # pid of the recorder this start started
        # The Spark home the driver started from: a view of the installation without
        # MLlib, or the installation itself (`kraftcore.spark.home`); None when this
        # call started no driver JVM (a session already there, or not embedded).
        self.spark_home = None
        self._cds_identity = None  # (device, inode) of cds_archive when the JVM got it
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
    driver (embedded mode only) uses a class-data archive, see the module's docstring
    (None: unless KRAFTCORE_SPARK_CDS=0). `mllib`: start the embedded driver from the
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
        elif _cds_wanted(cds) and not _CDS_USERS_OWN.search(
                conf.get("spark.driver.extraJavaOptions") or ""):  # not with the user's own
            cds_state, options, cds_archive = _prepare_cds(workdir, conf, driver_from)
            java_options += options
    cds_identity = _identity(cds_archive)
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
                _remove(cds_archive)
            raise SparkStartError(exc, log_path) from exc
        except BaseException:  # interrupted: nothing to keep
            if cds_state == "scheduled":
                _remove(cds_archive)
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        finally:
            if preload is not None:  # within the warning filter, whatever happens
                preload.join()
    handle = SparkHandle(session, workdir, log_path, owned=owned, cds=cds_state,
                         cds_archive=cds_archive)
    handle.spark_home = driver_from
    handle._cds_identity = cds_identity
    if cds_state == "used":
        _check_cds(handle, started_at)
    elif cds_state == "scheduled":  # Spark is up: a recorder, to record once it is stopped
        started = _start_recorder(cds_archive, master, user_conf, driver_from)
        if started is None:
            handle.cds, handle.cds_archive = "unavailable", None
        else:
            handle.cds_recorder, handle._recorder_pipe = started
    return handle
