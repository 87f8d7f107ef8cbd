"""`AdminClient`: a Kafka admin client for a KRaft controller quorum, as Kafka's admin
client is with `--bootstrap-controller` (docs/admin.md). The `kraftcore quorum | topics |
brokers | configs` commands print what it returns; tests, benchmarks and the demo use it
directly.

    async with AdminClient(("127.0.0.1", 9093), timeout_ms=30_000) as admin:
        await admin.create_topic("orders", partitions=6, replication_factor=3)
        topics = await admin.describe_topics(["orders"])

It owns one connection per address it talks to (versions negotiated with ApiVersions),
and the routing of requests:

* writes (CreateTopics, DeleteTopics, IncrementalAlterConfigs) go to the bootstrap
  controller; a NOT_CONTROLLER answer makes the client ask that node where the active
  controller is (DescribeCluster, endpoint type controller, as Kafka 3.7+ admin clients do)
  and send the request there; through an election (no active controller known, or the
  old one unreachable) it tries again every `NO_LEADER_RETRY_MS` for up to `timeout_ms`;
* reads (Metadata, DescribeCluster, DescribeConfigs) go to the active controller, found
  the same way once per client, so a read sees every write acknowledged before it; if the
  active controller cannot be reached they fall back to the bootstrap controller's own
  (possibly older) image;
* DescribeQuorum is answered only by the quorum leader; another node answers
  NOT_LEADER_OR_FOLLOWER with the leader's id, whose address DescribeCluster gives.

What the operations return is plain data (dicts and lists with snake_case keys, the same
the commands print with --json). A refusal or an answer that makes no sense is an
`AdminError` whose message says what failed and why; the network's own errors
(`ConnectError`, `RequestTimeoutError`, ...) pass through. `timeout_ms` bounds each
connection and each request, not an operation as a whole (the caller bounds that).

`quorum_leader(address)` asks one controller which node leads the quorum, without an
`AdminClient`: what a supervisor polls while a cluster starts.
"""

import asyncio

from kraftcore.errors import AdminError, KraftcoreError
from kraftcore.limits import ADMIN_REDIRECTS_MAX
from kraftcore.metadata.image import CONFIG_TOPIC
from kraftcore.net.client import Connection
from kraftcore.protocol import messages as m
from kraftcore.protocol.error_codes import ErrorCode, error_name
from kraftcore.raft import rpc
from kraftcore.raft.config import CLUSTER_METADATA_PARTITION, CLUSTER_METADATA_TOPIC
from kraftcore.types import ZERO_UUID

__all__ = ["AdminClient", "AdminConnections", "Controllers", "quorum_leader", "quorum_summary", "config_doc",
           "address_text", "error_text", "metadata_request", "TIMEOUT_MS_DEFAULT",
           "CONFIG_SOURCE_NAMES", "SOURCE_TOPIC", "SOURCE_DYNAMIC_DEFAULT_BROKER", "SOURCE_DEFAULT"]

TIMEOUT_MS_DEFAULT = 30_000
# Pause before asking again when no active controller is known (an election in progress).
NO_LEADER_RETRY_MS = 200
CLIENT_ID = "kraftcore-admin"

ENDPOINT_TYPE_BROKER = 1
ENDPOINT_TYPE_CONTROLLER = 2
OP_SET, OP_DELETE = 0, 1
# DescribeConfigs ConfigSource ids, named as Kafka's admin client names them.
SOURCE_TOPIC, SOURCE_DYNAMIC_BROKER, SOURCE_DYNAMIC_DEFAULT_BROKER, SOURCE_DEFAULT = 1, 2, 3, 5
CONFIG_SOURCE_NAMES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
                       3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG",
                       5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG"}


def address_text(address):
    """(host, port) as HOST:PORT ([ADDR]:PORT for IPv6)."""
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def error_text(code, message=None):
    """A Kafka error as `NAME (code)`, followed by `: message` when there is one."""
    text = f"{error_name(code)} ({code})"
    return f"{text}: {message}" if message else text


def _is_not_controller(code):
    return code == ErrorCode.NOT_CONTROLLER


def _is_broker_listener(api_versions):
    """Whether a listener's ApiVersions answer is a broker's: the data plane's APIs
    (Produce, Fetch) and none of a controller's (DescribeQuorum, BrokerRegistration)."""
    if not api_versions:
        return False
    return (0 in api_versions and 1 in api_versions
            and 55 not in api_versions and 62 not in api_versions)


