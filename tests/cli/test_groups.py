"""`kraftcore groups list | describe | reset-offsets | delete` against a scripted broker
served in-process (a `kraftcore.net.Listener` on 127.0.0.1 whose answers the test sets:
groups, members with their assignment bytes, committed offsets, log offsets, and the
errors FindCoordinator answers first), at the newest versions and at the versions before
the batched FindCoordinator (v4) and multi-group OffsetFetch (v8). Then the pure parts:
argument parsing, the reset plan, the tables.

The commands run through `kraftcore.cli.main.main([...])` in the test thread. A real
cluster with Kafka's own consumers: tests/runtime/test_groups_command_processes.py.
"""

import json
import struct

import pytest

from kraftcore.admin import groups as admin_groups
from kraftcore.admin.groups import plan_offsets
from kraftcore.cli import groups as cli
from kraftcore.cli.admin import CommandError
from kraftcore.errors import AdminError
from kraftcore.net import Listener
from kraftcore.protocol import messages as m
from kraftcore.protocol.error_codes import ErrorCode as E

from tests.admin.servers import LoopThread
from tests.cli.test_admin import _free_port, failed, kraftcore

QUICK_MS = "10000"  # --timeout-ms of commands expected to succeed (a hang guard)
NEWEST = None
# before FindCoordinator's key batches (v4) and OffsetFetch's group batches (v8), and
# without DescribeGroups' GROUP_ID_NOT_FOUND (v6)
OLDER = {10: (0, 3), 9: (2, 7), 15: (0, 5), 8: (2, 7), 42: (0, 1)}


def subscription(*topics):
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def assignment(topics):
    out = struct.pack(">hi", 0, len(topics))
    for topic, parts in topics.items():
        out += struct.pack(">h", len(topic)) + topic.encode()
        out += struct.pack(f">i{len(parts)}i", len(parts), *parts)
    return out + struct.pack(">i", -1)


