"""The admin commands of `kraftcore`: a Kafka admin client for a KRaft controller quorum
(docs/admin.md).

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
connecting included.

Where requests go:

* writes (CreateTopics, DeleteTopics, IncrementalAlterConfigs) go to the bootstrap
  controller; a NOT_CONTROLLER answer makes the client ask that node where the active
  controller is (DescribeCluster, endpoint type controller, as Kafka 3.7+ admin clients do
  with `--bootstrap-controller`) and send the request there, up to `REDIRECTS_MAX` times;
* reads (Metadata, DescribeCluster, DescribeConfigs) go to the active controller, found
  the same way, so a read sees every write acknowledged before it; if the active controller
  cannot be reached they fall back to the bootstrap controller's own (possibly older) image;
* DescribeQuorum is answered only by the quorum leader; another node answers
  NOT_LEADER_OR_FOLLOWER with the leader's id, whose address DescribeCluster gives.

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
from kraftcore.protocol import messages as m
from kraftcore.protocol.error_codes import ErrorCode, error_name
from kraftcore.types import ZERO_UUID
from kraftcore.raft import rpc
from kraftcore.raft.config import CLUSTER_METADATA_PARTITION, CLUSTER_METADATA_TOPIC

__all__ = ["COMMANDS", "add_arguments", "run", "AdminError", "parse_address",
           "quorum_summary", "format_status", "format_replication", "format_config",
           "CONFIG_SOURCE_NAMES"]

COMMANDS = ("quorum", "topics", "brokers", "configs")
TIMEOUT_MS = 30_000
REDIRECTS_MAX = 2
# Pause before asking again when no active controller is known (an election in progress).
NO_LEADER_RETRY_MS = 200
CLIENT_ID = "kraftcore-admin"
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

ENDPOINT_TYPE_BROKER = 1
ENDPOINT_TYPE_CONTROLLER = 2
OP_SET, OP_DELETE = 0, 1
# DescribeConfigs ConfigSource ids, named as Kafka's admin client names them.
SOURCE_TOPIC, SOURCE_DYNAMIC_DEFAULT_BROKER, SOURCE_DEFAULT = 1, 3, 5
CONFIG_SOURCE_NAMES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
                       3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG",
                       5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG"}
_LABEL_WIDTH = 24  # kafka-metadata-quorum pads its labels to this column


class AdminError(Exception):
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
    common.add_argument("--timeout-ms", type=int, default=TIMEOUT_MS, metavar="MS",
                        help=f"give up after this long (default {TIMEOUT_MS})")

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

def parse_address(text):
    """HOST:PORT (IPv6 as [ADDR]:PORT) -> (host, port); AdminError (usage) otherwise."""
    bad = AdminError(f"bad --bootstrap-controller {text!r}: expected HOST:PORT, e.g. "
                     "127.0.0.1:9093", EXIT_USAGE)
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


def _parse_pairs(pairs, what):
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise AdminError(f"bad {what} {pair!r}: expected KEY=VALUE", EXIT_USAGE)
        out[key] = value
    return out


def run(args):
    """Run the admin command of parsed `args`; returns the exit status."""
    label = f"kraftcore {args.command} {args.action}"
    try:
        _check_usage(args)
        address = parse_address(args.bootstrap_controller)
        return asyncio.run(_main(args, address))
    except AdminError as exc:
        print(f"{label}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"{label}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _check_usage(args):
    if args.timeout_ms < 1:
        raise AdminError(f"--timeout-ms must be >= 1, not {args.timeout_ms}", EXIT_USAGE)
    if args.command == "topics" and args.action == "create":
        if args.partitions != -1 and not 1 <= args.partitions <= 0x7FFFFFFF:
            raise AdminError(f"--partitions must be >= 1, not {args.partitions}", EXIT_USAGE)
        if args.replication_factor != -1 and not 1 <= args.replication_factor <= 0x7FFF:
            raise AdminError("--replication-factor must be in [1, 32767], not "
                             f"{args.replication_factor}", EXIT_USAGE)
        args.config_map = _parse_pairs(args.config, "--config")
    if args.command == "configs" and args.action == "set":
        args.config_map = _parse_pairs(args.pairs, "config")
        if not args.config_map and not args.delete:
            raise AdminError("nothing to change: give KEY=VALUE pairs or --delete KEY",
                             EXIT_USAGE)


async def _main(args, address):
    admin = _Admin(address, args.timeout_ms)
    command = _COMMANDS[(args.command, args.action)]
    where = f"{address[0]}:{address[1]}"
    try:
        lines = await asyncio.wait_for(command(admin, args), args.timeout_ms / 1000)
    except KraftcoreError as exc:  # ConnectError, RequestTimeoutError, EncodeError, ...
        raise AdminError(exc) from None
    except asyncio.TimeoutError:
        raise AdminError(f"no answer from {where} (or the controllers it named) within "
                         f"{args.timeout_ms} ms") from None
    finally:
        await admin.close()
    for line in lines:
        print(line)
    return EXIT_OK


# ------------------------------------------------------------------------------ the client

class _Cluster:
    """What DescribeCluster (endpoint type controller) says."""

    def __init__(self, cluster_id, controller_id, controllers):
        self.cluster_id = cluster_id
        self.controller_id = controller_id  # -1 when unknown
        self.controllers = controllers  # {id: (host, port)}


class _Admin:
    """Connections by address, version negotiation, and routing to the active controller."""

    def __init__(self, bootstrap, timeout_ms):
        self.bootstrap = bootstrap
        self.timeout_ms = timeout_ms
        self._conns = {}
        self._read_address = None

    async def close(self):
        conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            await conn.close()

    async def _conn(self, address):
        from kraftcore.net.client import Connection

        conn = self._conns.get(address)
        if conn is None or conn.closed:
            conn = await Connection.open(
                *address, client_id=CLIENT_ID, connect_timeout_ms=self.timeout_ms,
                request_timeout_ms=self.timeout_ms, negotiate_versions=True)
            self._conns[address] = conn
        return conn

    async def send(self, address, request_cls, build):
        """Send `build(version)` at the highest version both sides know."""
        conn = await self._conn(address)
        version = conn.choose_version(request_cls)
        return await conn.send(build(version), version)

    async def describe_controllers(self, address):
        conn = await self._conn(address)
        version = conn.choose_version(m.DescribeClusterRequest)
        if version < 1:
            raise AdminError(f"{_where(address)} answers DescribeCluster only at v0, which "
                             "cannot ask for the controllers (endpoint type needs v1+)")
        r = await conn.send(m.DescribeClusterRequest(endpoint_type=ENDPOINT_TYPE_CONTROLLER),
                            version)
        if r.error_code:
            raise AdminError(f"{_where(address)} refused DescribeCluster: "
                             f"{_error(r.error_code, r.error_message)}")
        return _Cluster(r.cluster_id, r.controller_id,
                        {b.broker_id: (b.host, b.port) for b in r.brokers})

    async def read_address(self):
        """Where reads go: the active controller when it is known and reachable, else the
        bootstrap controller (found once per command)."""
        if self._read_address is None:
            cluster = await self.describe_controllers(self.bootstrap)
            address = cluster.controllers.get(cluster.controller_id, self.bootstrap)
            if address != self.bootstrap:
                try:
                    await self._conn(address)
                except (KraftcoreError, OSError):
                    address = self.bootstrap
            self._read_address = address
        return self._read_address

    async def read(self, request_cls, build):
        """A read (Metadata, DescribeCluster), sent to `read_address()`."""
        return await self.send(await self.read_address(), request_cls, build)

    async def write(self, request_cls, build, not_controller):
        """A write: to the bootstrap, then where NOT_CONTROLLER answers point."""
        address = self.bootstrap
        for attempt in range(REDIRECTS_MAX + 1):
            response = await self.send(address, request_cls, build)
            if not not_controller(response):
                return response
            if attempt == REDIRECTS_MAX:
                break
            cluster = await self.describe_controllers(address)
            if cluster.controller_id in cluster.controllers:
                address = cluster.controllers[cluster.controller_id]
            else:  # an election is in progress: ask again shortly
                await asyncio.sleep(NO_LEADER_RETRY_MS / 1000)
                address = self.bootstrap
        raise AdminError(f"no controller accepted the request: {_where(address)} answered "
                         f"NOT_CONTROLLER after {REDIRECTS_MAX} redirects; the quorum may "
                         "be electing a leader, retry shortly")


def _where(address):
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _error(code, message=None):
    text = f"{error_name(code)} ({code})"
    return f"{text}: {message}" if message else text


def _is_not_controller(code):
    return code == ErrorCode.NOT_CONTROLLER


# ------------------------------------------------------------------------------ quorum describe

def _describe_quorum_request(version):
    return rpc.describe_quorum_request()


def _quorum_partition(response):
    for topic in response.topics:
        if topic.topic_name == CLUSTER_METADATA_TOPIC:
            for part in topic.partitions:
                if part.partition_index == CLUSTER_METADATA_PARTITION:
                    return part
    return None


async def _describe_quorum(admin, cluster):
    address = admin.bootstrap
    for _ in range(REDIRECTS_MAX + 1):
        response = await admin.send(address, m.DescribeQuorumRequest, _describe_quorum_request)
        if response.error_code:
            raise AdminError(f"{_where(address)} refused DescribeQuorum: "
                             f"{_error(response.error_code, response.error_message)}")
        part = _quorum_partition(response)
        if part is None:
            raise AdminError(f"{_where(address)} answered DescribeQuorum without the "
                             f"{CLUSTER_METADATA_TOPIC} partition")
        if part.error_code != ErrorCode.NOT_LEADER_OR_FOLLOWER:
            if part.error_code:
                raise AdminError(f"{_where(address)} refused DescribeQuorum: "
                                 f"{_error(part.error_code, part.error_message)}")
            return response, part
        leader = part.leader_id if part.leader_id >= 0 else cluster.controller_id
        if leader < 0:
            raise AdminError(f"the quorum has no leader right now (epoch "
                             f"{part.leader_epoch}); retry in a moment")
        if leader not in cluster.controllers:
            raise AdminError(f"node {leader} leads the quorum, but {_where(admin.bootstrap)} "
                             "does not list its address among the controllers")
        address = cluster.controllers[leader]
    raise AdminError("the quorum leader moved while it was being asked; retry")


def quorum_summary(part, cluster_id, endpoints):
    """The fields of `kafka-metadata-quorum describe` from a DescribeQuorum partition:
    a dict with snake_case keys. `endpoints`: {node id: ["NAME://host:port" or
    "host:port", ...]}."""
    voters = list(part.current_voters)
    observers = list(part.observers)
    leader_id = part.leader_id
    leader = next((v for v in voters if v.replica_id == leader_id), None)
    max_lag = max_lag_time = -1
    if leader is not None and voters:
        # The laggard: the smallest log end offset (the leader itself on a tie).
        laggard = min(voters, key=lambda v: (v.log_end_offset, v.replica_id != leader_id))
        max_lag = leader.log_end_offset - laggard.log_end_offset
        if laggard is leader:
            max_lag_time = 0
        elif leader.last_caught_up_timestamp >= 0 and laggard.last_caught_up_timestamp >= 0:
            max_lag_time = leader.last_caught_up_timestamp - laggard.last_caught_up_timestamp

    def node(r):
        directory = getattr(r, "replica_directory_id", ZERO_UUID)
        return {"id": r.replica_id,
                "directory_id": None if directory == ZERO_UUID else str(directory),
                "endpoints": list(endpoints.get(r.replica_id, ()))}

    def row(r, status):
        directory = getattr(r, "replica_directory_id", ZERO_UUID)
        lag = leader.log_end_offset - r.log_end_offset if leader is not None else -1
        return {"node_id": r.replica_id,
                "directory_id": None if directory == ZERO_UUID else str(directory),
                "log_end_offset": r.log_end_offset, "lag": lag,
                "last_fetch_timestamp": r.last_fetch_timestamp,
                "last_caught_up_timestamp": r.last_caught_up_timestamp, "status": status}

    replicas = []
    if leader is not None:
        replicas.append(row(leader, "Leader"))
    replicas += [row(v, "Follower") for v in voters if v is not leader]
    replicas += [row(o, "Observer") for o in observers]
    return {
        "cluster_id": cluster_id, "leader_id": leader_id, "leader_epoch": part.leader_epoch,
        "high_watermark": part.high_watermark, "max_follower_lag": max_lag,
        "max_follower_lag_time_ms": max_lag_time,
        "current_voters": [node(v) for v in voters],
        "current_observers": [node(o) for o in observers],
        "replicas": replicas,
    }


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


def _table(header, rows):
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
    return _table(header, rows)


async def _quorum_describe(admin, args):
    cluster = await admin.describe_controllers(admin.bootstrap)
    response, part = await _describe_quorum(admin, cluster)
    endpoints = {}
    for node in getattr(response, "nodes", None) or ():
        endpoints[node.node_id] = [f"{ln.name}://{_where((ln.host, ln.port))}"
                                   for ln in node.listeners]
    for node_id, address in cluster.controllers.items():
        endpoints.setdefault(node_id, [_where(address)])
    summary = quorum_summary(part, cluster.cluster_id, endpoints)
    if args.json:
        if args.status:
            del summary["replicas"]
        return [json.dumps(summary)]
    if args.status:
        return format_status(summary)
    now_ms = int(time.time() * 1000) if args.human_readable else None
    return format_replication(summary, now_ms)


# ------------------------------------------------------------------------------ topics

def _metadata_request(names):
    def build(version):
        if names is None:
            topics = [] if version == 0 else None
        else:
            topics = [m.MetadataRequest.MetadataRequestTopic(name=n) for n in names]
        body = m.MetadataRequest(topics=topics)
        if version >= 4:
            body.allow_auto_topic_creation = False
        return body
    return build


def _members(ids):
    return ",".join(map(str, ids))


def _topic_doc(topic):
    partitions = sorted(topic.partitions, key=lambda p: p.partition_index)
    return {
        "name": topic.name,
        "topic_id": None if topic.topic_id == ZERO_UUID else str(topic.topic_id),
        "partition_count": len(partitions),
        "replication_factor": len(partitions[0].replica_nodes) if partitions else 0,
        "partitions": [{"partition": p.partition_index,
                        "leader": p.leader_id if p.leader_id >= 0 else None,
                        "leader_epoch": p.leader_epoch, "replicas": list(p.replica_nodes),
                        "isr": list(p.isr_nodes), "offline_replicas": list(p.offline_replicas)}
                       for p in partitions],
    }


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


def _check_result(result, what, action, topic=None):
    """The controller's answer for one topic or config resource: one line for a missing
    answer, an unknown `topic` (when one is named) and any other error."""
    if result is None:
        raise AdminError(f"the controller's answer does not mention {what}")
    if topic is not None and result.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        raise AdminError(f"topic {topic!r} does not exist")
    if result.error_code:
        raise AdminError(f"cannot {action} {what}: "
                         f"{_error(result.error_code, result.error_message)}")


async def _topics_metadata(admin, names):
    response = await admin.read(m.MetadataRequest, _metadata_request(names))
    found = []
    for topic in response.topics:
        if topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise AdminError(f"topic {topic.name!r} does not exist")
        if topic.error_code:
            raise AdminError(f"cannot describe topic {topic.name!r}: "
                             f"{_error(topic.error_code)}")
        found.append(topic)
    return response, sorted(found, key=lambda t: t.name)


async def _topics_describe(admin, args):
    _, topics = await _topics_metadata(admin, None if args.topic is None else [args.topic])
    docs = [_topic_doc(t) for t in topics]
    if args.json:
        return [json.dumps({"topics": docs})]
    return [line for doc in docs for line in _describe_lines(doc)]


async def _topics_list(admin, args):
    _, topics = await _topics_metadata(admin, None)
    names = [t.name for t in topics]
    return [json.dumps({"topics": names})] if args.json else names


async def _topics_create(admin, args):
    cls = m.CreateTopicsRequest
    body = cls(topics=[cls.CreatableTopic(
        name=args.topic, num_partitions=args.partitions,
        replication_factor=args.replication_factor,
        configs=[cls.CreatableTopicConfig(name=k, value=v)
                 for k, v in args.config_map.items()])], timeout_ms=args.timeout_ms)
    response = await admin.write(cls, lambda version: body, lambda r: any(
        _is_not_controller(t.error_code) for t in r.topics))
    _check_result(next((t for t in response.topics if t.name == args.topic), None),
                  f"topic {args.topic!r}", "create")
    return [f"Created topic {args.topic}."]


async def _topics_delete(admin, args):
    cls = m.DeleteTopicsRequest

    def build(version):
        if version >= 6:
            return cls(topics=[cls.DeleteTopicState(name=args.topic)],
                       timeout_ms=args.timeout_ms)
        return cls(topic_names=[args.topic], timeout_ms=args.timeout_ms)

    response = await admin.write(cls, build, lambda r: any(
        _is_not_controller(t.error_code) for t in r.responses))
    _check_result(next((t for t in response.responses if t.name == args.topic), None),
                  f"topic {args.topic!r}", "delete", args.topic)
    return [f"Deleted topic {args.topic}."]


# ------------------------------------------------------------------------------ brokers

async def _brokers_list(admin, args):
    def describe(version):
        body = m.DescribeClusterRequest()
        if version >= 1:
            body.endpoint_type = ENDPOINT_TYPE_BROKER
        if version >= 2:
            body.include_fenced_brokers = True
        return body

    described = await admin.read(m.DescribeClusterRequest, describe)
    if described.error_code:
        raise AdminError(f"DescribeCluster was refused: "
                         f"{_error(described.error_code, described.error_message)}")
    # Before v2 DescribeCluster lists only unfenced brokers and says nothing of fencing.
    fenced_known = (described.decoded_version or 0) >= 2
    metadata = await admin.read(m.MetadataRequest, _metadata_request([]))
    active = {b.node_id for b in metadata.brokers}
    brokers = []
    for b in sorted(described.brokers, key=lambda b: b.broker_id):
        if fenced_known and b.is_fenced:
            state = "fenced"
        elif b.broker_id in active:
            state = "unfenced"
        else:  # registered and unfenced, yet not offered to clients
            state = "shutting down"
        # The epoch is kraftcore's tagged extension of DescribeCluster: -1 when the server
        # does not send it (a Kafka controller, or an older kraftcore).
        epoch = b.broker_epoch if b.broker_epoch >= 0 else None
        brokers.append({"id": b.broker_id, "state": state, "epoch": epoch,
                        "endpoints": [_where((b.host, b.port))], "rack": b.rack})
    if args.json:
        return [json.dumps({"brokers": brokers})]
    return _table(["ID", "STATE", "EPOCH", "ENDPOINTS", "RACK"],
                  [[b["id"], b["state"], "-" if b["epoch"] is None else b["epoch"],
                    ",".join(b["endpoints"]), b["rack"] or "-"] for b in brokers])


# ------------------------------------------------------------------------------ configs

async def _configs_set(admin, args):
    cls = m.IncrementalAlterConfigsRequest
    if args.cluster:
        resource = (CONFIG_BROKER, "")
        what, done = "the cluster default", "Completed updating default config for brokers " \
            "in the cluster."
    else:
        resource = (CONFIG_TOPIC, args.topic)
        what, done = f"topic {args.topic!r}", f"Completed updating config for topic " \
            f"{args.topic}."
    configs = [cls.AlterableConfig(name=k, config_operation=OP_SET, value=v)
               for k, v in args.config_map.items()]
    configs += [cls.AlterableConfig(name=k, config_operation=OP_DELETE, value=None)
                for k in args.delete]
    body = cls(resources=[cls.AlterConfigsResource(resource_type=resource[0],
                                                   resource_name=resource[1],
                                                   configs=configs)])
    response = await admin.write(cls, lambda version: body, lambda r: any(
        _is_not_controller(x.error_code) for x in r.responses))
    _check_result(response.responses[0] if response.responses else None, what,
                  "change the configs of", args.topic)
    return [done]


def _config_doc(config, version, own_source):
    """One DescribeConfigs entry as a dict; a v0 answer has IsDefault instead of a source."""
    if version == 0:
        source = SOURCE_DEFAULT if config.is_default else own_source
    else:
        source = config.config_source
    return {"name": config.name, "value": config.value,
            "source": CONFIG_SOURCE_NAMES.get(source, "UNKNOWN"),
            "sensitive": bool(config.is_sensitive), "read_only": bool(config.read_only),
            "synonyms": [{"name": s.name, "value": s.value,
                          "source": CONFIG_SOURCE_NAMES.get(s.source, "UNKNOWN")}
                         for s in (config.synonyms if version >= 1 else ())]}


def format_config(doc):
    """One config line as kafka-configs --describe prints it."""
    def shown(value):
        return "null" if value is None else value

    synonyms = ", ".join(f"{s['source']}:{s['name']}={shown(s['value'])}"
                         for s in doc["synonyms"])
    sensitive = "true" if doc["sensitive"] else "false"
    return f"  {doc['name']}={shown(doc['value'])} sensitive={sensitive} synonyms={{{synonyms}}}"


async def _configs_get(admin, args):
    cls = m.DescribeConfigsRequest
    if args.cluster:
        resource, what = (CONFIG_BROKER, ""), "the cluster default"
        own_source = SOURCE_DYNAMIC_DEFAULT_BROKER
        head = ("All default configs for brokers in the cluster are:" if args.all
                else "Default configs for brokers in the cluster are:")
    else:
        resource, what = (CONFIG_TOPIC, args.topic), f"topic {args.topic!r}"
        own_source = SOURCE_TOPIC
        head = f"{'All' if args.all else 'Dynamic'} configs for topic {args.topic} are:"

    def build(version):
        body = cls(resources=[cls.DescribeConfigsResource(
            resource_type=resource[0], resource_name=resource[1], configuration_keys=None)])
        if version >= 1:
            body.include_synonyms = True
        return body

    response = await admin.read(cls, build)
    result = next((r for r in response.results
                   if (r.resource_type, r.resource_name) == resource), None)
    _check_result(result, what, "describe the configs of", args.topic)
    version = response.decoded_version or 0
    docs = [_config_doc(c, version, own_source) for c in result.configs]
    if not args.all:
        docs = [d for d in docs if d["source"] == CONFIG_SOURCE_NAMES[own_source]]
    if args.json:
        kind = "broker" if args.cluster else "topic"
        return [json.dumps({"resource": {"type": kind, "name": resource[1]},
                            "configs": docs})]
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