def _another(address, known, bootstrap):
    """The controller to try after `address` could not be reached: the next one
    DescribeCluster named, else the bootstrap."""
    others = sorted(a for a in known.values() if a != address)
    if not others:
        return bootstrap
    later = [a for a in others if a > address]
    return (later or others)[0]


class Controllers:
    """What DescribeCluster (endpoint type controller) says."""

    def __init__(self, cluster_id, controller_id, controllers):
        self.cluster_id = cluster_id
        self.controller_id = controller_id  # -1 when unknown
        self.controllers = controllers  # {id: (host, port)}


class AdminConnections:
    """The connections of an admin client: one per address it talks to, opened on first
    use with versions negotiated (ApiVersions), `timeout_ms` bounding each connect and
    request, closed with the client (`close`, or `async with`). `connection_options`:
    TLS and SASL options of every connection (`kraftcore.admin.client_security`)."""

    def __init__(self, timeout_ms=TIMEOUT_MS_DEFAULT, connection_options=None):
        self.timeout_ms = timeout_ms
        self.connection_options = dict(connection_options or {})
        self._conns = {}

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc_info):
        await self.close()

    async def close(self):
        conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            await conn.close()

    def check_listener(self, conn, address):
        """Called with each new connection before it is used: raise to refuse a listener
        of the wrong kind (the connection is then closed)."""

    async def _conn(self, address):
        conn = self._conns.get(address)
        if conn is None or conn.closed:
            conn = await Connection.open(
                *address, client_id=CLIENT_ID, connect_timeout_ms=self.timeout_ms,
                request_timeout_ms=self.timeout_ms, negotiate_versions=True,
                **self.connection_options)
            try:
                self.check_listener(conn, address)
            except BaseException:
                await conn.close()
                raise
            self._conns[address] = conn
        return conn


