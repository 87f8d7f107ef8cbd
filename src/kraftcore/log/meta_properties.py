"""`meta.properties`: the identity file of every log directory of a KRaft node
(kafka-facts §3.9), and formatting directories with it.

A directory is *formatted* when it holds `meta.properties`. Kafka writes it with
`java.util.Properties.store` (`MetaProperties.java`, `PropertiesUtils.writePropertiesFile`),
and so does this module, byte for byte as a JDK 18+ does (keys sorted):

    #
    #Tue Oct 29 10:17:51 UTC 2024
    cluster.id=MkU3OEVBNTcwNTJENDM2Qg
    directory.id=4B5W4I0dQiy1Sc4H7mYTQw
    node.id=1
    version=1

`version` 1 is KRaft (0 was ZooKeeper mode, with `broker.id`: refused here). `cluster.id`
is the cluster's id, the same in every directory of every node; `node.id` the node's,
the same in every directory of the node; `directory.id` a random uuid per directory, never
reserved and never shared by two directories of a node. The second comment line is the
time of writing (Java's `Date.toString`, here always in UTC).

Invariants kept:

* a file is replaced atomically (`<file>.tmp`, fsync, rename, directory fsync:
  `fileio.write_atomic`), so a crash leaves the old file, the new one or none, never half;
* `format_directories` refuses to touch a formatted directory (unless told to skip the
  ones already formatted for the same cluster and node), and checks every directory before
  it writes the first file;
* `check_formatted` accepts a node's directories only when all are formatted, for one
  cluster, for the configured node, with distinct directory ids.

This module also holds the reader and writer of Java's `.properties` syntax, which both
`meta.properties` and the node's config file (`kraftcore.runtime.config`) use.
"""

import dataclasses
import os
import random
import re
import time

from kraftcore.errors import ConfigError, LogError
from kraftcore.layout import META_PROPERTIES_FILE
from kraftcore.log import fileio
from kraftcore.types import Uuid

__all__ = [
    "VERSION", "MetaProperties", "MetaPropertiesError",
    "NotFormattedError", "AlreadyFormattedError", "parse_properties", "store_properties",
    "validate_cluster_id", "read_meta_properties", "write_meta_properties",
    "node_directories", "format_directories", "check_formatted",
]

VERSION = 1

# What Kafka's `Uuid.fromString` accepts (kafka-facts §1.3): URL-safe base64 that decodes to
# 16 bytes, at most 24 characters, so 22 characters, or 22 and the padding "==". Checked
# here by pattern, because Python's base64 decoder silently skips characters outside the
# alphabet (and accepts '+' and '/', which Java's URL-safe decoder refuses).
_UUID_TEXT = re.compile(r"^[A-Za-z0-9_-]{22}(==)?$")


class MetaPropertiesError(LogError):
    """A `meta.properties` file is missing, unreadable, malformed, or disagrees with the
    node's other directories or its config. The message names the directory."""


class NotFormattedError(MetaPropertiesError):
    """A directory of the node has no `meta.properties`: run `kraftcore format` first."""


class AlreadyFormattedError(MetaPropertiesError):
    """`format_directories` found a directory that is already formatted; nothing was
    written."""


# ------------------------------------------------------------------ Java properties syntax

_WHITESPACE = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text):
    """(line number, raw logical line) pairs, as `java.util.Properties.load` forms them:
    comment (`#`, `!`) and blank lines skipped, a line ending in an odd number of
    backslashes continued on the next one (that backslash and the next line's leading
    whitespace dropped; a comment line is never continued, and a continuation line is
    never a comment)."""
    lines = re.split(r"\r\n|\r|\n", text)
    index = 0
    while index < len(lines):
        number = index + 1
        line = lines[index].lstrip(_WHITESPACE)
        index += 1
        if not line or line[0] in "#!":
            continue
        parts = []
        while True:
            trailing = len(line) - len(line.rstrip("\\"))
            if trailing % 2 == 0:
                parts.append(line)
                break
            parts.append(line[:-1])
            if index >= len(lines):  # a continuation at the end of the text ends it
                break
            line = lines[index].lstrip(_WHITESPACE)
            index += 1
        yield number, "".join(parts)


