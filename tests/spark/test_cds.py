"""The driver's class-data archive (`kraftcore.spark.cds`, `kraftcore.spark.recorder`), as
`kraftcore.spark.session.build_session` starts with it: recorded in the background after
the first start of an installation, used by the next ones, never a reason for the JVM not
to start, and off with KRAFTCORE_SPARK_CDS=0. And the driver's JIT options, which the
user's own override.

Each Spark start here is a process of its own (the archive is read when a JVM starts and
written when it exits) with its own cache directory (XDG_CACHE_HOME); a test that lets a
recorder write an archive waits for the recorder to exit.
"""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from kraftcore.spark import cds, session
from kraftcore.spark.home import driver_home, real_home

pytestmark = pytest.mark.spark

START = """
import json, sys
from pyspark import SparkContext
from kraftcore.spark.session import build_session
conf = json.loads(sys.argv[1])
handle = build_session("local[2]", conf=conf)
assert handle.session.range(5).count() == 5
jvm = SparkContext._gateway.jvm
vm = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
    jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean"))
jit = {name: vm.getVMOption(name).getValue()
       for name in ("Tier4InvocationThreshold", "Tier4BackEdgeThreshold")}
print(json.dumps({"cds": handle.cds, "archive": handle.cds_archive,
                  "recorder": handle.cds_recorder, "jit": jit}))
handle.stop()
"""


def _env(cache, **extra):
    env = {k: v for k, v in os.environ.items() if k != cds.CDS_ENV}
    return {**env, "XDG_CACHE_HOME": str(cache), **extra}


def _start(cache, conf=None, **env):
    """Start and stop Spark in a new process; what `build_session` said about the archive
    (its state, the archive, the recorder's pid) and the driver's JIT options."""
    result = subprocess.run([sys.executable, "-c", START, json.dumps(conf or {})],
                            env=_env(cache, **env), capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def _wait_exited(pid, timeout=600):
    """Until the process is gone (or a zombie): the recorder, which exits once its JVM
    has written the archive."""
    if not cds.wait_for_exit(pid, timeout):
        pytest.fail(f"the recorder {pid} still runs after {timeout} s")


def _files(cache):
    directory = os.path.join(cache, "kraftcore", "spark-cds")
    return sorted(os.listdir(directory)) if os.path.isdir(directory) else []


def _home():
    """Where a start with this process's XDG_CACHE_HOME runs the driver from."""
    return driver_home() or real_home()


def _stem():
    return cds._archive_stem(cds._java(), {}, _home())


def test_the_archive_is_written_once_then_used(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))  # for _stem()
    first = _start(cache)
    assert first["cds"] == "scheduled" and first["recorder"] is not None
    part = first["archive"]
    assert os.path.basename(part).startswith(_stem() + ".") and part.endswith(".part")
    # Claimed: a start meanwhile goes without and starts no second recorder.
    meanwhile = _start(cache)
    assert (meanwhile["cds"], meanwhile["recorder"]) == ("unavailable", None)
    _wait_exited(first["recorder"])
    assert _files(cache) == [os.path.basename(part)] and cds.has_header(part)
    time.sleep(cds._SETTLED_S + 0.5)  # a start takes a .part file once it has settled

    loaded = tmp_path / "class-load.log"
    second = _start(cache, {"spark.driver.extraJavaOptions":
                            f"-Xlog:class+load=info:file={loaded}"})
    assert second["cds"] == "used"
    archive = second["archive"]
    assert _files(cache) == [os.path.basename(archive)]
    assert archive.endswith(f"-{os.path.getsize(archive)}.jsa")
    # The JVM took Spark's classes from the archive instead of the jars.
    from_archive = [line for line in loaded.read_text().splitlines()
                    if "org.apache.spark.SparkContext " in line]
    assert from_archive and all("shared objects file (top)" in line
                                for line in from_archive), from_archive

    inode = os.stat(archive).st_ino
    third = _start(cache)
    assert third["cds"] == "used" and third["archive"] == archive
    assert os.stat(archive).st_ino == inode  # used again, not written again