class AdminClient(AdminConnections):
    """An admin client bootstrapped at `bootstrap` (host, port); see the module docstring.
    Close it (`close`, or `async with`) to close its connections."""

    def __init__(self, bootstrap, timeout_ms=TIMEOUT_MS_DEFAULT, connection_options=None):
        super().__init__(timeout_ms, connection_options)
        self.bootstrap = tuple(bootstrap)
        self._read_address = None

    # ------------------------------------------------------------------ routing

    def check_listener(self, conn, address):
        if _is_broker_listener(conn.api_versions):
            raise AdminError(
                f"{address_text(address)} is a broker's listener, not a controller's: "
                "give a controller's address (a port of controller.quorum.voters; "
                "`kraftcore cluster up` prints them), as Kafka's tools take with "
                "--bootstrap-controller")

    async def send(self, address, request_cls, build):
        """Send `build(version)` at the highest version both sides know."""
        conn = await self._conn(address)
        version = conn.choose_version(request_cls)
        return await conn.send(build(version), version)

    async def describe_controllers(self, address=None):
        """`Controllers`: what the controller at `address` (the bootstrap by default) says
        of the controllers and which one is active."""
        address = self.bootstrap if address is None else address
        conn = await self._conn(address)
        version = conn.choose_version(m.DescribeClusterRequest)
        if version < 1:
            raise AdminError(f"{address_text(address)} answers DescribeCluster only at v0, "
                             "which cannot ask for the controllers (endpoint type needs v1+)")
        r = await conn.send(m.DescribeClusterRequest(endpoint_type=ENDPOINT_TYPE_CONTROLLER),
                            version)
        if r.error_code:
            raise AdminError(f"{address_text(address)} refused DescribeCluster: "
                             f"{error_text(r.error_code, r.error_message)}")
        return Controllers(r.cluster_id, r.controller_id,
                           {b.broker_id: (b.host, b.port) for b in r.brokers})

    async def read_address(self):
        """Where reads go: the active controller when it is known and reachable, else the
        bootstrap controller (found once per client)."""
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
        """A read (Metadata, DescribeCluster, DescribeConfigs), sent to `read_address()`."""
        return await self.send(await self.read_address(), request_cls, build)

    async def write(self, request_cls, build, not_controller):
        """A write: to the bootstrap, then where NOT_CONTROLLER answers point, through an
        election if one is going on, for up to `timeout_ms` from the first attempt.
        `not_controller(response)`: whether the response is a NOT_CONTROLLER answer.

        Retried after `NO_LEADER_RETRY_MS`: NOT_CONTROLLER with no active controller known
        (or one pointing back and forth between two standbys), and a controller named by
        DescribeCluster that cannot be connected to (the request never left: the dead
        leader during an election). Not retried: a bootstrap that cannot be reached before
        any controller answered (raised at once), and a request that was sent and got no
        answer, which may have taken effect."""
        # one pause short of timeout_ms: a caller bounding the whole operation by the same
        # time (the commands do) gets this method's reason rather than its own timeout
        deadline = (asyncio.get_running_loop().time()
                    + (self.timeout_ms - NO_LEADER_RETRY_MS) / 1000)
        address = self.bootstrap
        known = {}  # other controllers DescribeCluster named, to try when one is down
        redirects = 0
        while True:
            try:
                conn = await self._conn(address)
            except AdminError:
                raise
            except (KraftcoreError, OSError) as exc:
                if not known:
                    raise  # the bootstrap itself, and no other controller known: say so now
                last = f"could not reach {address_text(address)}: {exc}"
                address = _another(address, known, self.bootstrap)
                redirects = ADMIN_REDIRECTS_MAX  # wait before the next attempt
            else:
                version = conn.choose_version(request_cls)
                response = await conn.send(build(version), version)
                if not not_controller(response):
                    return response
                last = f"{address_text(address)} answered NOT_CONTROLLER"
                try:
                    cluster = await self.describe_controllers(address)
                except (KraftcoreError, OSError) as exc:
                    last += f", then DescribeCluster failed: {exc}"
                    cluster = None
                if cluster is not None:
                    known.update(cluster.controllers)
                if cluster is not None and cluster.controller_id in cluster.controllers \
                        and redirects < ADMIN_REDIRECTS_MAX:
                    address = cluster.controllers[cluster.controller_id]
                    redirects += 1
                    continue
                address = self.bootstrap  # no active controller known: an election
                redirects = ADMIN_REDIRECTS_MAX
            loop = asyncio.get_running_loop()
            if loop.time() + NO_LEADER_RETRY_MS / 1000 > deadline:
                raise AdminError(f"no controller accepted the request within "
                                 f"{self.timeout_ms} ms ({last}); the quorum may be "
                                 "electing a leader: retry, or give a longer --timeout-ms")
            await asyncio.sleep(NO_LEADER_RETRY_MS / 1000)
            redirects = 0

    # ------------------------------------------------------------------ the quorum

    async def _describe_quorum(self, cluster):
        address = self.bootstrap
        for _ in range(ADMIN_REDIRECTS_MAX + 1):
            response = await self.send(address, m.DescribeQuorumRequest,
                                       _describe_quorum_request)
            if response.error_code:
                raise AdminError(f"{address_text(address)} refused DescribeQuorum: "
                                 f"{error_text(response.error_code, response.error_message)}")
            part = _quorum_partition(response)
            if part is None:
                raise AdminError(f"{address_text(address)} answered DescribeQuorum without "
                                 f"the {CLUSTER_METADATA_TOPIC} partition")
            if part.error_code != ErrorCode.NOT_LEADER_OR_FOLLOWER:
                if part.error_code:
                    raise AdminError(f"{address_text(address)} refused DescribeQuorum: "
                                     f"{error_text(part.error_code, part.error_message)}")
                return response, part
            leader = part.leader_id if part.leader_id >= 0 else cluster.controller_id
            if leader < 0:
                raise AdminError(f"the quorum has no leader right now (epoch "
                                 f"{part.leader_epoch}); retry in a moment")
            if leader not in cluster.controllers:
                raise AdminError(f"node {leader} leads the quorum, but "
                                 f"{address_text(self.bootstrap)} does not list its address "
                                 "among the controllers")
            address = cluster.controllers[leader]
        raise AdminError("the quorum leader moved while it was being asked; retry")

    async def describe_quorum(self):
        """The quorum's state as `kafka-metadata-quorum describe` shows it
        (`quorum_summary`), asked of the quorum leader."""
        cluster = await self.describe_controllers(self.bootstrap)
        response, part = await self._describe_quorum(cluster)
        endpoints = {}
        for node in getattr(response, "nodes", None) or ():
            endpoints[node.node_id] = [f"{ln.name}://{address_text((ln.host, ln.port))}"
                                       for ln in node.listeners]
        for node_id, address in cluster.controllers.items():
            endpoints.setdefault(node_id, [address_text(address)])
        return quorum_summary(part, cluster.cluster_id, endpoints)

    # ------------------------------------------------------------------ topics

    async def _topics_metadata(self, names):
        response = await self.read(m.MetadataRequest, metadata_request(names))
        found = []
        for topic in response.topics:
            if topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise AdminError(f"topic {topic.name!r} does not exist")
            if topic.error_code:
                raise AdminError(f"cannot describe topic {topic.name!r}: "
                                 f"{error_text(topic.error_code)}")
            found.append(topic)
        return response, sorted(found, key=lambda t: t.name)

    async def describe_topics(self, names=None):
        """[topic dict] by name: id, partition count, replication factor and each
        partition's leader, leader epoch, replicas, ISR and offline replicas. `names`: only
        these (an unknown one is an `AdminError`); None: every topic."""
        _, topics = await self._topics_metadata(names)
        return [_topic_doc(t) for t in topics]

    async def list_topics(self):
        """The topic names, sorted."""
        _, topics = await self._topics_metadata(None)
        return [t.name for t in topics]

    async def create_topic(self, name, partitions=-1, replication_factor=-1, configs=None):
        """Create topic `name`; -1 takes the controller's num.partitions /
        default.replication.factor. `configs`: {name: value}."""
        cls = m.CreateTopicsRequest
        body = cls(topics=[cls.CreatableTopic(
            name=name, num_partitions=partitions, replication_factor=replication_factor,
            configs=[cls.CreatableTopicConfig(name=k, value=v)
                     for k, v in (configs or {}).items()])], timeout_ms=self.timeout_ms)
        response = await self.write(cls, lambda version: body, lambda r: any(
            _is_not_controller(t.error_code) for t in r.topics))
        _check_result(next((t for t in response.topics if t.name == name), None),
                      f"topic {name!r}", "create")

    async def delete_topic(self, name):
        cls = m.DeleteTopicsRequest

        def build(version):
            if version >= 6:
                return cls(topics=[cls.DeleteTopicState(name=name)],
                           timeout_ms=self.timeout_ms)
            return cls(topic_names=[name], timeout_ms=self.timeout_ms)

        response = await self.write(cls, build, lambda r: any(
            _is_not_controller(t.error_code) for t in r.responses))
        _check_result(next((t for t in response.responses if t.name == name), None),
                      f"topic {name!r}", "delete", name)

    # ------------------------------------------------------------------ brokers

    async def list_brokers(self):
        """[broker dict] by id: id, state ("fenced", "unfenced", "shutting down"), epoch
        (None when the controller does not say), endpoints and rack."""
        def describe(version):
            body = m.DescribeClusterRequest()
            if version >= 1:
                body.endpoint_type = ENDPOINT_TYPE_BROKER
            if version >= 2:
                body.include_fenced_brokers = True
            return body

        described = await self.read(m.DescribeClusterRequest, describe)
        if described.error_code:
            raise AdminError(f"DescribeCluster was refused: "
                             f"{error_text(described.error_code, described.error_message)}")
        # Before v2 DescribeCluster lists only unfenced brokers and says nothing of fencing.
        fenced_known = (described.decoded_version or 0) >= 2
        metadata = await self.read(m.MetadataRequest, metadata_request([]))
        active = {b.node_id for b in metadata.brokers}
        brokers = []
        for b in sorted(described.brokers, key=lambda b: b.broker_id):
            if fenced_known and b.is_fenced:
                state = "fenced"
            elif b.broker_id in active:
                state = "unfenced"
            else:  # registered and unfenced, yet not offered to clients
                state = "shutting down"
            # The epoch is kraftcore's tagged extension of DescribeCluster: -1 when the
            # server does not send it (a Kafka controller, or an older kraftcore).
            epoch = b.broker_epoch if b.broker_epoch >= 0 else None
            brokers.append({"id": b.broker_id, "state": state, "epoch": epoch,
                            "endpoints": [address_text((b.host, b.port))], "rack": b.rack})
        return brokers

    # ------------------------------------------------------------------ configs

    async def alter_configs(self, resource, set_configs=None, delete=()):
        """IncrementalAlterConfigs on `resource` ((CONFIG_TOPIC, name), or (CONFIG_BROKER,
        "") for the cluster-wide default; `kraftcore.metadata.image`): SET each of `set_configs` ({name: value}) and
        DELETE each name in `delete`."""
        cls = m.IncrementalAlterConfigsRequest
        configs = [cls.AlterableConfig(name=k, config_operation=OP_SET, value=v)
                   for k, v in (set_configs or {}).items()]
        configs += [cls.AlterableConfig(name=k, config_operation=OP_DELETE, value=None)
                    for k in delete]
        body = cls(resources=[cls.AlterConfigsResource(resource_type=resource[0],
                                                       resource_name=resource[1],
                                                       configs=configs)])
        response = await self.write(cls, lambda version: body, lambda r: any(
            _is_not_controller(x.error_code) for x in r.responses))
        _check_result(response.responses[0] if response.responses else None,
                      _resource_text(resource), "change the configs of", _topic_of(resource))

    async def describe_configs(self, resource, inherited=False):
        """[config dict] of `resource` (as `alter_configs`): name, value, source, sensitive,
        read_only and synonyms in precedence order (`config_doc`). Only the configs set at
        the resource's own level, unless `inherited`: then also those that take their value
        from a lower level (the cluster default, Kafka's default)."""
        cls = m.DescribeConfigsRequest
        own_source = _own_source(resource)

        def build(version):
            body = cls(resources=[cls.DescribeConfigsResource(
                resource_type=resource[0], resource_name=resource[1],
                configuration_keys=None)])
            if version >= 1:
                body.include_synonyms = True
            return body

        response = await self.read(cls, build)
        result = next((r for r in response.results
                       if (r.resource_type, r.resource_name) == tuple(resource)), None)
        _check_result(result, _resource_text(resource), "describe the configs of",
                      _topic_of(resource))
        version = response.decoded_version or 0
        docs = [config_doc(c, version, own_source) for c in result.configs]
        if not inherited:
            docs = [d for d in docs if d["source"] == CONFIG_SOURCE_NAMES[own_source]]
        return docs


