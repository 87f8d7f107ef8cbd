"""`NodeConfig`: one node's settings, read from a Kafka-style `server.properties`.

The file uses Java's `.properties` syntax (`kraftcore.log.meta_properties.parse_properties`)
and Kafka's key names, types and defaults (kafka-facts §3.6, §4.3, §7.1, §8.3), so a KRaft
`server.properties` written for Kafka configures a kraftcore node, and the reverse. The
cluster id is not a setting: it lives in each directory's `meta.properties`, written by
`kraftcore format`.

Values are parsed as Kafka's `ConfigDef` parses them: surrounding whitespace is trimmed,
INT and LONG are decimal integers within Java's range, BOOLEAN is `true` / `false` (any
case), LIST is comma-separated with whitespace around commas ignored. Then the rules Kafka's
`KafkaConfig` checks for a KRaft node are checked (listed in docs/operations.md): every
problem raises `ConfigError` with one line that starts with the key it is about.

Keys kraftcore does not know are kept (`to_properties()`) and listed in `unknown_keys`;
Kafka only warns about them too, so the node driver should log them and go on.

A `NodeConfig` is frozen. `with_overrides({key: value})` gives a new one (`--set KEY=VALUE`),
checked again in full. `raft_config()` and `controller_config(cluster_id)` convert it to the
settings objects of the Raft core and of the controller; `listener_settings()` and
`request_memory_bytes` give the limits of the node's listeners.
"""

import dataclasses
import os
import re

from kraftcore import limits
from kraftcore.controller.config import ControllerConfig
from kraftcore.errors import ConfigError
from kraftcore.layout import INT32_MAX, INT64_MAX
from kraftcore.log.meta_properties import node_directories, parse_properties
from kraftcore.raft.config import CLUSTER_METADATA_PARTITION, CLUSTER_METADATA_TOPIC, RaftConfig
from kraftcore.runtime.security_config import (check_client_mechanism, is_security_key,
                                               parse_security)

__all__ = ["NodeConfig", "Listener", "parse_override", "KNOWN_KEYS", "DEFAULTS"]

ROLES = ("broker", "controller")
PLAINTEXT = "PLAINTEXT"
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# Kafka's `listener.security.protocol.map` default: each protocol's name maps to itself.
_DEFAULT_PROTOCOL_MAP = tuple((name, name) for name in SECURITY_PROTOCOLS)
# Kafka's MAX_FETCH_WAIT_MS (kafka-facts §4.3): how long the leader holds an idle Fetch.
FETCH_WAIT_MS_MAX_DEFAULT = 500
# QuorumConfig refuses voters on the non-routable meta-address (they could not be reached).
_NON_ROUTABLE_HOST = "0.0.0.0"
_WILDCARD_HOSTS = ("", "0.0.0.0", "::")

