"""Verifying KRaft metadata at scale: `kraftcore verify` and its PySpark job.

Many snapshot files (every node's, over time) are decoded in parallel by kraftcore's native
decoder inside Spark executors, turned into DataFrames (snapshots, brokers, topics,
partitions, configs) and checked: the bytes (CRC, header first, footer last), the nodes
against each other (the same snapshot id holds the same records everywhere), each snapshot
against its node's metadata log, the partition invariants (leader in the ISR, the ISR within
the replicas, replicas registered), unique topics, and epochs that never go back.

Modules:

* `checks`   what each check means; decoding and checking one file; the pure cross-file
             logic (no Spark).
* `replay`   the read-only metadata log reader and the `log-replay` check.
* `inputs`   which nodes, files and logs are read.
* `job`      the Spark job (mapInArrow over binaryFile, Spark SQL for cross-file checks).
* `local`    the same checks in one process (the reference, and the benchmark's baseline).
* `session`  starting Spark quietly (or on a cluster).
* `home`     the Spark installation the embedded driver starts from (without MLlib).
* `recorder` records the embedded driver's class-data archive, in the background.
* `report`   the result, as text and JSON.
* `sample`   sample node directories to try it on.

Spark is optional: `pip install 'kraftcore[spark]'`. `missing_requirements()` says what
is missing.
"""

import importlib.util
import os
import shutil

__all__ = ["missing_requirements", "java_missing", "INSTALL_HINT"]

INSTALL_HINT = "pip install 'kraftcore[spark]'"
# pyspark's mapInArrow goes through its pandas UDF machinery, which needs pandas too.
_REQUIRED = ("pyspark", "pyarrow", "pandas")


def missing_requirements():
    """The Python packages the Spark job needs that are not installed (import names)."""
    return [name for name in _REQUIRED if importlib.util.find_spec(name) is None]


def java_missing():
    """Why no Java runtime can be found for Spark (None when one can)."""
    home = os.environ.get("JAVA_HOME")
    if home:
        if os.path.exists(os.path.join(home, "bin", "java")):
            return None
        return f"JAVA_HOME is {home}, but {os.path.join(home, 'bin', 'java')} does not exist"
    if shutil.which("java"):
        return None
    return "no java on the PATH and JAVA_HOME is not set"