# ------------------------------------------------------------------------------ answers

def _check_result(result, what, action, topic=None):
    """The controller's answer for one topic or config resource: an `AdminError` for a
    missing answer, an unknown `topic` (when one is named) and any other error."""
    if result is None:
        raise AdminError(f"the controller's answer does not mention {what}")
    if topic is not None and result.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        raise AdminError(f"topic {topic!r} does not exist")
    if result.error_code:
        raise AdminError(f"cannot {action} {what}: "
                         f"{error_text(result.error_code, result.error_message)}")


def _resource_text(resource):
    rtype, name = resource
    if rtype == CONFIG_TOPIC:
        return f"topic {name!r}"
    return "the cluster default" if name == "" else f"node {name}"


def _own_source(resource):
    """The ConfigSource of a config set at `resource`'s own level."""
    if resource[0] == CONFIG_TOPIC:
        return SOURCE_TOPIC
    return SOURCE_DYNAMIC_DEFAULT_BROKER if resource[1] == "" else SOURCE_DYNAMIC_BROKER


def _topic_of(resource):
    return resource[1] if resource[0] == CONFIG_TOPIC else None


def metadata_request(names):
    """A builder of the Metadata request for topics `names` (None: every topic; []: none,
    only the brokers) at a given version, never creating a topic."""
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