# (key, field, Java type, default, minimum). Kafka's defaults: kafka-facts §7.1 (quorum),
# §8.3 (broker sessions), §4.3 (metadata log), §3.6 (topics). Timeouts must be positive;
# backoffs, lingers and intervals where 0 means "off" may be 0; retention -1 means no limit.
_NUMBERS = (
    ("controller.quorum.election.timeout.ms", "quorum_election_timeout_ms", "INT", 1000, 1),
    ("controller.quorum.fetch.timeout.ms", "quorum_fetch_timeout_ms", "INT", 2000, 1),
    ("controller.quorum.election.backoff.max.ms", "quorum_election_backoff_ms_max", "INT",
     1000, 0),
    ("controller.quorum.request.timeout.ms", "quorum_request_timeout_ms", "INT", 2000, 1),
    ("controller.quorum.retry.backoff.ms", "quorum_retry_backoff_ms", "INT", 20, 0),
    ("controller.quorum.append.linger.ms", "quorum_append_linger_ms", "INT", 25, 0),
    ("broker.session.timeout.ms", "broker_session_timeout_ms", "INT", 9000, 1),
    ("broker.heartbeat.interval.ms", "broker_heartbeat_interval_ms", "INT", 2000, 1),
    ("metadata.max.idle.interval.ms", "metadata_idle_interval_ms_max", "INT", 500, 0),
    ("metadata.log.max.record.bytes.between.snapshots",
     "metadata_log_record_bytes_between_snapshots_max", "LONG", 20 * 1024 * 1024, 1),
    ("metadata.log.max.snapshot.interval.ms", "metadata_log_snapshot_interval_ms_max",
     "LONG", 3_600_000, 0),
    # The smallest segment kraftcore's Log accepts; `segment.bytes >= segment.min.bytes`.
    ("metadata.log.segment.bytes", "metadata_log_segment_bytes", "INT", 1024 * 1024 * 1024,
     limits.LOG_SEGMENT_BYTES_MIN),
    ("metadata.log.segment.min.bytes", "metadata_log_segment_bytes_min", "INT",
     8 * 1024 * 1024, limits.LOG_SEGMENT_BYTES_MIN),
    ("metadata.log.segment.ms", "metadata_log_segment_ms", "LONG", 7 * 24 * 3600 * 1000, 1),
    ("metadata.max.retention.bytes", "metadata_retention_bytes_max", "LONG",
     100 * 1024 * 1024, -1),
    ("metadata.max.retention.ms", "metadata_retention_ms_max", "LONG", 7 * 24 * 3600 * 1000, -1),
    ("num.partitions", "num_partitions", "INT", 1, 1),
    ("default.replication.factor", "default_replication_factor", "INT", 1, 1),
    ("min.insync.replicas", "min_insync_replicas", "INT", 1, 1),
    # The listeners (kafka-facts §6.1; Kafka's SocketServerConfigs). Kafka also accepts
    # max.connections=0, which would refuse every peer; connections.max.idle.ms -1 turns the
    # idle timeout off.
    ("socket.request.max.bytes", "socket_request_bytes_max", "INT", 100 * 1024 * 1024, 1),
    ("max.connections", "connections_max", "INT", INT32_MAX, 1),
    ("max.connections.per.ip", "connections_per_ip_max", "INT", INT32_MAX, 0),
    ("connections.max.idle.ms", "connections_idle_ms_max", "LONG", 600_000, -1),
    # The data plane (kafka-broker-facts §C; Kafka's ReplicationConfigs, ServerLogConfigs).
    ("replica.lag.time.max.ms", "replica_lag_time_ms_max", "LONG", 30_000, 1),
    ("replica.fetch.wait.max.ms", "replica_fetch_wait_ms_max", "INT", 500, 0),
    ("replica.fetch.max.bytes", "replica_fetch_bytes_max", "INT", 1024 * 1024, 0),
    ("replica.fetch.response.max.bytes", "replica_fetch_response_bytes_max", "INT",
     10 * 1024 * 1024, 0),
    ("replica.fetch.backoff.ms", "replica_fetch_backoff_ms", "INT", 1000, 0),
    ("message.max.bytes", "message_bytes_max", "INT", 1024 * 1024 + 12, 0),
    ("log.segment.bytes", "log_segment_bytes", "INT", 1024 * 1024 * 1024,
     limits.LOG_SEGMENT_BYTES_MIN),
    ("log.roll.ms", "log_roll_ms", "LONG", 7 * 24 * 3600 * 1000, 1),
    ("log.retention.ms", "log_retention_ms", "LONG", 7 * 24 * 3600 * 1000, -1),
    ("log.retention.bytes", "log_retention_bytes", "LONG", -1, -1),
    ("log.flush.interval.ms", "log_flush_interval_ms", "LONG", -1, -1),
    ("log.flush.interval.messages", "log_flush_interval_messages", "LONG", INT64_MAX, 1),
    # The log cleaner of compacted topics (Kafka's CleanerConfig; the last two are the
    # broker defaults of the topic configs delete.retention.ms and min.compaction.lag.ms).
    ("log.cleaner.backoff.ms", "log_cleaner_backoff_ms", "LONG", 15_000, 0),
    ("log.cleaner.dedupe.buffer.size", "log_cleaner_dedupe_buffer_bytes", "LONG",
     128 * 1024 * 1024, 1),
    ("log.cleaner.delete.retention.ms", "log_cleaner_delete_retention_ms", "LONG",
     86_400_000, 0),
    ("log.cleaner.min.compaction.lag.ms", "log_cleaner_min_compaction_lag_ms", "LONG", 0, 0),
    # Consumer groups' committed offsets (Kafka's GroupCoordinatorConfig).
    ("offsets.topic.num.partitions", "offsets_topic_partitions", "INT", 50, 1),
    ("offsets.topic.replication.factor", "offsets_topic_replication_factor", "SHORT", 3, 1),
    ("offset.metadata.max.bytes", "offset_metadata_bytes_max", "INT", 4096, 0),
    ("offsets.commit.timeout.ms", "offsets_commit_timeout_ms", "INT", 5000, 1),
    ("group.min.session.timeout.ms", "group_session_timeout_min_ms", "INT", 6000, 0),
    ("group.max.session.timeout.ms", "group_session_timeout_max_ms", "INT", 1_800_000, 0),
    ("group.initial.rebalance.delay.ms", "group_initial_rebalance_delay_ms", "INT", 3000, 0),
    ("group.max.size", "group_size_max", "INT", INT32_MAX, 1),
    ("offsets.retention.minutes", "offsets_retention_minutes", "INT", 7 * 24 * 60, 1),
    ("offsets.retention.check.interval.ms", "offsets_retention_check_interval_ms", "LONG",
     600_000, 1),
)
# The largest value of each Java integer type a key can have.
_JAVA_MAX = {"SHORT": 32767, "INT": INT32_MAX, "LONG": INT64_MAX}
# queued.max.request.bytes is not in _NUMBERS: its default is kraftcore's own (the value of
# socket.request.max.bytes, where Kafka's is -1, no limit), see NodeConfig.
_QUEUED_MAX_REQUEST_BYTES = "queued.max.request.bytes"
# kraftcore's own key: HOST:PORT of the node's Prometheus endpoint (unset: no endpoint).
METRICS_LISTENER = "metrics.prometheus.listener"
_BOOLEANS = (("unclean.leader.election.enable", "unclean_leader_election_enable", False),
             ("log.cleaner.enable", "log_cleaner_enable", True))

DEFAULTS = {
    "listeners": "PLAINTEXT://:9092",
    "log.dir": "/tmp/kafka-logs",
    "inter.broker.listener.name": PLAINTEXT,
    "listener.security.protocol.map": ",".join(f"{n}:{p}" for n, p in _DEFAULT_PROTOCOL_MAP),
    **{key: str(default) for key, _, _, default, _ in _NUMBERS},
    **{key: str(default).lower() for key, _, default in _BOOLEANS},
}
"""Kafka's default of every key that has one (as the text a file would hold); not
queued.max.request.bytes, whose default in kraftcore is socket.request.max.bytes."""

