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
  one per installation and set of jars: the digest covers the real home's path and its
  jars' names, sizes and times, so an upgrade gets a new view, while the path stays the
  same from one start to the next, as the driver's class-data archive requires of its
  class path. Other top-level entries that come and go (Spark's scripts create `logs/`
  and `work/`) are linked or unlinked in place.
* One process at a time looks at the views (the directory's lock, as for the archives;
  held elsewhere for over 2 s, this start goes from the installation itself). A view is
  made in a private directory and renamed into place, so none is ever seen half made; a
  damaged one (a link deleted or changed) is moved aside and made anew. Views unused for
  30 days are deleted, and what was moved aside or left half made after an hour (links
  only: the installation is never touched). A session kept running for 30 days with no
  other start in between may lose its view under it.
* When no view can be made (a read-only cache, no symbolic links, a home without `jars`),
  or the installation has no MLlib jar, the driver starts from the installation itself;
  so it does with `build_session(..., mllib=True)`.
"""

import contextlib
import hashlib
import os
import re
import secrets
import shutil
import time

from kraftcore.spark.cache import cache_dir, locked

__all__ = ["real_home", "driver_home", "views_dir"]

_LEFT_OUT = re.compile(r"spark-mllib_.*\.jar")  # the jar that declares the provider
_LOCK_WAIT_S = 2.0  # how long a start waits for the views directory's lock
_UNUSED_S = 30 * 86400.0  # a view unused this long is deleted
_ABANDONED_S = 3600.0  # a view moved aside or left half made this long ago is deleted


def real_home():
    """The installation pyspark starts the driver from: $SPARK_HOME, else pyspark's own
    directory (a pip install)."""
    import pyspark

    return os.path.realpath(os.environ.get("SPARK_HOME")
                            or os.path.dirname(pyspark.__file__))


def views_dir():
    return cache_dir("spark-home")


def driver_home(home=None, *, now=None):
    """The view of `home` (default `real_home()`) to start the driver from, made or
    brought up to date if need be; None when the driver is to start from `home` itself
    (see the module's docstring). Never raises OSError."""
    home = home or real_home()
    now = time.time() if now is None else now
    try:
        entries = sorted(os.listdir(home))
        jars = sorted(os.listdir(os.path.join(home, "jars")))
        kept = [jar for jar in jars if not _LEFT_OUT.fullmatch(jar)]
        if len(kept) == len(jars):
            return None
        digest = hashlib.sha256(repr(home).encode())
        for jar in jars:
            st = os.stat(os.path.join(home, "jars", jar))
            digest.update(repr((jar, st.st_size, st.st_mtime_ns)).encode())
        root = views_dir()
        os.makedirs(root, mode=0o700, exist_ok=True)
        view = os.path.join(root, f"spark-{digest.hexdigest()[:16]}")
        with locked(root, _LOCK_WAIT_S):
            if not _up_to_date(view, home, entries, kept):
                if os.path.lexists(view):  # damaged: aside, for the sweep
                    os.rename(view, _aside(view))
                _make(view, home, entries, kept)
            os.utime(view, (now, now))  # its last use: what the clean-up goes by
            _sweep(root, view, now)
    except OSError:
        return None
    return view


def _aside(view):
    return f"{view}.{os.getpid()}-{secrets.token_hex(4)}.tmp"


def _links_to(path, target):
    return os.path.islink(path) and os.readlink(path) == target


def _up_to_date(view, home, entries, kept):
    """Whether `view` has every jar link it should (and no other); top-level links are
    added or removed here as the installation's entries come and go."""
    jars = os.path.join(view, "jars")
    if os.path.islink(view) or os.path.islink(jars) or not os.path.isdir(jars):
        return False
    if sorted(os.listdir(jars)) != kept or not all(
            _links_to(os.path.join(jars, jar), os.path.join(home, "jars", jar))
            for jar in kept):
        return False
    present = set(os.listdir(view))
    for name in entries:
        if name != "jars" and not _links_to(os.path.join(view, name),
                                            os.path.join(home, name)):
            if name in present:
                return False  # not a link of ours: made anew
            os.symlink(os.path.join(home, name), os.path.join(view, name))
    for name in present.difference(entries):
        if os.path.islink(os.path.join(view, name)):
            os.remove(os.path.join(view, name))
    return True


def _make(view, home, entries, kept):
    draft = _aside(view)
    os.mkdir(draft, 0o700)
    try:
        for name in entries:
            if name != "jars":
                os.symlink(os.path.join(home, name), os.path.join(draft, name))
        os.mkdir(os.path.join(draft, "jars"))
        for jar in kept:
            os.symlink(os.path.join(home, "jars", jar), os.path.join(draft, "jars", jar))
        os.rename(draft, view)
    finally:
        shutil.rmtree(draft, ignore_errors=True)  # gone already once renamed


def _sweep(root, keep, now):
    """Delete views unused for `_UNUSED_S`, and what was moved aside or left half made
    `_ABANDONED_S` ago. Never follows a link: a link is unlinked, and `rmtree` removes the
    links inside a view, not what they point to."""
    for name in os.listdir(root):
        path = os.path.join(root, name)
        if path == keep or not name.startswith("spark-"):
            continue
        with contextlib.suppress(OSError):
            age = now - os.lstat(path).st_mtime
            if age > (_ABANDONED_S if name.endswith(".tmp") else _UNUSED_S):
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.remove(path)
