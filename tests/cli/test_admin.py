"""`kraftcore quorum | topics | brokers | configs` against controllers served in-process
(`tests.admin.servers`: an active controller and a standby that answers NOT_CONTROLLER /
NOT_LEADER_OR_FOLLOWER, so redirects are exercised too).

The commands run through `kraftcore.cli.main.main([...])` in the test thread. No test
asserts on a duration; the thread joins and futures have hang guards only.
"""

import asyncio
import json
import socket

import pytest

from kraftcore.admin.client import SOURCE_TOPIC, config_doc, quorum_summary
from kraftcore.cli import admin
from kraftcore.cli.main import main
from kraftcore.controller.replication import NewTopic
from kraftcore.net import Listener
from kraftcore.protocol import messages as m
from kraftcore.types import Uuid

from tests.admin import servers
from tests.admin.servers import Cluster, LoopThread, brokers, cluster  # noqa: F401 (fixtures)

QUICK_MS = "10000"  # --timeout-ms of commands expected to succeed (a hang guard)


def kraftcore(capsys, *argv):
    """Run `kraftcore ARGV`; returns (exit status, stdout, stderr)."""
    try:
        status = main(list(argv))
    except SystemExit as exc:  # argparse's usage errors
        status = exc.code
    out, err = capsys.readouterr()
    return status, out, err


def ok(capsys, *argv):
    status, out, err = kraftcore(capsys, *argv, "--timeout-ms", QUICK_MS)
    assert (status, err) == (0, ""), err
    return out


def failed(capsys, *argv, status=1):
    code, out, err = kraftcore(capsys, *argv)
    assert code == status
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# ------------------------------------------------------------------------------ quorum describe

def test_quorum_describe_status(cluster, capsys):
    out = ok(capsys, "quorum", "describe", "--bootstrap-controller", cluster.address,
             "--status")
    lines = out.splitlines()
    labels = [line.split(":")[0] for line in lines]
    assert labels == ["ClusterId", "LeaderId", "LeaderEpoch", "HighWatermark",
                      "MaxFollowerLag", "MaxFollowerLagTimeMs", "CurrentVoters",
                      "CurrentObservers"]
    values = {line[:24].rstrip(": "): line[24:] for line in lines}
    core = cluster.active.quorum.core
    assert values["ClusterId"] == "kraftcore-cluster"
    assert values["LeaderId"] == "1"
    assert values["LeaderEpoch"] == str(core.epoch)
    assert int(values["HighWatermark"]) >= 1
    assert (values["MaxFollowerLag"], values["MaxFollowerLagTimeMs"]) == ("0", "0")
    assert json.loads(values["CurrentVoters"]) == [
        {"id": 1, "directoryId": None, "endpoints": [cluster.address]}]
    assert json.loads(values["CurrentObservers"]) == []


def test_quorum_describe_json_through_a_follower(cluster, capsys):
    """Asked at the standby, the command finds the leader and asks it."""
    status = json.loads(ok(capsys, "quorum", "describe", "--bootstrap-controller",
                           cluster.standby_address, "--status", "--json"))
    assert set(status) == {"cluster_id", "leader_id", "leader_epoch", "high_watermark",
                           "max_follower_lag", "max_follower_lag_time_ms", "current_voters",
                           "current_observers"}
    assert status["leader_id"] == 1 and status["cluster_id"] == "kraftcore-cluster"
    assert status["current_voters"][0]["id"] == 1
    replication = json.loads(ok(capsys, "quorum", "describe", "--bootstrap-controller",
                                cluster.standby_address, "--replication", "--json"))
    (leader,) = replication["replicas"]
    assert leader["node_id"] == 1 and leader["status"] == "Leader" and leader["lag"] == 0
    assert leader["log_end_offset"] >= replication["high_watermark"]
    assert set(leader) == {"node_id", "directory_id", "log_end_offset", "lag",
                           "last_fetch_timestamp", "last_caught_up_timestamp", "status"}