# The key each field comes from, for error messages.
_KEY_OF = {
    "node_id": "node.id", "process_roles": "process.roles",
    "quorum_voters": "controller.quorum.voters",
    "quorum_bootstrap_servers": "controller.quorum.bootstrap.servers",
    "listeners": "listeners", "controller_listener_names": "controller.listener.names",
    "advertised_listeners": "advertised.listeners",
    "inter_broker_listener_name": "inter.broker.listener.name",
    "listener_security_protocol_map": "listener.security.protocol.map",
    "log_dirs": "log.dirs", "metadata_log_dir": "metadata.log.dir",
    "metrics_listener": METRICS_LISTENER,
    **{field: key for key, field, _, _, _ in _NUMBERS},
    "queued_request_bytes_max": _QUEUED_MAX_REQUEST_BYTES,
    **{field: key for key, field, _ in _BOOLEANS},
}
KNOWN_KEYS = frozenset(_KEY_OF.values()) | {"broker.id", "log.dir", "security.inter.broker.protocol"}
"""Every key `NodeConfig` reads; others land in `unknown_keys`."""


@dataclasses.dataclass(frozen=True)
class Listener:
    """One entry of `listeners` / `advertised.listeners`: `NAME://host:port`. The name is
    upper-cased (Kafka normalises listener names); an empty host means every interface."""

    name: str
    host: str
    port: int

    @property
    def address(self):
        return (self.host, self.port)

    def __str__(self):
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