def _unescape(raw, number, where):
    out = []
    position = 0
    while position < len(raw):
        char = raw[position]
        position += 1
        if char != "\\" or position >= len(raw):
            out.append(char)
            continue
        char = raw[position]
        position += 1
        if char == "u":
            digits = raw[position:position + 4]
            if not re.fullmatch(r"[0-9A-Fa-f]{4}", digits):
                raise ValueError(f"line {number}: malformed \\uxxxx escape in the {where}")
            out.append(chr(int(digits, 16)))
            position += 4
        else:
            out.append(_ESCAPES.get(char, char))
    text = "".join(out)
    if any("\ud800" <= c <= "\udfff" for c in text):
        # \uXXXX pairs encode characters beyond the BMP as UTF-16 surrogates.
        try:
            text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
        except UnicodeDecodeError:
            raise ValueError(f"line {number}: unpaired \\uxxxx surrogate in the {where}") from None
    return text


def parse_properties(text):
    """The key -> value dict of Java `.properties` text (`key=value`, `key: value` or
    `key value`; `#` / `!` comments; `\\` continuations; `\\t \\n \\r \\f \\uXXXX` and
    `\\<char>` escapes). A later key replaces an earlier one, as in Java. Raises
    ValueError (naming the line) for a malformed `\\uXXXX` escape."""
    properties = {}
    for number, line in _logical_lines(text):
        key_end = len(line)
        value_start = len(line)
        separator = False
        backslash = False
        for position, char in enumerate(line):
            if not backslash and char in "=:":
                key_end, value_start, separator = position, position + 1, True
                break
            if not backslash and char in _WHITESPACE:
                key_end, value_start = position, position + 1
                break
            backslash = (not backslash) if char == "\\" else False
        while value_start < len(line):
            char = line[value_start]
            if char not in _WHITESPACE:
                if separator or char not in "=:":
                    break
                separator = True
            value_start += 1
        key = _unescape(line[:key_end], number, "key")
        properties[key] = _unescape(line[value_start:], number, f"value of {key!r}")
    return properties


def _escape(text, is_key):
    out = []
    for position, char in enumerate(text):
        if char == " ":
            out.append("\\ " if is_key or position == 0 else " ")
        elif char in "\\=:#!":
            out.append("\\" + char)
        elif char in "\t\n\r\f":
            out.append("\\" + "tnrf"["\t\n\r\f".index(char)])
        else:
            out.append(char)
    return "".join(out)