class Broker:
    """Broker 1 on 127.0.0.1, coordinator of every group, leader of every partition.
    `metadata_only`: serve nothing but Metadata (and ApiVersions), as a controller's
    listener, naming `metadata_only`'s broker as the cluster's."""

    def __init__(self, thread, versions=NEWEST, metadata_only=None):
        self.topics = {"orders": 3, "payments": 1}
        self.log_start = {("orders", 0): 2, ("orders", 1): 0, ("orders", 2): 0,
                          ("payments", 0): 0}
        self.log_end = {("orders", 0): 10, ("orders", 1): 12, ("orders", 2): 9,
                        ("payments", 0): 4}
        self.groups = {}  # id -> {"state", "protocol_type", "protocol", "members"}
        self.offsets = {}  # id -> {(topic, partition): offset}
        self.find_errors = []  # codes FindCoordinator answers before it names this broker
        self.commits = []  # (group, generation, member id, {(topic, partition): offset})
        self.requests = []
        keys = {k: None for k in (0, 1, 2, 3, 8, 9, 10, 15, 16, 42)}
        keys.update(versions or {})
        self.named = metadata_only or self
        if metadata_only is not None:
            keys = {3: None}
        self.listener = thread.call(Listener.start("127.0.0.1", 0, self.handle,
                                                   api_keys=keys))
        self.address = f"127.0.0.1:{self.listener.port}"

    def add_group(self, group, members=(), state=None, protocol_type="consumer",
                  offsets=None):
        """`members` [(member id, client id, {topic: [partition]} or raw bytes)]."""
        self.groups[group] = {
            "state": state or ("Stable" if members else "Empty"),
            "protocol_type": protocol_type, "protocol": "range" if members else "",
            "members": [(mid, client, assigned if isinstance(assigned, bytes)
                         else assignment(assigned)) for mid, client, assigned in members]}
        if offsets is not None:
            self.offsets[group] = dict(offsets)

    async def handle(self, request, peer):
        self.requests.append((request.api_key, request.api_version))
        return getattr(self, f"_api_{request.api_key}")(request.api_version, request.body)

    def _api_3(self, version, body):  # Metadata
        cls = m.MetadataResponse
        names = sorted(self.topics) if body.topics is None else [t.name for t in body.topics]
        topics = []
        for name in names:
            if name not in self.topics:
                topics.append(cls.MetadataResponseTopic(error_code=E.UNKNOWN_TOPIC_OR_PARTITION,
                                                        name=name))
                continue
            topics.append(cls.MetadataResponseTopic(error_code=0, name=name, partitions=[
                cls.MetadataResponsePartition(error_code=0, partition_index=p, leader_id=1,
                                              replica_nodes=[1], isr_nodes=[1])
                for p in range(self.topics[name])]))
        return cls(brokers=[cls.MetadataResponseBroker(node_id=1, host="127.0.0.1",
                                                       port=self.named.listener.port)],
                   cluster_id="c", controller_id=1, topics=topics)

    def _api_10(self, version, body):  # FindCoordinator
        cls = m.FindCoordinatorResponse
        code = self.find_errors.pop(0) if self.find_errors else 0
        node = (-1, "", -1) if code else (1, "127.0.0.1", self.listener.port)
        if version >= 4:
            return cls(coordinators=[cls.Coordinator(key=k, node_id=node[0], host=node[1],
                                                     port=node[2], error_code=code)
                                     for k in body.coordinator_keys])
        return cls(error_code=code, node_id=node[0], host=node[1], port=node[2])

    def _api_16(self, version, body):  # ListGroups
        cls = m.ListGroupsResponse
        states = {s.lower() for s in body.states_filter} if version >= 4 else set()
        return cls(error_code=0, groups=[
            cls.ListedGroup(group_id=g, protocol_type=d["protocol_type"], group_state=d["state"])
            for g, d in sorted(self.groups.items())
            if not states or d["state"].lower() in states])

    def _api_15(self, version, body):  # DescribeGroups
        cls = m.DescribeGroupsResponse
        out = []
        for group in body.groups:
            d = self.groups.get(group)
            if d is None:
                code = E.GROUP_ID_NOT_FOUND if version >= 6 else 0
                out.append(cls.DescribedGroup(error_code=code, group_id=group,
                                              group_state="Dead"))
                continue
            out.append(cls.DescribedGroup(
                error_code=0, group_id=group, group_state=d["state"],
                protocol_type=d["protocol_type"], protocol_data=d["protocol"],
                members=[cls.DescribedGroupMember(
                    member_id=mid, client_id=client, client_host="/127.0.0.1",
                    member_metadata=subscription("orders"), member_assignment=data)
                    for mid, client, data in d["members"]]))
        return cls(groups=out)

    def _fetched(self, cls_topic, cls_part, group):
        by_topic = {}
        for (t, p), offset in sorted(self.offsets.get(group, {}).items()):
            by_topic.setdefault(t, []).append(cls_part(
                partition_index=p, committed_offset=offset, metadata="", error_code=0))
        return [cls_topic(name=t, partitions=parts) for t, parts in by_topic.items()]

    def _api_9(self, version, body):  # OffsetFetch
        cls = m.OffsetFetchResponse
        if version >= 8:
            return cls(groups=[cls.OffsetFetchResponseGroup(
                group_id=g.group_id, error_code=0, topics=self._fetched(
                    cls.OffsetFetchResponseTopics, cls.OffsetFetchResponsePartitions,
                    g.group_id)) for g in body.groups])
        return cls(error_code=0, topics=self._fetched(
            cls.OffsetFetchResponseTopic, cls.OffsetFetchResponsePartition, body.group_id))

    def _api_2(self, version, body):  # ListOffsets
        cls = m.ListOffsetsResponse
        return cls(topics=[cls.ListOffsetsTopicResponse(name=t.name, partitions=[
            cls.ListOffsetsPartitionResponse(
                partition_index=p.partition_index, error_code=0, timestamp=-1,
                offset=(self.log_start if p.timestamp == -2 else self.log_end)[
                    (t.name, p.partition_index)]) for p in t.partitions])
            for t in body.topics])

    def _api_8(self, version, body):  # OffsetCommit
        cls = m.OffsetCommitResponse
        group = self.groups.get(body.group_id)
        code = E.UNKNOWN_MEMBER_ID if group and group["members"] else 0
        offsets = {(t.name, p.partition_index): p.committed_offset
                   for t in body.topics for p in t.partitions}
        if not code:
            self.commits.append((body.group_id, body.generation_id_or_member_epoch,
                                 body.member_id, offsets))
            self.offsets.setdefault(body.group_id, {}).update(offsets)
        return cls(topics=[cls.OffsetCommitResponseTopic(name=t.name, partitions=[
            cls.OffsetCommitResponsePartition(partition_index=p.partition_index,
                                              error_code=code) for p in t.partitions])
            for t in body.topics])

    def _api_42(self, version, body):  # DeleteGroups
        cls = m.DeleteGroupsResponse
        results = []
        for group in body.groups_names:
            d = self.groups.get(group)
            if d is None and group not in self.offsets:
                code = E.GROUP_ID_NOT_FOUND
            elif d is not None and d["members"]:
                code = E.NON_EMPTY_GROUP
            else:
                code = 0
                self.groups.pop(group, None)
                self.offsets.pop(group, None)
            results.append(cls.DeletableGroupResult(group_id=group, error_code=code))
        return cls(throttle_time_ms=0, results=results)