def test_quorum_describe_replication_table(cluster, capsys):
    out = ok(capsys, "quorum", "describe", "--bootstrap-controller", cluster.address,
             "--replication")
    header, row = out.splitlines()
    assert header.split() == ["NodeId", "DirectoryId", "LogEndOffset", "Lag",
                              "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status"]
    cells = row.split()
    assert (cells[0], cells[3], cells[-1]) == ("1", "0", "Leader")


def test_quorum_summary_with_followers_and_observers():
    """The lag fields, computed as kafka-metadata-quorum does, from a three-voter answer."""
    cls = m.DescribeQuorumResponse
    part = cls.PartitionData(
        leader_id=2, leader_epoch=7, high_watermark=90,
        current_voters=[
            cls.ReplicaState(replica_id=1, log_end_offset=80, last_fetch_timestamp=1000,
                             last_caught_up_timestamp=400),
            cls.ReplicaState(replica_id=2, log_end_offset=100, last_fetch_timestamp=1500,
                             last_caught_up_timestamp=1500),
            cls.ReplicaState(replica_id=3, log_end_offset=100, last_fetch_timestamp=1490,
                             last_caught_up_timestamp=1490)],
        observers=[cls.ReplicaState(replica_id=10, log_end_offset=60,
                                    replica_directory_id=Uuid.from_ints(1, 2))])
    summary = quorum_summary(part, "c", {1: ["CONTROLLER://h1:1"], 2: ["h2:2"]})
    assert (summary["max_follower_lag"], summary["max_follower_lag_time_ms"]) == (20, 1100)
    assert [(r["node_id"], r["lag"], r["status"]) for r in summary["replicas"]] == [
        (2, 0, "Leader"), (1, 20, "Follower"), (3, 0, "Follower"), (10, 40, "Observer")]
    assert summary["current_observers"] == [
        {"id": 10, "directory_id": str(Uuid.from_ints(1, 2)), "endpoints": []}]
    status = admin.format_status(summary)
    assert status[0] == "ClusterId:              c"
    assert status[6] == ('CurrentVoters:          [{"id": 1, "directoryId": null, '
                         '"endpoints": ["CONTROLLER://h1:1"]}, {"id": 2, "directoryId": '
                         'null, "endpoints": ["h2:2"]}, {"id": 3, "directoryId": null, '
                         '"endpoints": []}]')
    table = admin.format_replication(summary, now_ms=2000)
    assert table[2].split() == ["1", "-", "80", "20", "1000", "ms", "ago", "1600", "ms",
                                "ago", "Follower"]
    assert table[4].split()[-3:] == ["-1", "-1", "Observer"]
    # Every voter caught up: no lag, and no lag time either.
    for v in part.current_voters:
        v.log_end_offset = 100
    again = quorum_summary(part, "c", {})
    assert (again["max_follower_lag"], again["max_follower_lag_time_ms"]) == (0, 0)


def test_quorum_describe_without_a_leader(capsys):
    cluster = Cluster(standby_knows_leader=False)
    try:
        line = failed(capsys, "quorum", "describe", "--bootstrap-controller",
                      cluster.standby_address, "--status")
    finally:
        cluster.close()
    assert "the quorum has no leader right now" in line


# ------------------------------------------------------------------------------ topics

