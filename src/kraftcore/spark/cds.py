"""The embedded Spark driver's class-data archive (JDK Application Class-Data Sharing,
dynamic archive, JDK 13 or later): the cache of archives, the claim of a recording, the
recorder process's start, and what a start does with an archive the JVM took or refused.
`kraftcore.spark.session.build_session` asks it for the driver's JVM options.

Most of Spark's start is the driver JVM loading, verifying and interpreting some 12,000
classes of Spark's jars; with an archive it maps them instead. The first start of a given
installation finds none: it claims the recording (an empty `.part` file, created with the
cache directory locked, so that one start at a time claims), starts without, and leaves the
recording to a detached, niced process (`kraftcore.spark.recorder`, `start_recorder`) that
waits until the starting process is done with Spark (`SparkHandle.stop`, or its exit; at
most 10 minutes). The recorder's driver JVM runs with `-XX:ArchiveClassesAtExit` and
writes the classes it loaded to that `.part` file as it exits (recording makes a start
about twice as slow: the user's command does not pay for it). A later start checks the file
(HotSpot writes the archive's header last, so a header means a complete file), renames it
into place and runs with `-XX:SharedArchiveFile`.

* Where: `$XDG_CACHE_HOME/kraftcore/spark-cds/` (default `~/.cache/...`, `archive_dir`),
  one archive per installation, 100-170 MB, named after the Java, pyspark and kraftcore
  versions and a digest of the JVM's files, the Spark jars (names, sizes, times) and what
  else changes the driver's class path; its size is part of its name. Another
  installation's archive is deleted when unused for 30 days.
* An archive that is not whole (its size differs from its name, no header) is deleted
  before the JVM starts (a truncated archive would crash the JVM), and that start has a
  new one recorded; one the JVM refuses (it logs why to `cds.log` in the work directory)
  is deleted after the start (`check_after_start`; unless another process has put a new
  one in its place since) and leaves a `.failed` mark. A JVM never fails to start for it:
  an unreadable cache directory (or its lock held elsewhere for over 2 s), a path Spark
  cannot pass to the JVM, a Java older than 13, a recorder still at work or class-data
  options of the user's own (`USERS_OWN`) just mean a start goes without; and a start
  that fails for whatever reason deletes the archive it was given. A recorder that ends
  without an archive (`recording_failed`, or a claim left untouched for `_WRITING_S`: it
  was killed) leaves a `.failed` mark too. The mark says why and counts the failures in a
  row: no new recorder is started for an hour after the first, then 2, 4, ... and at most
  128 hours after each further one; an archive the JVM takes clears it.
* Off: `KRAFTCORE_SPARK_CDS=0` (`CDS_ENV`; or `build_session(..., cds=False)`); no archive
  is read or written then.
* On a quiet 2-vCPU machine: 3.4 s to start without the archive, 2.1 s with it; the
  recorder takes ~30 s of its own in the background (its start 10 s, the job on a small
  sample, the archive written 6-10 s).

It never raises into a start: whatever goes wrong here means "no archive this time".
"""

import contextlib
import hashlib
import os
import re
import secrets
import shutil
import sys
import threading
import time

from kraftcore.spark.cache import cache_dir, locked

__all__ = ["CDS_ENV", "USERS_OWN", "archive_dir", "wanted", "prepare", "check_after_start",
           "start_recorder", "recording_failed", "has_header", "identity", "remove",
           "wait_for_exit"]

CDS_ENV = "KRAFTCORE_SPARK_CDS"
_JAVA_MIN = 13  # -XX:ArchiveClassesAtExit (dynamic archives) came with JDK 13
_MAGIC = 0xF00BABA8  # the first 4 bytes of a HotSpot dynamic archive, its header
_SETTLED_S = 1.0  # a .part file with a header, untouched for this long: complete
_WRITING_S = 600.0  # a claim (.part, no header) untouched this long lost its recorder
_LOCK_WAIT_S = 2.0  # how long a start waits for the cache directory's lock
_UNUSED_S = 30 * 86400.0  # other installations' archives unused for this long go
_RETRY_S = 3600.0  # after a recorder failed, the next one is started this much later
_RETRY_DOUBLINGS = 7  # twice as late after each failure in a row (at most 128 h)
_FAILURES_LINE = re.compile(r"failures: ([0-9]+)\n")  # the first line of a `.failed` mark
# Class-data options of the user's own (in spark.driver.extraJavaOptions): a start with
# them goes without kraftcore's archive.
USERS_OWN = re.compile(r"-Xshare:off|SharedArchiveFile|ArchiveClassesAtExit")
_UNSAFE = re.compile(r"[\s'\"\\:,%]")  # Spark splits the options on spaces; ':' lists


def archive_dir():
    """Where the driver's class-data archives are kept."""
    return cache_dir("spark-cds")


def wanted(cds):
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