@pytest.fixture(scope="module")
def thread():
    t = LoopThread()
    yield t
    t.stop()


@pytest.fixture(params=["newest", "older"])
def broker(request, thread):
    b = Broker(thread, NEWEST if request.param == "newest" else OLDER)
    yield b
    thread.call(b.listener.close())


def run_ok(capsys, *argv):
    """(stdout, stderr) of a command expected to succeed."""
    status, out, err = kraftcore(capsys, *argv, "--timeout-ms", QUICK_MS)
    assert status == 0, err
    return out, err


def groups(capsys, broker, *argv):
    action, *rest = argv
    out, err = run_ok(capsys, "groups", action, "--bootstrap-server", broker.address, *rest)
    assert err == ""
    return out


def rows(out):
    return [line.split() for line in out.splitlines()]


BILLING = [("m-1", "c1", {"orders": [0, 1]}), ("m-2", "c2", {"orders": [2]})]


# ------------------------------------------------------------------------------ list

def test_list_every_group_with_its_type_and_state(broker, capsys):
    broker.add_group("billing", BILLING)
    broker.add_group("audit", offsets={("orders", 0): 3}, protocol_type="")
    broker.add_group("connectors", [("w-1", "w", b"")], protocol_type="connect")
    assert rows(groups(capsys, broker, "list")) == [
        ["GROUP", "PROTOCOL-TYPE", "STATE"], ["audit", "-", "Empty"],
        ["billing", "consumer", "Stable"], ["connectors", "connect", "Stable"]]
    assert rows(groups(capsys, broker, "list", "--state", "stable,EMPTY", "--state",
                       "Stable")) == rows(groups(capsys, broker, "list"))
    assert rows(groups(capsys, broker, "list", "--state", "empty"))[1:] == [
        ["audit", "-", "Empty"]]
    doc = json.loads(groups(capsys, broker, "list", "--json"))
    assert doc["groups"][1] == {"group": "billing", "protocol_type": "consumer",
                                "state": "Stable", "coordinator": 1}


def test_list_through_a_controller_flag_and_several_bootstraps(broker, thread, capsys):
    """--bootstrap-controller takes the brokers from that listener's Metadata (a listener
    that serves nothing else, as a controller's); a --bootstrap-server list goes on past
    an address that does not answer."""
    broker.add_group("billing", offsets={("orders", 0): 1})
    controller = Broker(thread, metadata_only=broker)
    try:
        for action in (["list"], ["describe", "billing"], ["reset-offsets", "billing",
                                                           "--all-topics", "--to-latest"]):
            out, _ = run_ok(capsys, "groups", *action, "--bootstrap-controller",
                            controller.address)
            assert rows(out)[-1][0] == "billing"
    finally:
        thread.call(controller.listener.close())
    assert {key for key, _ in controller.requests} == {3}
    out, _ = run_ok(capsys, "groups", "list", "--bootstrap-server",
                    f"127.0.0.1:{_free_port()},{broker.address}")
    assert rows(out)[1][0] == "billing"