def test_a_foreign_archive_is_refused_deleted_and_spark_starts(tmp_path, monkeypatch):
    """An archive the JVM will not map (another program's: Spark's launcher alone, another
    class path) under this installation's name: the JVM says so, starts anyway, and the
    archive is deleted so that the next start writes a proper one."""
    import pyspark

    jars = os.path.join(os.path.dirname(pyspark.__file__), "jars")
    launcher = next(os.path.join(jars, n) for n in os.listdir(jars)
                    if n.startswith("spark-launcher_"))
    foreign = tmp_path / "foreign.jsa"
    subprocess.run([cds._java(), f"-XX:ArchiveClassesAtExit={foreign}", "-Xlog:cds*=off",
                    "-cp", launcher, "org.apache.spark.launcher.Main"],
                   capture_output=True, timeout=120)
    assert foreign.read_bytes()[:4] == (0xF00BABA8).to_bytes(4, sys.byteorder)
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))  # for _stem()
    directory = cache / "kraftcore" / "spark-cds"
    directory.mkdir(parents=True)
    planted = directory / f"{_stem()}-{foreign.stat().st_size}.jsa"
    planted.write_bytes(foreign.read_bytes())

    started = _start(cache)
    assert started["cds"] == "rejected" and started["archive"] == str(planted)
    assert not planted.exists()


@pytest.mark.parametrize("damage", ["half", "no-header", "empty", "size-not-a-number"])
def test_an_archive_that_is_not_whole_is_deleted_before_the_jvm_starts(tmp_path,
                                                                       monkeypatch,
                                                                       damage):
    """A truncated archive would crash the JVM (SIGBUS): it never gets to see one."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    directory = tmp_path / "kraftcore" / "spark-cds"
    directory.mkdir(parents=True)
    header = (0xF00BABA8).to_bytes(4, sys.byteorder)
    name, content = {
        "half": (f"{_stem()}-8192.jsa", header + bytes(4092)),
        "no-header": (f"{_stem()}-4096.jsa", bytes(4096)),
        "empty": (f"{_stem()}-0.jsa", b""),
        "size-not-a-number": (f"{_stem()}-x.jsa", header + bytes(4092)),
    }[damage]
    (directory / name).write_bytes(content)
    workdir = tmp_path / "work"
    workdir.mkdir()
    state, options, archive = cds.prepare(str(workdir), {}, _home())
    assert (state, options) == ("scheduled", [])
    # Only the claim of a new recording is left: an empty .part file.
    assert os.listdir(directory) == [os.path.basename(archive)]
    assert archive.endswith(".part") and os.path.getsize(archive) == 0


def test_a_part_file_is_taken_once_complete_and_left_alone_while_written(tmp_path,
                                                                         monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    directory = tmp_path / "kraftcore" / "spark-cds"
    directory.mkdir(parents=True)
    workdir = tmp_path / "work"
    workdir.mkdir()
    part = directory / f"{_stem()}.123-abcd.part"
    part.write_bytes(bytes(4096))  # no header yet: a JVM is still writing it
    assert cds.prepare(str(workdir), {}, _home()) == ("unavailable", [], None)
    assert part.exists()

    header = (0xF00BABA8).to_bytes(4, sys.byteorder)
    part.write_bytes(header + bytes(4092))
    settled = time.time() - 10
    os.utime(part, (settled, settled))
    state, options, archive = cds.prepare(str(workdir), {}, _home())
    assert state == "used" and archive == str(directory / f"{_stem()}-4096.jsa")
    assert options[0] == f"-XX:SharedArchiveFile={archive}"
    assert os.listdir(directory) == [os.path.basename(archive)]


def test_a_recorder_waits_for_its_starter_then_a_failure_leaves_a_mark(tmp_path,
                                                                      monkeypatch):
    """The recorder does nothing while the process that started Spark still has it open
    (its pipe). Then Spark does not start in it (here: a heap the JVM refuses): no
    archive, the claim becomes a `.failed` mark saying why, and no start schedules another
    recorder until `_RETRY_S` has passed."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    workdir = tmp_path / "work"
    workdir.mkdir()
    state, _, part = cds.prepare(str(workdir), {}, _home())
    assert state == "scheduled"
    pid, pipe = cds.start_recorder(part, "local[1]",
                                  {"spark.driver.extraJavaOptions": "-Xms4g"}, _home())
    directory = tmp_path / "kraftcore" / "spark-cds"
    time.sleep(3)
    assert not cds.wait_for_exit(pid, 0.1)  # still waiting for the pipe's end
    assert os.listdir(directory) == [os.path.basename(part)]
    pipe.close()
    _wait_exited(pid, timeout=300)
    mark = directory / f"{_stem()}.failed"
    assert os.listdir(directory) == [mark.name]
    assert "SparkStartError" in mark.read_text() and "spark.log" in mark.read_text()

    assert cds.prepare(str(workdir), {}, _home()) == ("unavailable", [], None)
    assert mark.exists()
    assert mark.read_text().startswith("failures: 1\n")
    long_ago = time.time() - cds._RETRY_S - 1
    os.utime(mark, (long_ago, long_ago))
    state, _, part = cds.prepare(str(workdir), {}, _home())
    assert state == "scheduled"
    assert sorted(os.listdir(directory)) == sorted([os.path.basename(part), mark.name])


