"""`NodeConfig`: Java properties syntax, Kafka's defaults and value types, every validation
rule (one ConfigError line naming the key), overrides, and the conversions to the Raft and
controller settings."""

import dataclasses

import pytest

from kraftcore.controller.config import ControllerConfig
from kraftcore.errors import ConfigError
from kraftcore.log.meta_properties import parse_properties
from kraftcore.raft.config import RaftConfig
from kraftcore.runtime.config import DEFAULTS, KNOWN_KEYS, Listener, NodeConfig, parse_override

CONTROLLER = {
    "node.id": "1",
    "process.roles": "controller",
    "controller.quorum.voters": "1@localhost:9093,2@localhost:9095,3@localhost:9097",
    "listeners": "CONTROLLER://:9093",
    "controller.listener.names": "CONTROLLER",
    "log.dirs": "/data/c1",
}
BROKER = {
    "node.id": "4",
    "process.roles": "broker",
    "controller.quorum.voters": "1@localhost:9093,2@localhost:9095,3@localhost:9097",
    "listeners": "PLAINTEXT://127.0.0.1:9092",
    "controller.listener.names": "CONTROLLER",
    "log.dirs": "/data/b4",
}
COMBINED = {
    "node.id": "1",
    "process.roles": "broker,controller",
    "controller.quorum.voters": "1@localhost:9093",
    "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093",
    "controller.listener.names": "CONTROLLER",
    "log.dirs": "/data/n1",
}


def config(base, **changes):
    """`base` with keys changed (`node_id=...` style names: '_' becomes '.'); a None value
    removes the key."""
    properties = dict(base)
    for name, value in changes.items():
        key = name.replace("__", "-").replace("_", ".")
        if value is None:
            properties.pop(key, None)
        else:
            properties[key] = value
    return NodeConfig.from_mapping(properties)


def refused(base, key, *fragments, **changes):
    """Assert that `base` with `changes` is refused with one line starting with `key:`."""
    with pytest.raises(ConfigError) as info:
        config(base, **changes)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{key}: "), message
    for fragment in fragments:
        assert fragment in message, message
    return message


# ------------------------------------------------------------------ Java properties syntax


def test_separators_comments_and_whitespace():
    text = (
        "# a comment\n"
        "! another comment\n"
        "   \n"
        "a=1\n"
        "b = 2\n"
        "c:3\n"
        "d : 4\n"
        "e 5\n"
        "  f\t=\t6  \n"
        "g=\n"
        "h\n"
        "i==x\n"
        "j=a=b:c\n"
        "k:=v\n"
    )
    assert parse_properties(text) == {
        "a": "1", "b": "2", "c": "3", "d": "4", "e": "5", "f": "6  ", "g": "", "h": "",
        "i": "=x", "j": "a=b:c", "k": "=v",
    }


def test_line_continuations():
    text = (
        "listeners=PLAINTEXT://:9092,\\\n"
        "          CONTROLLER://:9093\n"
        "two=a\\\n"
        "  \\\n"
        "   b\n"
        "even=ends in a backslash\\\\\n"
        "next=1\n"
        "# a comment \\\n"
        "not.continued=yes\n"
        "cont=x\\\n"
        "# not a comment\n"
        "ended=by an empty line\\\n"
        "\n"
        "last=at the end\\"
    )
    assert parse_properties(text) == {
        "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093",
        "two": "ab",
        "even": "ends in a backslash\\",
        "next": "1",
        "not.continued": "yes",
        "cont": "x# not a comment",
        "ended": "by an empty line",
        "last": "at the end",
    }


def test_escapes():
    text = (
        "tabs=a\\tb\\nc\\rd\\fe\n"
        "unicode=caf\\u00e9 \\u0041\n"
        "astral=\\ud83d\\ude00\n"
        "other=\\q\\\\\\#\n"
        "key\\ with\\ spaces\\=and\\:colons = v\n"
        "\\#hash=not a comment\n"
        "lead=\\  space\n"
    )
    assert parse_properties(text) == {
        "tabs": "a\tb\nc\rd\fe",
        "unicode": "café A",
        "astral": "\U0001F600",
        "other": "q\\#",
        "key with spaces=and:colons": "v",
        "#hash": "not a comment",
        "lead": "  space",
    }


def test_line_ends_and_duplicates():
    assert parse_properties("a=1\r\nb=2\rc=3\na=4") == {"a": "4", "b": "2", "c": "3"}


@pytest.mark.parametrize("text", ["a=\\u12\n", "a=\\uzzzz\n", "b\\u00=1\n"])
def test_malformed_unicode_escape(text):
    with pytest.raises(ValueError, match="line 1: malformed"):
        parse_properties(text)
    with pytest.raises(ConfigError, match=r"^server.properties: line 1: malformed"):
        NodeConfig.from_text(text, source="server.properties")


def test_from_text_reads_a_kafka_style_file():
    text = """
    # KRaft combined node
    process.roles = broker,controller
    node.id = 1
    controller.quorum.voters = 1@localhost:9093
    listeners = PLAINTEXT://localhost:9092,\\
                CONTROLLER://localhost:9093
    controller.listener.names = CONTROLLER
    log.dirs = /var/lib/kraftcore/data
    num.partitions = 3
    """
    c = NodeConfig.from_text(text)
    assert c.listeners == (Listener("PLAINTEXT", "localhost", 9092),
                           Listener("CONTROLLER", "localhost", 9093))
    assert c.num_partitions == 3
    assert c.is_combined and c.unknown_keys == ()


