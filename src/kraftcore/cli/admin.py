"""The admin commands of `kraftcore`: `kraftcore.admin.client.AdminClient` on the command
line (docs/admin.md). This module parses the arguments and prints what the client returns,
as Kafka's tools print it (or as JSON).

    kraftcore quorum describe --bootstrap-controller HOST:PORT (--status | --replication)
                              [--human-readable] [--json]
    kraftcore topics create   --bootstrap-controller HOST:PORT --topic NAME
                              [--partitions N] [--replication-factor R] [--config K=V ...]
    kraftcore topics delete   --bootstrap-controller HOST:PORT --topic NAME
    kraftcore topics describe --bootstrap-controller HOST:PORT [--topic NAME] [--json]
    kraftcore topics list     --bootstrap-controller HOST:PORT [--json]
    kraftcore brokers list    --bootstrap-controller HOST:PORT [--json]
    kraftcore configs set     --bootstrap-controller HOST:PORT (--topic NAME | --cluster)
                              [K=V ...] [--delete K ...]
    kraftcore configs get     --bootstrap-controller HOST:PORT (--topic NAME | --cluster)
                              [--all] [--json]

Every command takes `--timeout-ms` (default 30 000): the bound of the whole command,
connecting included. Where each request goes (the active controller, redirects after
NOT_CONTROLLER, the quorum leader for DescribeQuorum) is the client's business.

Exit status: 0 done; 1 the operation failed or nothing answered (one line on stderr, no
traceback); 2 a usage error (a bad HOST:PORT, a config without '='); 130 interrupted.
"""

import argparse
import asyncio
import json
import sys
import time

from kraftcore.errors import KraftcoreError
from kraftcore.metadata.image import CONFIG_BROKER, CONFIG_TOPIC

__all__ = ["COMMANDS", "add_arguments", "run", "CommandError", "parse_address",
           "format_status", "format_replication", "format_config", "table",
           "run_reporting", "check_timeout"]

COMMANDS = ("quorum", "topics", "brokers", "configs")
TIMEOUT_MS_DEFAULT = 30_000  # --timeout-ms: the bound of a whole command
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
_LABEL_WIDTH = 24  # kafka-metadata-quorum pads its labels to this column


class CommandError(Exception):
    """A failure to report as one line; `exit_code` 1 (failed) or 2 (usage)."""

    def __init__(self, message, exit_code=EXIT_FAILED):
        super().__init__(" ".join(str(message).split()))
        self.exit_code = exit_code


# ------------------------------------------------------------------------------ arguments