def test_topics_create_describe_list_delete(brokers, capsys):
    cluster, _ = brokers
    out = ok(capsys, "topics", "create", "--bootstrap-controller", cluster.address,
             "--topic", "orders", "--partitions", "3", "--replication-factor", "2",
             "--config", "min.insync.replicas=2")
    assert out == "Created topic orders.\n"
    image = cluster.image
    topic = image.topic("orders")
    assert len(topic.partitions) == 3
    assert image.configs[(2, "orders")] == {"min.insync.replicas": "2"}
    ok(capsys, "topics", "create", "--bootstrap-controller", cluster.address, "--topic",
       "audit")

    assert ok(capsys, "topics", "list", "--bootstrap-controller", cluster.address) == \
        "audit\norders\n"
    assert json.loads(ok(capsys, "topics", "list", "--bootstrap-controller",
                         cluster.address, "--json")) == {"topics": ["audit", "orders"]}

    text = ok(capsys, "topics", "describe", "--bootstrap-controller", cluster.address,
              "--topic", "orders").splitlines()
    assert text[0] == (f"Topic: orders\tTopicId: {topic.topic_id}\tPartitionCount: 3\t"
                       "ReplicationFactor: 2")
    for pid, line in enumerate(text[1:]):
        p = topic.partitions[pid]
        assert line == (f"\tTopic: orders\tPartition: {pid}\tLeader: {p.leader}\t"
                        f"Replicas: {','.join(map(str, p.replicas))}\t"
                        f"Isr: {','.join(map(str, p.isr))}")
    doc = json.loads(ok(capsys, "topics", "describe", "--bootstrap-controller",
                        cluster.address, "--json"))
    assert [t["name"] for t in doc["topics"]] == ["audit", "orders"]
    orders = doc["topics"][1]
    assert orders["topic_id"] == str(topic.topic_id)
    assert [(p["partition"], p["leader"], p["replicas"], p["isr"])
            for p in orders["partitions"]] == [
        (pid, p.leader, p.replicas, p.isr) for pid, p in sorted(topic.partitions.items())]

    assert ok(capsys, "topics", "delete", "--bootstrap-controller", cluster.address,
              "--topic", "orders") == "Deleted topic orders.\n"
    assert cluster.image.topic("orders") is None
    assert ok(capsys, "topics", "list", "--bootstrap-controller", cluster.address) == \
        "audit\n"


def test_topics_errors(brokers, capsys):
    cluster, _ = brokers
    where = ("--bootstrap-controller", cluster.address)
    ok(capsys, "topics", "create", *where, "--topic", "t")
    assert "already exists" in failed(capsys, "topics", "create", *where, "--topic", "t")
    line = failed(capsys, "topics", "create", *where, "--topic", "wide",
                  "--replication-factor", "5")
    assert "INVALID_REPLICATION_FACTOR" in line
    assert "INVALID_CONFIG" in failed(capsys, "topics", "create", *where, "--topic", "c",
                                      "--config", "retention.ms=-5")
    assert "bad --config" in failed(capsys, "topics", "create", *where, "--topic", "c",
                                    "--config", "oops", status=2)
    assert "--partitions" in failed(capsys, "topics", "create", *where, "--topic", "c",
                                    "--partitions", "0", status=2)
    assert failed(capsys, "topics", "delete", *where, "--topic", "nope") == \
        "kraftcore topics delete: error: topic 'nope' does not exist"
    assert failed(capsys, "topics", "describe", *where, "--topic", "nope") == \
        "kraftcore topics describe: error: topic 'nope' does not exist"


def test_writes_are_redirected_from_a_standby(brokers, capsys):
    cluster, _ = brokers
    ok(capsys, "topics", "create", "--bootstrap-controller", cluster.standby_address,
       "--topic", "moved", "--partitions", "2")
    assert len(cluster.image.topic("moved").partitions) == 2
    assert ok(capsys, "topics", "list", "--bootstrap-controller", cluster.standby_address) \
        == "moved\n"
    ok(capsys, "configs", "set", "--bootstrap-controller", cluster.standby_address,
       "--topic", "moved", "min.insync.replicas=2")
    assert cluster.image.configs[(2, "moved")] == {"min.insync.replicas": "2"}
    ok(capsys, "topics", "delete", "--bootstrap-controller", cluster.standby_address,
       "--topic", "moved")
    assert cluster.image.topic("moved") is None
    assert "create_topics" in cluster.standby_node.facade.submitted