_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _java_date(now_ms):
    t = time.gmtime(now_ms // 1000)
    return (f"{_DAYS[t.tm_wday]} {_MONTHS[t.tm_mon - 1]} {t.tm_mday:02d} "
            f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} UTC {t.tm_year}")


def store_properties(properties, now_ms, comment=""):
    """The text `Properties.store(writer, comment)` writes for `properties` on a JDK 18+
    (keys in sorted order): `#<comment>`, `#<date>`, then `key=value` lines, `\\n` line
    ends, with Java's escapes."""
    lines = ["#" + comment, "#" + _java_date(now_ms)]
    lines += [f"{_escape(key, True)}={_escape(str(value), False)}"
              for key, value in sorted(properties.items())]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- meta.properties


def validate_cluster_id(cluster_id):
    """Return `cluster_id` if Kafka accepts it as a cluster id (what `Uuid.fromString`
    parses: 16 bytes in URL-safe base64, 22 characters as `kraftcore random-uuid` prints
    them, or 24 with the `==` padding); else raise ConfigError."""
    if not isinstance(cluster_id, str) or not _UUID_TEXT.match(cluster_id):
        raise ConfigError(
            f"cluster id {cluster_id!r} is not a Kafka uuid (22 characters of URL-safe "
            "base64, as `kraftcore random-uuid` prints)")
    return cluster_id


@dataclasses.dataclass(frozen=True)
class MetaProperties:
    """The contents of one `meta.properties` (version 1)."""

    cluster_id: str
    node_id: int
    directory_id: Uuid = None  # None: a file written before directory ids (Kafka < 3.7)
    version: int = VERSION

    def to_properties(self):
        properties = {"version": str(self.version), "cluster.id": self.cluster_id,
                      "node.id": str(self.node_id)}
        if self.directory_id is not None:
            properties["directory.id"] = str(self.directory_id)
        return properties

    def to_bytes(self, now_ms):
        """The file's bytes, as Kafka writes them, dated `now_ms`."""
        return store_properties(self.to_properties(), now_ms).encode("utf-8")

    @classmethod
    def from_bytes(cls, data, path=META_PROPERTIES_FILE):
        """Parse a file's bytes; MetaPropertiesError (naming `path`) when it is not a
        KRaft meta.properties."""
        try:
            properties = parse_properties(data.decode("utf-8"))
        except UnicodeDecodeError:
            raise MetaPropertiesError(f"{path}: not UTF-8 text") from None
        except ValueError as exc:
            raise MetaPropertiesError(f"{path}: {exc}") from None
        version = properties.get("version")
        if version is None:
            raise MetaPropertiesError(f"{path}: no version (is it a meta.properties file?)")
        if version.strip() == "0":
            raise MetaPropertiesError(
                f"{path}: version 0 is a ZooKeeper-mode directory; kraftcore runs KRaft only "
                "(format a new directory)")
        if version.strip() != str(VERSION):
            raise MetaPropertiesError(f"{path}: unknown version {version!r} (expected 1)")
        cluster_id = properties.get("cluster.id", "").strip()
        if not cluster_id:
            raise MetaPropertiesError(f"{path}: no cluster.id")
        node_text = properties.get("node.id")
        if node_text is None:
            raise MetaPropertiesError(f"{path}: no node.id")
        if not re.fullmatch(r"\+?[0-9]{1,10}", node_text.strip()) or int(node_text) > 0x7FFFFFFF:
            raise MetaPropertiesError(f"{path}: node.id {node_text!r} is not an int >= 0")
        directory_id = properties.get("directory.id")
        if directory_id is not None:
            directory_id = directory_id.strip()
            if not _UUID_TEXT.match(directory_id):
                raise MetaPropertiesError(
                    f"{path}: directory.id {directory_id!r} is not a Kafka uuid")
            directory_id = Uuid.from_str(directory_id)
        return cls(cluster_id=cluster_id, node_id=int(node_text), directory_id=directory_id)


def read_meta_properties(directory):
    """The `MetaProperties` of `directory`, or None when it has no `meta.properties` (or
    does not exist). MetaPropertiesError when the file cannot be read or parsed."""
    path = os.path.join(directory, META_PROPERTIES_FILE)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        raise MetaPropertiesError(f"{directory} is not a directory") from None
    except OSError as exc:
        raise MetaPropertiesError(f"cannot read {path}: {exc.strerror or exc}") from None
    return MetaProperties.from_bytes(data, path)


def write_meta_properties(directory, meta, now_ms=None):
    """Write `meta` to `directory`/meta.properties atomically (tmp file, fsync, rename,
    directory fsync). `now_ms` dates the file (default: the wall clock)."""
    if now_ms is None:
        now_ms = time.time_ns() // 1_000_000
    fileio.write_atomic(os.path.join(directory, META_PROPERTIES_FILE), meta.to_bytes(now_ms))


def node_directories(config):
    """Every directory of a node, each once: its `log_dirs` in order, then its
    `metadata_log_dir` unless it is one of them."""
    directories = []
    seen = set()
    for directory in (*config.log_dirs, config.metadata_log_dir):
        key = os.path.normpath(os.path.abspath(directory))
        if key not in seen:
            seen.add(key)
            directories.append(directory)
    return directories


def _kind(config, directory):
    same = os.path.normpath(os.path.abspath(directory)) == \
        os.path.normpath(os.path.abspath(config.metadata_log_dir))
    return "metadata" if same else "data"


def _format_hint(config, cluster_id="ID", extra=""):
    source = getattr(config, "source", None) or "FILE"
    return f"run kraftcore format --config {source} --cluster-id {cluster_id}{extra}"


def format_directories(config, cluster_id, *, rng=None, now_ms=None, ignore_formatted=False,
                       before_write=None):
    """Format every directory of the node `config` describes (a `NodeConfig`: its
    `node_id`, `log_dirs`, `metadata_log_dir`) for cluster `cluster_id`: create each
    directory and write its `meta.properties` with a fresh random directory id (drawn
    from `rng`, a `random.Random`; default the system's). Returns [(directory,
    MetaProperties)] of what was written, in order.

    Every directory is checked before anything is written: a formatted one raises
    AlreadyFormattedError (with `ignore_formatted`, it is skipped instead, if it belongs to
    this cluster and node), a path that is not a directory or cannot be created raises
    MetaPropertiesError, a bad cluster id ConfigError. `before_write(directory)`, when
    given, runs after a directory is created and before its meta.properties is written
    (the bootstrap file goes there first, so a formatted directory always has it); an
    OSError from it is a MetaPropertiesError."""
    validate_cluster_id(cluster_id)
    rng = rng or random.SystemRandom()
    directories = node_directories(config)
    existing = {}
    for directory in directories:
        if os.path.exists(directory) and not os.path.isdir(directory):
            raise MetaPropertiesError(f"{directory} ({_kind(config, directory)} directory) "
                                      "exists and is not a directory")
        meta = read_meta_properties(directory) if os.path.isdir(directory) else None
        if meta is None:
            continue
        if not ignore_formatted:
            raise AlreadyFormattedError(
                f"{_kind(config, directory)} directory {directory} is already formatted "
                f"(cluster.id {meta.cluster_id}, node.id {meta.node_id}); kraftcore never "
                "reformats a directory: use --ignore-formatted to format only the others, or "
                "delete it if its data is no longer wanted")
        if meta.cluster_id != cluster_id or meta.node_id != config.node_id:
            raise AlreadyFormattedError(
                f"{_kind(config, directory)} directory {directory} is already formatted for "
                f"cluster.id {meta.cluster_id}, node.id {meta.node_id}, not cluster.id "
                f"{cluster_id}, node.id {config.node_id}")
        existing[directory] = meta
    used = {meta.directory_id for meta in existing.values() if meta.directory_id is not None}
    written = []
    for directory in directories:
        if directory in existing:
            continue
        directory_id = Uuid.random(rng)  # never a reserved id
        while directory_id in used:
            directory_id = Uuid.random(rng)
        used.add(directory_id)
        meta = MetaProperties(cluster_id=cluster_id, node_id=config.node_id,
                              directory_id=directory_id)
        try:
            os.makedirs(directory, exist_ok=True)
            if before_write is not None:
                before_write(directory)
            write_meta_properties(directory, meta, now_ms)
        except OSError as exc:
            raise MetaPropertiesError(
                f"cannot format {_kind(config, directory)} directory {directory}: "
                f"{exc.strerror or exc}") from None
        written.append((directory, meta))
    return written


def check_formatted(config):
    """The cluster id of the node `config` describes, once every one of its directories
    holds a valid `meta.properties` for one cluster and for `config.node_id`, with
    distinct directory ids. Raises NotFormattedError (saying how to format) or
    MetaPropertiesError (naming the directories that disagree)."""
    directories = node_directories(config)
    found = {}
    missing = []
    for directory in directories:
        meta = read_meta_properties(directory)
        if meta is None:
            missing.append(directory)
        else:
            found[directory] = meta
    first_dir = next(iter(found), None)
    for directory, meta in found.items():
        first = found[first_dir]
        if meta.cluster_id != first.cluster_id:
            raise MetaPropertiesError(
                f"{directory} belongs to cluster {meta.cluster_id} but {first_dir} to cluster "
                f"{first.cluster_id}: a node's directories must all be formatted for one "
                "cluster")
        if meta.node_id != config.node_id:
            raise MetaPropertiesError(
                f"{directory} was formatted for node.id {meta.node_id} but node.id is "
                f"{config.node_id}: fix node.id, or point the config at this node's "
                "directories")
    if missing:
        directory = missing[0]
        if found:
            cluster_id = found[first_dir].cluster_id
            raise NotFormattedError(
                f"{_kind(config, directory)} directory {directory} is not formatted (the "
                f"node's other directories belong to cluster {cluster_id}): "
                f"{_format_hint(config, cluster_id, ' --ignore-formatted')}")
        raise NotFormattedError(f"{_kind(config, directory)} directory {directory} is not "
                                f"formatted: {_format_hint(config)}")
    ids = {}
    for directory, meta in found.items():
        if meta.directory_id is None:
            continue
        if meta.directory_id in ids:
            raise MetaPropertiesError(
                f"{directory} and {ids[meta.directory_id]} have the same directory.id "
                f"{meta.directory_id}: one was copied from the other; format a fresh one")
        ids[meta.directory_id] = directory
    return found[first_dir].cluster_id