def add_arguments(sub):
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--bootstrap-controller", required=True, metavar="HOST:PORT",
                        help="a controller's listener; requests are routed to the active "
                        "controller from there")
    common.add_argument("--timeout-ms", type=int, default=TIMEOUT_MS_DEFAULT, metavar="MS",
                        help=f"give up after this long (default {TIMEOUT_MS_DEFAULT})")
    add_command_config(common)

    quorum = sub.add_parser("quorum", help="describe the metadata quorum",
                            description="The state of the KRaft metadata quorum, like "
                            "kafka-metadata-quorum.")
    quorum_sub = quorum.add_subparsers(dest="action", metavar="ACTION", required=True)
    describe = quorum_sub.add_parser(
        "describe", parents=[common], help="leader, epoch, high watermark and replicas",
        description="Ask the quorum leader (DescribeQuorum) and print --status (leader, "
        "epoch, high watermark, follower lag, voters and observers) or --replication (one "
        "row per replica: log end offset, lag, last fetch and caught-up times).")
    what = describe.add_mutually_exclusive_group(required=True)
    what.add_argument("--status", action="store_true", help="the quorum's summary")
    what.add_argument("--replication", action="store_true", help="one row per replica")
    describe.add_argument("--human-readable", action="store_true",
                          help="timestamps as 'N ms ago' (text output only)")
    describe.add_argument("--json", action="store_true", help="one JSON object")

    topics = sub.add_parser("topics", help="create, delete, describe and list topics",
                            description="Topics, like kafka-topics.")
    topics_sub = topics.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = topics_sub.add_parser("create", parents=[common], help="create a topic")
    create.add_argument("--topic", required=True, metavar="NAME")
    create.add_argument("--partitions", type=int, default=-1, metavar="N",
                        help="partition count (default: the controller's num.partitions)")
    create.add_argument("--replication-factor", type=int, default=-1, metavar="R",
                        help="replicas per partition (default: the controller's "
                        "default.replication.factor)")
    create.add_argument("--config", action="append", default=[], metavar="K=V",
                        help="a topic config (min.insync.replicas, "
                        "unclean.leader.election.enable); repeatable")
    delete = topics_sub.add_parser("delete", parents=[common], help="delete a topic")
    delete.add_argument("--topic", required=True, metavar="NAME")
    tdescribe = topics_sub.add_parser("describe", parents=[common],
                                      help="partitions, leaders, replicas and ISRs")
    tdescribe.add_argument("--topic", metavar="NAME", help="only this topic")
    tdescribe.add_argument("--json", action="store_true", help="one JSON object")
    tlist = topics_sub.add_parser("list", parents=[common], help="topic names")
    tlist.add_argument("--json", action="store_true", help="one JSON object")

    brokers = sub.add_parser("brokers", help="list the registered brokers")
    brokers_sub = brokers.add_subparsers(dest="action", metavar="ACTION", required=True)
    blist = brokers_sub.add_parser(
        "list", parents=[common],
        help="id, state, epoch and endpoint of every registered broker",
        description="Every registered broker with its state (fenced, unfenced, shutting "
        "down), broker epoch, endpoint and rack.")
    blist.add_argument("--json", action="store_true", help="one JSON object")

    configs = sub.add_parser("configs", help="read and change topic and cluster configs")
    configs_sub = configs.add_subparsers(dest="action", metavar="ACTION", required=True)
    cset = configs_sub.add_parser(
        "set", parents=[common], help="set or delete configs of a topic or the cluster",
        description="IncrementalAlterConfigs: SET each K=V and DELETE each --delete K, on a "
        "topic (--topic) or on the cluster-wide broker default (--cluster).")
    target = cset.add_mutually_exclusive_group(required=True)
    target.add_argument("--topic", metavar="NAME")
    target.add_argument("--cluster", action="store_true",
                        help="the cluster-wide default (broker resource '')")
    cset.add_argument("pairs", nargs="*", metavar="K=V")
    cset.add_argument("--delete", action="append", default=[], metavar="K",
                      help="remove a config (back to its default); repeatable")
    cget = configs_sub.add_parser(
        "get", parents=[common], help="show the configs of a topic or the cluster",
        description="DescribeConfigs: the configs set on a topic (--topic) or on the "
        "cluster-wide broker default (--cluster), each with its synonyms in precedence "
        "order, like kafka-configs --describe. --all adds the configs that take their value "
        "from a lower level (cluster default, Kafka's default).")
    target = cget.add_mutually_exclusive_group(required=True)
    target.add_argument("--topic", metavar="NAME")
    target.add_argument("--cluster", action="store_true",
                        help="the cluster-wide default (broker resource '')")
    cget.add_argument("--all", action="store_true",
                      help="every config, not only those set at this level")
    cget.add_argument("--json", action="store_true", help="one JSON object")
    return sub


# ------------------------------------------------------------------------------ running

def parse_address(text, flag="--bootstrap-controller"):
    """HOST:PORT (IPv6 as [ADDR]:PORT) -> (host, port); CommandError (usage) naming `flag`
    otherwise."""
    bad = CommandError(f"bad {flag} {text!r}: expected HOST:PORT, e.g. 127.0.0.1:9093",
                       EXIT_USAGE)
    host, sep, port = str(text).rpartition(":")
    if not sep or not host or not port.isdigit():
        raise bad
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host or ":" in host and not str(text).startswith("["):
        raise bad
    port = int(port)
    if not 0 < port < 65536:
        raise bad
    return host, port


def add_command_config(parser):
    """The `--command-config FILE` option of the commands that talk to a cluster."""
    parser.add_argument("--command-config", metavar="FILE",
                        help="Kafka client properties for a secured listener: "
                        "security.protocol, ssl.truststore.location, ssl.keystore.location, "
                        "sasl.mechanism, sasl.jaas.config (docs/security.md)")


def cluster_arguments(server_help, controller_help):
    """The options every command that talks to brokers or to a controller takes: one of
    `--bootstrap-server` and `--bootstrap-controller` (see `parse_bootstrap`),
    `--timeout-ms` and `--command-config`; a parent parser."""
    common = argparse.ArgumentParser(add_help=False)
    where = common.add_mutually_exclusive_group(required=True)
    where.add_argument("--bootstrap-server", metavar="HOST:PORT[,HOST:PORT...]",
                       help=server_help)
    where.add_argument("--bootstrap-controller", metavar="HOST:PORT", help=controller_help)
    common.add_argument("--timeout-ms", type=int, default=TIMEOUT_MS_DEFAULT, metavar="MS",
                        help=f"give up after this long (default {TIMEOUT_MS_DEFAULT})")
    add_command_config(common)
    return common


def parse_bootstrap(args):
    """([(host, port), ...], whether they are a controller's) of `cluster_arguments`'
    options; a CommandError (usage) for an address that does not parse."""
    if args.bootstrap_controller is not None:
        return [parse_address(args.bootstrap_controller)], True
    items = [x.strip() for x in args.bootstrap_server.split(",") if x.strip()]
    if not items:
        raise CommandError("--bootstrap-server needs at least one HOST:PORT", EXIT_USAGE)
    return [parse_address(x, "--bootstrap-server") for x in items], False


