"""`kraftcore groups` against a `kraftcore cluster up` of one controller and one broker on
127.0.0.1, with a group of two kafka-python consumers: `list` and `describe` show the group,
each partition's committed offset, log end offset, lag and owner (the member whose
assignment holds it); `reset-offsets` is refused while the consumers run, plans without
committing, and with `--execute` moves the offsets to the log start once they closed; the
next consumer of the group then starts at offset 0.

Every wait is bounded and none is a timing goal.
"""

import json
import threading
import uuid

import pytest

from tests.runtime.processes import LocalCluster, broker_address, kraftcore, wait_for

PARTITIONS = 4
RECORDS = 40  # 10 per partition
COMMITTED = 6  # what each consumer commits for its partitions
SETTINGS = ("group.initial.rebalance.delay.ms=0", "offsets.topic.num.partitions=3")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("groups-cli"), SETTINGS, brokers=1,
                     controllers=1)
    try:
        wait_for("an unfenced broker", lambda: list(c.brokers().values()) == ["unfenced"])
        yield c
    finally:
        c.down()


def produce(boot, topic):
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=boot, acks="all")
    try:
        futures = [producer.send(topic, b"v%d" % i, partition=i % PARTITIONS)
                   for i in range(RECORDS)]
        producer.flush(timeout=30)
        assert all(f.succeeded() for f in futures)
    finally:
        producer.close(timeout=5)


class Member(threading.Thread):
    """A kafka-python consumer of the group, polling in its own thread; once `commit` is
    set it commits COMMITTED for every partition it is assigned (again after a rebalance
    that changes them), and records them in `committed`."""

    def __init__(self, boot, topic, group, client_id, commit, stop):
        super().__init__(daemon=True)
        from kafka import KafkaConsumer

        self.consumer = KafkaConsumer(topic, bootstrap_servers=boot, group_id=group,
                                      client_id=client_id, enable_auto_commit=False,
                                      auto_offset_reset="earliest", fetch_max_wait_ms=100)
        self.commit, self.stop = commit, stop
        self.committed = set()
        self.error = None

    def run(self):
        from kafka.structs import OffsetAndMetadata

        try:
            while not self.stop.is_set():
                self.consumer.poll(timeout_ms=100)
                owned = set(self.consumer.assignment())
                if self.commit.is_set() and owned and owned != self.committed:
                    try:
                        self.consumer.commit({tp: OffsetAndMetadata(COMMITTED, "", -1)
                                              for tp in owned})
                    except Exception:  # noqa: BLE001 - a rebalance: the next poll rejoins
                        continue
                    self.committed = owned
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.error = exc
        finally:
            self.consumer.close()


def groups(*argv, check=True):
    return kraftcore("groups", *argv, "--timeout-ms", "20000", check=check)


def test_describe_lag_owners_and_reset_to_earliest(cluster):
    boot = broker_address(cluster)
    run = uuid.uuid4().hex[:6]
    topic, group = f"orders-{run}", f"billing-{run}"
    kraftcore("topics", "create", "--bootstrap-controller", cluster.bootstrap(), "--topic",
              topic, "--partitions", str(PARTITIONS), "--replication-factor", "1")
    produce(boot, topic)
    where = ["--bootstrap-server", boot]

    commit, stop = threading.Event(), threading.Event()
    members = [Member(boot, topic, group, f"c{i}", commit, stop) for i in range(2)]
    for member in members:
        member.start()
    try:
        def settled():
            answer = groups("describe", group, *where, "--json", check=False)
            if answer.returncode != 0:  # no member has joined yet: no such group
                return False
            doc = json.loads(answer.stdout)
            owned = [a for m in doc["members"] for a in m["assignment"]]
            return (doc["state"] == "Stable" and len(doc["members"]) == 2
                    and sorted(p for a in owned for p in a["partitions"])
                    == list(range(PARTITIONS)))

        wait_for("two members sharing the partitions", settled)
        commit.set()

        def described():
            doc = json.loads(groups("describe", group, *where, "--json").stdout)
            offsets = [r["current_offset"] for r in doc["offsets"]]
            return offsets == [COMMITTED] * PARTITIONS and all(m.committed for m in members) \
                and doc

        doc = wait_for("the members' commits", described)
        owner_of = {(topic, p): m["client_id"] for m in doc["members"]
                    for a in m["assignment"] for p in a["partitions"]}
        for member in members:
            client = member.consumer.config["client_id"]
            assert {(tp.topic, tp.partition) for tp in member.committed} == {
                tp for tp, c in owner_of.items() if c == client}

        listed = groups("list", *where).stdout.splitlines()
        assert listed[0].split() == ["GROUP", "PROTOCOL-TYPE", "STATE"]
        assert [group, "consumer", "Stable"] in [line.split() for line in listed]

        table = [line.split() for line in groups("describe", group, *where).stdout.splitlines()]
        assert table[0] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET",
                            "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
        assert [(r[1], int(r[2]), r[3], r[4], r[5], r[7], r[8]) for r in table[1:]] == [
            (topic, p, str(COMMITTED), str(RECORDS // PARTITIONS),
             str(RECORDS // PARTITIONS - COMMITTED), "/127.0.0.1", owner_of[(topic, p)])
            for p in range(PARTITIONS)]

        refused = groups("reset-offsets", group, *where, "--topic", topic, "--to-earliest",
                         "--execute", check=False)
        assert refused.returncode == 1 and refused.stdout == ""
        assert "can only be reset if the group" in refused.stderr
        assert "the current state is Stable (2 members)" in refused.stderr
    finally:
        stop.set()
        for member in members:
            member.join(30)
    assert [m.error for m in members] == [None, None]

    wait_for("the group to empty", lambda: [group, "consumer", "Empty"] in [
        line.split() for line in groups("list", *where, "--state", "Empty").stdout.splitlines()])
    dry = groups("reset-offsets", group, *where, "--topic", topic, "--to-earliest")
    assert [line.split() for line in dry.stdout.splitlines()][1:] == [
        [group, topic, str(p), "0"] for p in range(PARTITIONS)]
    assert "dry run" in dry.stderr
    doc = json.loads(groups("describe", group, *where, "--json").stdout)
    assert [r["current_offset"] for r in doc["offsets"]] == [COMMITTED] * PARTITIONS

    groups("reset-offsets", group, *where, "--topic", topic, "--to-earliest", "--execute")
    lines = groups("describe", group, *where).stdout.splitlines()
    assert lines[0] == f"Consumer group '{group}' has no active members."
    assert [line.split()[3:6] for line in lines[2:]] == [["0", "10", "10"]] * PARTITIONS

    first = read_from_committed(boot, topic, group)
    assert first == {p: 0 for p in range(PARTITIONS)}


def read_from_committed(boot, topic, group):
    """{partition: offset of the first record} a new consumer of `group` reads."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, bootstrap_servers=boot, group_id=group,
                             enable_auto_commit=False, auto_offset_reset="latest",
                             fetch_max_wait_ms=100)
    first = {}
    try:
        def read_all():
            for records in consumer.poll(timeout_ms=200).values():
                for r in records:
                    first.setdefault(r.partition, r.offset)
            return len(first) == PARTITIONS
        wait_for("a record of every partition", read_all)
    finally:
        consumer.close()
    return first
