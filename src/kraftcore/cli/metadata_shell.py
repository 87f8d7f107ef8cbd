"""`kraftcore metadata-shell`: browse a metadata image as a read-only tree, like Kafka's
`kafka-metadata-shell` (kafka-facts §9.4; docs/metadata-shell.md).

    kraftcore metadata-shell --snapshot FILE [COMMAND ...]
    kraftcore metadata-shell --dir DIR [COMMAND ...]

What it owns:

* **The arguments.** `--snapshot` loads one `.checkpoint` file, `--dir` a
  `__cluster_metadata-0` directory (or a log directory holding one), both read-only by
  `kraftcore.metadata.directory` (which says how the log is read and what stops it);
  warnings and load errors are printed here.
* **The tree** (`build_tree`): Kafka's layout (`/image/...`, `/local/...`). Nodes are built
  lazily, once, on first visit, so a large image costs only what is browsed.
* **The commands** (`MetadataShell`): `ls`, `cd`, `pwd`, `cat`, `tree`, `find`, `help`
  (`man`), `exit` (`quit`); paths absolute or relative, with `.` and `..`, and glob patterns
  (`*`, `?`, `[...]`, `{a,b}`) in any component.

Modes: interactive (stdin is a terminal: prompt, readline editing and path completion),
one command (the words after the options), or a script (commands read from a non-terminal
stdin, no prompt). A command that fails (an unknown path, `cat` of a directory) prints one
line on stderr and the shell goes on; the exit status of the one-command and script modes
is then 1. Startup errors (missing file, not a snapshot, corrupt bytes, a directory without
a metadata log) are one line on stderr and exit 2; no traceback.
"""

import cmd
import datetime
import fnmatch
import importlib
import json
import re
import shlex
import shutil
import sys

import kraftcore
from kraftcore.errors import MetadataLoadError
from kraftcore.metadata import records as R
from kraftcore.metadata.directory import load_directory, load_snapshot_file
from kraftcore.metadata.image import METADATA_VERSION

__all__ = ["add_arguments", "run", "build_tree", "MetadataShell"]

EXIT_OK, EXIT_COMMAND_FAILED, EXIT_LOAD_ERROR = 0, 1, 2
PROG = "kraftcore metadata-shell"
_GLOB_CHARS = re.compile(r"[*?\[{]")


# ================================================================================ the tree


class Node:
    """A node of the tree: a directory (named children) or a file (a text value)."""

    is_dir = True
    record = None  # the record a record directory shows (its `cat` prints it as JSON)

    def names(self):
        return []

    def child(self, name):
        return None

    def text(self):
        raise NotImplementedError


class Leaf(Node):
    is_dir = False

    def __init__(self, value):
        self.value = value

    def text(self):
        return format_value(self.value)


class Dir(Node):
    """A directory whose children `build()` returns, once, on first use: an ordered dict of
    name -> Node, or name -> zero-argument callable making the Node (made on first visit)."""

    def __init__(self, build):
        self._build = build
        self._children = None

    def _entries(self):
        if self._children is None:
            self._children = self._build()
        return self._children

    def names(self):
        return list(self._entries())

    def child(self, name):
        entries = self._entries()
        entry = entries.get(name)
        if entry is not None and not isinstance(entry, Node):
            entry = entries[name] = entry()
        return entry


class RecordDir(Dir):
    """A metadata record as a directory of its fields (Kafka's JSON names, in wire order);
    `cat` on it prints the whole record as one JSON object."""

    def __init__(self, record):
        super().__init__(lambda: {k: Leaf(v) for k, v in record.to_json().items()})
        self.record = record

    def text(self):
        return json.dumps(self.record.to_json())