def command_options(args):
    """The connection options `--command-config` asks for ({} without it); a CommandError
    (usage) when the file cannot be read or its settings are wrong."""
    path = getattr(args, "command_config", None)
    if not path:
        return {}
    from kraftcore.admin.client_security import connection_options, read_command_config
    from kraftcore.errors import ConfigError
    try:
        return connection_options(read_command_config(path))
    except ConfigError as exc:
        raise CommandError(f"--command-config {path}: {exc}", EXIT_USAGE) from None


def _parse_pairs(pairs, what):
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise CommandError(f"bad {what} {pair!r}: expected KEY=VALUE", EXIT_USAGE)
        out[key] = value
    return out


def run(args):
    """Run the admin command of parsed `args`; returns the exit status."""
    def body():
        _check_usage(args)
        address = parse_address(args.bootstrap_controller)
        return asyncio.run(_main(args, address))

    return run_reporting(f"kraftcore {args.command} {args.action}", body)


def run_reporting(label, body):
    """`body()`'s exit status; a `CommandError` it raises is one line on stderr, `label:
    error: ...`, and its exit code, Ctrl-C `label: interrupted` and 130."""
    try:
        return body()
    except CommandError as exc:
        print(f"{label}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"{label}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def check_timeout(args):
    """A CommandError (usage) for a --timeout-ms below 1."""
    if args.timeout_ms < 1:
        raise CommandError(f"--timeout-ms must be >= 1, not {args.timeout_ms}", EXIT_USAGE)


def _check_usage(args):
    check_timeout(args)
    if args.command == "topics" and args.action == "create":
        if args.partitions != -1 and not 1 <= args.partitions <= 0x7FFFFFFF:
            raise CommandError(f"--partitions must be >= 1, not {args.partitions}", EXIT_USAGE)
        if args.replication_factor != -1 and not 1 <= args.replication_factor <= 0x7FFF:
            raise CommandError("--replication-factor must be in [1, 32767], not "
                               f"{args.replication_factor}", EXIT_USAGE)
        args.config_map = _parse_pairs(args.config, "--config")
    if args.command == "configs" and args.action == "set":
        args.config_map = _parse_pairs(args.pairs, "config")
        if not args.config_map and not args.delete:
            raise CommandError("nothing to change: give KEY=VALUE pairs or --delete KEY",
                               EXIT_USAGE)


async def _main(args, address):
    # Imported here, not above: every `kraftcore` command builds this module's parser, and
    # only the admin commands need the network.
    from kraftcore.admin.client import AdminClient, address_text

    admin = AdminClient(address, args.timeout_ms, command_options(args))
    command = _COMMANDS[(args.command, args.action)]
    try:
        lines = await asyncio.wait_for(command(admin, args), args.timeout_ms / 1000)
    except KraftcoreError as exc:  # AdminError, ConnectError, RequestTimeoutError, ...
        raise CommandError(exc) from None
    except asyncio.TimeoutError:
        raise CommandError(f"no answer from {address_text(address)} (or the controllers it "
                           f"named) within {args.timeout_ms} ms") from None
    finally:
        await admin.close()
    for line in lines:
        print(line)
    return EXIT_OK


# ------------------------------------------------------------------------------ quorum describe

def _kafka_nodes(nodes):
    return "[" + ", ".join(json.dumps({"id": n["id"], "directoryId": n["directory_id"],
                                       "endpoints": n["endpoints"]}) for n in nodes) + "]"


def format_status(summary):
    """The lines of `kafka-metadata-quorum describe --status`."""
    fields = [("ClusterId", summary["cluster_id"]), ("LeaderId", summary["leader_id"]),
              ("LeaderEpoch", summary["leader_epoch"]),
              ("HighWatermark", summary["high_watermark"]),
              ("MaxFollowerLag", summary["max_follower_lag"]),
              ("MaxFollowerLagTimeMs", summary["max_follower_lag_time_ms"]),
              ("CurrentVoters", _kafka_nodes(summary["current_voters"])),
              ("CurrentObservers", _kafka_nodes(summary["current_observers"]))]
    return [f"{label + ':':<{_LABEL_WIDTH}}{value}" for label, value in fields]


def table(header, rows):
    """Left-aligned columns two spaces apart, the header first (trailing spaces cut)."""
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows)]
    return ["  ".join(f"{str(x):<{w}}" for x, w in zip(line, widths)).rstrip()
            for line in [header, *rows]]


