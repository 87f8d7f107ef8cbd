"""Fixtures of the verification tests: the cluster directories they check, and ONE Spark
session for the whole run.

`cluster` is parametrized by *source*: `local-quorum`, a real QuorumController (over
`kraftcore.sim.local.LocalQuorum`) whose metadata log is copied to three nodes, each
snapshotting it at its own offsets (`kraftcore.spark.sample`), which gives every damage of
`tests/spark/util.damage_all` a place to go. The snapshots of a simulator run and of a real
local cluster are checked in `test_sources.py`.
"""

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


@pytest.fixture(scope="session")
def spark():
    """The one SparkSession of the run: local[2], quiet, bound to 127.0.0.1."""
    import kraftcore.spark as ks

    missing = ks.missing_requirements()
    if missing:
        pytest.fail(f"the spark tests need {', '.join(missing)}: {ks.INSTALL_HINT} "
                    "(pyspark's mapInArrow needs pandas too)")
    from kraftcore.spark.session import build_session

    handle = build_session("local[2]", app_name="kraftcore-tests")
    yield handle.session
    handle.stop()
