"""Fixtures of the verification tests: the cluster directories they check, and ONE Spark
session for the whole run.

`cluster` is parametrized by *source*: `local-quorum`, a real QuorumController (over
`kraftcore.controller.local.LocalQuorum`) whose metadata log is copied to three nodes, each
snapshotting it at its own offsets (`kraftcore.spark.sample`), which gives every damage of
`tests/spark/util.damage_all` a place to go. The snapshots of a simulator run and of a real
local cluster are checked in `test_sources.py`.
"""

import os

import pytest

from kraftcore.spark.sample import write_sample_cluster


def _local_quorum(directory):
    return write_sample_cluster(str(directory), nodes=3, topics=6, partitions=3)


SOURCES = {
    "local-quorum": _local_quorum,
}


@pytest.fixture(scope="session", params=sorted(SOURCES))
def cluster(request, tmp_path_factory):
    """A clean set of node directories (read-only: tests that damage files copy it)."""
    return SOURCES[request.param](tmp_path_factory.mktemp(f"cluster-{request.param}"))


@pytest.fixture(scope="session", autouse=True)
def spark_cache(tmp_path_factory):
    """Spark's class-data archive (kraftcore.spark.cds) goes to a cache directory of
    the run, not the user's: every Spark this run starts, in this process or a child,
    reads XDG_CACHE_HOME."""
    saved = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg-cache"))
    yield
    if saved is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = saved


@pytest.fixture(scope="session")
def spark():
    """The one SparkSession of the run: local[2], quiet, bound to 127.0.0.1."""
    import kraftcore.spark as ks

    missing = ks.missing_requirements()
    if missing:
        pytest.fail(f"the spark tests need {', '.join(missing)}: {ks.INSTALL_HINT} "
                    "(pyspark's mapInArrow needs pandas too)")
    from kraftcore.spark.session import build_session

    # No class-data archive: it would be recorded by a process of its own after this run.
    handle = build_session("local[2]", app_name="kraftcore-tests", cds=False)
    yield handle.session
    handle.stop()