def test_from_file(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("\n".join(f"{k}={v}" for k, v in CONTROLLER.items()))
    c = NodeConfig.from_file(path)
    assert c.node_id == 1 and c.source == str(path)
    assert c == NodeConfig.from_mapping(CONTROLLER)  # the source is not part of equality


def test_from_file_latin1(tmp_path):
    path = tmp_path / "server.properties"
    lines = [f"{k}={v}" for k, v in CONTROLLER.items()] + ["comment.key=caf\xe9"]
    path.write_bytes("\n".join(lines).encode("latin-1"))
    assert NodeConfig.from_file(path).to_properties()["comment.key"] == "café"


@pytest.mark.parametrize("make", [lambda p: p / "missing.properties", lambda p: p])
def test_from_file_unreadable(tmp_path, make):
    path = make(tmp_path)
    with pytest.raises(ConfigError, match=f"^cannot read config file {path}: "):
        NodeConfig.from_file(path)


# ------------------------------------------------------------------ defaults and types


def test_kafka_defaults():
    c = NodeConfig.from_mapping(CONTROLLER)
    assert c.quorum_election_timeout_ms == 1000
    assert c.quorum_fetch_timeout_ms == 2000
    assert c.quorum_election_backoff_ms_max == 1000
    assert c.quorum_request_timeout_ms == 2000
    assert c.quorum_retry_backoff_ms == 20
    assert c.quorum_append_linger_ms == 25
    assert c.broker_session_timeout_ms == 9000
    assert c.broker_heartbeat_interval_ms == 2000
    assert c.metadata_idle_interval_ms_max == 500
    assert c.metadata_log_record_bytes_between_snapshots_max == 20 * 1024 * 1024
    assert c.metadata_log_snapshot_interval_ms_max == 3_600_000
    assert c.metadata_log_segment_bytes == 1024 ** 3
    assert c.metadata_log_segment_bytes_min == 8 * 1024 * 1024
    assert c.metadata_log_segment_ms == 7 * 24 * 3600 * 1000
    assert c.metadata_retention_bytes_max == 100 * 1024 * 1024
    assert c.metadata_retention_ms_max == 7 * 24 * 3600 * 1000
    assert c.num_partitions == 1
    assert c.default_replication_factor == 1
    assert c.min_insync_replicas == 1
    assert c.unclean_leader_election_enable is False
    assert c.metadata_log_dir == "/data/c1"
    assert c.inter_broker_listener_name == "PLAINTEXT"
    assert c.advertised_listeners == ()
    assert c.quorum_bootstrap_servers == ()


def test_default_listener_and_log_dir():
    # Kafka's defaults: listeners=PLAINTEXT://:9092, log.dir=/tmp/kafka-logs.
    c = config(BROKER, listeners=None, log_dirs=None)
    assert c.listeners == (Listener("PLAINTEXT", "", 9092),)
    assert c.log_dirs == ("/tmp/kafka-logs",)
    assert c.broker_listener == ("", 9092)
    assert DEFAULTS["listeners"] == "PLAINTEXT://:9092"
    assert DEFAULTS["controller.quorum.fetch.timeout.ms"] == "2000"


def test_defaults_table_matches_the_fields():
    explicit = NodeConfig.from_mapping({**CONTROLLER, **{
        k: v for k, v in DEFAULTS.items()
        if k not in ("listeners", "log.dir", "inter.broker.listener.name",
                     "listener.security.protocol.map")}})
    assert dataclasses.replace(explicit, originals=()) == \
        dataclasses.replace(NodeConfig.from_mapping(CONTROLLER), originals=())


def test_values_are_trimmed_and_typed():
    c = config(CONTROLLER, node_id=" 1 ", num_partitions="+7 ",
               unclean_leader_election_enable=" TRUE ",
               metadata_log_max_record_bytes_between_snapshots=str(2**40))
    assert c.node_id == 1 and c.num_partitions == 7
    assert c.unclean_leader_election_enable is True
    assert c.metadata_log_record_bytes_between_snapshots_max == 2**40


def test_mapping_takes_ints_and_bools():
    c = NodeConfig.from_mapping({**CONTROLLER, "node.id": 1, "num.partitions": 4,
                                 "unclean.leader.election.enable": True})
    assert (c.node_id, c.num_partitions, c.unclean_leader_election_enable) == (1, 4, True)
    assert c.to_properties()["unclean.leader.election.enable"] == "true"
    with pytest.raises(ConfigError, match=r"^num.partitions: the value must be text"):
        NodeConfig.from_mapping({**CONTROLLER, "num.partitions": 1.5})


@pytest.mark.parametrize("key", ["num.partitions", "controller.quorum.fetch.timeout.ms",
                                 "metadata.log.segment.bytes"])
@pytest.mark.parametrize("value", ["ten", "1.5", "1_000", "", "0x10", "2147483648"])
def test_bad_int(key, value):
    with pytest.raises(ConfigError) as info:
        NodeConfig.from_mapping({**CONTROLLER, key: value})
    assert str(info.value).startswith(f"{key}: ")


def test_long_range():
    key = "metadata.log.max.snapshot.interval.ms"
    assert NodeConfig.from_mapping({**CONTROLLER, key: str(2**63 - 1)}).snapshot_interval_ms \
        == 2**63 - 1
    with pytest.raises(ConfigError, match=f"^{key}: .*out of range for a Java long"):
        NodeConfig.from_mapping({**CONTROLLER, key: str(2**63)})


@pytest.mark.parametrize("value", ["yes", "1", "", "t"])
def test_bad_boolean(value):
    refused(CONTROLLER, "unclean.leader.election.enable", "true or false",
            unclean_leader_election_enable=value)


def test_unknown_keys_are_kept_and_reported():
    c = NodeConfig.from_mapping({**CONTROLLER, "zookeeper.connect": "zk:2181",
                                 "auto.create.topics.enable": "false"})
    assert c.unknown_keys == ("auto.create.topics.enable", "zookeeper.connect")
    assert c.to_properties()["zookeeper.connect"] == "zk:2181"
    assert "node.id" in KNOWN_KEYS and "zookeeper.connect" not in KNOWN_KEYS


def test_frozen_and_hashable():
    c = NodeConfig.from_mapping(CONTROLLER)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.node_id = 2
    assert hash(c) == hash(NodeConfig.from_mapping(CONTROLLER))
    assert "originals" not in repr(c)


# ------------------------------------------------------------------ node.id, process.roles


def test_node_id_missing():
    refused(CONTROLLER, "node.id", "missing", node_id=None)


@pytest.mark.parametrize("value", ["-1", "x"])
def test_node_id_bad(value):
    refused(CONTROLLER, "node.id", node_id=value)


def test_broker_id_alias():
    assert config(BROKER, node_id=None, broker_id="4").node_id == 4
    assert config(BROKER, broker_id="4").node_id == 4
    refused(BROKER, "broker.id", "differs from node.id 4", broker_id="5")


def test_process_roles():
    assert config(COMBINED, process_roles="controller, broker").process_roles == \
        ("controller", "broker")
    refused(CONTROLLER, "process.roles", "missing", process_roles=None)
    refused(CONTROLLER, "process.roles", "missing", process_roles="  ")
    refused(CONTROLLER, "process.roles", "unknown role 'zookeeper'", process_roles="zookeeper")
    refused(CONTROLLER, "process.roles", "unknown role 'Controller'", process_roles="Controller")
    refused(CONTROLLER, "process.roles", "listed twice", process_roles="controller,controller")
    refused(CONTROLLER, "process.roles", "empty entry", process_roles="controller,")


def test_role_properties():
    c, b, both = (NodeConfig.from_mapping(m) for m in (CONTROLLER, BROKER, COMBINED))
    assert (c.is_controller, c.is_broker, c.is_combined) == (True, False, False)
    assert (b.is_controller, b.is_broker, b.is_combined) == (False, True, False)
    assert (both.is_controller, both.is_broker, both.is_combined) == (True, True, True)


# ------------------------------------------------------------------ the quorum


def test_voters():
    c = config(CONTROLLER, controller_quorum_voters=" 1@localhost:9093 , 2@[::1]:9095,"
               "3@10.0.0.3:9097")
    assert c.voters == {1: ("localhost", 9093), 2: ("::1", 9095), 3: ("10.0.0.3", 9097)}
    assert c.quorum_voters[1] == (2, "::1", 9095)
    c.voters[9] = ("x", 1)  # a copy: the config does not change
    assert 9 not in c.voters


@pytest.mark.parametrize("voters, fragment", [
    ("1@localhost", "not in the form ID@HOST:PORT"),
    ("localhost:9093", "not in the form ID@HOST:PORT"),
    ("1@2@localhost:9093", "not in the form ID@HOST:PORT"),
    ("x@localhost:9093", "voter id 'x'"),
    ("-1@localhost:9093", "voter id -1"),
    ("1@:9093", "has no host"),
    ("1@localhost:0", "port 0"),
    ("1@localhost:65536", "port 65536"),
    ("1@local host:9093", "not in the form"),
    ("1@0.0.0.0:9093", "0.0.0.0"),
    ("1@localhost:9093,1@otherhost:9093", "listed twice"),
    ("1@localhost:9093,,2@localhost:9095", "empty entry"),
])
def test_bad_voters(voters, fragment):
    refused(CONTROLLER, "controller.quorum.voters", fragment, controller_quorum_voters=voters)


def test_voters_missing():
    refused(CONTROLLER, "controller.quorum.voters", "missing", controller_quorum_voters=None)
    refused(BROKER, "controller.quorum.voters", "missing", controller_quorum_voters="")


def test_bootstrap_servers_alone_is_kip_853():
    message = refused(BROKER, "controller.quorum.bootstrap.servers", "KIP-853",
                      "not supported yet", "controller.quorum.voters",
                      controller_quorum_voters=None,
                      controller_quorum_bootstrap_servers="localhost:9093,localhost:9095")
    assert "dynamic quorums" in message


def test_bootstrap_servers_with_voters_are_parsed():
    c = config(BROKER, controller_quorum_bootstrap_servers="localhost:9093, [::1]:9095")
    assert c.quorum_bootstrap_servers == (("localhost", 9093), ("::1", 9095))
    assert c.voters[1] == ("localhost", 9093)
    refused(BROKER, "controller.quorum.bootstrap.servers", "port 70000",
            controller_quorum_bootstrap_servers="localhost:70000")
    refused(BROKER, "controller.quorum.bootstrap.servers", "not in the form HOST:PORT",
            controller_quorum_bootstrap_servers="localhost")


def test_controller_must_be_a_voter():
    refused(CONTROLLER, "controller.quorum.voters", "node 5 is a controller",
            "not one of the voters (1,2,3)", node_id="5")


def test_controller_voter_port_must_match_its_controller_listener():
    refused(CONTROLLER, "controller.quorum.voters", "node 1 is listed at localhost:9093",
            "CONTROLLER://:9094", listeners="CONTROLLER://:9094")


def test_the_first_controller_listener_is_the_quorum_one():
    c = config(CONTROLLER, listeners="CONTROLLER://:9093,CONTROLLER2://:9099",
               controller_listener_names="CONTROLLER,CONTROLLER2")
    assert c.controller_listener == ("", 9093)
    assert c.controller_listener_name == "CONTROLLER"
    refused(CONTROLLER, "controller.quorum.voters", "on port 9099",
            listeners="CONTROLLER://:9093,CONTROLLER2://:9099",
            controller_listener_names="CONTROLLER2,CONTROLLER")


def test_broker_only_must_not_be_a_voter():
    refused(BROKER, "controller.quorum.voters", "node 1 is a broker only", node_id="1")


# ------------------------------------------------------------------ listeners


def test_listener_parsing():
    c = config(COMBINED, listeners="plaintext://0.0.0.0:9092, controller://[::1]:9093")
    assert c.listeners == (Listener("PLAINTEXT", "0.0.0.0", 9092),
                           Listener("CONTROLLER", "::1", 9093))
    assert str(c.listeners[1]) == "CONTROLLER://[::1]:9093"
    assert c.listeners[0].address == ("0.0.0.0", 9092)


@pytest.mark.parametrize("listeners, fragment", [
    ("CONTROLLER:9093", "NAME://HOST:PORT"),
    ("CONTROLLER://localhost", "NAME://HOST:PORT"),
    ("://localhost:9093", "NAME://HOST:PORT"),
    ("CONTROLLER://localhost:65536", "port 65536"),
    ("CONTROLLER://localhost:-1", "port -1"),
    ("", "empty"),
])
def test_bad_listeners(listeners, fragment):
    refused(CONTROLLER, "listeners", fragment, listeners=listeners)


def test_listener_port_zero_is_allowed_for_a_broker():
    assert config(BROKER, listeners="PLAINTEXT://127.0.0.1:0").broker_listener == \
        ("127.0.0.1", 0)


def test_listener_names_and_ports_are_unique():
    refused(COMBINED, "listeners", "PLAINTEXT is used twice",
            listeners="PLAINTEXT://:9092,PLAINTEXT://:9094,CONTROLLER://:9093")
    refused(COMBINED, "listeners", "same port",
            listeners="PLAINTEXT://:9093,CONTROLLER://:9093")
    refused(COMBINED, "listeners", "same port",
            listeners="PLAINTEXT://10.0.0.1:9093,CONTROLLER://:9093")
    # Two specific addresses may share a port.
    c = config(COMBINED, listeners="PLAINTEXT://10.0.0.1:9093,CONTROLLER://10.0.0.2:9093")
    assert c.broker_listener == ("10.0.0.1", 9093)


def test_controller_listener_names():
    refused(CONTROLLER, "controller.listener.names", "missing",
            controller_listener_names=None)
    refused(BROKER, "controller.listener.names", "missing", controller_listener_names="")
    refused(CONTROLLER, "controller.listener.names", "listed twice",
            controller_listener_names="CONTROLLER,CONTROLLER")
    refused(CONTROLLER, "controller.listener.names", "CONTROLLER2 is not among listeners",
            controller_listener_names="CONTROLLER,CONTROLLER2")
    # Names are case-insensitive (Kafka upper-cases them).
    assert config(CONTROLLER, controller_listener_names="controller").controller_listener == \
        ("", 9093)


def test_controller_only_listens_only_on_controller_listeners():
    refused(CONTROLLER, "listeners", "PLAINTEXT://:9092 is not a controller listener",
            listeners="CONTROLLER://:9093,PLAINTEXT://:9092")


def test_broker_only_must_not_listen_on_a_controller_listener():
    refused(BROKER, "listeners", "CONTROLLER://:9093 is a controller listener",
            listeners="PLAINTEXT://:9092,CONTROLLER://:9093")


def test_broker_listener():
    b = NodeConfig.from_mapping(BROKER)
    assert b.broker_listener == ("127.0.0.1", 9092)
    assert b.broker_listener_name == "PLAINTEXT"
    assert b.controller_listener is None
    assert b.controller_listener_name == "CONTROLLER"
    c = NodeConfig.from_mapping(CONTROLLER)
    assert c.broker_listener is None and c.advertised_broker_listener is None
    assert c.broker_endpoints == ()
    both = NodeConfig.from_mapping(COMBINED)
    assert both.broker_listener == ("", 9092) and both.controller_listener == ("", 9093)
    assert both.broker_endpoints == (Listener("PLAINTEXT", "", 9092),)


def test_inter_broker_listener_name():
    c = config(BROKER, listeners="INTERNAL://:9092,EXTERNAL://:9094",
               inter_broker_listener_name="internal",
               listener_security_protocol_map="INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT")
    assert c.broker_listener == ("", 9092)
    assert c.broker_endpoints == (Listener("INTERNAL", "", 9092), Listener("EXTERNAL", "", 9094))
    refused(BROKER, "inter.broker.listener.name", "PLAINTEXT is not among listeners",
            listeners="INTERNAL://:9092",
            listener_security_protocol_map="INTERNAL:PLAINTEXT")
    refused(COMBINED, "inter.broker.listener.name", "CONTROLLER is a controller listener",
            inter_broker_listener_name="CONTROLLER")
    refused(BROKER, "inter.broker.listener.name", "empty", inter_broker_listener_name=" ")


def test_security_inter_broker_protocol():
    assert config(BROKER, security_inter_broker_protocol="plaintext").broker_listener == \
        ("127.0.0.1", 9092)
    # Kafka's rule: the inter-broker listener is the one named after the protocol
    assert config(BROKER, security_inter_broker_protocol="ssl", listeners="SSL://:9093",
                  ssl_keystore_location="/k.pem").inter_broker_listener_name == "SSL"
    refused(BROKER, "security.inter.broker.protocol", "unknown security protocol",
            security_inter_broker_protocol="TLS")
    refused(BROKER, "security.inter.broker.protocol", "set only one",
            security_inter_broker_protocol="PLAINTEXT", inter_broker_listener_name="PLAINTEXT")


def test_advertised_listeners():
    c = config(BROKER, advertised_listeners="PLAINTEXT://broker4.example:9092")
    assert c.broker_listener == ("127.0.0.1", 9092)
    assert c.advertised_broker_listener == ("broker4.example", 9092)
    assert c.broker_endpoints == (Listener("PLAINTEXT", "broker4.example", 9092),)
    assert NodeConfig.from_mapping(BROKER).advertised_broker_listener == ("127.0.0.1", 9092)
    refused(BROKER, "advertised.listeners", "names no listener",
            advertised_listeners="OTHER://broker4.example:9092")
    refused(BROKER, "advertised.listeners", "0.0.0.0 cannot be advertised",
            advertised_listeners="PLAINTEXT://0.0.0.0:9092")
    refused(BROKER, "advertised.listeners", "port 0 cannot be advertised",
            advertised_listeners="PLAINTEXT://broker4:0")
    refused(BROKER, "advertised.listeners", "used twice",
            advertised_listeners="PLAINTEXT://a:9092,PLAINTEXT://b:9092")


def test_advertised_listeners_must_hold_the_inter_broker_listener():
    refused(BROKER, "inter.broker.listener.name", "not among advertised.listeners",
            listeners="PLAINTEXT://:9092,EXTERNAL://:9094",
            listener_security_protocol_map="PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT",
            advertised_listeners="EXTERNAL://broker4:9094")


def test_security_protocols():
    # An unmapped controller listener is PLAINTEXT while the map is Kafka's default...
    assert NodeConfig.from_mapping(CONTROLLER).controller_listener == ("", 9093)
    # ...but must be mapped once the map is set.
    refused(CONTROLLER, "listener.security.protocol.map", "no security protocol for listener "
            "CONTROLLER", listener_security_protocol_map="PLAINTEXT:PLAINTEXT")
    assert config(CONTROLLER, listener_security_protocol_map="controller:plaintext")
    refused(BROKER, "listener.security.protocol.map", "no security protocol for listener "
            "INTERNAL", listeners="INTERNAL://:9092", inter_broker_listener_name="INTERNAL")
    refused(BROKER, "listener.security.protocol.map", "unknown security protocol 'TLS'",
            listener_security_protocol_map="PLAINTEXT:TLS")
    refused(BROKER, "listener.security.protocol.map", "LISTENER_NAME:SECURITY_PROTOCOL",
            listener_security_protocol_map="PLAINTEXT")
    refused(BROKER, "listener.security.protocol.map", "mapped twice",
            listener_security_protocol_map="PLAINTEXT:PLAINTEXT,plaintext:PLAINTEXT")
    # A mapped protocol no listener uses does not matter.
    assert config(BROKER, listener_security_protocol_map="PLAINTEXT:PLAINTEXT,X:SSL")


SASL_BROKER = dict(BROKER, **{
    "listeners": "SASL_SSL://:9094", "inter.broker.listener.name": "SASL_SSL",
    "ssl.keystore.location": "/etc/kraftcore/broker.pem",
    "sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
    "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
    "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config":
        'org.apache.kafka.common.security.scram.ScramLoginModule required '
        'username="broker" password="b-secret";',
    "listener.name.sasl_ssl.plain.sasl.jaas.config":
        'org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_alice="alice-secret";',
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:broker;User:CN=admin,O=Example",
})


def test_security_settings():
    c = NodeConfig.from_mapping(SASL_BROKER)
    assert c.unknown_keys == ()
    security = c.security
    listener = security.listener("SASL_SSL")
    assert listener.protocol == "SASL_SSL" and listener.uses_tls and listener.uses_sasl
    assert listener.sasl_mechanisms == ("SCRAM-SHA-512", "PLAIN")
    assert listener.tls.keystore_location == "/etc/kraftcore/broker.pem"
    assert listener.client_credentials("SCRAM-SHA-512") == ("broker", "b-secret")
    assert listener.plain_users() == {"alice": "alice-secret"}
    assert security.authorizer_enabled and not security.allow_everyone_if_no_acl_found
    assert [str(p) for p in security.super_users] == ["User:broker", "User:CN=admin,O=Example"]
    assert security.listener("CONTROLLER").protocol == "PLAINTEXT"
    # a listener's own setting wins over the node's
    own = config(dict(SASL_BROKER, **{"listener.name.sasl_ssl.ssl.client.auth": "required",
                                      "ssl.client.auth": "none"}))
    assert own.security.listener("SASL_SSL").tls.client_auth == "required"


def test_security_settings_are_checked():
    refused(SASL_BROKER, "ssl.keystore.type", "PEM files only", ssl_keystore_type="JKS")
    refused(SASL_BROKER, "ssl.keystore.key", "inline", ssl_keystore_key="-----BEGIN")
    refused(SASL_BROKER, "ssl.client.auth", "always", ssl_client_auth="always")
    refused(SASL_BROKER, "sasl.enabled.mechanisms", "GSSAPI is not supported",
            sasl_enabled_mechanisms="GSSAPI")
    refused(SASL_BROKER, "sasl.mechanism.inter.broker.protocol", "PLAIN is not among",
            sasl_enabled_mechanisms="SCRAM-SHA-512", sasl_mechanism_inter_broker_protocol="PLAIN")
    scram_jaas = "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"
    refused(dict(SASL_BROKER, **{scram_jaas: 'org.apache.kafka.common.security.scram.'
                                              'ScramLoginModule required;'}),
            scram_jaas, "no username")
    plain_jaas = "listener.name.sasl_ssl.plain.sasl.jaas.config"
    refused(dict(SASL_BROKER, **{plain_jaas: "not jaas"}), plain_jaas)
    refused(SASL_BROKER, "authorizer.class.name", "not supported",
            authorizer_class_name="kafka.security.authorizer.AclAuthorizer")
    refused(SASL_BROKER, "super.users", "Type:name", super_users="alice")
    refused(SASL_BROKER, "allow.everyone.if.no.acl.found", "true or false",
            allow_everyone_if_no_acl_found="yes")
    # Kafka's default mechanism for brokers to reach SASL controllers is GSSAPI
    refused(dict(SASL_BROKER, **{"listener.security.protocol.map":
                                 "SASL_SSL:SASL_SSL,CONTROLLER:SASL_PLAINTEXT"}),
            "sasl.enabled.mechanisms", "GSSAPI", sasl_enabled_mechanisms=None)


# ------------------------------------------------------------------ directories


def test_log_dirs():
    c = config(CONTROLLER, log_dirs="/a, /b ,/c")
    assert c.log_dirs == ("/a", "/b", "/c") and c.metadata_log_dir == "/a"
    assert c.directories == ("/a", "/b", "/c")
    assert c.metadata_partition_dir == "/a/__cluster_metadata-0"
    assert config(CONTROLLER, log_dirs=None, log_dir="/x").log_dirs == ("/x",)
    # log.dirs wins over log.dir, as in Kafka.
    assert config(CONTROLLER, log_dir="/x").log_dirs == ("/data/c1",)


def test_metadata_log_dir():
    c = config(CONTROLLER, metadata_log_dir="/meta")
    assert c.metadata_log_dir == "/meta"
    assert c.directories == ("/data/c1", "/meta")
    assert c.metadata_partition_dir == "/meta/__cluster_metadata-0"
    assert config(CONTROLLER, metadata_log_dir="/data/c1/").directories == ("/data/c1",)
    refused(CONTROLLER, "metadata.log.dir", "empty", metadata_log_dir=" ")


def test_bad_log_dirs():
    refused(CONTROLLER, "log.dirs", "empty", log_dirs="")
    refused(CONTROLLER, "log.dirs", "listed twice", log_dirs="/a,/b,/a/")
    refused(CONTROLLER, "log.dirs", "empty entry", log_dirs="/a,,/b")
    refused(CONTROLLER, "log.dir", "empty entry", log_dirs=None, log_dir="/a,")


# ------------------------------------------------------------------ numbers


@pytest.mark.parametrize("key", [
    "controller.quorum.election.timeout.ms", "controller.quorum.fetch.timeout.ms",
    "controller.quorum.request.timeout.ms", "broker.session.timeout.ms",
    "broker.heartbeat.interval.ms", "metadata.log.max.record.bytes.between.snapshots",
    "metadata.log.segment.ms", "num.partitions", "default.replication.factor",
    "min.insync.replicas"])
def test_must_be_positive(key):
    with pytest.raises(ConfigError, match=f"^{key}: 0 must be positive"):
        NodeConfig.from_mapping({**CONTROLLER, key: "0"})


@pytest.mark.parametrize("key", [
    "controller.quorum.election.backoff.max.ms", "controller.quorum.retry.backoff.ms",
    "controller.quorum.append.linger.ms", "metadata.max.idle.interval.ms",
    "metadata.log.max.snapshot.interval.ms"])
def test_may_be_zero(key):
    assert NodeConfig.from_mapping({**CONTROLLER, key: "0"})
    with pytest.raises(ConfigError, match=f"^{key}: -1 must be >= 0"):
        NodeConfig.from_mapping({**CONTROLLER, key: "-1"})


@pytest.mark.parametrize("key", ["metadata.max.retention.bytes", "metadata.max.retention.ms"])
def test_retention_may_be_unlimited(key):
    assert NodeConfig.from_mapping({**CONTROLLER, key: "-1"})
    with pytest.raises(ConfigError, match=f"^{key}: -2 must be -1"):
        NodeConfig.from_mapping({**CONTROLLER, key: "-2"})


def test_group_coordinator_settings():
    c = NodeConfig.from_mapping(BROKER)
    kafka_defaults = {"session_timeout_min_ms": 6000, "session_timeout_max_ms": 1_800_000,
                      "initial_rebalance_delay_ms": 3000, "group_size_max": 2**31 - 1,
                      "offsets_retention_ms": 7 * 24 * 3600 * 1000}
    assert c.group_settings() == {"offsets_partitions": 50, "offsets_replication_factor": 3,
                                  "metadata_chars_max": 4096, "commit_timeout_ms": 5000,
                                  **kafka_defaults}
    c = NodeConfig.from_mapping({**BROKER, "offsets.topic.num.partitions": "7",
                                 "offsets.topic.replication.factor": "2",
                                 "offset.metadata.max.bytes": "0",
                                 "offsets.commit.timeout.ms": "100",
                                 "group.min.session.timeout.ms": "10",
                                 "group.max.session.timeout.ms": "20",
                                 "group.initial.rebalance.delay.ms": "0",
                                 "group.max.size": "3",
                                 "offsets.retention.minutes": "2"})
    assert c.group_settings() == {"offsets_partitions": 7, "offsets_replication_factor": 2,
                                  "metadata_chars_max": 0, "commit_timeout_ms": 100,
                                  "session_timeout_min_ms": 10, "session_timeout_max_ms": 20,
                                  "initial_rebalance_delay_ms": 0, "group_size_max": 3,
                                  "offsets_retention_ms": 120_000}
    refused(BROKER, "group.min.session.timeout.ms", "must not be above group.max",
            group_min_session_timeout_ms="30000", group_max_session_timeout_ms="20000")
    refused(BROKER, "group.max.size", "0 must be positive", group_max_size="0")
    assert c.unknown_keys == ()
    for key in ("offsets.topic.num.partitions", "offsets.topic.replication.factor",
                "offsets.commit.timeout.ms"):
        refused(BROKER, key, "0 must be positive", **{key.replace(".", "_"): "0"})
    # Kafka's replication factors are Java shorts
    refused(BROKER, "offsets.topic.replication.factor", "out of range for a Java short",
            offsets_topic_replication_factor="32768")
    assert config(BROKER, offsets_topic_replication_factor="32767")


def test_heartbeat_below_session_timeout():
    refused(BROKER, "broker.heartbeat.interval.ms", "below broker.session.timeout.ms (9000)",
            broker_heartbeat_interval_ms="9000")
    assert config(BROKER, broker_heartbeat_interval_ms="8999")


def test_segment_bytes():
    refused(CONTROLLER, "metadata.log.segment.bytes", "below metadata.log.segment.min.bytes",
            metadata_log_segment_bytes=str(1024 * 1024))
    c = config(CONTROLLER, metadata_log_segment_bytes="65536",
               metadata_log_segment_min_bytes="65536")
    assert c.metadata_log_settings() == {"segment_bytes": 65536,
                                         "segment_ms": 7 * 24 * 3600 * 1000}
    refused(CONTROLLER, "metadata.log.segment.min.bytes", "at least 14",
            metadata_log_segment_min_bytes="13")


def test_every_error_is_one_line_naming_a_key():
    # A value with a newline in it is quoted, so the message stays on one line.
    message = refused(CONTROLLER, "num.partitions", num_partitions="1\n2")
    assert "'1\\n2'" in message


# ------------------------------------------------------------------ direct construction


def test_constructor_and_replace_validate():
    c = NodeConfig.from_mapping(CONTROLLER)
    with pytest.raises(ConfigError, match="^node.id: 7 is a controller|^controller.quorum"):
        dataclasses.replace(c, node_id=7)
    with pytest.raises(ConfigError, match="^num.partitions: must be an integer"):
        dataclasses.replace(c, num_partitions="3")
    with pytest.raises(ConfigError, match="^listeners: entries must be Listener"):
        dataclasses.replace(c, listeners=("CONTROLLER://:9093",))
    with pytest.raises(ConfigError, match="^unclean.leader.election.enable: must be true"):
        dataclasses.replace(c, unclean_leader_election_enable=1)
    built = NodeConfig(node_id=1, process_roles=("controller",),
                       quorum_voters=((1, "localhost", 9093),),
                       listeners=(Listener("CONTROLLER", "", 9093),),
                       controller_listener_names=("CONTROLLER",), log_dirs=("/d",))
    assert built.metadata_log_dir == "/d" and built.voters == {1: ("localhost", 9093)}


# ------------------------------------------------------------------ overrides


def test_with_overrides():
    c = NodeConfig.from_mapping(COMBINED)
    d = c.with_overrides({"controller.quorum.fetch.timeout.ms": "300", "num.partitions": 6,
                          "some.unknown.key": "x"})
    assert d.quorum_fetch_timeout_ms == 300 and d.num_partitions == 6
    assert d.unknown_keys == ("some.unknown.key",)
    assert c.quorum_fetch_timeout_ms == 2000  # the original is unchanged
    assert d.with_overrides({"some.unknown.key": None}).unknown_keys == ()
    with pytest.raises(ConfigError, match="^controller.quorum.fetch.timeout.ms: "):
        c.with_overrides({"controller.quorum.fetch.timeout.ms": "soon"})


def test_with_overrides_keeps_the_source(tmp_path):
    path = tmp_path / "n.properties"
    path.write_text("\n".join(f"{k}={v}" for k, v in COMBINED.items()))
    assert NodeConfig.from_file(path).with_overrides({"num.partitions": "2"}).source == str(path)


def test_parse_override():
    assert parse_override("num.partitions=3") == ("num.partitions", "3")
    assert parse_override("listeners=A://:1,B://:2") == ("listeners", "A://:1,B://:2")
    assert parse_override(" k =a=b") == ("k", "a=b")
    assert parse_override("k=") == ("k", "")
    for bad in ("novalue", "=3", ""):
        with pytest.raises(ConfigError, match="expected KEY=VALUE"):
            parse_override(bad)


# ------------------------------------------------------------------ conversions


def test_raft_config():
    c = config(CONTROLLER, controller_quorum_election_timeout_ms="1500",
               controller_quorum_fetch_timeout_ms="3000",
               controller_quorum_election_backoff_max_ms="700",
               controller_quorum_request_timeout_ms="2500",
               controller_quorum_retry_backoff_ms="30")
    raft = c.raft_config(cluster_id="MkU3OEVBNTcwNTJENDM2Qg")
    assert isinstance(raft, RaftConfig)
    assert (raft.election_timeout_ms, raft.fetch_timeout_ms, raft.election_backoff_ms_max,
            raft.request_timeout_ms, raft.retry_backoff_ms) == (1500, 3000, 700, 2500, 30)
    assert raft.fetch_wait_ms_max == 500
    assert raft.cluster_id == "MkU3OEVBNTcwNTJENDM2Qg"
    assert NodeConfig.from_mapping(CONTROLLER).raft_config().cluster_id is None


@pytest.mark.parametrize("fetch, request_timeout, wait", [
    (2000, 2000, 500), (300, 2000, 150), (2000, 600, 300), (1, 1, 0), (1001, 5000, 500)])
def test_fetch_max_wait_stays_below_the_timeouts(fetch, request_timeout, wait):
    # RaftConfig refuses fetch_wait_ms_max >= either timeout; short timeouts (the failover
    # benchmark uses a 300 ms fetch timeout) lower the long poll instead of failing.
    c = config(CONTROLLER, controller_quorum_fetch_timeout_ms=str(fetch),
               controller_quorum_request_timeout_ms=str(request_timeout))
    assert c.fetch_wait_ms_max == wait
    assert c.raft_config().fetch_wait_ms_max == wait


def test_controller_config():
    c = config(COMBINED, broker_session_timeout_ms="6000", broker_heartbeat_interval_ms="500",
               metadata_max_idle_interval_ms="0", num_partitions="3",
               default_replication_factor="2")
    cc = c.controller_config("MkU3OEVBNTcwNTJENDM2Qg")
    assert isinstance(cc, ControllerConfig)
    assert (cc.cluster_id, cc.session_timeout_ms, cc.heartbeat_interval_ms,
            cc.idle_interval_ms_max, cc.default_partitions, cc.default_replication_factor) == \
        ("MkU3OEVBNTcwNTJENDM2Qg", 6000, 500, 0, 3, 2)
    for bad in (None, ""):
        with pytest.raises(ConfigError, match="cluster id"):
            c.controller_config(bad)


def test_snapshot_settings():
    c = config(CONTROLLER, metadata_log_max_record_bytes_between_snapshots="1000",
               metadata_log_max_snapshot_interval_ms="0")
    assert (c.snapshot_interval_bytes, c.snapshot_interval_ms) == (1000, 0)


# ------------------------------------------------------------------ listener limits


def test_listener_limits_defaults():
    c = NodeConfig.from_mapping(CONTROLLER)
    assert c.socket_request_bytes_max == 100 * 1024 * 1024
    assert c.connections_max == c.connections_per_ip_max == 2**31 - 1
    assert c.connections_idle_ms_max == 600_000
    # kraftcore's default, not Kafka's -1: the largest request, so memory has a bound
    assert c.queued_request_bytes_max == c.socket_request_bytes_max
    assert c.request_memory_bytes == 100 * 1024 * 1024
    assert "queued.max.request.bytes" not in DEFAULTS
    assert {"socket.request.max.bytes", "max.connections", "max.connections.per.ip",
            "connections.max.idle.ms", "queued.max.request.bytes"} <= KNOWN_KEYS
    assert c.listener_settings() == {
        "frame_bytes_max": 100 * 1024 * 1024, "connections_max": 4096,
        "connections_per_ip_max": 2**31 - 1, "connections_idle_ms_max": 600_000}


def test_listener_limits_are_read():
    c = config(BROKER, socket_request_max_bytes="1048576", max_connections="100",
               max_connections_per_ip="10", connections_max_idle_ms="-1",
               queued_max_request_bytes="4194304")
    assert c.listener_settings() == {
        "frame_bytes_max": 1048576, "connections_max": 100, "connections_per_ip_max": 10,
        "connections_idle_ms_max": None}
    assert c.request_memory_bytes == 4194304
    # the default follows socket.request.max.bytes
    assert config(BROKER, socket_request_max_bytes="1048576").request_memory_bytes == 1048576
    for unlimited in ("-1", "0"):  # as in Kafka: no limit
        assert config(BROKER, queued_max_request_bytes=unlimited).request_memory_bytes is None
    assert config(BROKER, queued_max_request_bytes=str(2**40)).request_memory_bytes == 2**40


def test_listener_limits_are_checked():
    refused(CONTROLLER, "queued.max.request.bytes", "at least socket.request.max.bytes "
            "(104857600)", "request of the largest size could never be read",
            queued_max_request_bytes="1048576")
    refused(CONTROLLER, "queued.max.request.bytes", "-1 (no limit)",
            queued_max_request_bytes="-2")
    refused(CONTROLLER, "queued.max.request.bytes", "at least socket.request.max.bytes "
            "(209715200)", socket_request_max_bytes="209715200",
            queued_max_request_bytes="104857600")
    refused(CONTROLLER, "socket.request.max.bytes", "0 must be positive",
            socket_request_max_bytes="0")
    refused(CONTROLLER, "max.connections", "0 must be positive", max_connections="0")
    refused(CONTROLLER, "max.connections.per.ip", "refuse every connection",
            "max.connections.per.ip.overrides", "set a positive limit",
            max_connections_per_ip="0")
    refused(CONTROLLER, "max.connections.per.ip", "-1 must be >= 0",
            max_connections_per_ip="-1")
    refused(CONTROLLER, "connections.max.idle.ms", "-2 must be -1 (no limit)",
            connections_max_idle_ms="-2")
    refused(CONTROLLER, "max.connections", "out of range", max_connections="2147483648")
    refused(CONTROLLER, "queued.max.request.bytes", "is not an integer",
            queued_max_request_bytes="lots")