def test_no_active_controller_is_one_clear_line(capsys):
    cluster = Cluster(standby_knows_leader=False)
    try:
        line = failed(capsys, "topics", "create", "--bootstrap-controller",
                      cluster.standby_address, "--topic", "x", "--timeout-ms", "1500")
    finally:
        cluster.close()
    # retried through the election for --timeout-ms, then one line saying why
    assert "NOT_CONTROLLER" in line and "within 1500 ms" in line and "retry" in line


# ------------------------------------------------------------------------------ brokers

def test_brokers_list_states(brokers, capsys):
    cluster, epochs = brokers
    epochs[4] = cluster.add_broker(4, unfence=False)
    cluster.on_loop(cluster.active.quorum.call, "create_topics",
                    [NewTopic("t", assignments={0: [3, 1]})])
    # Broker 3 leads t-0 and asks for a controlled shutdown: its leadership moves, and it
    # stays registered and unfenced, in controlled shutdown, until its next heartbeat.
    cluster.heartbeat(3, epochs[3], want_shutdown=True)
    assert cluster.image.brokers[3].in_controlled_shutdown
    doc = json.loads(ok(capsys, "brokers", "list", "--bootstrap-controller", cluster.address,
                        "--json"))
    assert [(b["id"], b["state"], b["epoch"], b["endpoints"]) for b in doc["brokers"]] == [
        (1, "unfenced", epochs[1], ["127.0.0.1:9091"]),
        (2, "unfenced", epochs[2], ["127.0.0.1:9092"]),
        (3, "shutting down", epochs[3], ["127.0.0.1:9093"]),
        (4, "fenced", epochs[4], ["127.0.0.1:9094"])]
    assert set(doc["brokers"][0]) == {"id", "state", "epoch", "endpoints", "rack"}
    table = ok(capsys, "brokers", "list", "--bootstrap-controller", cluster.standby_address)
    rows = [line.split() for line in table.splitlines()]
    assert rows[0] == ["ID", "STATE", "EPOCH", "ENDPOINTS", "RACK"]
    assert rows[1] == ["1", "unfenced", str(epochs[1]), "127.0.0.1:9091", "-"]
    assert rows[3] == ["3", "shutting", "down", str(epochs[3]), "127.0.0.1:9093", "-"]
    assert rows[4] == ["4", "fenced", str(epochs[4]), "127.0.0.1:9094", "-"]


def test_brokers_list_from_a_server_without_epochs(brokers, capsys, monkeypatch):
    """A server that does not send kraftcore's BrokerEpoch tag (a Kafka controller): the
    epoch shows as '-' and null."""
    cluster, _ = brokers
    original = servers.handle_controller_request

    async def without_epochs(facade, request):
        response = await original(facade, request)
        if request.api_key == 60:
            for b in response.brokers:
                b.broker_epoch = -1
        return response

    monkeypatch.setattr(servers, "handle_controller_request", without_epochs)
    doc = json.loads(ok(capsys, "brokers", "list", "--bootstrap-controller", cluster.address,
                        "--json"))
    assert [b["epoch"] for b in doc["brokers"]] == [None, None, None]
    rows = [line.split() for line in ok(capsys, "brokers", "list", "--bootstrap-controller",
                                        cluster.address).splitlines()]
    assert rows[1] == ["1", "unfenced", "-", "127.0.0.1:9091", "-"]


# ------------------------------------------------------------------------------ configs