def test_failures_in_a_row_wait_longer_each_time_until_an_archive_is_taken(tmp_path,
                                                                          monkeypatch):
    """A failure that keeps coming back (a JDK that refuses every archive) costs one
    background recording after 1, 2, 4, ... hours, at most 128; an archive the JVM takes
    ends the run (no JVM here: its cds.log is written by hand)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    workdir = tmp_path / "work"
    workdir.mkdir()
    directory = tmp_path / "kraftcore" / "spark-cds"
    directory.mkdir(parents=True)
    stem_path = str(directory / _stem())
    mark = directory / f"{_stem()}.failed"
    for failures in (1, 2, 3):
        cds._mark_failed(stem_path, "refused\n")
        assert mark.read_text() == f"failures: {failures}\nrefused\n"
    assert [cds._retry_after(n) / 3600 for n in (1, 2, 3, 8, 9, 50)] == [1, 2, 4, 128, 128, 128]

    def state_after(hours):
        then = time.time() - hours * 3600
        os.utime(mark, (then, then))
        state, _, part = cds.prepare(str(workdir), {}, _home())
        if part:
            os.remove(part)
        return state

    assert state_after(3.9) == "unavailable"  # 3 in a row: 4 hours
    assert state_after(4.1) == "scheduled"
    mark.write_text("an older mark, no count\n")  # counts as one failure
    assert state_after(0.9) == "unavailable" and state_after(1.1) == "scheduled"
    cds._mark_failed(stem_path, "again\n")
    assert mark.read_text().startswith("failures: 2\n")

    # Another installation's mark is kept (its count) for 30 days.
    other = directory / "spark-driver-other.failed"
    other.write_text("failures: 5\n")
    then = time.time() - 2 * 86400
    os.utime(other, (then, then))
    assert state_after(0) == "unavailable" and other.exists()
    then = time.time() - cds._UNUSED_S - 60
    os.utime(other, (then, then))
    state_after(0)
    assert not other.exists()

    # An archive the JVM took (nothing in its cds.log): the failures are over.
    archive = directory / f"{_stem()}-4096.jsa"
    archive.write_bytes((0xF00BABA8).to_bytes(4, sys.byteorder) + bytes(4092))
    state, _, given = cds.prepare(str(workdir), {}, _home())
    assert state == "used" and given == str(archive) and mark.exists()
    (workdir / "cds.log").write_text("")
    handle = session.SparkHandle(None, str(workdir), None, owned=False, cds="used",
                           cds_archive=given)
    handle.cds_identity = cds.identity(given)
    written = os.stat(mark).st_mtime
    cds.check_after_start(handle, written - 10)  # marked since this start began: another's refusal
    assert handle.cds == "used" and mark.exists()
    cds.check_after_start(handle, written + 10)
    assert handle.cds == "used" and not mark.exists() and archive.exists()

    # A mark that cannot be read counts as one failure; the next one replaces it.
    os.mkdir(mark)
    assert cds._failures(str(mark)) == 1
    os.rmdir(mark)
    os.mkdir(str(mark) + ".1.tmp")  # a draft left by a killed process is no mark
    assert cds._failures(str(mark)) == 0


def test_a_claim_left_untouched_is_taken_for_abandoned(tmp_path, monkeypatch):
    """A recorder touches its claim; one untouched for `_WRITING_S` lost its recorder
    (killed, a reboot): marked failed, so that a recorder that cannot survive here is not
    started again at once."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    workdir = tmp_path / "work"
    workdir.mkdir()
    _, _, part = cds.prepare(str(workdir), {}, _home())
    assert cds.prepare(str(workdir), {}, _home()) == ("unavailable", [], None)  # still young
    long_ago = time.time() - cds._WRITING_S - 1
    os.utime(part, (long_ago, long_ago))
    assert cds.prepare(str(workdir), {}, _home()) == ("unavailable", [], None)
    directory = tmp_path / "kraftcore" / "spark-cds"
    mark = directory / f"{_stem()}.failed"
    assert os.listdir(directory) == [mark.name]
    assert "stopped without writing the archive" in mark.read_text()