def has_header(path, size=None):
    """A whole archive: HotSpot's header (written last) and, when known, the right size."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
            whole = size is None or os.fstat(f.fileno()).st_size == size
    except OSError:
        return False
    return whole and len(head) == 4 and int.from_bytes(head, sys.byteorder) == _MAGIC


def remove(path):
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


def _locked(directory):
    """The cache directory's lock: one process at a time looks at its files, claims a
    recording or marks one failed. Raises OSError when another process holds it for more
    than `_LOCK_WAIT_S`: a start then goes without the archive rather than wait."""
    return locked(directory, _LOCK_WAIT_S)


def _failures(mark):
    """How many recordings in a row failed, by the `.failed` mark `mark` (0: none)."""
    try:
        with open(mark, encoding="utf-8", errors="replace") as f:
            found = _FAILURES_LINE.match(f.readline())
    except FileNotFoundError:
        return 0
    except OSError:  # there, but unreadable: one failure, and the mark is written anew
        return 1
    return int(found.group(1)) if found else 1


def _retry_after(failures):
    """How long after its last failure a recording is tried again."""
    return _RETRY_S * 2 ** min(max(failures - 1, 0), _RETRY_DOUBLINGS)


def _mark_failed(stem_path, why):
    """Write `<stem>.failed` (under the lock): no recorder for this installation for
    `_retry_after` the failures in a row so far (this one included); the file says why."""
    mark = stem_path + ".failed"
    failures = _failures(mark) + 1
    draft = f"{mark}.{os.getpid()}.tmp"  # whole or not there: the count survives a kill
    with open(draft, "w", encoding="utf-8", errors="replace") as f:
        f.write(f"failures: {failures}\n{why}")
    os.replace(draft, mark)


def prepare(workdir, conf, spark_home):
    """The class-data options of a driver JVM started from `spark_home`: `(state,
    options, archive)`. `state` is "used" (`archive` is mapped), "scheduled" (none yet:
    this start goes without, and `archive` is the claimed `.part` file a recorder is to
    write) or "unavailable"."""
    java = _java()
    directory = archive_dir()
    if java is None or _UNSAFE.search(directory + workdir):
        return "unavailable", [], None
    feature = _java_feature(_java_release(java)[1])
    if feature is None or feature < _JAVA_MIN:
        return "unavailable", [], None  # older JVMs refuse the options, and would not start
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        stem = _archive_stem(java, conf, spark_home)
        with _locked(directory):
            return _state(directory, stem, workdir)
    except OSError:
        return "unavailable", [], None


def _state(directory, stem, workdir):
    """`prepare` with the directory locked."""
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
            if ready is None and size.isdigit() and has_header(path, int(size)):
                ready = path
            else:  # a second one, or not whole: the JVM could crash on a short file
                remove(path)
        elif name.startswith(stem + ".") and name.endswith(".part"):
            parts.append((path, age))
        elif name == stem + ".failed":  # kept until an archive is had: it counts
            failed |= age < _retry_after(_failures(path))
        elif name.endswith(".failed"):  # another installation's: its count, for a while
            if age > _UNUSED_S:
                remove(path)
        elif age > _UNUSED_S or (age > _WRITING_S and not has_header(path)):
            remove(path)  # another installation's, unused for long, or abandoned
    writing = False
    for part, age in parts:
        if has_header(part):  # written: taken once settled; a second one goes
            if ready is None and age >= _SETTLED_S:
                ready = _adopt(part, directory, stem)
            elif ready is None:
                writing = True
            else:
                remove(part)
        elif age > _WRITING_S:  # untouched for long: its recorder is gone
            remove(part)
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
    `_retry_after` the failures in a row. Nothing is marked when the archive was written
    after all, or when the claim is gone (a start found it abandoned and marked it)."""
    stem_path = part.rsplit(".", 2)[0]  # <stem>.<pid>-<token>.part
    with contextlib.suppress(OSError), _locked(os.path.dirname(part)):
        if has_header(part):
            return
        os.remove(part)
        _mark_failed(stem_path, why)


def start_recorder(part, master, conf, spark_home):
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
        remove(part)
        return None
    return recorder.pid, recorder.stdin


def identity(path):
    """(device, inode) of the file at `path`, or None."""
    try:
        st = os.stat(path) if path else None
    except OSError:
        return None
    return None if st is None else (st.st_dev, st.st_ino)


def check_after_start(handle, started_at):
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
                with _locked(os.path.dirname(archive)):
                    if os.stat(mark).st_mtime < started_at:
                        remove(mark)
            return
        handle.cds = "rejected"
        with open(log, encoding="utf-8", errors="replace") as f:
            why = "the driver JVM refused the archive:\n" + f.read(64 * 1024)
        with _locked(os.path.dirname(archive)):
            if identity(archive) == handle.cds_identity:
                remove(archive)
                _mark_failed(stem_path, why)
