"""What `kraftcore verify` reads: the nodes, their snapshot files and their metadata logs.

A *node* is one directory given to `--snapshots`. Every `.checkpoint` file below it, at any
depth, is one of that node's snapshots: point it at a node's metadata log directory
(`.../__cluster_metadata-0`), at its `metadata.log.dir`, or at a copy of either. Node names
are the directories' base names (`node-1`), or their full paths when two base names clash.

Hidden files and directories (names starting with ".") are not read. The files are listed
here, once, and both engines read exactly that list (Spark's own recursive listing would
skip `__cluster_metadata-0`: it hides names starting with "_"). A `.checkpoint` file whose name is not
a snapshot id (`bootstrap.checkpoint`) is checked for its format and content but takes no
part in the checks that need an id (nodes agree, log replay, epochs over time).

With `--logs`, each node's metadata log is the directory of `.log` segments found under the
`--logs` directory given in the same position as its `--snapshots` directory (or, with
`--logs` alone, under the node's own directory).

Every problem with the inputs is an `InputError` whose message is one line that says what
to do.
"""

import os
from typing import NamedTuple

from kraftcore.errors import KraftcoreError
from kraftcore.layout import SNAPSHOT_SUFFIX
from kraftcore.spark.replay import find_log_dir

__all__ = ["InputError", "Node", "discover_nodes", "list_snapshot_files"]


class InputError(KraftcoreError):
    """A user error in what `kraftcore verify` was asked to read."""


class Node(NamedTuple):
    name: str
    root: str  # the directory given, absolute
    files: tuple  # absolute paths of its .checkpoint files, sorted
    log_dir: str = None  # the metadata log directory, with --logs


def _hidden(name):
    return name.startswith(".")


def list_snapshot_files(root):
    """Every `.checkpoint` file under `root` (absolute paths, sorted), hidden names left
    out."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not _hidden(d)]
        for name in filenames:
            if name.endswith(SNAPSHOT_SUFFIX) and not _hidden(name):
                path = os.path.join(dirpath, name)
                if os.path.isfile(path):
                    found.append(path)
    return tuple(sorted(found))


def _directory(path, what):
    if not os.path.exists(path):
        raise InputError(f"{what} {path}: no such directory")
    if not os.path.isdir(path):
        raise InputError(f"{what} {path} is not a directory")
    if not os.access(path, os.R_OK | os.X_OK):
        raise InputError(f"{what} {path} cannot be read (permission denied)")
    return os.path.abspath(path)


def _names(roots):
    names = [os.path.basename(r.rstrip(os.sep)) or r for r in roots]
    if len(set(names)) != len(names):
        return list(roots)
    return names


def discover_nodes(snapshot_dirs, log_dirs=None):
    """The `Node`s to verify. `log_dirs`: None (no log replay), an empty list (each node's
    log is under its own directory) or one directory per snapshot directory, in order."""
    if not snapshot_dirs:
        raise InputError("give at least one snapshot directory (--snapshots DIR)")
    roots = [_directory(d, "snapshot directory") for d in snapshot_dirs]
    for i, a in enumerate(roots):
        for b in roots[i + 1:]:
            if a == b:
                raise InputError(f"snapshot directory {a} is given twice")
            inner, outer = (a, b) if len(a) > len(b) else (b, a)
            if inner.startswith(outer.rstrip(os.sep) + os.sep):
                raise InputError(f"snapshot directory {inner} is inside {outer}: a node is one "
                                 "directory, give each node's directory once")
    if log_dirs is not None and log_dirs and len(log_dirs) != len(roots):
        raise InputError(f"--logs names {len(log_dirs)} directories for {len(roots)} "
                         "--snapshots directories: give one log directory per snapshot "
                         "directory, in the same order (or --logs alone when each node's "
                         "log is in its snapshot directory)")
    names = _names(roots)
    nodes = []
    for i, (name, root) in enumerate(zip(names, roots)):
        files = list_snapshot_files(root)
        if not files:
            raise InputError(f"no .checkpoint file under {root} (snapshot files are named "
                             "<end offset>-<epoch>.checkpoint and live in the node's "
                             "__cluster_metadata-0 directory)")
        log_dir = None
        if log_dirs is not None:
            where = _directory(log_dirs[i], "log directory") if log_dirs else root
            try:
                log_dir = find_log_dir(where)
            except ValueError as exc:
                raise InputError(str(exc)) from None
            if log_dir is None:
                raise InputError(f"no metadata log under {where}: expected .log segments "
                                 "named <base offset, 20 digits>.log (in __cluster_metadata-0)")
        nodes.append(Node(name, root, files, log_dir))
    return nodes