def config_doc(config, version, own_source):
    """One DescribeConfigs entry as a dict; a v0 answer has IsDefault instead of a source,
    and `own_source` is the source of a config that is not a default there."""
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


def _describe_quorum_request(version):
    return rpc.describe_quorum_request()


def _quorum_partition(response):
    for topic in response.topics:
        if topic.topic_name == CLUSTER_METADATA_TOPIC:
            for part in topic.partitions:
                if part.partition_index == CLUSTER_METADATA_PARTITION:
                    return part
    return None


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


async def quorum_leader(address, timeout_s=2.0, connection_options=None):
    """The leader id a controller at `address` reports through DescribeQuorum, or None
    (no answer, an error, or no leader)."""
    body = rpc.describe_quorum_request()
    try:
        connection = await Connection.open(*address, connect_timeout_ms=int(timeout_s * 1000),
                                           request_timeout_ms=int(timeout_s * 1000),
                                           **(connection_options or {}))
    except (KraftcoreError, OSError):
        return None
    try:
        response = await connection.send(body, 1)
    except (KraftcoreError, OSError):
        return None
    finally:
        await connection.close()
    if response.error_code or not response.topics:
        return None
    partition = response.topics[0].partitions[0]
    return partition.leader_id if partition.error_code == 0 and partition.leader_id >= 0 \
        else None
