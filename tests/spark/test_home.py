"""The Spark home the embedded driver starts from (`kraftcore.spark.home`): a view of the
installation without MLlib's jar, made once per installation, made again when it changes
or is damaged, cleaned up when unused, and never a reason for a start to fail.

Most tests use a small fake installation (a few empty files): the view only links to it.
The last one looks at the run's real driver.
"""

import os

import pytest

from kraftcore.spark import home as H

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


def test_a_damaged_view_is_made_again_and_an_abandoned_draft_goes(tmp_path, cache):
    real = _installation(tmp_path / "spark")
    view = H.driver_home(str(real), now=1_000_000.0)
    os.remove(os.path.join(view, "jars", "scala-reflect-2.13.jar"))
    os.remove(os.path.join(view, "conf"))
    draft = os.path.join(H.views_dir(), "spark-0123456789abcdef.99-cafe.tmp")
    os.mkdir(draft)
    os.utime(draft, (1_000_000.0, 1_000_000.0))
    assert H.driver_home(str(real), now=1_000_000.0 + 1800) == view
    assert "conf" in os.listdir(view)
    assert "scala-reflect-2.13.jar" in os.listdir(os.path.join(view, "jars"))
    assert os.path.isdir(draft)  # half an hour: its maker may still be at work
    H.driver_home(str(real), now=1_000_000.0 + 7200)
    assert not os.path.exists(draft)  # two hours: abandoned


def test_a_start_that_loses_the_race_uses_the_winners_view(tmp_path, cache, monkeypatch):
    real = _installation(tmp_path / "spark")
    rename = os.rename
    raced = []

    def another_start_first(src, dst):
        if not raced:  # the other start renames its own draft into place just before
            raced.append(dst)
            monkeypatch.setattr(os, "rename", rename)
            assert H.driver_home(str(real)) == dst
        rename(src, dst)

    monkeypatch.setattr(os, "rename", another_start_first)
    view = H.driver_home(str(real))
    assert raced == [view]
    assert os.listdir(H.views_dir()) == [os.path.basename(view)]  # no draft left behind
    assert "spark-mllib_2.13-4.3.0.jar" not in os.listdir(os.path.join(view, "jars"))


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
