"""The cyclic garbage collector's settings in a node process (`kraftcore start`).

A busy node holds a working set of short-lived objects: with 1024 operations in flight, each
one's request, records, future and callbacks live for one commit (a few to a hundred
milliseconds) and are freed by reference counting, in no cycle. CPython's default first
threshold (700 net container allocations) runs a young collection several times per
commit, so that working set survives, is promoted, and is rescanned by the older
collections: on the active controller under that load the collector took 15-20% of the
event loop (`docs/benchmarks.md`). And every full collection walks the image and the
modules loaded at start.

`settle()`, called once the node has started (its image loaded): collect what start-up left,
move every object alive then out of the collector's reach (`gc.freeze()`: they are never
scanned again, and are still freed by reference counting when no longer used), and raise
the first threshold to `YOUNG_THRESHOLD`, above the working set, so that young collections
run only when container objects really accumulate. What is in reference cycles is still
collected, only later: up to `YOUNG_THRESHOLD` new container objects wait for a
collection. The older generations keep their thresholds.

Only the process's owner calls it: `kraftcore start` does; a `Node` embedded in another
program leaves that program's collector alone.
"""

import gc

__all__ = ["YOUNG_THRESHOLD", "settle"]

YOUNG_THRESHOLD = 50_000


def settle():
    """Freeze what start-up left alive and raise the young threshold (see the module
    docstring); a threshold already higher (or 0, the collector's automatic runs off) is
    kept."""
    gc.collect()
    gc.freeze()
    young, older, oldest = gc.get_threshold()
    if young and young < YOUNG_THRESHOLD:
        gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