def test_a_start_goes_without_when_another_holds_the_cache_lock(tmp_path, monkeypatch):
    import fcntl

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(cds, "_LOCK_WAIT_S", 0.2)
    directory = tmp_path / "kraftcore" / "spark-cds"
    directory.mkdir(parents=True)
    workdir = tmp_path / "work"
    workdir.mkdir()
    holder = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        assert cds.prepare(str(workdir), {}, _home()) == ("unavailable", [], None)
    finally:
        os.close(holder)
    assert cds.prepare(str(workdir), {}, _home())[0] == "scheduled"


def test_the_off_switch(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    started = _start(cache, **{cds.CDS_ENV: "0"})
    assert started["cds"] == "off" and started["archive"] is None
    assert not (cache / "kraftcore" / "spark-cds").exists()  # (the home's view is there)
    for value in ("0", "off", "false", "no", "OFF"):
        monkeypatch.setenv(cds.CDS_ENV, value)
        assert not cds.wanted(None)
    monkeypatch.setenv(cds.CDS_ENV, "1")
    assert cds.wanted(None) and not cds.wanted(False)
    monkeypatch.delenv(cds.CDS_ENV)
    assert cds.wanted(None)


def test_the_driver_jit_options_and_the_users_own_after_them(tmp_path):
    """The embedded driver runs with C2's thresholds raised (`_DRIVER_JIT`); a value the
    user gives in spark.driver.extraJavaOptions comes after them and wins."""
    ours = _start(tmp_path / "cache", **{cds.CDS_ENV: "0"})["jit"]
    assert ours == {"Tier4InvocationThreshold": "20000", "Tier4BackEdgeThreshold": "400000"}
    theirs = _start(tmp_path / "cache",
                    {"spark.driver.extraJavaOptions": "-XX:Tier4InvocationThreshold=5000"},
                    **{cds.CDS_ENV: "0"})["jit"]
    assert theirs == {"Tier4InvocationThreshold": "5000", "Tier4BackEdgeThreshold": "400000"}


def test_the_java_feature_release():
    assert [cds._java_feature(v) for v in ("17.0.15", "1.8.0_392", "11.0.2", "21", "", None)] \
        == [17, 8, 11, 21, None, None]


@pytest.mark.parametrize("version", ['"1.8.0_392"', '"11.0.2"', "unknown"])
def test_a_jvm_older_than_13_gets_no_archive_options(tmp_path, monkeypatch, version):
    """JDK 8 refuses -Xlog and JDK 11 -XX:ArchiveClassesAtExit: the JVM would not start."""
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "java").write_text("#!/bin/sh\n")
    (home / "bin" / "java").chmod(0o755)
    (home / "release").write_text(f"JAVA_VERSION={version}\n" if version != "unknown" else "")
    monkeypatch.setenv("JAVA_HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    workdir = tmp_path / "work"
    workdir.mkdir()
    assert cds.prepare(str(workdir), {}, real_home()) == ("unavailable", [], None)
    assert not (tmp_path / "cache").exists()


def test_a_start_that_fails_keeps_and_names_its_log_and_drops_the_archive(tmp_path,
                                                                          monkeypatch):
    """No JVM here: Spark's getOrCreate is made to fail as a JVM that dies at start does,
    after writing to its output (the log, in quiet mode). $SPARK_HOME is the driver's
    view only while it starts, whatever happens."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("SPARK_HOME", raising=False)
    homes = []
    monkeypatch.delenv(cds.CDS_ENV, raising=False)
    monkeypatch.setattr(SparkContext, "_gateway", None)
    monkeypatch.setattr(SparkContext, "_active_spark_context", None)
    directory = tmp_path / "kraftcore" / "spark-cds"
    directory.mkdir(parents=True)
    archive = directory / f"{_stem()}-4096.jsa"
    archive.write_bytes((0xF00BABA8).to_bytes(4, sys.byteorder) + bytes(4092))

    def dies(builder):
        homes.append(os.environ.get("SPARK_HOME"))
        os.write(1, b"the JVM's last words\n")
        raise RuntimeError("Java gateway process exited before sending its port number")

    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", dies)
    with pytest.raises(session.SparkStartError) as info:
        session.build_session("local[1]")
    assert str(info.value) == "Java gateway process exited before sending its port number"
    log = info.value.log_path
    with open(log) as f:
        assert "the JVM's last words" in f.read()
    assert not archive.exists()  # used by the start that failed: the next one records anew
    assert homes == [driver_home()] and "SPARK_HOME" not in os.environ
    shutil.rmtree(os.path.dirname(log))
    # No archive: this start claims a recording; failing, it gives the claim up (and
    # starts no recorder).
    with pytest.raises(session.SparkStartError) as info:
        session.build_session("local[1]")
    assert os.listdir(directory) == []
    shutil.rmtree(os.path.dirname(info.value.log_path))
    # The user's own class-data options: kraftcore's stay out (no claim either).
    monkeypatch.setenv("SPARK_HOME", real_home())
    for option in ("-Xshare:off", "-XX:SharedArchiveFile=/tmp/theirs.jsa"):
        seen = {}
        monkeypatch.setattr(SparkSession.Builder, "getOrCreate",
                            lambda builder: seen.update(builder._options) or dies(builder))
        with pytest.raises(session.SparkStartError) as info:
            session.build_session("local[1]", conf={"spark.driver.extraJavaOptions": option})
        assert os.listdir(directory) == []
        options = seen["spark.driver.extraJavaOptions"]
        assert option in options and "ArchiveClassesAtExit" not in options
        assert options.count("SharedArchiveFile") == option.count("SharedArchiveFile")
        assert homes[-1] == driver_home() and os.environ["SPARK_HOME"] == real_home()
        shutil.rmtree(os.path.dirname(info.value.log_path))


@pytest.mark.parametrize("replaced", [False, True])
def test_an_archive_the_jvm_refused_is_dropped_unless_another_took_its_place(tmp_path,
                                                                             replaced):
    archive = tmp_path / "stem-25.jsa"
    archive.write_bytes(b"the one the JVM was given")
    (tmp_path / "cds.log").write_text("[warning][cds] the archive was refused\n")
    handle = session.SparkHandle(None, str(tmp_path), None, owned=False, cds="used",
                           cds_archive=str(archive))
    handle.cds_identity = cds.identity(str(archive))
    if replaced:  # another process put a new archive under the same name since
        (tmp_path / "new.jsa").write_bytes(b"a newer one")
        os.replace(tmp_path / "new.jsa", archive)
    cds.check_after_start(handle, time.time())
    assert handle.cds == "rejected"
    assert archive.exists() == replaced
    # Dropped: no new recording for a while (the reason may be in the settings), and why.
    mark = tmp_path / "stem.failed"
    assert mark.exists() != replaced
    if not replaced:
        assert "the archive was refused" in mark.read_text()