def format_replication(summary, now_ms=None):
    """The table of `kafka-metadata-quorum describe --replication`; with `now_ms`,
    timestamps read 'N ms ago' (-1 stays -1)."""
    def when(ts):
        return ts if now_ms is None or ts < 0 else f"{max(now_ms - ts, 0)} ms ago"

    header = ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
              "LastCaughtUpTimestamp", "Status"]
    rows = [[r["node_id"], r["directory_id"] or "-", r["log_end_offset"], r["lag"],
             when(r["last_fetch_timestamp"]), when(r["last_caught_up_timestamp"]), r["status"]]
            for r in summary["replicas"]]
    return table(header, rows)


async def _quorum_describe(admin, args):
    summary = await admin.describe_quorum()
    if args.json:
        if args.status:
            del summary["replicas"]
        return [json.dumps(summary)]
    if args.status:
        return format_status(summary)
    now_ms = int(time.time() * 1000) if args.human_readable else None
    return format_replication(summary, now_ms)


# ------------------------------------------------------------------------------ topics

def _members(ids):
    return ",".join(map(str, ids))


def _describe_lines(doc):
    head = (f"Topic: {doc['name']}\tTopicId: {doc['topic_id'] or '-'}\t"
            f"PartitionCount: {doc['partition_count']}\t"
            f"ReplicationFactor: {doc['replication_factor']}")
    lines = [head]
    for p in doc["partitions"]:
        leader = "none" if p["leader"] is None else p["leader"]
        line = (f"\tTopic: {doc['name']}\tPartition: {p['partition']}\tLeader: {leader}\t"
                f"Replicas: {_members(p['replicas'])}\tIsr: {_members(p['isr'])}")
        if p["offline_replicas"]:
            line += f"\tOffline: {_members(p['offline_replicas'])}"
        lines.append(line)
    return lines


async def _topics_describe(admin, args):
    docs = await admin.describe_topics(None if args.topic is None else [args.topic])
    if args.json:
        return [json.dumps({"topics": docs})]
    return [line for doc in docs for line in _describe_lines(doc)]


async def _topics_list(admin, args):
    names = await admin.list_topics()
    return [json.dumps({"topics": names})] if args.json else names


async def _topics_create(admin, args):
    await admin.create_topic(args.topic, args.partitions, args.replication_factor,
                             args.config_map)
    return [f"Created topic {args.topic}."]


async def _topics_delete(admin, args):
    await admin.delete_topic(args.topic)
    return [f"Deleted topic {args.topic}."]


# ------------------------------------------------------------------------------ brokers

async def _brokers_list(admin, args):
    brokers = await admin.list_brokers()
    if args.json:
        return [json.dumps({"brokers": brokers})]
    return table(["ID", "STATE", "EPOCH", "ENDPOINTS", "RACK"],
                  [[b["id"], b["state"], "-" if b["epoch"] is None else b["epoch"],
                    ",".join(b["endpoints"]), b["rack"] or "-"] for b in brokers])


# ------------------------------------------------------------------------------ configs

def _resource(args):
    return (CONFIG_BROKER, "") if args.cluster else (CONFIG_TOPIC, args.topic)


async def _configs_set(admin, args):
    await admin.alter_configs(_resource(args), args.config_map, args.delete)
    if args.cluster:
        return ["Completed updating default config for brokers in the cluster."]
    return [f"Completed updating config for topic {args.topic}."]


def format_config(doc):
    """One config line as kafka-configs --describe prints it."""
    def shown(value):
        return "null" if value is None else value

    synonyms = ", ".join(f"{s['source']}:{s['name']}={shown(s['value'])}"
                         for s in doc["synonyms"])
    sensitive = "true" if doc["sensitive"] else "false"
    return f"  {doc['name']}={shown(doc['value'])} sensitive={sensitive} synonyms={{{synonyms}}}"


async def _configs_get(admin, args):
    docs = await admin.describe_configs(_resource(args), inherited=args.all)
    if args.json:
        kind = "broker" if args.cluster else "topic"
        return [json.dumps({"resource": {"type": kind, "name": _resource(args)[1]},
                            "configs": docs})]
    if args.cluster:
        head = ("All default configs for brokers in the cluster are:" if args.all
                else "Default configs for brokers in the cluster are:")
    else:
        head = f"{'All' if args.all else 'Dynamic'} configs for topic {args.topic} are:"
    return [head] + [format_config(d) for d in docs]


_COMMANDS = {
    ("quorum", "describe"): _quorum_describe,
    ("topics", "create"): _topics_create,
    ("topics", "delete"): _topics_delete,
    ("topics", "describe"): _topics_describe,
    ("topics", "list"): _topics_list,
    ("brokers", "list"): _brokers_list,
    ("configs", "set"): _configs_set,
    ("configs", "get"): _configs_get,
}
