"""The Spark home the embedded driver starts from: the installation as it is, less the one
jar whose presence alone costs a start two seconds and which the job never uses.

MLlib's jar registers SQL functions with every new SparkSession: it declares a
`SparkSessionExtensionsProvider`, which Spark finds through Java's ServiceLoader on the
class path and always applies (no setting turns it off). Building those functions starts
Scala's runtime reflection and loads some 2,000 classes: on a 2-vCPU machine, 2.0 of the
5.4 s a driver takes to start without a class-data archive. `kraftcore verify` uses nothing
of MLlib. So the embedded driver runs from a view of the installation: a directory of
symbolic links to every entry of the real Spark home, whose `jars` links every jar but
MLlib's (`spark-mllib_*.jar`; `spark-mllib-local`, which registers nothing, stays).

* Where: `$XDG_CACHE_HOME/kraftcore/spark-home/spark-<digest>` (default `~/.cache/...`),
  one per installation: the digest covers the real home's path, its entries and its jars'
  names, sizes and times, so an upgrade gets a new view. The path stays the same from one
  start to the next, as the driver's class-data archive requires of its class path.
* A view is made in a private directory and renamed into place, so no start sees one half
  made; two starts making the same view at once both end up using the one renamed first.
  Views unused for 30 days are deleted (links only; the installation is never touched).
* When no view can be made (a read-only cache, no symbolic links, a home without `jars`),
  or the installation has no MLlib jar, the driver starts from the installation itself.
"""

import contextlib
import hashlib
import os
import re
import secrets
import shutil
import time

__all__ = ["real_home", "driver_home", "views_dir", "cache_dir"]

_LEFT_OUT = re.compile(r"spark-mllib_.*\.jar")  # the jar that declares the provider
_UNUSED_S = 30 * 86400.0  # a view unused this long is deleted
_ABANDONED_S = 3600.0  # a half-made view (its maker was killed) this old is deleted


def real_home():
    """The installation pyspark starts the driver from: $SPARK_HOME, else pyspark's own
    directory (a pip install)."""
    import pyspark

    return os.path.realpath(os.environ.get("SPARK_HOME")
                            or os.path.dirname(pyspark.__file__))


def cache_dir(name):
    """`$XDG_CACHE_HOME/kraftcore/<name>` (default `~/.cache/kraftcore/<name>`), absolute."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"),
                                                             ".cache")
    return os.path.abspath(os.path.join(base, "kraftcore", name))


def views_dir():
    return cache_dir("spark-home")


def driver_home(home=None, *, now=None):
    """The view of `home` (default `real_home()`) to start the driver from, made if need
    be; None when the driver is to start from `home` itself (see the module's docstring).
    Never raises OSError."""
    home = home or real_home()
    now = time.time() if now is None else now
    try:
        entries = sorted(os.listdir(home))
        jars = sorted(os.listdir(os.path.join(home, "jars")))
        kept = [jar for jar in jars if not _LEFT_OUT.fullmatch(jar)]
        if len(kept) == len(jars):
            return None
        digest = hashlib.sha256(repr((home, entries)).encode())
        for jar in jars:
            st = os.stat(os.path.join(home, "jars", jar))
            digest.update(repr((jar, st.st_size, st.st_mtime_ns)).encode())
        root = views_dir()
        os.makedirs(root, mode=0o700, exist_ok=True)
        view = os.path.join(root, f"spark-{digest.hexdigest()[:16]}")
        if not _whole(view, entries, kept):
            _make(view, home, entries, kept)
        os.utime(view, (now, now))  # its last use: what the clean-up goes by
        _sweep(root, view, now)
    except OSError:
        return None
    return view


def _whole(view, entries, kept):
    """Whether `view` is there with every link it should have."""
    try:
        return (sorted(os.listdir(view)) == entries
                and sorted(os.listdir(os.path.join(view, "jars"))) == kept)
    except OSError:
        return False


def _make(view, home, entries, kept):
    if os.path.lexists(view):  # not whole (links deleted by hand): made again
        shutil.rmtree(view)
    draft = f"{view}.{os.getpid()}-{secrets.token_hex(4)}.tmp"
    os.mkdir(draft, 0o700)
    try:
        for name in entries:
            if name != "jars":
                os.symlink(os.path.join(home, name), os.path.join(draft, name))
        os.mkdir(os.path.join(draft, "jars"))
        for jar in kept:
            os.symlink(os.path.join(home, "jars", jar), os.path.join(draft, "jars", jar))
        try:
            os.rename(draft, view)
        except OSError:
            if not _whole(view, entries, kept):  # not another start's view: a real error
                raise
    finally:
        shutil.rmtree(draft, ignore_errors=True)  # gone already once renamed


def _sweep(root, keep, now):
    """Delete views unused for `_UNUSED_S` and drafts abandoned for `_ABANDONED_S`."""
    for name in os.listdir(root):
        path = os.path.join(root, name)
        if path == keep or os.path.islink(path):
            continue
        with contextlib.suppress(OSError):
            age = now - os.stat(path).st_mtime
            if age > (_ABANDONED_S if name.endswith(".tmp") else _UNUSED_S):
                shutil.rmtree(path)