def test_configs_set_topic_and_cluster(brokers, capsys):
    cluster, _ = brokers
    where = ("--bootstrap-controller", cluster.address)
    ok(capsys, "topics", "create", *where, "--topic", "t")
    assert ok(capsys, "configs", "set", *where, "--topic", "t", "min.insync.replicas=2",
              "unclean.leader.election.enable=true") == \
        "Completed updating config for topic t.\n"
    assert cluster.image.configs[(2, "t")] == {"min.insync.replicas": "2",
                                               "unclean.leader.election.enable": "true"}
    ok(capsys, "configs", "set", *where, "--topic", "t", "--delete", "min.insync.replicas")
    assert cluster.image.configs[(2, "t")] == {"unclean.leader.election.enable": "true"}
    assert ok(capsys, "configs", "set", *where, "--cluster", "min.insync.replicas=3") == \
        "Completed updating default config for brokers in the cluster.\n"
    assert cluster.image.configs[(4, "")] == {"min.insync.replicas": "3"}
    assert "does not exist" in failed(capsys, "configs", "set", *where, "--topic", "nope",
                                      "min.insync.replicas=2")
    assert "INVALID_CONFIG" in failed(capsys, "configs", "set", *where, "--topic", "t",
                                      "min.insync.replicas=zero")
    assert "nothing to change" in failed(capsys, "configs", "set", *where, "--topic", "t",
                                         status=2)


MIN_ISR, UNCLEAN = "min.insync.replicas", "unclean.leader.election.enable"


def test_configs_get_topic_and_cluster(brokers, capsys):
    cluster, _ = brokers
    where = ("--bootstrap-controller", cluster.address)
    ok(capsys, "topics", "create", *where, "--topic", "t", "--config", f"{MIN_ISR}=2")
    ok(capsys, "topics", "create", *where, "--topic", "plain")
    ok(capsys, "configs", "set", *where, "--cluster", f"{UNCLEAN}=true")

    assert ok(capsys, "configs", "get", *where, "--topic", "t").splitlines() == [
        "Dynamic configs for topic t are:",
        f"  {MIN_ISR}=2 sensitive=false synonyms={{DYNAMIC_TOPIC_CONFIG:{MIN_ISR}=2, "
        f"DEFAULT_CONFIG:{MIN_ISR}=1}}"]
    assert ok(capsys, "configs", "get", *where, "--topic", "t", "--all").splitlines() == [
        "All configs for topic t are:",
        f"  {MIN_ISR}=2 sensitive=false synonyms={{DYNAMIC_TOPIC_CONFIG:{MIN_ISR}=2, "
        f"DEFAULT_CONFIG:{MIN_ISR}=1}}",
        f"  {UNCLEAN}=true sensitive=false synonyms={{DYNAMIC_DEFAULT_BROKER_CONFIG:"
        f"{UNCLEAN}=true, DEFAULT_CONFIG:{UNCLEAN}=false}}"]
    # Nothing set on the topic itself: the header alone.
    assert ok(capsys, "configs", "get", *where, "--topic", "plain") == \
        "Dynamic configs for topic plain are:\n"
    assert ok(capsys, "configs", "get", *where, "--cluster").splitlines() == [
        "Default configs for brokers in the cluster are:",
        f"  {UNCLEAN}=true sensitive=false synonyms={{DYNAMIC_DEFAULT_BROKER_CONFIG:"
        f"{UNCLEAN}=true, DEFAULT_CONFIG:{UNCLEAN}=false}}"]
    everything = ok(capsys, "configs", "get", *where, "--cluster", "--all").splitlines()
    assert everything[0] == "All default configs for brokers in the cluster are:"
    assert everything[1] == (f"  {MIN_ISR}=1 sensitive=false synonyms={{DEFAULT_CONFIG:"
                             f"{MIN_ISR}=1}}")