def test_list_from_a_broker_without_group_states(thread, capsys):
    broker = Broker(thread, {16: (0, 3)})
    try:
        broker.add_group("billing", BILLING)
        assert rows(groups(capsys, broker, "list"))[1] == ["billing", "consumer", "-"]
        line = failed(capsys, "groups", "list", "--bootstrap-server", broker.address,
                      "--state", "Stable")
        assert "below v4 only, which carries no group states" in line
    finally:
        thread.call(broker.listener.close())


# ------------------------------------------------------------------------------ describe

def test_describe_offsets_lag_and_owners(broker, capsys):
    broker.add_group("billing", BILLING, offsets={("orders", 0): 4, ("orders", 1): 12,
                                                  ("payments", 0): 1})
    assert rows(groups(capsys, broker, "describe", "billing")) == [
        ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
         "CONSUMER-ID", "HOST", "CLIENT-ID"],
        ["billing", "orders", "0", "4", "10", "6", "m-1", "/127.0.0.1", "c1"],
        ["billing", "orders", "1", "12", "12", "0", "m-1", "/127.0.0.1", "c1"],
        ["billing", "orders", "2", "-", "9", "-", "m-2", "/127.0.0.1", "c2"],
        ["billing", "payments", "0", "1", "4", "3", "-", "-", "-"]]
    doc = json.loads(groups(capsys, broker, "describe", "billing", "--json"))
    assert (doc["state"], doc["assignment_strategy"], doc["coordinator"]["id"]) == (
        "Stable", "range", 1)
    assert doc["members"][0] == {
        "member_id": "m-1", "group_instance_id": None, "client_id": "c1",
        "host": "/127.0.0.1", "subscription": ["orders"],
        "assignment": [{"topic": "orders", "partitions": [0, 1]}], "assignment_error": None}
    assert doc["offsets"][3] == {"topic": "payments", "partition": 0, "current_offset": 1,
                                 "log_end_offset": 4, "lag": 3, "member_id": None,
                                 "host": None, "client_id": None}


def test_describe_members_and_state_views(broker, capsys):
    broker.add_group("billing", BILLING + [("m-3", "c3", {})])
    assert rows(groups(capsys, broker, "describe", "billing", "--members")) == [
        ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"],
        ["billing", "m-1", "/127.0.0.1", "c1", "2"], ["billing", "m-2", "/127.0.0.1", "c2", "1"],
        ["billing", "m-3", "/127.0.0.1", "c3", "0"]]
    verbose = rows(groups(capsys, broker, "describe", "billing", "--members", "--verbose"))
    assert verbose[0][-2:] == ["#PARTITIONS", "ASSIGNMENT"]
    assert [r[-1] for r in verbose[1:]] == ["orders(0,1)", "orders(2)", "-"]
    out = groups(capsys, broker, "describe", "billing", "--state")
    assert out.splitlines()[1].split("  ")[0] == "billing"
    assert f"127.0.0.1:{broker.listener.port} (1)" in out
    assert rows(out)[1][-3:] == ["range", "Stable", "3"]
    # the offsets view lists a member that owns nothing on a row of its own
    assert ["billing", "-", "-", "-", "-", "-", "m-3", "/127.0.0.1", "c3"] in rows(
        groups(capsys, broker, "describe", "billing"))


def test_describe_an_inactive_and_a_rebalancing_group(broker, capsys):
    broker.add_group("idle", offsets={("orders", 2): 9})
    lines = groups(capsys, broker, "describe", "idle").splitlines()
    assert lines[0] == "Consumer group 'idle' has no active members."
    assert lines[2].split() == ["idle", "orders", "2", "9", "9", "0", "-", "-", "-"]
    assert groups(capsys, broker, "describe", "idle", "--members").splitlines() == [
        "Consumer group 'idle' has no active members."]
    broker.add_group("moving", [("m-1", "c1", b"")], state="PreparingRebalance")
    assert groups(capsys, broker, "describe", "moving").splitlines()[0] == (
        "Warning: consumer group 'moving' is rebalancing.")


