"""Kafka's own decoder reads the offsets topic kraftcore's group coordinator writes:
`kafka-dump-log --offsets-decoder` (Kafka 4.4.0's `org.apache.kafka.tools.DumpLogSegments`)
on a `__consumer_offsets` partition segment that a `GroupCoordinator` leading it wrote
through its partition (`kraftcore.broker.partition.Partition`, the log a broker keeps):
commits of value v4 (with a leader epoch, metadata, a topic id given as tag 0), v1 (a
commit with a retention time) and a tombstone; and the GroupMetadata record (value v3) of a
group two members joined (one static) and the leader synced. Each record's key and value,
as Kafka prints them, are the values kraftcore committed.

Without Java or Kafka's jars the test skips on a developer's machine and fails under CI
(`.ci/run` sets CI), as the other tests of Kafka's tools do."""

from __future__ import annotations

import base64
import json
import random
import re
import subprocess

import pytest

from kraftcore import codec
from kraftcore.broker.group_records import (OFFSETS_TOPIC, OffsetAndMetadata,
                                            offset_commit_record)
from kraftcore.broker.groups import GroupConfig, GroupCoordinator, JoinRequest
from kraftcore.broker.high_watermarks import HighWatermarks
from kraftcore.broker.partition import Partition
from kraftcore.broker.replicas import RoleChanges
from kraftcore.log import Log
from kraftcore.metadata.records import PartitionRecord
from kraftcore.types import Uuid
from tests.peers.kafka_node import kafka_jars_for_tests

DUMP_LOG = "org.apache.kafka.tools.DumpLogSegments"
TOOL_TIMEOUT_S = 180
NOW = 1_700_000_000_000
TOPIC_ID = Uuid.random(random.Random(7))


@pytest.fixture(scope="module")
def jars():
    return kafka_jars_for_tests()


def lead_offsets_partition(directory):
    """(log, partition, coordinator): broker 1 leads __consumer_offsets-0 (its only
    partition, no followers) in `directory`, its coordinator loaded."""
    log = Log.open(directory / f"{OFFSETS_TOPIC}-0", own_checkpoints=False)
    partition = Partition(OFFSETS_TOPIC, Uuid.random(random.Random(1)), 0, log, 1,
                          HighWatermarks())
    partition.apply(PartitionRecord(partition_id=0, topic_id=partition.topic_id, replicas=[1],
                                    isr=[1], leader=1, leader_epoch=3, partition_epoch=0), 1, NOW)
    coordinator = GroupCoordinator(1, GroupConfig(offsets_partitions=1,
                                                  initial_rebalance_delay_ms=0))
    coordinator.on_role_changes(RoleChanges([partition], [], [], []))
    while coordinator.load_step(1 << 20, NOW):
        pass
    return log, partition, coordinator


