"""`kraftcore format` and `kraftcore random-uuid`, as Kafka's `kafka-storage` has them.

    kraftcore random-uuid
    kraftcore format --config FILE --cluster-id ID [--ignore-formatted]
                     [--add-scram MECHANISM=[name=N,password=P] ...]
                     (-c FILE -t ID [-g] [-S ...])

`format` reads the node's config, then writes `meta.properties` (version 1, the cluster id,
the node id, a fresh directory id) into every one of its `log.dirs` and its
`metadata.log.dir`, creating them. Before it, each directory gets `bootstrap.checkpoint`
(as Kafka writes it): the records the first active controller writes into the empty
metadata log — metadata.version (the controller's bootstrap level) and one
UserScramCredentialRecord per `--add-scram` (`kraftcore.security.scram_args`; Kafka accepts
it on any node, and only the controllers' files are read). It refuses when any directory is
already formatted and writes nothing then; `--ignore-formatted` skips the directories
already formatted for the same cluster and node instead. `random-uuid` prints a new
cluster id.

Exit status: 0 done; 1 refused by the directories (already formatted, not a directory,
cannot be written); 2 bad input (a config file that is missing or invalid, a bad cluster
id, bad arguments). Errors are one line on stderr, `kraftcore format: error: ...`, never a
traceback.
"""

import os
import random
import sys

from kraftcore.errors import ConfigError, MetadataError
from kraftcore.log.bootstrap import write_bootstrap_file
from kraftcore.log.meta_properties import (MetaPropertiesError, format_directories,
                                           validate_cluster_id)
from kraftcore.metadata.bootstrap import bootstrap_records, encode_bootstrap
from kraftcore.metadata.records import METADATA_VERSION_LEVELS
from kraftcore.security.scram import mechanism as scram_mechanism
from kraftcore.security.scram_args import parse_add_scram
from kraftcore.types import Uuid

__all__ = ["add_arguments", "run", "run_format", "run_random_uuid", "random_uuid"]

EXIT_OK, EXIT_REFUSED, EXIT_USAGE = 0, 1, 2


def add_arguments(sub):
    """Add the `format` and `random-uuid` subcommands to an argparse subparsers object."""
    fmt = sub.add_parser(
        "format",
        help="write meta.properties into a node's log directories (as kafka-storage format)",
        description="Format the log directories (log.dirs) and the metadata log directory "
        "(metadata.log.dir) of the node the config file describes: create them and write "
        "meta.properties with the cluster id and the node id. Refuses, writing nothing, "
        "when one of them is already formatted. Exit 0 when done, 1 when refused, 2 for a "
        "bad config file or cluster id.")
    fmt.add_argument("--config", "-c", required=True, metavar="FILE",
                     help="the node's server.properties")
    fmt.add_argument("--cluster-id", "-t", required=True, metavar="ID", dest="cluster_id",
                     help="the cluster id, the same for every node (make one with "
                     "kraftcore random-uuid)")
    fmt.add_argument("--ignore-formatted", "-g", action="store_true", dest="ignore_formatted",
                     help="skip directories already formatted for this cluster and node "
                     "instead of refusing")
    fmt.add_argument("--add-scram", "-S", action="append", dest="add_scram", default=[],
                     metavar="SCRAM_CREDENTIAL",
                     help="a SCRAM credential for the bootstrap metadata, e.g. "
                     "'SCRAM-SHA-256=[name=alice,password=alice-secret]' or "
                     "'SCRAM-SHA-512=[name=alice,iterations=8192,salt=\"N3E=\","
                     "saltedpassword=\"YCE=\"]' (salt and saltedpassword in base64); "
                     "repeat for more")
    sub.add_parser("random-uuid", help="print a new random cluster id",
                   description="Print a random uuid in Kafka's text form (22 characters of "
                   "URL-safe base64), to use as a cluster id.")
    return fmt


def random_uuid(rng=None):
    """A random uuid's text (never a reserved id, never starting with '-')."""
    return str(Uuid.random(rng or random.SystemRandom()))


def _error(err, message):
    err.write(f"kraftcore format: error: {message}\n")
    err.flush()


def _bootstrap(config, cluster_id, add_scram, rng):
    """(bootstrap.checkpoint bytes, its records); ValueError with a one-line reason."""
    scram = []
    for text in add_scram:
        try:
            scram.append(parse_add_scram(text, rng))
        except ValueError as exc:
            raise ValueError(f"--add-scram {text!r}: {exc}") from None
    level = config.controller_config(cluster_id).bootstrap_metadata_version
    try:
        records = bootstrap_records(level, scram)
    except MetadataError as exc:
        raise ValueError(f"--add-scram: {exc}") from None
    return encode_bootstrap(records), records


def _describe_bootstrap(records):
    names = {level: name for name, level in METADATA_VERSION_LEVELS.items()}
    level = records[0].feature_level
    creds = ", ".join(f"{r.name} ({scram_mechanism(r.mechanism).name})" for r in records[1:])
    return f"Bootstrap metadata: metadata.version {names[level]}; SCRAM credentials: {creds}.\n"


def run_format(config_path, cluster_id, ignore_formatted=False, *, out=None, err=None,
               rng=None, add_scram=()):
    """Format the directories of the node configured in `config_path`; returns the exit
    status (0, 1 refused, 2 bad input), having printed one line per directory or one
    error line. `add_scram` are `--add-scram` values."""
    from kraftcore.runtime.config import NodeConfig

    out = out or sys.stdout
    err = err or sys.stderr
    try:
        config = NodeConfig.from_file(config_path)
    except ConfigError as exc:
        message = str(exc)
        if not message.startswith("cannot read config file"):
            message = f"{config_path}: {message}"
        _error(err, message)
        return EXIT_USAGE
    try:
        validate_cluster_id(cluster_id)
    except ConfigError as exc:
        _error(err, f"--cluster-id: {exc}")
        return EXIT_USAGE
    try:
        data, records = _bootstrap(config, cluster_id, add_scram,
                                   rng or random.SystemRandom())
    except ValueError as exc:
        _error(err, exc)
        return EXIT_USAGE
    try:
        written = format_directories(config, cluster_id, rng=rng,
                                     ignore_formatted=ignore_formatted,
                                     before_write=lambda d: write_bootstrap_file(d, data))
    except MetaPropertiesError as exc:
        _error(err, exc)
        return EXIT_REFUSED
    if config.unknown_keys:
        err.write(f"kraftcore format: warning: {config_path}: keys kraftcore does not use: "
                  f"{', '.join(config.unknown_keys)}\n")
    metadata_dir = os.path.normpath(os.path.abspath(config.metadata_log_dir))
    for directory, meta in written:
        kind = "metadata" if os.path.normpath(os.path.abspath(directory)) == metadata_dir \
            else "data"
        out.write(f"Formatted {kind} directory {directory} with cluster.id {meta.cluster_id}, "
                  f"node.id {meta.node_id}, directory.id {meta.directory_id}.\n")
    if not written:
        out.write("All of the log directories are already formatted.\n")
    elif add_scram:
        out.write(_describe_bootstrap(records))
    out.flush()
    return EXIT_OK


def run_random_uuid(*, out=None, rng=None):
    out = out or sys.stdout
    out.write(random_uuid(rng) + "\n")
    out.flush()
    return EXIT_OK


def run(args, *, out=None, err=None):
    """Dispatch parsed `args` of `format` or `random-uuid`; returns the exit status."""
    if args.command == "random-uuid":
        return run_random_uuid(out=out)
    return run_format(args.config, args.cluster_id, args.ignore_formatted, out=out, err=err,
                      add_scram=args.add_scram)