def test_an_unknown_group_is_one_line(broker, capsys):
    line = failed(capsys, "groups", "describe", "nope", "--bootstrap-server", broker.address)
    assert line == "kraftcore groups describe: error: consumer group 'nope' does not exist"


def test_an_assignment_that_does_not_decode_is_a_warning(broker, capsys):
    broker.add_group("odd", [("m-1", "c1", b"\x00\x00\x00\x00\x00\x07xx")],
                     offsets={("orders", 0): 5})
    out, err = run_ok(capsys, "groups", "describe", "odd", "--bootstrap-server",
                      broker.address)
    (warning,) = err.splitlines()
    assert warning.startswith("kraftcore groups describe: warning: the assignment of member "
                              "m-1 does not decode (a consumer assignment's topic count 7")
    assert rows(out)[1] == ["odd", "orders", "0", "5", "10", "5", "-", "-", "-"]
    assert rows(out)[2] == ["odd", "-", "-", "-", "-", "-", "m-1", "/127.0.0.1", "c1"]
    # a group of another protocol type: its members' bytes are not read at all
    broker.add_group("connect", [("w-1", "w", b"\xff")], protocol_type="connect")
    out, err = run_ok(capsys, "groups", "describe", "connect", "--bootstrap-server",
                      broker.address, "--json")
    assert err == "" and json.loads(out)["members"][0]["assignment"] == []


def test_a_coordinator_that_is_not_available_yet_is_asked_again(broker, capsys):
    broker.find_errors = [E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS,
                          E.NOT_COORDINATOR]
    broker.add_group("billing", BILLING)
    assert rows(groups(capsys, broker, "describe", "billing", "--state"))[1][-1] == "2"
    assert broker.find_errors == []


def test_a_coordinator_that_never_comes_ends_within_the_timeout(broker, capsys):
    broker.find_errors = [E.COORDINATOR_NOT_AVAILABLE] * 1000
    line = failed(capsys, "groups", "describe", "billing", "--bootstrap-server",
                  broker.address, "--timeout-ms", "1000")
    assert line.startswith("kraftcore groups describe: error: describing group 'billing': "
                           "still failing after 1000 ms (no coordinator for group "
                           "'billing' yet: COORDINATOR_NOT_AVAILABLE (15)")
    assert line.endswith("retry, or give a longer --timeout-ms")


# ------------------------------------------------------------------------------ reset-offsets

def test_reset_is_a_dry_run_until_executed(broker, capsys):
    broker.add_group("billing", offsets={("orders", 0): 7, ("orders", 1): 3})
    out, err = run_ok(capsys, "groups", "reset-offsets", "billing", "--bootstrap-server",
                      broker.address, "--topic", "orders", "--to-earliest")
    assert rows(out) == [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                         ["billing", "orders", "0", "2"], ["billing", "orders", "1", "0"],
                         ["billing", "orders", "2", "0"]]
    assert err == ("kraftcore groups reset-offsets: dry run: nothing was committed; add "
                   "--execute to commit these offsets\n")
    assert broker.commits == []
    out, err = run_ok(capsys, "groups", "reset-offsets", "billing", "--bootstrap-server",
                      broker.address, "--topic", "orders:0,2", "--to-latest", "--execute",
                      "--json")
    assert err == ""
    assert json.loads(out) == {"group": "billing", "executed": True, "offsets": [
        {"topic": "orders", "partition": 0, "current_offset": 7, "new_offset": 10},
        {"topic": "orders", "partition": 2, "current_offset": None, "new_offset": 9}]}
    assert broker.commits == [("billing", -1, "", {("orders", 0): 10, ("orders", 2): 9})]