def format_value(value):
    """A leaf's text: strings as they are, true/false/null as in JSON, lists and structs as
    JSON."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value)
    return str(value)


def _natural(name):
    """Sort key: numeric names by number, before the others (by text)."""
    return (0, int(name), "") if name.isdigit() else (1, 0, name)


def _sorted_dict(items, make):
    """{str(key): lambda: make(value)} ordered naturally by name."""
    named = sorted(((str(k), v) for k, v in items), key=lambda kv: _natural(kv[0]))
    return {name: (lambda v=v: make(v)) for name, v in named}


_MV_NAMES = {level: name for name, level in R.METADATA_VERSION_LEVELS.items()}
# ConfigResource.Type (kafka-facts §5.2, "Related enums").
_CONFIG_TYPES = {0: "UNKNOWN", 2: "TOPIC", 4: "BROKER", 8: "BROKER_LOGGER",
                 16: "CLIENT_METRICS", 32: "GROUP"}
# org.apache.kafka.clients.admin.ScramMechanism
_SCRAM_MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
# The order Kafka's shell names the parts of a client-quota entity.
_QUOTA_TYPE_ORDER = {"client-id": 0, "ip": 1, "user": 2}
_QUOTA_TYPE_NAMES = {"client-id": "clientId", "ip": "ip", "user": "user"}
DEFAULT_QUOTA_NAME = "<default>"


def provenance_text(image):
    """Kafka's provenance line: `offset <last contained offset>, epoch <epoch>, time
    <ISO-8601 UTC>`."""
    ms = image.timestamp_ms
    when = "unknown"
    if ms is not None and ms >= 0:
        try:
            moment = datetime.datetime.fromtimestamp(ms // 1000, tz=datetime.timezone.utc)
            fraction = f".{ms % 1000:03d}".rstrip("0").rstrip(".")
            when = moment.strftime("%Y-%m-%dT%H:%M:%S") + fraction + "Z[UTC]"
        except (OverflowError, OSError, ValueError):
            when = f"{ms} ms"
    return f"offset {image.end_offset - 1}, epoch {image.epoch}, time {when}"


def config_resource_name(resource_type, resource_name):
    """Kafka's child name of a config resource: `TOPIC:orders`, and the type alone for a
    default resource (empty name), e.g. `BROKER` for the cluster-wide broker defaults."""
    type_name = _CONFIG_TYPES.get(resource_type, f"TYPE_{resource_type}")
    return type_name if resource_name == "" else f"{type_name}:{resource_name}"


def quota_entity_name(entity):
    """Kafka's child name of a client-quota entity, e.g. `clientId(app)_user(alice)`;
    `\\`, `(` and `)` in a name are escaped with `\\`; the default entity of a type
    (a null name) shows as `<default>`."""
    parts = []
    for entity_type, name in sorted(entity, key=lambda p: (_QUOTA_TYPE_ORDER.get(p[0], 3),
                                                           p[0])):
        if name is None:
            text = DEFAULT_QUOTA_NAME
        else:
            text = name.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        parts.append(f"{_QUOTA_TYPE_NAMES.get(entity_type, entity_type)}({text})")
    return "_".join(parts)


def _topic_node(topic):
    def build():
        # Kafka's order: the partitions, then id and name (sorted by name)
        out = _sorted_dict(topic.partitions.items(), RecordDir)
        out.update({"id": Leaf(str(topic.topic_id)), "name": Leaf(topic.name)})
        return out
    return Dir(build)


def _image_node(image):
    def features():
        out = {}
        level = image.features.get(METADATA_VERSION)
        if level is not None:
            out["metadataVersion"] = Leaf(_MV_NAMES.get(level, f"level {level}"))
        for name in sorted(image.features):
            out[f"finalized_{name}"] = Leaf(image.features[name])
        if image.zk_migration_state is not None:
            out["zkMigrationState"] = Leaf(image.zk_migration_state)
        return out

    def cluster():
        return {
            "brokers": Dir(lambda: _sorted_dict(image.brokers.items(), RecordDir)),
            "controllers": Dir(lambda: _sorted_dict(image.controllers.items(), RecordDir)),
        }

    def topics():
        by_name = [(name, image.topics[tid]) for name, tid in image.topic_ids.items()]
        by_id = [(str(tid), topic) for tid, topic in image.topics.items()]
        return {
            "byId": Dir(lambda: _sorted_dict(by_id, _topic_node)),
            "byName": Dir(lambda: _sorted_dict(by_name, _topic_node)),
        }

    def configs():
        named = sorted((config_resource_name(t, n), entries)
                       for (t, n), entries in image.configs.items())
        return {name: (lambda e=entries: Dir(lambda: {k: Leaf(e[k]) for k in sorted(e)}))
                for name, entries in named}

    def quotas():
        named = sorted((quota_entity_name(entity), entries)
                       for entity, entries in image.quotas.items())
        return {name: (lambda e=entries: Dir(lambda: {k: Leaf(e[k]) for k in sorted(e)}))
                for name, entries in named}

    def producer_ids():
        record = image.producer_ids
        return {"nextProducerId": Leaf(-1 if record is None else record.next_producer_id)}

    def acls():
        return {"byId": Dir(lambda: _sorted_dict(
            ((str(i), acl) for i, acl in image.acls.items()), RecordDir))}

    def scram():
        by_mechanism = {}
        for (user, mechanism), record in image.scram.items():
            by_mechanism.setdefault(mechanism, []).append((user, record))
        mechanisms = dict.fromkeys(_SCRAM_MECHANISMS)
        mechanisms.update(dict.fromkeys(by_mechanism))
        out = {}
        for mechanism in sorted(mechanisms):
            users = by_mechanism.get(mechanism, [])
            name = _SCRAM_MECHANISMS.get(mechanism, f"UNKNOWN_{mechanism}")
            out[name] = (lambda u=users: Dir(lambda: _sorted_dict(u, RecordDir)))
        return out

    return Dir(lambda: {
        "acls": lambda: Dir(acls),
        "clientQuotas": lambda: Dir(quotas),
        "cluster": lambda: Dir(cluster),
        "configs": lambda: Dir(configs),
        "delegationToken": lambda: Dir(lambda: _sorted_dict(image.tokens.items(), RecordDir)),
        "features": lambda: Dir(features),
        "producerIds": lambda: Dir(producer_ids),
        "provenance": lambda: Leaf(provenance_text(image)),
        "scram": lambda: Dir(scram),
        "topics": lambda: Dir(topics),
    })


def build_tree(loaded):
    """The root of the tree of a `Loaded` image (see docs/metadata-shell.md)."""
    def local():
        return {
            "logBatches": Leaf(loaded.log_batches),
            "snapshot": Leaf("none" if loaded.snapshot is None else loaded.snapshot),
            "source": Leaf(loaded.source),
            "version": Leaf(kraftcore.__version__),
        }

    return Dir(lambda: {"image": lambda: _image_node(loaded.image), "local": lambda: Dir(local)})


# ================================================================================ paths


class PathError(Exception):
    """A path that does not name what a command needs; the message is the line shown."""


def _join(components):
    return "/" + "/".join(components)


def _brace_expand(pattern):
    """`a{b,c}d` -> [abd, acd] (one level, no nesting: enough for names in this tree)."""
    match = re.search(r"\{([^{}]*)\}", pattern)
    if not match:
        return [pattern]
    head, tail = pattern[:match.start()], pattern[match.end():]
    out = []
    for alternative in match.group(1).split(","):
        out += _brace_expand(head + alternative + tail)
    return out


def _match_children(node, component):
    """Names of `node`'s children that `component` names: itself when such a child exists,
    else the children its glob pattern matches (in the directory's order)."""
    if node.child(component) is not None:
        return [component]
    if not _GLOB_CHARS.search(component):
        return []
    patterns = _brace_expand(component)
    return [name for name in node.names()
            if any(fnmatch.fnmatchcase(name, p) for p in patterns)]


# ================================================================================ the shell

_COMMANDS = {
    "ls": ("ls [PATH ...]", "List the children of directories (and the names of files)."),
    "cd": ("cd [PATH]", "Change the current directory (to / without a PATH)."),
    "pwd": ("pwd", "Print the current directory."),
    "cat": ("cat PATH ...", "Print the value of files; a record directory (a broker, a "
            "partition, ...) prints its record as one JSON object."),
    "tree": ("tree [PATH ...]", "Print directories and everything below them, indented."),
    "find": ("find [PATH ...] [-name PATTERN] [-type d|f]",
             "Print the path of every node at and below PATH (default: the current "
             "directory), optionally only those whose name matches PATTERN or of one type."),
    "help": ("help [COMMAND]", "Show the commands, or one command's usage (also: man)."),
    "exit": ("exit", "Leave the shell (also: quit, Ctrl-D)."),
}
_ALIASES = {"man": "help", "quit": "exit"}


class MetadataShell(cmd.Cmd):
    """The commands over a tree (`build_tree`). `run_command(words)` runs one command and
    returns whether it succeeded; `onecmd(line)` parses a line first; `cmdloop()` is the
    interactive loop (cmd.Cmd). Output goes to `out`, failures (one line each) to `err`."""

    def __init__(self, root, *, out=None, err=None, stdin=None, interactive=False):
        super().__init__(stdin=stdin, stdout=out)
        self.root = root
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.interactive = interactive
        self.use_rawinput = stdin is None
        self.cwd = ()
        self.failures = 0
        self.stopped = False
        self._update_prompt()

    # ------------------------------------------------------------------ paths

    def _update_prompt(self):
        self.prompt = f"[{_join(self.cwd)}] >> " if self.interactive else ""

    def _start(self, path):
        if path.startswith("/"):
            return []
        nodes = [self.root]
        for name in self.cwd:
            nodes.append(nodes[-1].child(name))
        return list(zip(self.cwd, nodes[1:]))

    def expand(self, path):
        """[(components, node)] that `path` names (globs expanded, in tree order); a
        PathError when it names nothing."""
        matches = [(tuple(self._start(path)))]
        for component in path.split("/"):
            if component in ("", "."):
                continue
            if component == "..":
                matches = [m[:-1] for m in matches]
                continue
            following = []
            for steps in matches:
                node = steps[-1][1] if steps else self.root
                if not node.is_dir:
                    continue
                for name in _match_children(node, component):
                    following.append(steps + ((name, node.child(name)),))
            matches = following
            if not matches:
                break
        if not matches:
            raise PathError(f"{path}: no such file or directory")
        seen, out = set(), []
        for steps in matches:
            components = tuple(name for name, _ in steps)
            if components not in seen:
                seen.add(components)
                out.append((components, steps[-1][1] if steps else self.root))
        return out

    # ------------------------------------------------------------------ running

    def fail(self, command, message):
        self.failures += 1
        self.err.write(f"{command}: {message}\n")
        return False

    def run_command(self, words):
        """Run one command given as words; True when it succeeded."""
        if not words:
            return True
        name = _ALIASES.get(words[0], words[0])
        handler = getattr(self, f"_cmd_{name}", None) if name in _COMMANDS else None
        if handler is None:
            return self.fail(words[0], "unknown command; type help for the commands")
        try:
            return handler(words[0], words[1:])
        except PathError as exc:
            return self.fail(words[0], str(exc))

    def onecmd(self, line):
        line = line.strip()
        if not line or line.startswith("#"):
            return self.stopped
        if line == "EOF":  # cmd.Cmd's end of input
            if self.interactive:
                self.out.write("\n")
            self.stopped = True
            return True
        try:
            words = shlex.split(line)
        except ValueError as exc:
            self.fail(line.split()[0], f"cannot parse the line: {exc}")
            return self.stopped
        self.run_command(words)
        return self.stopped

    def postcmd(self, stop, line):
        self._update_prompt()
        return stop

    def cmdloop(self, intro=None):
        while not self.stopped:
            try:
                super().cmdloop(intro)
                return
            except KeyboardInterrupt:
                self.out.write("^C\n")
                intro = ""

    def run_script(self, lines):
        """Run commands one per line (script mode); stops at `exit`."""
        for line in lines:
            if self.onecmd(line):
                break

    # ------------------------------------------------------------------ completion

    def completenames(self, text, *ignored):
        return [name for name in sorted({*_COMMANDS, *_ALIASES}) if name.startswith(text)]

    def completedefault(self, text, line, begidx, endidx):
        """Complete the path being typed (readline passes only the part after its last
        delimiter, `text`; the whole word is taken from `line`)."""
        words = line[:endidx].split(" ")
        word = words[-1] if words else ""
        directory, _, prefix = word.rpartition("/")
        try:
            targets = self.expand(directory + "/" if word.startswith("/") or directory
                                  else ".")
        except PathError:
            return []
        if len(targets) != 1 or not targets[0][1].is_dir:
            return []
        node = targets[0][1]
        cut = len(prefix) - len(text)
        out = []
        for name in node.names():
            if name.startswith(prefix):
                out.append((name + ("/" if node.child(name).is_dir else ""))[cut:])
        return out

    # ------------------------------------------------------------------ commands

    def _write_names(self, names):
        if not names:
            return
        if self.interactive:
            self.columnize(list(names), shutil.get_terminal_size().columns)
        else:
            for name in names:
                self.out.write(name + "\n")

    def _cmd_ls(self, command, args):
        ok = True
        files, directories = [], []
        for target in args or ["."]:
            try:
                for components, node in self.expand(target):
                    if node.is_dir:
                        directories.append((_join(components), node.names()))
                    else:
                        files.append(components[-1])
            except PathError as exc:
                ok = self.fail(command, str(exc))
        self._write_names(files)
        headers = bool(files) or len(directories) > 1
        for i, (path, names) in enumerate(directories):
            if headers:
                self.out.write(("\n" if files or i else "") + f"{path}:\n")
            self._write_names(names)
        return ok

    def _cmd_cd(self, command, args):
        if len(args) > 1:
            return self.fail(command, "takes at most one path")
        targets = self.expand(args[0]) if args else [((), self.root)]
        if len(targets) != 1:
            return self.fail(command, f"{args[0]}: names {len(targets)} nodes, not one")
        components, node = targets[0]
        if not node.is_dir:
            return self.fail(command, f"{args[0]}: not a directory")
        self.cwd = components
        return True

    def _cmd_pwd(self, command, args):
        if args:
            return self.fail(command, "takes no arguments")
        self.out.write(_join(self.cwd) + "\n")
        return True

    def _cmd_cat(self, command, args):
        if not args:
            return self.fail(command, "needs a path: cat PATH ...")
        ok = True
        for target in args:
            try:
                for components, node in self.expand(target):
                    if node.is_dir and node.record is None:
                        ok = self.fail(command, f"{_join(components)}: is a directory")
                    else:
                        self.out.write(node.text() + "\n")
            except PathError as exc:
                ok = self.fail(command, str(exc))
        return ok

    def _tree(self, node, indent):
        write = self.out.write
        for name in node.names():
            child = node.child(name)
            if child.is_dir:
                write(f"{indent}{name}:\n")
                self._tree(child, indent + "  ")
            else:
                write(f"{indent}{name}: {child.text()}\n")

    def _cmd_tree(self, command, args):
        ok = True
        targets = []
        for target in args or ["."]:
            try:
                targets += self.expand(target)
            except PathError as exc:
                ok = self.fail(command, str(exc))
        for components, node in targets:
            indent = ""
            if len(targets) > 1:
                self.out.write(f"{_join(components)}:\n")
                indent = "  "
            if node.is_dir:
                self._tree(node, indent)
            else:
                self.out.write(indent + node.text() + "\n")
        return ok

    def _find(self, components, node, name_pattern, kind):
        if ((name_pattern is None or (components and fnmatch.fnmatchcase(components[-1],
                                                                          name_pattern)))
                and (kind is None or (kind == "d") == node.is_dir)):
            self.out.write(_join(components) + "\n")
        if node.is_dir:
            for name in node.names():
                self._find(components + (name,), node.child(name), name_pattern, kind)

    def _cmd_find(self, command, args):
        paths, name_pattern, kind = [], None, None
        i = 0
        while i < len(args):
            arg = args[i]
            if arg in ("-name", "-type"):
                if i + 1 == len(args):
                    return self.fail(command, f"{arg} needs a value")
                value = args[i + 1]
                if arg == "-name":
                    name_pattern = value
                elif value in ("d", "f"):
                    kind = value
                else:
                    return self.fail(command, f"-type takes d (directory) or f (file), "
                                     f"not {value!r}")
                i += 2
            elif arg.startswith("-") and arg != "-":
                return self.fail(command, f"unknown option {arg}; usage: "
                                 f"{_COMMANDS['find'][0]}")
            else:
                paths.append(arg)
                i += 1
        ok = True
        for target in paths or ["."]:
            try:
                for components, node in self.expand(target):
                    self._find(components, node, name_pattern, kind)
            except PathError as exc:
                ok = self.fail(command, str(exc))
        return ok

    def _cmd_help(self, command, args):
        if args:
            name = _ALIASES.get(args[0], args[0])
            if name not in _COMMANDS:
                return self.fail(command, f"{args[0]}: no such command")
            usage, text = _COMMANDS[name]
            self.out.write(f"{usage}\n    {text}\n")
            return True
        self.out.write("Commands (paths are absolute or relative, with . and .., and may "
                       "hold globs: * ? [...] {a,b}):\n")
        for usage, text in _COMMANDS.values():
            self.out.write(f"  {usage:<44} {text}\n")
        return True

    def _cmd_exit(self, command, args):
        self.stopped = True
        return True


# ================================================================================ the command


def add_arguments(sub):
    import argparse

    shell = sub.add_parser(
        "metadata-shell",
        help="browse a metadata image (snapshot or metadata log) as a tree",
        description="Load a KRaft metadata image read-only, from one snapshot file or from a "
        "metadata log directory (its newest snapshot plus the log after it), and browse it "
        "as a tree with ls, cd, pwd, cat, tree and find, like Kafka's kafka-metadata-shell. "
        "With a COMMAND after the options, run it and exit; with commands on a "
        "non-terminal stdin, run them in order. Exit 0, 1 when a command failed, 2 when the "
        "image cannot be loaded.")
    source = shell.add_mutually_exclusive_group(required=True)
    source.add_argument("--snapshot", metavar="FILE",
                        help="a snapshot file (<end offset>-<epoch>.checkpoint)")
    source.add_argument("--dir", metavar="DIR",
                        help="a metadata log directory (__cluster_metadata-0) or a log "
                        "directory holding one")
    shell.add_argument("shell_command", nargs=argparse.REMAINDER, metavar="COMMAND",
                       help="one shell command to run, e.g. ls /image/topics/byName")
    return shell


def run(args, *, stdin=None, out=None, err=None):
    """Run the command for parsed `args` (`--snapshot` / `--dir`, `shell_command`); returns
    the exit status."""
    stdin = stdin or sys.stdin
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        if args.snapshot is not None:
            loaded = load_snapshot_file(args.snapshot)
        else:
            loaded = load_directory(args.dir)
    except MetadataLoadError as exc:
        err.write(f"{PROG}: {exc}\n")
        return EXIT_LOAD_ERROR
    for warning in loaded.warnings:
        err.write(f"{PROG}: warning: {warning}\n")
    root = build_tree(loaded)
    words = list(args.shell_command or ())
    if words[:1] == ["--"]:  # `... --dir D -- ls`: the separator is not part of the command
        words = words[1:]
    if words:
        shell = MetadataShell(root, out=out, err=err)
        shell.run_command(words)
        return EXIT_COMMAND_FAILED if shell.failures else EXIT_OK
    interactive = _is_terminal(stdin) and _is_terminal(out)
    if not interactive:
        shell = MetadataShell(root, out=out, err=err, stdin=stdin)
        shell.run_script(stdin)
        return EXIT_COMMAND_FAILED if shell.failures else EXIT_OK
    try:  # line editing, history and completion for input()
        importlib.import_module("readline")
    except ImportError:
        pass
    shell = MetadataShell(root, out=out, err=err, interactive=True)
    image = loaded.image
    shell.cmdloop(f"Loaded {loaded.snapshot or loaded.source}"
                  f"{f' + {loaded.log_batches} log batches' if loaded.log_batches else ''}: "
                  f"{provenance_text(image)}; {len(image.brokers)} brokers, "
                  f"{len(image.topics)} topics, {image.partition_count()} partitions.\n"
                  "Type help for the commands, exit to leave.")
    return EXIT_OK


def _is_terminal(stream):
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
