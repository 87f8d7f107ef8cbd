"""The Spark home the embedded driver starts from (`kraftcore.spark.home`): a view of the
installation without MLlib's jar, made once per installation, made again when it changes
or is damaged, cleaned up when unused, and never a reason for a start to fail.

Most tests use a small fake installation (a few empty files): the view only links to it.
The last one looks at the run's real driver.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest

from kraftcore.spark import home as H
from kraftcore.spark.cache import locked

DAY = 86400.0


@pytest.fixture
def cache(tmp_path, monkeypatch):
    path = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(path))
    return path


def _installation(path, jars=("spark-core_2.13-4.3.0.jar", "spark-mllib_2.13-4.3.0.jar",
                              "spark-mllib-local_2.13-4.3.0.jar", "scala-reflect-2.13.jar")):
    for directory in ("bin", "conf", "python", "jars"):
        (path / directory).mkdir(parents=True)
    (path / "bin" / "spark-submit").write_text("#!/bin/sh\n")
    (path / "RELEASE").write_text("Spark 4.3.0\n")
    for jar in jars:
        (path / "jars" / jar).write_bytes(jar.encode())
    return path


def _tree(path):
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def test_a_view_links_every_entry_and_every_jar_but_mllibs(tmp_path, cache):
    real = _installation(tmp_path / "spark")
    before = _tree(real)
    view = H.driver_home(str(real))
    assert view is not None and os.path.dirname(view) == H.views_dir()
    assert H.views_dir() == str(cache / "kraftcore" / "spark-home")
    assert sorted(os.listdir(view)) == ["RELEASE", "bin", "conf", "jars", "python"]
    for name in ("RELEASE", "bin", "conf", "python"):
        assert os.readlink(os.path.join(view, name)) == str(real / name)
    assert not os.path.islink(os.path.join(view, "jars"))
    assert sorted(os.listdir(os.path.join(view, "jars"))) == [
        "scala-reflect-2.13.jar", "spark-core_2.13-4.3.0.jar",
        "spark-mllib-local_2.13-4.3.0.jar"]
    with open(os.path.join(view, "jars", "spark-core_2.13-4.3.0.jar"), "rb") as f:
        assert f.read() == b"spark-core_2.13-4.3.0.jar"  # a link to the real jar
    assert _tree(real) == before  # the installation is never touched


def test_the_view_is_used_again_until_the_installation_changes(tmp_path, cache):
    real = _installation(tmp_path / "spark")
    view = H.driver_home(str(real), now=1_000_000.0)
    inode = os.stat(view).st_ino
    assert H.driver_home(str(real), now=1_000_100.0) == view
    assert os.stat(view).st_ino == inode and os.stat(view).st_mtime == 1_000_100.0

    (real / "jars" / "spark-core_2.13-4.3.0.jar").write_bytes(b"an upgrade, another size")
    upgraded = H.driver_home(str(real), now=1_000_200.0)
    assert upgraded != view and os.path.isdir(view)  # the old one may still be running
    (real / "jars" / "delta-spark_2.13-4.0.jar").write_bytes(b"a jar of the user's")
    added = H.driver_home(str(real), now=1_000_300.0)
    assert added not in (view, upgraded)
    assert "delta-spark_2.13-4.0.jar" in os.listdir(os.path.join(added, "jars"))

    # Unused for 30 days: deleted by the next start (links only: the jars stay).
    H.driver_home(str(real), now=1_000_300.0 + 31 * DAY)
    assert sorted(os.listdir(H.views_dir())) == [os.path.basename(added)]
    assert (real / "jars" / "spark-mllib_2.13-4.3.0.jar").exists()


def test_entries_that_come_and_go_are_linked_in_place(tmp_path, cache):
    """Spark's own scripts create `logs/` and `work/` in its home: the same view (and so
    the same class path for the archive) follows them."""
    real = _installation(tmp_path / "spark")
    view = H.driver_home(str(real))
    (real / "logs").mkdir()
    assert H.driver_home(str(real)) == view
    assert os.readlink(os.path.join(view, "logs")) == str(real / "logs")
    (real / "logs").rmdir()
    (real / "RELEASE").unlink()
    assert H.driver_home(str(real)) == view
    assert sorted(os.listdir(view)) == ["bin", "conf", "jars", "python"]


def test_a_damaged_view_is_moved_aside_and_made_again(tmp_path, cache):
    real = _installation(tmp_path / "spark")
    view = H.driver_home(str(real), now=1_000_000.0)
    jar = os.path.join(view, "jars", "scala-reflect-2.13.jar")
    os.remove(jar)
    os.symlink(str(tmp_path / "elsewhere.jar"), jar)  # a link changed by hand
    assert H.driver_home(str(real), now=1_000_000.0) == view
    assert os.readlink(jar) == str(real / "jars" / "scala-reflect-2.13.jar")
    aside = [n for n in os.listdir(H.views_dir()) if n.endswith(".tmp")]
    assert len(aside) == 1 and aside[0].startswith(os.path.basename(view) + ".")
    os.utime(os.path.join(H.views_dir(), aside[0]), (1_000_000.0, 1_000_000.0))
    H.driver_home(str(real), now=1_000_000.0 + 1800)
    assert len(os.listdir(H.views_dir())) == 2  # half an hour: left alone
    H.driver_home(str(real), now=1_000_000.0 + 7200)
    assert os.listdir(H.views_dir()) == [os.path.basename(view)]  # two hours: deleted
    # Its `jars` made a link to the real one (MLlib's jar in it again): made anew.
    shutil.rmtree(os.path.join(view, "jars"))
    os.symlink(str(real / "jars"), os.path.join(view, "jars"))
    assert H.driver_home(str(real)) == view
    assert not os.path.islink(os.path.join(view, "jars"))
    assert "spark-mllib_2.13-4.3.0.jar" not in os.listdir(os.path.join(view, "jars"))
    # A top-level entry that is not a link of ours (a real directory): made anew.
    os.remove(os.path.join(view, "conf"))
    os.mkdir(os.path.join(view, "conf"))
    assert H.driver_home(str(real)) == view
    assert os.readlink(os.path.join(view, "conf")) == str(real / "conf")
    assert "spark-mllib_2.13-4.3.0.jar" in os.listdir(real / "jars")


def test_the_sweep_never_follows_a_link_into_the_installation(tmp_path, cache):
    real = _installation(tmp_path / "spark")
    before = _tree(real)
    root = H.views_dir()
    os.makedirs(root)
    old = 1_000_000.0
    for name, target in (("spark-0000000000000000", real),
                         ("spark-1111111111111111.1-ab.tmp", real / "jars"),
                         ("spark-2222222222222222", real / "RELEASE")):
        os.symlink(str(target), os.path.join(root, name))
        os.utime(os.path.join(root, name), (old, old), follow_symlinks=False)
    view = H.driver_home(str(real), now=old + 31 * DAY)
    assert os.listdir(root) == [os.path.basename(view)]  # the links went, not their targets
    assert _tree(real) == before


def test_a_start_goes_from_the_installation_while_the_views_are_locked(tmp_path, cache,
                                                                       monkeypatch):
    real = _installation(tmp_path / "spark")
    view = H.driver_home(str(real))
    monkeypatch.setattr(H, "_LOCK_WAIT_S", 0.2)
    with locked(H.views_dir(), 0):
        assert H.driver_home(str(real)) is None
    assert H.driver_home(str(real)) == view


def test_no_view_when_there_is_nothing_to_leave_out_or_no_place_for_it(tmp_path,
                                                                       monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    no_mllib = _installation(tmp_path / "plain", jars=("spark-core_2.13-4.3.0.jar",))
    assert H.driver_home(str(no_mllib)) is None
    no_jars = tmp_path / "build"
    no_jars.mkdir()
    assert H.driver_home(str(no_jars)) is None
    assert H.driver_home(str(tmp_path / "missing")) is None
    assert not (tmp_path / "cache").exists()

    real = _installation(tmp_path / "spark")
    (tmp_path / "not-a-directory").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "not-a-directory"))
    assert H.driver_home(str(real)) is None  # the start goes on from the installation


def test_the_embedded_driver_runs_without_mllib(spark):
    """The run's one session: started from a view in the run's cache, its class path has
    no MLlib (nor the SQL functions it registers), and this process's SPARK_HOME is as it
    was."""
    jvm = spark.sparkContext._jvm
    view = jvm.java.lang.System.getenv("SPARK_HOME")
    assert os.path.dirname(view) == H.views_dir()
    assert os.environ.get("SPARK_HOME") != view
    assert "spark-mllib_" not in jvm.java.lang.System.getProperty("java.class.path")
    with pytest.raises(Exception, match="ClassNotFoundException"):
        jvm.java.lang.Class.forName("org.apache.spark.sql.ml.InternalFunctionRegistration")
    assert spark.range(3).count() == 3


MLLIB = """
import json
from pyspark import SparkContext
from kraftcore.spark.home import real_home
from kraftcore.spark.session import build_session
handle = build_session("local[1]", cds=False, mllib=True)
jvm = SparkContext._gateway.jvm
jvm.java.lang.Class.forName("org.apache.spark.sql.ml.InternalFunctionRegistration")
print(json.dumps({"home": handle.spark_home, "real": real_home(),
                  "jvm": jvm.java.lang.System.getenv("SPARK_HOME")}))
handle.stop()
"""


def test_mllib_on_request(tmp_path):
    """`build_session(..., mllib=True)`: the driver starts from the installation itself,
    MLlib's classes there; no view is made."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    result = subprocess.run([sys.executable, "-c", MLLIB], env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["home"] == seen["real"] == seen["jvm"]
    assert not (tmp_path / "cache" / "kraftcore" / "spark-home").exists()