@dataclasses.dataclass(frozen=True)
class NodeConfig:
    """A KRaft node's validated settings. Build one with `from_file`, `from_text` or
    `from_mapping`; the constructor also validates (so does `dataclasses.replace`), but
    takes parsed values."""

    node_id: int
    process_roles: tuple                  # ("broker",), ("controller",) or both, as given
    quorum_voters: tuple = ()             # ((node id, host, port), ...), as given
    quorum_bootstrap_servers: tuple = ()  # ((host, port), ...)
    listeners: tuple = (Listener(PLAINTEXT, "", 9092),)
    controller_listener_names: tuple = ()
    advertised_listeners: tuple = ()      # empty: advertise `listeners`
    inter_broker_listener_name: str = PLAINTEXT
    listener_security_protocol_map: tuple = _DEFAULT_PROTOCOL_MAP  # ((name, protocol), ...)
    log_dirs: tuple = ("/tmp/kafka-logs",)
    metadata_log_dir: str = None          # None: the first of log_dirs
    metrics_listener: tuple = ()          # (host, port) of the Prometheus endpoint, or ()
    quorum_election_timeout_ms: int = 1000
    quorum_fetch_timeout_ms: int = 2000
    quorum_election_backoff_ms_max: int = 1000
    quorum_request_timeout_ms: int = 2000
    quorum_retry_backoff_ms: int = 20
    quorum_append_linger_ms: int = 25
    broker_session_timeout_ms: int = 9000
    broker_heartbeat_interval_ms: int = 2000
    metadata_idle_interval_ms_max: int = 500
    metadata_log_record_bytes_between_snapshots_max: int = 20 * 1024 * 1024
    metadata_log_snapshot_interval_ms_max: int = 3_600_000
    metadata_log_segment_bytes: int = 1024 * 1024 * 1024
    metadata_log_segment_bytes_min: int = 8 * 1024 * 1024
    metadata_log_segment_ms: int = 7 * 24 * 3600 * 1000
    metadata_retention_bytes_max: int = 100 * 1024 * 1024
    metadata_retention_ms_max: int = 7 * 24 * 3600 * 1000
    num_partitions: int = 1
    default_replication_factor: int = 1
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    socket_request_bytes_max: int = 100 * 1024 * 1024
    connections_max: int = INT32_MAX
    connections_per_ip_max: int = INT32_MAX
    connections_idle_ms_max: int = 600_000
    replica_lag_time_ms_max: int = 30_000
    replica_fetch_wait_ms_max: int = 500
    replica_fetch_bytes_max: int = 1024 * 1024
    replica_fetch_response_bytes_max: int = 10 * 1024 * 1024
    replica_fetch_backoff_ms: int = 1000
    message_bytes_max: int = 1024 * 1024 + 12
    log_segment_bytes: int = 1024 * 1024 * 1024
    log_roll_ms: int = 7 * 24 * 3600 * 1000
    log_retention_ms: int = 7 * 24 * 3600 * 1000
    log_retention_bytes: int = -1
    log_flush_interval_ms: int = -1
    log_flush_interval_messages: int = INT64_MAX
    log_cleaner_enable: bool = True
    log_cleaner_backoff_ms: int = 15_000
    log_cleaner_dedupe_buffer_bytes: int = 128 * 1024 * 1024
    log_cleaner_delete_retention_ms: int = 86_400_000
    log_cleaner_min_compaction_lag_ms: int = 0
    offsets_topic_partitions: int = 50
    offsets_topic_replication_factor: int = 3
    offset_metadata_bytes_max: int = 4096
    offsets_commit_timeout_ms: int = 5000
    group_session_timeout_min_ms: int = 6000
    group_session_timeout_max_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3000
    group_size_max: int = INT32_MAX
    offsets_retention_minutes: int = 7 * 24 * 60
    offsets_retention_check_interval_ms: int = 600_000
    # None: socket_request_bytes_max (kraftcore's default; Kafka's is -1, no limit)
    queued_request_bytes_max: int = None
    unknown_keys: tuple = ()              # sorted names of the keys kraftcore does not read
    # sorted (key, value) text of every key given
    originals: tuple = dataclasses.field(default=(), repr=False)
    # The file it was read from (None: from text or a mapping); used in hints only.
    source: str = dataclasses.field(default=None, compare=False)

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_file(cls, path):
        """Read and validate a `.properties` file. ConfigError when it cannot be read."""
        path = os.fspath(path)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            # Java reads .properties files as ISO-8859-1; accept that too.
            text = data.decode("latin-1")
        return cls.from_text(text, source=path)

    @classmethod
    def from_text(cls, text, source=None):
        """Parse and validate `.properties` text."""
        try:
            properties = parse_properties(text)
        except ValueError as exc:
            raise ConfigError(f"{source or 'config'}: {exc}") from None
        return cls.from_mapping(properties, source=source)

    @classmethod
    def from_mapping(cls, properties, source=None):
        """Validate a key -> value mapping. Values are text as in a file; ints and bools
        are also taken (`True` is `true`)."""
        texts = {}
        for key, value in properties.items():
            if not isinstance(key, str):
                raise ConfigError(f"{key!r}: config keys must be strings")
            if isinstance(value, bool):
                value = "true" if value else "false"
            elif isinstance(value, int):
                value = str(value)
            elif not isinstance(value, str):
                raise ConfigError(f"{key}: the value must be text, got {type(value).__name__} "
                                  f"{value!r}")
            texts[key] = value
        fields = _parse(texts)
        return cls(**fields, unknown_keys=tuple(sorted(
                       key for key in set(texts) - KNOWN_KEYS if not is_security_key(key))),
                   originals=tuple(sorted(texts.items())), source=source)

    def with_overrides(self, overrides):
        """A new config with `overrides` ({key: value}; a None value removes the key)
        applied over the keys this one was built from, validated in full."""
        properties = dict(self.originals)
        for key, value in overrides.items():
            if value is None:
                properties.pop(key, None)
            else:
                properties[key] = value
        return type(self).from_mapping(properties, source=self.source)

    def to_properties(self):
        """The key -> value text this config was built from (unknown keys included)."""
        return dict(self.originals)

    # ------------------------------------------------------------------ validation

    def __post_init__(self):
        if self.metadata_log_dir is None and self.log_dirs:
            object.__setattr__(self, "metadata_log_dir", self.log_dirs[0])
        if self.queued_request_bytes_max is None:
            object.__setattr__(self, "queued_request_bytes_max", self.socket_request_bytes_max)
        _check_types(self)
        _check_values(self)
        _check_listeners(self)
        _check_quorum(self)
        _check_security(self)

    # ------------------------------------------------------------------ derived values

    def listener_address(self, name):
        """(host, port) listener `name` binds."""
        return self._listener(name).address

    def listener_protocol(self, name):
        """The security protocol of listener `name` (`listener.security.protocol.map`; an
        unmapped controller listener is PLAINTEXT, as in Kafka)."""
        return dict(self.listener_security_protocol_map).get(name, PLAINTEXT)

    @property
    def security(self):
        """The node's `SecurityConfig` (TLS, SASL and authorization settings of its
        listeners and of the controller listener)."""
        names = [listener.name for listener in self.listeners]
        names += [n for n in self.controller_listener_names if n not in names]
        return parse_security(dict(self.originals),
                              {name: self.listener_protocol(name) for name in names})

    @property
    def is_controller(self):
        return "controller" in self.process_roles

    @property
    def is_broker(self):
        return "broker" in self.process_roles

    @property
    def is_combined(self):
        return self.is_controller and self.is_broker

    @property
    def voters(self):
        """{node id: (host, port)} of `controller.quorum.voters` (a new dict each time)."""
        return {node_id: (host, port) for node_id, host, port in self.quorum_voters}

    @property
    def controller_listener_name(self):
        """The first of `controller.listener.names`: the listener the quorum talks on."""
        return self.controller_listener_names[0]

    @property
    def controller_listener(self):
        """(host, port) a controller binds for the quorum (its first controller listener;
        host "" is every interface); None on a broker-only node."""
        if not self.is_controller:
            return None
        return self._listener(self.controller_listener_name).address

    @property
    def broker_listener(self):
        """(host, port) a broker binds for brokers and clients (`inter.broker.listener.name`);
        None on a controller-only node."""
        if not self.is_broker:
            return None
        return self._listener(self.inter_broker_listener_name).address

    @property
    def advertised_broker_listener(self):
        """(host, port) other nodes should use to reach this broker (its
        `advertised.listeners` entry, else its listener); None on a controller-only node."""
        if not self.is_broker:
            return None
        for listener in self.advertised_listeners:
            if listener.name == self.inter_broker_listener_name:
                return listener.address
        return self.broker_listener

    @property
    def broker_endpoints(self):
        """The `Listener`s a broker registers with the controller: its advertised listeners
        (or its listeners) other than the controller listeners; () on a controller."""
        if not self.is_broker:
            return ()
        source = self.advertised_listeners or self.listeners
        return tuple(listener for listener in source
                     if listener.name not in self.controller_listener_names)

    @property
    def broker_listener_name(self):
        """`inter.broker.listener.name` under the name the node driver uses."""
        return self.inter_broker_listener_name

    @property
    def snapshot_interval_bytes(self):
        """`metadata.log.max.record.bytes.between.snapshots` (kafka-facts §4.6)."""
        return self.metadata_log_record_bytes_between_snapshots_max

    @property
    def snapshot_interval_ms(self):
        """`metadata.log.max.snapshot.interval.ms` (0: no time-based snapshots)."""
        return self.metadata_log_snapshot_interval_ms_max

    @property
    def directories(self):
        """Every directory of the node, each once: `log_dirs`, then `metadata_log_dir`."""
        return tuple(node_directories(self))

    @property
    def metadata_partition_dir(self):
        """`<metadata.log.dir>/__cluster_metadata-0`, the metadata log (kafka-facts §4.1)."""
        return os.path.join(self.metadata_log_dir,
                            f"{CLUSTER_METADATA_TOPIC}-{CLUSTER_METADATA_PARTITION}")

    @property
    def fetch_wait_ms_max(self):
        """How long a leader holds a Fetch on an idle log: Kafka's 500 ms, lowered to half
        the fetch or request timeout when those are short, so that a long-polled Fetch
        always answers before the follower gives up on it (RaftConfig's rule)."""
        return min(FETCH_WAIT_MS_MAX_DEFAULT, self.quorum_fetch_timeout_ms // 2,
                   self.quorum_request_timeout_ms // 2)

    def _listener(self, name):
        for listener in self.listeners:
            if listener.name == name:
                return listener
        raise KeyError(name)  # pragma: no cover - validation guarantees it exists

    # ------------------------------------------------------------------ conversions

    def raft_config(self, cluster_id=None):
        """The Raft core's settings: the quorum timeouts and backoffs, and
        `fetch_wait_ms_max`."""
        return RaftConfig(
            election_timeout_ms=self.quorum_election_timeout_ms,
            fetch_timeout_ms=self.quorum_fetch_timeout_ms,
            election_backoff_ms_max=self.quorum_election_backoff_ms_max,
            request_timeout_ms=self.quorum_request_timeout_ms,
            retry_backoff_ms=self.quorum_retry_backoff_ms,
            fetch_wait_ms_max=self.fetch_wait_ms_max,
            cluster_id=cluster_id,
        )

    def controller_config(self, cluster_id):
        """The active controller's settings for cluster `cluster_id` (from meta.properties):
        broker sessions, the NoOp interval, topic defaults."""
        if not isinstance(cluster_id, str) or not cluster_id:
            raise ConfigError(f"cluster id must be a non-empty string, got {cluster_id!r}")
        return ControllerConfig(
            cluster_id=cluster_id,
            session_timeout_ms=self.broker_session_timeout_ms,
            heartbeat_interval_ms=self.broker_heartbeat_interval_ms,
            idle_interval_ms_max=self.metadata_idle_interval_ms_max,
            default_partitions=self.num_partitions,
            default_replication_factor=self.default_replication_factor,
        )

    def metadata_log_settings(self):
        """`LogConfig` settings for the metadata log (`FileRaftStorage.open(path, **them)`)."""
        return {"segment_bytes": self.metadata_log_segment_bytes,
                "segment_ms": self.metadata_log_segment_ms}

    def partition_log_settings(self):
        """`LogConfig` settings of a broker's partition logs. Kafka leaves flushing to the
        OS and relies on replication: no fsync unless `log.flush.interval.ms` is set (then
        every that many ms) or `log.flush.interval.messages` is 1 (every append)."""
        if self.log_flush_interval_messages == 1:
            fsync, interval = "always", {}
        elif self.log_flush_interval_ms > 0:
            fsync, interval = "interval", {"fsync_interval_ms": self.log_flush_interval_ms}
        else:
            fsync, interval = "never", {}
        return {"segment_bytes": self.log_segment_bytes, "segment_ms": self.log_roll_ms,
                "retention_ms": self.log_retention_ms,
                "retention_bytes": self.log_retention_bytes,
                "batch_bytes_max": max(self.message_bytes_max, 61),
                "append_bytes_max": max(64 * 1024 * 1024, self.message_bytes_max),
                "fsync": fsync, **interval}

    def cleaner_settings(self):
        """The broker's defaults of `kraftcore.log.cleaner.CleanerConfig` (a topic's own
        delete.retention.ms, min.compaction.lag.ms and min.cleanable.dirty.ratio win)."""
        return {"delete_retention_ms": self.log_cleaner_delete_retention_ms,
                "min_compaction_lag_ms": self.log_cleaner_min_compaction_lag_ms,
                "offset_map_bytes": self.log_cleaner_dedupe_buffer_bytes}

    def group_settings(self):
        """Keyword arguments of the broker's `kraftcore.broker.groups.GroupConfig`."""
        return {"offsets_partitions": self.offsets_topic_partitions,
                "offsets_replication_factor": self.offsets_topic_replication_factor,
                "metadata_chars_max": self.offset_metadata_bytes_max,
                "commit_timeout_ms": self.offsets_commit_timeout_ms,
                "session_timeout_min_ms": self.group_session_timeout_min_ms,
                "session_timeout_max_ms": self.group_session_timeout_max_ms,
                "initial_rebalance_delay_ms": self.group_initial_rebalance_delay_ms,
                "group_size_max": self.group_size_max,
                "offsets_retention_ms": self.offsets_retention_minutes * 60_000}

    @property
    def request_memory_bytes(self):
        """`queued.max.request.bytes` as the node's `kraftcore.net.RequestMemory` takes it:
        None when it is -1 or 0 (no limit, as in Kafka)."""
        value = self.queued_request_bytes_max
        return value if value > 0 else None

    def listener_settings(self):
        """Keyword arguments of `kraftcore.net.Listener.start` for each of the node's
        listeners: the largest request, the connection limits (`max.connections` within
        kraftcore's own cap of `limits.NET_LISTENER_CONNECTIONS_MAX` per listener) and the
        idle timeout (None: off). The request memory they share is the node's own
        (`RequestMemory(config.request_memory_bytes)`)."""
        idle_ms = self.connections_idle_ms_max
        return {"frame_bytes_max": self.socket_request_bytes_max,
                "connections_max": min(self.connections_max,
                                       limits.NET_LISTENER_CONNECTIONS_MAX),
                "connections_per_ip_max": self.connections_per_ip_max,
                "connections_idle_ms_max": idle_ms if idle_ms >= 0 else None}


def parse_override(text):
    """`KEY=VALUE` (a `--set` argument) -> (key, value); the value may hold '='."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set {text!r}: expected KEY=VALUE")
    return key.strip(), value


# ---------------------------------------------------------------------------- parsing


def _fail(key, message):
    raise ConfigError(f"{key}: {message}")


def _integer(key, text, java_type):
    trimmed = text.strip()
    if not re.fullmatch(r"[+-]?[0-9]+", trimmed):
        _fail(key, f"{text!r} is not an integer")
    value = int(trimmed)
    bound = _JAVA_MAX[java_type]
    if not -bound - 1 <= value <= bound:
        _fail(key, f"{value} is out of range for a Java {java_type.lower()}")
    return value


def _boolean(key, text):
    trimmed = text.strip().lower()
    if trimmed not in ("true", "false"):
        _fail(key, f"expected true or false, got {text!r}")
    return trimmed == "true"


def _list(key, text):
    trimmed = text.strip()
    if not trimmed:
        return []
    items = re.split(r"\s*,\s*", trimmed)
    if "" in items:
        _fail(key, f"empty entry in {text!r}")
    return items


_HOST = r"[0-9A-Za-z%._:-]*"


def _host_port(key, entry, form, min_port, host_required):
    match = (re.fullmatch(rf"\[({_HOST})\]:([+-]?[0-9]+)", entry)
             or re.fullmatch(rf"({_HOST}):([+-]?[0-9]+)", entry))
    if not match:
        _fail(key, f"{entry!r} is not in the form {form}")
    host, port = match.group(1), int(match.group(2))
    if host_required and not host:
        _fail(key, f"{entry!r} has no host (expected {form})")
    if not min_port <= port <= 65535:
        _fail(key, f"port {port} in {entry!r} is out of range {min_port}-65535")
    return host, port


def _listeners(key, text):
    listeners = []
    for entry in _list(key, text):
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)://(.*)", entry)
        if not match:
            _fail(key, f"{entry!r} is not in the form NAME://HOST:PORT")
        host, port = _host_port(key, match.group(2), "NAME://HOST:PORT", 0, False)
        listeners.append(Listener(match.group(1).upper(), host, port))
    return tuple(listeners)


def _voters(text):
    key = "controller.quorum.voters"
    voters = []
    for entry in _list(key, text):
        node_text, at, address = entry.partition("@")
        if not at or "@" in address:
            _fail(key, f"{entry!r} is not in the form ID@HOST:PORT")
        if not re.fullmatch(r"[+-]?[0-9]+", node_text):
            _fail(key, f"voter id {node_text!r} in {entry!r} is not an integer")
        node_id = int(node_text)
        if not 0 <= node_id <= INT32_MAX:
            _fail(key, f"voter id {node_id} in {entry!r} must be in 0-{INT32_MAX}")
        host, port = _host_port(key, address, "ID@HOST:PORT", 1, True)
        voters.append((node_id, host, port))
    return tuple(voters)


def _bootstrap_servers(text):
    key = "controller.quorum.bootstrap.servers"
    return tuple(_host_port(key, entry, "HOST:PORT", 1, True) for entry in _list(key, text))


def _protocol_map(text):
    key = "listener.security.protocol.map"
    mapping = []
    for entry in _list(key, text):
        name, colon, protocol = entry.partition(":")
        if not colon or not name.strip() or not protocol.strip():
            _fail(key, f"{entry!r} is not in the form LISTENER_NAME:SECURITY_PROTOCOL")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if protocol not in SECURITY_PROTOCOLS:
            _fail(key, f"unknown security protocol {protocol!r} for listener {name} "
                  f"(known: {', '.join(SECURITY_PROTOCOLS)})")
        mapping.append((name, protocol))
    return tuple(mapping)


def _parse(texts):
    """The NodeConfig fields given by key -> text `texts` (the ones not given are left to
    the dataclass defaults). Raises ConfigError on the first value that does not parse."""
    fields = {}
    node_text = texts.get("node.id")
    broker_text = texts.get("broker.id")
    if node_text is None and broker_text is None:
        _fail("node.id", "missing; every KRaft node needs its id, an integer >= 0, the same "
              "as in controller.quorum.voters for a controller")
    if node_text is not None:
        fields["node_id"] = _integer("node.id", node_text, "INT")
    if broker_text is not None:
        broker_id = _integer("broker.id", broker_text, "INT")
        if node_text is not None and broker_id != fields["node_id"]:
            _fail("broker.id", f"{broker_id} differs from node.id {fields['node_id']}; set "
                  "only node.id (or both to the same value)")
        fields["node_id"] = broker_id

    roles_text = texts.get("process.roles")
    if roles_text is None or not roles_text.strip():
        _fail("process.roles", "missing; set it to broker, controller, or broker,controller "
              "(kraftcore runs KRaft mode only, no ZooKeeper)")
    fields["process_roles"] = tuple(_list("process.roles", roles_text))

    if "controller.quorum.voters" in texts:
        fields["quorum_voters"] = _voters(texts["controller.quorum.voters"])
    if "controller.quorum.bootstrap.servers" in texts:
        fields["quorum_bootstrap_servers"] = _bootstrap_servers(
            texts["controller.quorum.bootstrap.servers"])
    for key, field in (("listeners", "listeners"), ("advertised.listeners", "advertised_listeners")):
        if key in texts:
            fields[field] = _listeners(key, texts[key])
    if "controller.listener.names" in texts:
        names = _list("controller.listener.names", texts["controller.listener.names"])
        fields["controller_listener_names"] = tuple(name.upper() for name in names)
    if "listener.security.protocol.map" in texts:
        fields["listener_security_protocol_map"] = _protocol_map(
            texts["listener.security.protocol.map"])

    inter_broker = texts.get("inter.broker.listener.name")
    protocol = texts.get("security.inter.broker.protocol")
    if protocol is not None:
        if inter_broker is not None:
            _fail("security.inter.broker.protocol", "set only one of it and "
                  "inter.broker.listener.name")
        if protocol.strip().upper() not in SECURITY_PROTOCOLS:
            _fail("security.inter.broker.protocol", f"unknown security protocol "
                  f"{protocol.strip()!r} (known: {', '.join(SECURITY_PROTOCOLS)})")
        inter_broker = protocol.strip().upper()  # Kafka: the listener of that name
    if inter_broker is not None:
        if not inter_broker.strip():
            _fail("inter.broker.listener.name", "empty")
        fields["inter_broker_listener_name"] = inter_broker.strip().upper()

    if "log.dirs" in texts:
        fields["log_dirs"] = tuple(_list("log.dirs", texts["log.dirs"]))
    elif "log.dir" in texts:
        fields["log_dirs"] = tuple(_list("log.dir", texts["log.dir"]))
    if "metadata.log.dir" in texts:
        fields["metadata_log_dir"] = texts["metadata.log.dir"].strip()
        if not fields["metadata_log_dir"]:
            _fail("metadata.log.dir", "empty (leave it out to use the first of log.dirs)")

    if texts.get(METRICS_LISTENER, "").strip():
        fields["metrics_listener"] = _host_port(METRICS_LISTENER, texts[METRICS_LISTENER].strip(),
                                                "HOST:PORT", 0, True)
    for key, field, java_type, _default, _minimum in _NUMBERS:
        if key in texts:
            fields[field] = _integer(key, texts[key], java_type)
    if _QUEUED_MAX_REQUEST_BYTES in texts:
        fields["queued_request_bytes_max"] = _integer(
            _QUEUED_MAX_REQUEST_BYTES, texts[_QUEUED_MAX_REQUEST_BYTES], "LONG")
    for key, field, _default in _BOOLEANS:
        if key in texts:
            fields[field] = _boolean(key, texts[key])
    return fields


# ---------------------------------------------------------------------------- validation


def _check_types(config):
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        key = _KEY_OF.get(field.name, field.name)
        if field.type in (int, "int"):
            if type(value) is not int:
                _fail(key, f"must be an integer, got {value!r}")
        elif field.type in (bool, "bool"):
            if type(value) is not bool:
                _fail(key, f"must be true or false, got {value!r}")
        elif field.type in (tuple, "tuple"):
            if type(value) is not tuple:
                _fail(key, f"must be a tuple, got {type(value).__name__}")
        elif not isinstance(value, str) and not (
                value is None and field.name in ("metadata_log_dir", "source")):
            _fail(key, f"must be text, got {value!r}")
    for field in ("listeners", "advertised_listeners"):
        for listener in getattr(config, field):
            if not isinstance(listener, Listener):
                _fail(_KEY_OF[field], f"entries must be Listener objects, got {listener!r}")


def _check_values(config):
    if not 0 <= config.node_id <= INT32_MAX:
        _fail("node.id", f"{config.node_id} must be in 0-{INT32_MAX}")
    roles = config.process_roles
    if not roles:
        _fail("process.roles", "empty; set it to broker, controller, or broker,controller")
    for role in roles:
        if role not in ROLES:
            _fail("process.roles", f"unknown role {role!r} (roles are broker and controller)")
    if len(set(roles)) != len(roles):
        _fail("process.roles", f"a role is listed twice in {','.join(roles)!r}")

    for key, field, java_type, _default, minimum in _NUMBERS:
        value = getattr(config, field)
        if value < minimum:
            what = {1: "must be positive", 0: "must be >= 0", -1: "must be -1 (no limit) or >= 0"}
            _fail(key, f"{value} {what.get(minimum, f'must be at least {minimum}')}")
        if value > _JAVA_MAX[java_type]:
            _fail(key, f"{value} is out of range for a Java {java_type.lower()}")
    if config.broker_heartbeat_interval_ms >= config.broker_session_timeout_ms:
        _fail("broker.heartbeat.interval.ms",
              f"{config.broker_heartbeat_interval_ms} must be below broker.session.timeout.ms "
              f"({config.broker_session_timeout_ms}), or a live broker would be fenced")
    if config.group_session_timeout_min_ms > config.group_session_timeout_max_ms:
        _fail("group.min.session.timeout.ms",
              f"{config.group_session_timeout_min_ms} must not be above "
              f"group.max.session.timeout.ms ({config.group_session_timeout_max_ms}), or no "
              "member could join a group")
    if config.metadata_log_segment_bytes < config.metadata_log_segment_bytes_min:
        _fail("metadata.log.segment.bytes",
              f"{config.metadata_log_segment_bytes} is below metadata.log.segment.min.bytes "
              f"({config.metadata_log_segment_bytes_min}): a segment must hold the largest "
              "metadata batch")
    if config.connections_per_ip_max == 0:
        _fail("max.connections.per.ip", "0 would refuse every connection (Kafka allows it "
              "only with max.connections.per.ip.overrides, which kraftcore does not read); "
              "set a positive limit")
    queued, frame = config.queued_request_bytes_max, config.socket_request_bytes_max
    if queued < -1 or 0 < queued < frame:
        _fail(_QUEUED_MAX_REQUEST_BYTES,
              f"{queued} must be -1 (no limit) or at least socket.request.max.bytes ({frame}), "
              "or a request of the largest size could never be read; raise it, or lower "
              "socket.request.max.bytes")
    if queued > INT64_MAX:
        _fail(_QUEUED_MAX_REQUEST_BYTES, f"{queued} is out of range for a Java long")

    if not config.log_dirs:
        _fail("log.dirs", "empty; list at least one directory")
    seen = {}
    for directory in config.log_dirs:
        if not directory:
            _fail("log.dirs", "empty directory name")
        normal = os.path.normpath(directory)
        if normal in seen:
            _fail("log.dirs", f"{directory!r} is listed twice")
        seen[normal] = directory
    if not config.metadata_log_dir:
        _fail("metadata.log.dir", "empty (leave it out to use the first of log.dirs)")


def _names(listeners):
    return ", ".join(str(listener) for listener in listeners) or "none"


def _check_security(config):
    """The security keys parse, and this node can authenticate where it is a client: to
    the controllers, and (a broker) to the other brokers."""
    if not config.controller_listener_names:
        return
    security = config.security
    check_client_mechanism(security, config.controller_listener_name,
                           security.controller_mechanism, "sasl.mechanism.controller.protocol")
    if config.is_broker and config.inter_broker_listener_name in security.listeners:
        check_client_mechanism(security, config.inter_broker_listener_name,
                               security.inter_broker_mechanism,
                               "sasl.mechanism.inter.broker.protocol")


def _check_listeners(config):
    listeners = config.listeners
    if not listeners:
        _fail("listeners", "empty; a node needs at least one listener (NAME://HOST:PORT)")
    names = [listener.name for listener in listeners]
    for name in names:
        if names.count(name) > 1:
            _fail("listeners", f"listener name {name} is used twice in {_names(listeners)}")
    for index, one in enumerate(listeners):
        for other in listeners[index + 1:]:
            if one.port and one.port == other.port and (
                    one.host == other.host or one.host in _WILDCARD_HOSTS
                    or other.host in _WILDCARD_HOSTS):
                _fail("listeners", f"{one} and {other} use the same port")

    controller_names = config.controller_listener_names
    if not controller_names:
        _fail("controller.listener.names",
              "missing; name the listener(s) controllers use, e.g. CONTROLLER")
    for name in controller_names:
        if controller_names.count(name) > 1:
            _fail("controller.listener.names", f"{name} is listed twice")

    protocol_map = dict(config.listener_security_protocol_map)
    if len(protocol_map) != len(config.listener_security_protocol_map):
        _fail("listener.security.protocol.map", "a listener name is mapped twice")
    explicit = config.listener_security_protocol_map != _DEFAULT_PROTOCOL_MAP
    for listener in listeners:
        protocol = protocol_map.get(listener.name)
        if protocol is None:
            if explicit or listener.name not in config.controller_listener_names:
                _fail("listener.security.protocol.map",
                      f"has no security protocol for listener {listener.name} (add "
                      f"{listener.name}:PLAINTEXT)")
            protocol = PLAINTEXT  # Kafka maps unmapped controller listeners to PLAINTEXT

    if config.is_controller:
        for name in controller_names:
            if name not in names:
                _fail("controller.listener.names",
                      f"{name} is not among listeners ({_names(listeners)}); a controller "
                      "listens on every controller listener")
        if not config.is_broker:
            for listener in listeners:
                if listener.name not in controller_names:
                    _fail("listeners", f"{listener} is not a controller listener "
                          f"(controller.listener.names={','.join(controller_names)}); a "
                          "controller-only node listens only on controller listeners")
    else:
        for listener in listeners:
            if listener.name in controller_names:
                _fail("listeners", f"{listener} is a controller listener "
                      f"(controller.listener.names); a broker-only node must not listen on it")

    advertised = config.advertised_listeners
    advertised_names = [listener.name for listener in advertised]
    for listener in advertised:
        if advertised_names.count(listener.name) > 1:
            _fail("advertised.listeners", f"listener name {listener.name} is used twice")
        if listener.name not in names:
            _fail("advertised.listeners", f"{listener} names no listener of listeners "
                  f"({_names(listeners)})")
        if listener.host == _NON_ROUTABLE_HOST:
            _fail("advertised.listeners", f"{listener}: 0.0.0.0 cannot be advertised; name "
                  "a host or address others can reach")
        if listener.port == 0:
            _fail("advertised.listeners", f"{listener}: port 0 cannot be advertised")

    if config.is_broker:
        name = config.inter_broker_listener_name
        if name in controller_names:
            _fail("inter.broker.listener.name", f"{name} is a controller listener "
                  "(controller.listener.names); brokers need a listener of their own")
        if name not in names:
            _fail("inter.broker.listener.name", f"{name} is not among listeners "
                  f"({_names(listeners)}); set inter.broker.listener.name to the broker's "
                  "listener")
        if advertised and name not in advertised_names:
            _fail("inter.broker.listener.name", f"{name} is not among advertised.listeners "
                  f"({_names(advertised)})")


def _check_quorum(config):
    voters = config.quorum_voters
    if not voters:
        if config.quorum_bootstrap_servers:
            _fail("controller.quorum.bootstrap.servers",
                  "dynamic quorums (KIP-853) are not supported yet; list the controllers "
                  "in controller.quorum.voters (ID@HOST:PORT,...) instead")
        _fail("controller.quorum.voters", "missing; list the controllers as "
              "ID@HOST:PORT,... (the same list on every node)")
    seen = set()
    for node_id, host, port in voters:
        if node_id in seen:
            _fail("controller.quorum.voters", f"voter id {node_id} is listed twice")
        seen.add(node_id)
        if host == _NON_ROUTABLE_HOST:
            _fail("controller.quorum.voters", f"voter {node_id} is at 0.0.0.0, which other "
                  "nodes cannot connect to; give its host name or address")
    node_id = config.node_id
    entry = config.voters.get(node_id)
    if config.is_controller:
        if entry is None:
            _fail("controller.quorum.voters",
                  f"node {node_id} is a controller (process.roles) but is not one of the "
                  f"voters ({','.join(str(v[0]) for v in voters)})")
        listener = config._listener(config.controller_listener_name)
        if listener.port != entry[1]:
            _fail("controller.quorum.voters",
                  f"node {node_id} is listed at {entry[0]}:{entry[1]}, but its controller "
                  f"listener {listener} is on port {listener.port}")
    elif entry is not None:
        _fail("controller.quorum.voters",
              f"node {node_id} is a broker only (process.roles=broker) but is listed as a "
              "voter; remove it from the voters or add the controller role")