def dump_records(jars, segment):
    """`kafka-dump-log --offsets-decoder` of `segment`: its record lines matched by
    `_RECORD`, and the tool's whole output."""
    proc = subprocess.run(
        ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", f"{jars}/*", DUMP_LOG,
         "--offsets-decoder", "--files", str(segment)],
        capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [_RECORD.match(line) for line in proc.stdout.splitlines()
               if line.startswith("| offset:")]
    assert records and all(records), proc.stdout
    return records, proc.stdout


def write_offsets_partition(directory):
    """Commits through a coordinator leading __consumer_offsets-0; returns the segment path
    and what was committed, in log order ((group, topic, partition), value or None)."""
    log, partition, coordinator = lead_offsets_partition(directory)
    written = []
    for group, offsets in (
            ("console-consumer-1", [("orders", 0, OffsetAndMetadata(42, 7, "meta", NOW)),
                                    ("orders", 1, OffsetAndMetadata(5, -1, "", NOW, NOW + 60_000))]),
            ("grüße", [("orders", 2, OffsetAndMetadata(9, 1, "ü", NOW + 1, topic_id=TOPIC_ID))])):
        answers = []
        coordinator.commit(group, offsets, NOW, lambda code, _: answers.append(code))
        assert answers == [0]  # no followers: durable once written
        written += [((group, topic, index), value) for topic, index, value in offsets]
    key, _ = offset_commit_record("console-consumer-1", "orders", 1, OffsetAndMetadata(0))
    partition.append_as_leader(codec.encode_batch([None], keys=[key], timestamp=NOW + 2), -1)
    written.append((("console-consumer-1", "orders", 1), None))
    # the coordinator that loads this log (the next leader) sees the tombstone
    loaded = GroupCoordinator(1, GroupConfig(offsets_partitions=1))
    loaded.on_role_changes(RoleChanges([partition], [], [], []))
    while loaded.load_step(1 << 20):
        pass
    assert loaded.committed("console-consumer-1") == {
        ("orders", 0): OffsetAndMetadata(42, 7, "meta", NOW)}
    log.close()
    return directory / f"{OFFSETS_TOPIC}-0" / "00000000000000000000.log", written


_RECORD = re.compile(r"^\| offset: (\d+) .* key: (\{.*\}) payload: (.*)$")


def expected_payload(value):
    if value is None:
        return "<DELETE>"
    if value.expire_timestamp_ms != -1:
        return {"version": "1", "data": {
            "offset": value.offset, "metadata": value.metadata,
            "commitTimestamp": value.commit_timestamp_ms,
            "expireTimestamp": value.expire_timestamp_ms}}
    data = {"offset": value.offset, "leaderEpoch": value.leader_epoch,
            "metadata": value.metadata, "commitTimestamp": value.commit_timestamp_ms}
    if value.topic_id == TOPIC_ID:
        data["topicId"] = str(TOPIC_ID)
    return {"version": "4", "data": data}


def test_kafka_decodes_the_offsets_kraftcore_commits(jars, tmp_path):
    segment, written = write_offsets_partition(tmp_path)
    records, out = dump_records(jars, segment)
    assert len(records) == len(written), out
    for offset, (match, ((group, topic, index), value)) in enumerate(zip(records, written)):
        assert int(match.group(1)) == offset
        assert json.loads(match.group(2)) == {
            "type": "1", "data": {"group": group, "topic": topic, "partition": index}}
        payload = match.group(3)
        expected = expected_payload(value)
        assert (payload if value is None else json.loads(payload)) == expected, match.group(0)
    assert "isvalid: true" in out and "isvalid: false" not in out


def write_group_partition(directory):
    """Two members join a group through a coordinator leading __consumer_offsets-0 and the
    leader syncs an assignment: the log holds Kafka's GroupMetadata record of the group.
    Returns the segment path and the group's members as stored."""
    log, _, coordinator = lead_offsets_partition(directory)
    answers = []
    firsts = []
    for n in range(2):
        coordinator.join(JoinRequest("readers", "", None if n else "static-0", f"client-{n}",
                                     "/127.0.0.1", 10_000, 30_000, "consumer",
                                     (("range", b"sub-%d" % n),)), NOW, firsts.append)
    ids = [f.member_id for f in firsts]
    assert firsts[0].error == 0 and firsts[1].error == 79  # MEMBER_ID_REQUIRED
    coordinator.join(JoinRequest("readers", ids[1], None, "client-1", "/127.0.0.1", 10_000,
                                 30_000, "consumer", (("range", b"sub-1"),)), NOW, answers.append)
    coordinator.join(JoinRequest("readers", ids[0], "static-0", "client-0", "/127.0.0.1",
                                 10_000, 30_000, "consumer", (("range", b"sub-0"),)), NOW,
                     answers.append)
    assert {a.error for a in answers} == {0}
    leader = answers[0].leader
    synced = []
    for mid in ids:
        coordinator.sync("readers", answers[0].generation, mid,
                         "static-0" if mid == ids[0] else None, "consumer", "range",
                         {i: b"assign-" + i[-4:].encode() for i in ids} if mid == leader
                         else {}, NOW, synced.append)
    assert [s.error for s in synced] == [0, 0]
    log.close()
    members = {ids[0]: ("static-0", "client-0", b"sub-0", b"assign-" + ids[0][-4:].encode()),
               ids[1]: (None, "client-1", b"sub-1", b"assign-" + ids[1][-4:].encode())}
    return (directory / f"{OFFSETS_TOPIC}-0" / "00000000000000000000.log", leader,
            answers[0].generation, members)


def test_kafka_decodes_the_group_metadata_kraftcore_stores(jars, tmp_path):
    segment, leader, generation, members = write_group_partition(tmp_path)
    records, out = dump_records(jars, segment)
    stored = [json.loads(r.group(3)) for r in records
              if json.loads(r.group(2)) == {"type": "2", "data": {"group": "readers"}}]
    assert stored, out
    last = stored[-1]
    assert last["version"] == "3", last
    data = last["data"]
    assert (data["protocolType"], data["generation"], data["protocol"], data["leader"]) == (
        "consumer", generation, "range", leader)
    assert data["currentStateTimestamp"] == NOW
    seen = {}
    for member in data["members"]:
        assert (member["clientHost"], member["sessionTimeout"],
                member["rebalanceTimeout"]) == ("/127.0.0.1", 10_000, 30_000)
        seen[member["memberId"]] = (member["groupInstanceId"], member["clientId"],
                                    _bytes(member["subscription"]),
                                    _bytes(member["assignment"]))
    assert seen == members


def _bytes(printed):
    """A bytes field as Kafka's JSON converters print it (base64 text)."""
    return base64.b64decode(printed)