def test_configs_get_json_and_errors(brokers, capsys):
    cluster, _ = brokers
    where = ("--bootstrap-controller", cluster.standby_address)  # reads find the active one
    ok(capsys, "topics", "create", *where, "--topic", "t", "--config", f"{MIN_ISR}=2")
    doc = json.loads(ok(capsys, "configs", "get", *where, "--topic", "t", "--all", "--json"))
    assert doc == {"resource": {"type": "topic", "name": "t"}, "configs": [
        {"name": MIN_ISR, "value": "2", "source": "DYNAMIC_TOPIC_CONFIG", "sensitive": False,
         "read_only": False, "synonyms": [
             {"name": MIN_ISR, "value": "2", "source": "DYNAMIC_TOPIC_CONFIG"},
             {"name": MIN_ISR, "value": "1", "source": "DEFAULT_CONFIG"}]},
        {"name": UNCLEAN, "value": "false", "source": "DEFAULT_CONFIG", "sensitive": False,
         "read_only": False, "synonyms": [
             {"name": UNCLEAN, "value": "false", "source": "DEFAULT_CONFIG"}]}]}
    cluster_doc = json.loads(ok(capsys, "configs", "get", *where, "--cluster", "--json"))
    assert cluster_doc == {"resource": {"type": "broker", "name": ""}, "configs": []}
    assert failed(capsys, "configs", "get", *where, "--topic", "nope") == \
        "kraftcore configs get: error: topic 'nope' does not exist"
    assert "one of the arguments --topic --cluster is required" in \
        kraftcore(capsys, "configs", "get", *where)[2]


def test_config_lines_from_a_v0_answer():
    """DescribeConfigs v0 has IsDefault instead of a source, and no synonyms."""
    cls = m.DescribeConfigsResponse
    set_here = cls.DescribeConfigsResourceResult(name=MIN_ISR, value="2", is_default=False)
    default = cls.DescribeConfigsResourceResult(name=UNCLEAN, value="false", is_default=True)
    secret = cls.DescribeConfigsResourceResult(name="x.password", value=None,
                                               is_default=False, is_sensitive=True)
    docs = [config_doc(c, 0, SOURCE_TOPIC) for c in (set_here, default, secret)]
    assert [(d["source"], d["synonyms"]) for d in docs] == [
        ("DYNAMIC_TOPIC_CONFIG", []), ("DEFAULT_CONFIG", []), ("DYNAMIC_TOPIC_CONFIG", [])]
    assert [admin.format_config(d) for d in docs] == [
        f"  {MIN_ISR}=2 sensitive=false synonyms={{}}",
        f"  {UNCLEAN}=false sensitive=false synonyms={{}}",
        "  x.password=null sensitive=true synonyms={}"]


# ------------------------------------------------------------------------------ reaching nobody

def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("argv", [
    ["quorum", "describe", "--status"], ["topics", "list"], ["brokers", "list"],
    ["topics", "create", "--topic", "x"], ["configs", "set", "--cluster", "a=b"],
    ["configs", "get", "--cluster"]])
def test_nothing_listening(capsys, argv):
    line = failed(capsys, *argv, "--bootstrap-controller", f"127.0.0.1:{_free_port()}")
    assert "could not connect" in line


@pytest.mark.parametrize("address", ["nope", "host:", ":9093", "h:99999", "h:port", "::1:9"])
def test_bad_address(capsys, address):
    line = failed(capsys, "topics", "list", "--bootstrap-controller", address, status=2)
    assert line.startswith("kraftcore topics list: error: bad --bootstrap-controller")


def test_parse_address():
    assert admin.parse_address("127.0.0.1:9093") == ("127.0.0.1", 9093)
    assert admin.parse_address("[::1]:9093") == ("::1", 9093)
    assert admin.parse_address("ctrl-1.example:1") == ("ctrl-1.example", 1)


def test_a_controller_that_never_answers(capsys):
    """A listener that accepts requests and never answers: the command gives up after its
    --timeout-ms with one line."""
    thread = LoopThread()

    async def never(request, peer):
        await asyncio.Event().wait()

    listener = thread.call(Listener.start("127.0.0.1", 0, never))
    try:
        line = failed(capsys, "topics", "list", "--bootstrap-controller",
                      f"127.0.0.1:{listener.port}", "--timeout-ms", "300")
    finally:
        thread.call(listener.close())
        thread.stop()
    assert "300 ms" in line