def test_reset_shift_and_offset_stay_inside_the_log(broker, capsys):
    broker.add_group("billing", offsets={("orders", 0): 7, ("orders", 1): 3})
    out, err = run_ok(capsys, "groups", "reset-offsets", "billing", "--bootstrap-server",
                      broker.address, "--all-topics", "--shift-by", "-5", "--execute")
    assert rows(out)[1:] == [["billing", "orders", "0", "2"], ["billing", "orders", "1", "0"]]
    assert err == ("kraftcore groups reset-offsets: warning: new offset -2 of orders-1 is "
                   "below its earliest offset 0: 0 is used\n")
    assert broker.offsets["billing"] == {("orders", 0): 2, ("orders", 1): 0}
    out, err = run_ok(capsys, "groups", "reset-offsets", "billing", "--bootstrap-server",
                      broker.address, "--topic", "payments", "--to-offset", "99")
    assert rows(out)[1:] == [["billing", "payments", "0", "4"]]
    assert "new offset 99 of payments-0 is above its latest offset 4: 4 is used" in err


def test_a_reset_is_refused_while_the_group_has_members(broker, capsys):
    broker.add_group("billing", BILLING)
    line = failed(capsys, "groups", "reset-offsets", "billing", "--bootstrap-server",
                  broker.address, "--topic", "orders", "--to-earliest", "--execute")
    assert line == ("kraftcore groups reset-offsets: error: assignments can only be reset "
                    "if the group 'billing' is inactive, but the current state is Stable "
                    "(2 members): stop its consumers, then reset again")
    assert broker.commits == []


@pytest.mark.parametrize("argv, words", [
    (["--topic", "nope", "--to-latest"], "topic 'nope' does not exist"),
    (["--topic", "orders:5", "--to-latest"], "topic 'orders' has no partition 5 (it has 3: 0-2)"),
    (["--topic", "orders:2", "--shift-by", "1"],
     "cannot shift the offset of orders-2: the group has no committed offset there"),
    (["--all-topics", "--to-latest"], "group 'fresh' has no committed offsets"),
])
def test_reset_errors(broker, capsys, argv, words):
    line = failed(capsys, "groups", "reset-offsets", "fresh", "--bootstrap-server",
                  broker.address, *argv)
    assert words in line


def test_a_reset_creates_the_offsets_of_a_new_group(broker, capsys):
    run_ok(capsys, "groups", "reset-offsets", "fresh", "--bootstrap-server", broker.address,
           "--topic", "orders:1", "--to-offset", "5", "--execute")
    assert broker.commits == [("fresh", -1, "", {("orders", 1): 5})]


# ------------------------------------------------------------------------------ delete

def test_delete(broker, capsys):
    broker.add_group("old", offsets={("orders", 0): 1})
    broker.add_group("busy", BILLING)
    assert groups(capsys, broker, "delete", "old") == (
        "Deletion of requested consumer groups ('old') was successful.\n")
    assert "old" not in broker.offsets
    assert failed(capsys, "groups", "delete", "old", "--bootstrap-server", broker.address) == (
        "kraftcore groups delete: error: consumer group 'old' does not exist")
    line = failed(capsys, "groups", "delete", "busy", "--bootstrap-server", broker.address)
    assert line == ("kraftcore groups delete: error: cannot delete group 'busy': it has "
                    "active members (NON_EMPTY_GROUP (68)); stop its consumers first")


# ------------------------------------------------------------------------------ usage

@pytest.mark.parametrize("argv, words", [
    (["list", "--bootstrap-server", "nope"], "bad --bootstrap-server 'nope'"),
    (["list", "--bootstrap-server", ","], "--bootstrap-server needs at least one HOST:PORT"),
    (["list", "--bootstrap-controller", "h:0"], "bad --bootstrap-controller 'h:0'"),
    (["list", "--bootstrap-server", "h:1", "--state", "Sleepy"], "bad --state 'Sleepy'"),
    (["describe", "g", "--bootstrap-server", "h:1", "--verbose"], "--verbose goes with"),
    (["describe", "", "--bootstrap-server", "h:1"], "the group id is empty"),
    (["reset-offsets", "g", "--bootstrap-server", "h:1", "--topic", "t:1,x", "--to-latest"],
     "bad --topic 't:1,x'"),
    (["reset-offsets", "g", "--bootstrap-server", "h:1", "--topic", "t", "--to-offset",
      "-1"], "--to-offset must be >= 0"),
    (["list", "--bootstrap-server", "h:1", "--timeout-ms", "0"], "--timeout-ms must be >= 1"),
])
def test_usage_errors(capsys, argv, words):
    line = failed(capsys, "groups", *argv, status=2)
    assert line.startswith(f"kraftcore groups {argv[0]}: error: ") and words in line


def test_argparse_usage_errors(capsys):
    status, out, err = kraftcore(capsys, "groups", "list")
    assert status == 2 and "--bootstrap-server" in err
    status, out, err = kraftcore(capsys, "groups", "reset-offsets", "g", "--bootstrap-server",
                                 "h:1", "--topic", "t")
    assert status == 2 and "--to-earliest" in err


def test_nothing_listening(capsys):
    line = failed(capsys, "groups", "list", "--bootstrap-server", f"127.0.0.1:{_free_port()}")
    assert "could not connect" in line


# ------------------------------------------------------------------------------ the pure parts

def test_parse_topic():
    assert cli.parse_topic("orders") == ("orders", None)
    assert cli.parse_topic("orders:0, 3") == ("orders", [0, 3])
    for bad in ("", ":1", "orders:", "orders:-1", "orders:1-2", "orders:99999999999"):
        with pytest.raises(CommandError):
            cli.parse_topic(bad)


def test_repeated_topics_merge():
    assert cli._topics(["a:1", "a:0,1", "b", "b:2", "c:3"]) == {"a": [0, 1], "b": None,
                                                                "c": [3]}


def test_parse_states():
    assert cli.parse_states(["stable,EMPTY", "Stable"]) == ["Stable", "Empty"]
    assert cli.parse_states([]) == []


def test_plan_offsets_strategies():
    tps = [("t", 1), ("t", 0)]
    committed = {("t", 0): 5}
    earliest = {("t", 0): 2, ("t", 1): 0}
    latest = {("t", 0): 9, ("t", 1): 4}

    def plan(strategy, value=None):
        rows, warnings = plan_offsets(tps, committed, earliest, latest, strategy, value)
        return [r["new_offset"] for r in rows], len(warnings)

    assert plan(admin_groups.TO_EARLIEST) == ([2, 0], 0)
    assert plan(admin_groups.TO_LATEST) == ([9, 4], 0)
    assert plan(admin_groups.TO_OFFSET, 3) == ([3, 3], 0)
    assert plan(admin_groups.TO_OFFSET, 1) == ([2, 1], 1)
    assert plan(admin_groups.TO_OFFSET, 7) == ([7, 4], 1)
    with pytest.raises(AdminError, match="no committed offset"):
        plan(admin_groups.SHIFT_BY, 1)
    rows, warnings = plan_offsets([("t", 0)], committed, earliest, latest,
                                  admin_groups.SHIFT_BY, 10)
    assert rows == [{"topic": "t", "partition": 0, "current_offset": 5, "new_offset": 9}]
    assert warnings == ["new offset 15 of t-0 is above its latest offset 9: 9 is used"]


def test_tables_print_missing_values_as_dashes():
    doc = {"group": "g", "state": "Empty", "members": [], "offsets": [
        {"topic": "t", "partition": 0, "current_offset": None, "log_end_offset": None,
         "lag": None, "member_id": None, "host": None, "client_id": None}]}
    assert cli.format_offsets(doc)[-1].split() == ["g", "t", "0"] + ["-"] * 6
    assert cli.format_list([{"group": "g", "protocol_type": "", "state": "Empty"}])[1] == (
        "g      -              Empty")
    doc = {"group": "g", "state": "Stable", "assignment_strategy": "",
           "coordinator": {"id": 3, "host": "::1", "port": 9092}, "members": []}
    assert cli.format_state(doc)[1].startswith("g      [::1]:9092 (3)    -  ")
