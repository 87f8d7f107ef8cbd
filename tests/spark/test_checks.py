"""The checks of `kraftcore verify` without Spark: `analyze_file` on good and bad bytes, the
cross-file logic, the log replay, the inputs and the report, through the in-process engine
(the reference the Spark job is compared with in test_job.py). Fast: no JVM."""

import json
import re
import os
import shutil

import pytest

from kraftcore import codec
from kraftcore.runtime.raft_storage import FileRaftStorage
from kraftcore.log.snapshots import file_name
from kraftcore.metadata import records as R
from kraftcore.raft.control import (SnapshotFooterRecord, SnapshotHeaderRecord,
                                        encode_control_batch)
from kraftcore.metadata.delta import replay_all
from kraftcore.metadata.image import EMPTY_IMAGE
from kraftcore.metadata.snapshot import encode_snapshot
from kraftcore.types import Uuid
from kraftcore.spark import checks as C
from kraftcore.spark.inputs import InputError, discover_nodes
from kraftcore.spark.local import verify_in_process
from kraftcore.spark.replay import LogProblem, iter_log_batches, replay_node
from kraftcore.spark.sample import build_history, snapshot_images

from tests.spark.util import (UNKNOWN_TYPE_VALUE, change_rack, copy_cluster, damage_all,
                              drop_footer, flip_byte, leader_outside_isr, nodes_of, own_ids,
                              problem_keys, rewrite, snapshot_path)

TS = 1_700_000_000_000
T1, T2 = Uuid(bytes(range(16))), Uuid(bytes(range(1, 17)))


# ------------------------------------------------------------------ hand-made snapshots

def _snapshot(records, epoch=1, header=True, footer=True):
    """Snapshot bytes of `records` as given (no replay, so duplicates stay)."""
    parts = []
    offset = 0
    if header:
        parts.append(encode_control_batch(
            [SnapshotHeaderRecord(version=0, last_contained_log_timestamp=TS)],
            base_offset=0, leader_epoch=epoch, timestamp=TS))
        offset = 1
    if records:
        parts.append(R.encode_batch(records, base_offset=offset, leader_epoch=epoch,
                                    timestamp=TS))
        offset += len(records)
    if footer:
        parts.append(encode_control_batch([SnapshotFooterRecord(version=0)],
                                          base_offset=offset, leader_epoch=epoch,
                                          timestamp=TS))
    return b"".join(parts)


def _broker(b):
    return R.RegisterBrokerRecord(broker_id=b, incarnation_id=Uuid(bytes([b + 1] * 16)),
                                  broker_epoch=b, fenced=False)


def _partition(pid, replicas, isr, leader, topic=T1, recovery=0):
    return R.PartitionRecord(partition_id=pid, topic_id=topic, replicas=replicas, isr=isr,
                             leader=leader, leader_recovery_state=recovery, leader_epoch=0,
                             partition_epoch=0)


def _analyze(data, name="00000000000000000100-0000000001.checkpoint"):
    return C.analyze_file("n1", f"/x/{name}", data)


def _checks(result):
    return sorted(v.check for v in result.violations)


def test_a_good_snapshot_has_no_violation_and_its_tables():
    r = _analyze(_snapshot([_broker(1), _broker(2), R.TopicRecord(name="t", topic_id=T1),
                            _partition(0, [1, 2], [1, 2], 1)]))
    assert r.violations == [] and not r.damaged
    assert (r.snapshot_id, r.batches, r.records, r.timestamp_ms) == ((100, 1), 3, 4, TS)
    assert [b[0] for b in r.brokers] == [1, 2]
    assert r.topics == [(str(T1), "t", 3)]
    [p] = r.partitions
    assert p == (str(T1), "t", 0, [1, 2], [1, 2], [], [], 1, 0, 0, 0, 4)
    assert len(r.digest) == 64


def test_the_partition_invariants_name_the_record():
    r = _analyze(_snapshot([
        _broker(1), _broker(2), R.TopicRecord(name="t", topic_id=T1),
        _partition(0, [1, 2], [1], 2),              # leader outside the ISR
        _partition(1, [1, 2], [2], 2),              # fine
        _partition(2, [1, 2], [1, 2, 3], 1),        # ISR member 3 is no replica
        _partition(3, [1, 4], [1], 1),              # replica 4 not registered
        _partition(4, [1, 2], [1], 2, recovery=1),  # unclean election: allowed
        _partition(5, [1, 2], [1], -1),             # no leader: allowed
        _partition(0, [1, 2], [1, 2], 1, topic=T2),  # topic T2 has no TopicRecord
    ]))
    found = {(v.check, v.offset, v.record) for v in r.violations}
    assert found == {("leader-in-isr", 4, "PartitionRecord t-0"),
                     ("isr-subset", 6, "PartitionRecord t-2"),
                     ("replicas-registered", 7, "PartitionRecord t-3"),
                     ("partitions-have-topics", 10, f"PartitionRecord {T2}-0")}
    assert not r.damaged and r.digest is not None
    leader = next(v for v in r.violations if v.check == "leader-in-isr")
    assert "leader 2 is not in the ISR [1]" in leader.message
    assert leader.file == "/x/00000000000000000100-0000000001.checkpoint"


def test_duplicate_topic_ids_and_names_are_caught():
    r = _analyze(_snapshot([R.TopicRecord(name="a", topic_id=T1),
                            R.TopicRecord(name="b", topic_id=T1),
                            R.TopicRecord(name="a", topic_id=T2)]))
    assert [(v.check, v.offset) for v in r.violations] == [("topics-unique", 2),
                                                           ("topics-unique", 3)]
    assert "topic id" in r.violations[0].message and "'a'" in r.violations[1].message


def test_a_flipped_byte_is_a_crc_violation_and_the_file_is_left_out_of_content_checks():
    data = bytearray(_snapshot([_broker(1), R.TopicRecord(name="t", topic_id=T1),
                                _partition(0, [1], [1], 1)]))
    second = 12 + int.from_bytes(data[8:12], "big")
    data[second + 70] ^= 1
    r = _analyze(bytes(data))
    assert [(v.check, v.position, v.offset) for v in r.violations] == [
        ("batch-crc", second, 1)]
    assert r.damaged and r.digest is None and r.partitions == [] and r.brokers == []


def test_broken_framing_and_records_are_format_violations():
    good = _snapshot([_broker(1)])
    r = _analyze(good[:-10])  # the footer batch is cut short
    assert _checks(r) == ["batch-format"] and r.damaged
    assert "truncated" in r.violations[0].message
    assert _checks(_analyze(b"")) == ["batch-format"]
    assert _analyze(b"").violations[0].message == "the file is empty"
    # A record value that is not a metadata record, in a batch with a valid CRC.
    bad = (encode_control_batch([SnapshotHeaderRecord(version=0,
                                                      last_contained_log_timestamp=TS)],
                                base_offset=0, leader_epoch=1, timestamp=TS)
           + codec.encode_batch([b"\x01\x63\x00"], base_offset=1, leader_epoch=1,
                                timestamp=TS)
           + encode_control_batch([SnapshotFooterRecord(version=0)], base_offset=2,
                                  leader_epoch=1, timestamp=TS))
    r = _analyze(bad)
    assert [(v.check, v.offset) for v in r.violations] == [("batch-format", 1)]


def test_header_footer_and_epoch_rules():
    assert _checks(_analyze(_snapshot([_broker(1)], header=False))) == ["header-first"]
    r = _analyze(_snapshot([_broker(1)], footer=False))
    assert _checks(r) == ["footer-last"] and not r.damaged
    assert "incomplete" in r.violations[0].message
    assert _checks(_analyze(_snapshot([], footer=False))) == ["footer-last"]
    wrong_epoch = _analyze(_snapshot([_broker(1)], epoch=2))
    assert _checks(wrong_epoch) == ["batch-epoch"]
    assert "file name says epoch 1" in wrong_epoch.violations[0].message
    # A file whose name is no snapshot id: no epoch to compare with.
    assert _analyze(_snapshot([_broker(1)], epoch=2), "bootstrap.checkpoint").violations == []


def test_the_digest_ignores_batching_and_sees_content():
    records = [_broker(1), _broker(2), R.TopicRecord(name="t", topic_id=T1)]
    one = _snapshot(records)
    split = (encode_control_batch([SnapshotHeaderRecord(version=0,
                                                        last_contained_log_timestamp=TS)],
                                  base_offset=0, leader_epoch=1, timestamp=TS)
             + R.encode_batch(records[:1], base_offset=1, leader_epoch=1, timestamp=TS)
             + R.encode_batch(records[1:], base_offset=2, leader_epoch=1, timestamp=TS)
             + encode_control_batch([SnapshotFooterRecord(version=0)], base_offset=4,
                                    leader_epoch=1, timestamp=TS))
    assert _analyze(one).digest == _analyze(split).digest
    assert _analyze(one).digest != _analyze(_snapshot(records[:2])).digest


# ------------------------------------------------------------------ cross-file logic

def test_the_majority_digest_is_the_reference():
    s = [C.FileSummary("n1", "/a", (5, 1), "x"), C.FileSummary("n2", "/b", (5, 1), "y"),
         C.FileSummary("n3", "/c", (5, 1), "y"), C.FileSummary("n1", "/d", (9, 1), "z"),
         C.FileSummary("n2", "/e", (7, 1), None), C.FileSummary("n3", "/f", (7, 1), "q")]
    pairs, compared = C.plan_node_comparisons(s)
    assert compared == 1  # (5, 1); the damaged /e leaves (7, 1) with one file
    assert [(m.path, r.path) for m, r in pairs] == [("/a", "/b")]
    tie = [C.FileSummary("n2", "/b", (5, 1), "y"), C.FileSummary("n1", "/a", (5, 1), "x")]
    assert [(m.path, r.path) for m, r in C.plan_node_comparisons(tie)[0]] == [("/b", "/a")]


def test_epoch_regressions_compare_successive_snapshots_of_one_node():
    rows = [("n1", "/a", (10, 1), "T", "t", 0, 3, 1, 1),
            ("n1", "/b", (20, 1), "T", "t", 0, 3, 2, 2),
            ("n1", "/c", (30, 2), "T", "t", 0, 3, 2, 1),   # partition epoch 2 -> 1
            ("n2", "/d", (15, 1), "T", "t", 0, 3, 5, 5)]   # another node: not compared
    regressions, compared = C.epoch_regressions(rows)
    assert compared == 2
    [reg] = regressions
    assert (reg.path, reg.prev_path) == ("/c", "/b")
    v = C.epoch_violation(reg)
    assert v.check == "epochs-monotonic" and v.other_file == "/b" and v.offset == 3
    assert "partition epoch 2 -> 1" in v.message and "leader epoch" not in v.message


def test_fingerprint_differences_name_the_field():
    base = [_broker(1), R.TopicRecord(name="t", topic_id=T1), _partition(0, [1], [1], 1)]
    changed = [_broker(1), R.TopicRecord(name="t", topic_id=T1),
               _partition(0, [1], [1], -1), _broker(2)]
    mine, theirs = C.fingerprints(_snapshot(changed)), C.fingerprints(_snapshot(base))
    diffs = C.diff_fingerprints(mine, theirs)
    assert [d.key for d in diffs] == [f"partition/{T1}/0", "broker/2"]
    pair = (C.FileSummary("n2", "/b", (5, 1), "y"), C.FileSummary("n1", "/a", (5, 1), "x"))
    out = C.node_difference_violations(pair, diffs, len(diffs), C.topic_names(mine))
    assert out[0].record == "PartitionRecord t-0" and out[0].offset == 3
    assert "leader -1 in n2's file, 1 in n1's a" in out[0].message
    assert "is not in n1's a" in out[1].message


# ------------------------------------------------------------------ whole clusters

def test_a_clean_cluster_passes_every_check(cluster):
    report = verify_in_process(nodes_of(cluster, logs=True))
    assert report.ok, [C.Violation(*v) for v in report.violations]
    assert all(report.status(c) == "passed" for c in C.CHECK_NAMES)
    files = sum(len(ids) for ids in cluster.snapshots.values())
    assert report.checked["log-replay"] == files and report.not_covered == 0
    assert report.checked["nodes-agree"] == len(cluster.shared_ids)
    assert report.checked["epochs-monotonic"] > 0
    assert report.checked["leader-in-isr"] > 0


def test_without_logs_the_replay_is_skipped(cluster):
    report = verify_in_process(nodes_of(cluster))
    assert report.ok and report.status("log-replay") == "skipped"


@pytest.mark.parametrize("problem", ["flipped-byte", "missing-footer", "nodes-disagree",
                                     "leader-outside-isr", "differs-from-log"])
def test_each_problem_alone_is_caught_and_named(cluster, tmp_path, problem):
    c = copy_cluster(cluster, tmp_path / "c")
    node = c.node_dirs[0]
    sid = own_ids(c, 0)[-1]
    logs = problem == "differs-from-log"
    if problem == "nodes-disagree":
        node = c.node_dirs[1]
        sid = max(map(tuple, c.shared_ids))
    path = snapshot_path(node, sid)
    expected = {
        "flipped-byte": "batch-crc", "missing-footer": "footer-last",
        "nodes-disagree": "nodes-agree", "leader-outside-isr": "leader-in-isr",
        "differs-from-log": "log-replay"}[problem]
    if problem == "flipped-byte":
        flip_byte(path)
    elif problem == "missing-footer":
        drop_footer(path)
    elif problem == "leader-outside-isr":
        rewrite(path, sid, leader_outside_isr())
    else:
        rewrite(path, sid, change_rack)
    report = verify_in_process(nodes_of(c, logs=logs))
    assert problem_keys(report) == {(expected, os.path.basename(node), os.path.basename(path))}
    assert report.status(expected) == "failed" and not report.ok
    if problem in ("nodes-disagree", "differs-from-log"):
        [v] = report.violations
        assert v.record == "RegisterBrokerRecord broker 0"
        assert "rack 'rack-moved'" in v.message


def test_an_unclean_leader_outside_the_isr_is_allowed(cluster, tmp_path):
    c = copy_cluster(cluster, tmp_path / "c")
    sid = own_ids(c, 0)[-1]
    rewrite(snapshot_path(c.node_dirs[0], sid), sid, leader_outside_isr(recovering=True))
    report = verify_in_process(nodes_of(c))
    assert report.ok and report.checked["leader-in-isr"] > 0


def test_everything_at_once(cluster, tmp_path):
    c, expected = damage_all(cluster, tmp_path / "c")
    report = verify_in_process(nodes_of(c, logs=True))
    assert problem_keys(report) == expected


def test_epochs_going_back_are_caught(cluster, tmp_path):
    c = copy_cluster(cluster, tmp_path / "c")
    node = c.node_dirs[0]
    ids = sorted(map(tuple, c.snapshots[node]))
    latest = ids[-1]
    # The oldest snapshot of the latest epoch: leaders moved since (brokers were fenced).
    old = min(sid for sid in ids[:-1] if sid[1] == latest[1])
    # The older snapshot's content again, under an id after the latest one.
    later = (latest[0] + 100, latest[1])
    shutil.copy(snapshot_path(node, old),
                os.path.join(os.path.dirname(snapshot_path(node, old)), file_name(later)))
    report = verify_in_process(nodes_of(c))
    keys = problem_keys(report)
    assert keys == {("epochs-monotonic", os.path.basename(node), file_name(later))}
    v = report.violations[0]
    assert v.other_file == snapshot_path(node, latest) and " -> " in v.message


# ------------------------------------------------------------------ log replay

@pytest.fixture(scope="module")
def history():
    return build_history(topics=4, partitions=2)


def _node(tmp_path, history, cuts, *, segment_bytes=None, start_at=None):
    """A node directory with the sample log and snapshots at `cuts` (offsets); with
    `start_at` the log start moves to that snapshot (older segments deleted)."""
    images = snapshot_images(history, cuts)
    settings = {"segment_bytes": segment_bytes} if segment_bytes else {}
    log_dir = tmp_path / "node" / "__cluster_metadata-0"
    storage = FileRaftStorage.open(str(log_dir), **settings)
    for batch in history.batches:
        storage.append_as_follower(batch.data)
    ids = []
    for cut in cuts:
        sid = (images[cut].end_offset, images[cut].epoch)
        storage.write_snapshot(sid, encode_snapshot(images[cut]))
        ids.append(sid)
    if start_at is not None:
        storage.advance_log_start_offset(ids[start_at])
    storage.close()
    return str(log_dir), [(str(log_dir / file_name(s)), s) for s in ids]


def test_replay_from_a_log_that_starts_after_offset_zero(tmp_path, history):
    cuts = history.cuts
    log_dir, snaps = _node(tmp_path, history, cuts, segment_bytes=2048, start_at=2)
    first = sorted(n for n in os.listdir(log_dir) if n.endswith(".log"))[0]
    assert first != "00000000000000000000.log"
    kept = [s for s in snaps if os.path.exists(s[0])]
    result = replay_node("n", log_dir, kept)
    assert result.violations == []
    assert result.compared == len(kept) - 1 and result.not_covered == 1  # the base snapshot


def test_replay_names_a_snapshot_inside_a_batch_and_a_corrupt_log(tmp_path, history):
    log_dir, snaps = _node(tmp_path, history, history.cuts[:2])
    big = next(b for b in history.batches if b.last_offset > b.base_offset)
    inside = (big.base_offset + 1, big.epoch)
    result = replay_node("n", log_dir, [(snaps[0][0], inside)] + snaps)
    assert [v.check for v in result.violations] == ["log-replay"]
    assert "inside a log batch" in result.violations[0].message
    assert result.compared == 2

    segment = os.path.join(log_dir, "00000000000000000000.log")
    with open(segment, "r+b") as f:
        f.seek(len(history.batches[0].data) + 70)  # inside the second batch
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    result = replay_node("n", log_dir, snaps)
    [v] = result.violations
    assert v.check == "log-replay" and v.other_file == segment
    assert "fails its CRC-32C check" in v.message and v.position is not None


def test_the_log_ends_at_the_zeros_a_running_node_wrote_ahead_of_its_data(tmp_path, history):
    """A node killed while running leaves its active segment with zeros after the data
    (prefilled space): the log ends there, as the node's recovery decides. Recovery trims
    such zeros in any segment, so a next segment starting where the data ends follows it;
    one starting elsewhere is a gap."""
    log_dir, _ = _node(tmp_path, history, history.cuts[:1])
    segment = os.path.join(log_dir, "00000000000000000000.log")
    with open(segment, "ab") as f:
        f.write(bytes(256 * 1024))
    batches = list(iter_log_batches(log_dir))
    assert [b.data for b in batches] == [b.data for b in history.batches]
    end = batches[-1].last_offset + 1
    with open(os.path.join(log_dir, f"{end:020d}.log"), "wb"):
        pass  # a next segment where the data ends: the zeros are trimmed space
    assert [b.data for b in iter_log_batches(log_dir)] == [b.data for b in history.batches]
    os.rename(os.path.join(log_dir, f"{end:020d}.log"),
              os.path.join(log_dir, f"{end + 5:020d}.log"))
    with pytest.raises(LogProblem, match=f"offsets \\[{end}, {end + 5}\\) are missing") \
            as raised:
        list(iter_log_batches(log_dir))
    assert raised.value.segment == segment


def test_replay_counts_snapshots_past_the_log_as_not_covered(tmp_path, history):
    log_dir, snaps = _node(tmp_path, history, history.cuts[:2])
    path, sid = snaps[-1]
    result = replay_node("n", log_dir, snaps + [(path, (history.cuts[-1] + 50, sid[1]))])
    assert result.violations == [] and result.compared == 2 and result.not_covered == 1


def test_segments_that_are_not_part_of_the_log_are_notes_not_violations(tmp_path, history):
    """Files a node's recovery sets aside (an empty segment based inside the one before it,
    a copy whose first batch is not at its name's offset) are left out of the replay and
    reported as notes; the report stays ok."""
    log_dir, snaps = _node(tmp_path, history, history.cuts[:2], segment_bytes=2048)
    segments = sorted(n for n in os.listdir(log_dir) if n.endswith(".log"))
    open(os.path.join(log_dir, f"{1:020d}.log"), "wb").close()
    shutil.copy(os.path.join(log_dir, segments[0]), os.path.join(log_dir, f"{2:020d}.log"))
    result = replay_node("n", log_dir, snaps)
    assert result.violations == [] and result.compared == 2
    assert [n.split(": ", 1)[0] for n in result.notes] == [
        os.path.join(log_dir, f"{1:020d}.log"), os.path.join(log_dir, f"{2:020d}.log")]
    assert all("left out of the replay" in n and "not part of the log" in n
               for n in result.notes)
    report = verify_in_process(discover_nodes([os.path.dirname(log_dir)], []))
    assert report.ok and len(report.notes) == 2
    assert report.notes[0].startswith("node: ") and report.to_dict()["notes"] == report.notes
    assert f"  note: {report.notes[1]}" in report.render().splitlines()


def test_a_log_that_starts_above_the_newest_snapshot_is_a_violation(tmp_path, history):
    """The newest snapshot ends at offset E: the node's log must reach down to E, or the
    offsets between them are held by neither (before, every snapshot only counted as not
    covered)."""
    log_dir, snaps = _node(tmp_path, history, history.cuts[:2], segment_bytes=2048)
    newest = snaps[-1][1][0]
    bases = sorted(int(n[:20]) for n in os.listdir(log_dir) if n.endswith(".log"))
    keep = next(b for b in bases if b > newest)
    for base in bases:
        if base < keep:
            os.unlink(os.path.join(log_dir, f"{base:020d}.log"))
    result = replay_node("n", log_dir, snaps)
    [v] = result.violations
    assert v.check == "log-replay" and result.compared == 0 and result.not_covered == 2
    assert f"offsets [{newest}, {keep}) are missing" in v.message
    assert v.other_file == os.path.join(log_dir, f"{keep:020d}.log")


def test_an_epoch_going_back_in_the_last_segment_is_a_violation(tmp_path, history):
    log_dir, snaps = _node(tmp_path, history, history.cuts[:1])
    last = history.batches[-1]
    older = codec.encode_batch([b"x"], base_offset=last.last_offset + 1,
                               leader_epoch=last.epoch - 1, timestamp=TS)
    with open(os.path.join(log_dir, "00000000000000000000.log"), "ab") as f:
        f.write(older)
    with pytest.raises(LogProblem, match="epoch"):
        list(iter_log_batches(log_dir))
    result = replay_node("n", log_dir, snaps + [(snaps[0][0], (last.last_offset + 2, 1))])
    assert [v.check for v in result.violations] == ["log-replay"]
    assert result.compared == 1


def test_a_record_of_an_unknown_type_is_named_never_skipped(tmp_path, history):
    good = R.encode_values([_broker(1)])[0]
    data = b"".join([
        encode_control_batch(
            [SnapshotHeaderRecord(version=0, last_contained_log_timestamp=TS)],
            base_offset=0, leader_epoch=1, timestamp=TS),
        codec.encode_batch([good, UNKNOWN_TYPE_VALUE], base_offset=1, leader_epoch=1,
                           timestamp=TS),
        encode_control_batch([SnapshotFooterRecord(version=0)], base_offset=3, leader_epoch=1,
                             timestamp=TS)])
    result = _analyze(data)
    [v] = result.violations
    assert (v.check, v.offset) == ("batch-format", 2) and result.damaged
    assert "unknown metadata record type 9999" in v.message
    # in the log: the replay stops there and says why
    log_dir, snaps = _node(tmp_path, history, history.cuts[:1])
    last = history.batches[-1]
    with open(os.path.join(log_dir, "00000000000000000000.log"), "ab") as f:
        f.write(codec.encode_batch([UNKNOWN_TYPE_VALUE], base_offset=last.last_offset + 1,
                                   leader_epoch=last.epoch, timestamp=TS))
    result = replay_node("n", log_dir, snaps + [(snaps[0][0], (last.last_offset + 2,
                                                               last.epoch))])
    [v] = result.violations
    assert v.check == "log-replay" and result.compared == 1
    assert "unknown metadata record type 9999" in v.message


def _one_broker_node(tmp_path, broker, snapshot_edit=None):
    """A node whose log registers `broker` (after metadata.version), with a snapshot of
    that log, whose records `snapshot_edit` may change; returns (log dir, snapshots)."""
    from kraftcore.metadata.image import METADATA_VERSION

    records = [R.FeatureLevelRecord(name=METADATA_VERSION, feature_level=21), broker]
    log_dir = tmp_path / "node" / "__cluster_metadata-0"
    storage = FileRaftStorage.open(str(log_dir))
    storage.append_as_follower(R.encode_batch(records, base_offset=0, leader_epoch=1,
                                              timestamp=TS))
    image = replay_all(EMPTY_IMAGE, (snapshot_edit or list)(records), 2, 1, TS)
    storage.write_snapshot((2, 1), encode_snapshot(image))
    storage.close()
    return str(log_dir), [(str(log_dir / file_name((2, 1))), (2, 1))]


def test_the_replay_compares_a_brokers_endpoints_features_and_log_dirs_in_any_order(
        tmp_path):
    """Kafka keeps them as maps and a sorted set: its snapshot lists them in another order
    than the broker sent them in (its log's). Another value is still a difference."""
    endpoint = R.RegisterBrokerRecord.BrokerEndpoint
    feature = R.RegisterBrokerRecord.BrokerFeature
    broker = _broker(1).replace(
        end_points=[endpoint(name="PLAINTEXT", host="127.0.0.1", port=9092,
                             security_protocol=0),
                    endpoint(name="INTERNAL", host="127.0.0.1", port=9093,
                             security_protocol=0)],
        features=[feature(name="metadata.version", min_supported_version=7,
                          max_supported_version=21),
                  feature(name="group.version", min_supported_version=0,
                          max_supported_version=1)],
        log_dirs=[Uuid(bytes([9] * 16)), Uuid(bytes([3] * 16))])

    def reordered(records):
        b = records[1]
        return [records[0], b.replace(end_points=b.end_points[::-1],
                                      features=b.features[::-1], log_dirs=b.log_dirs[::-1])]

    result = replay_node("n", *_one_broker_node(tmp_path / "a", broker, reordered))
    assert result.violations == [] and result.compared == 1

    def other_port(records):
        b = records[1]
        return [records[0], b.replace(end_points=[b.end_points[0].replace(port=1)]
                                      + b.end_points[1:])]

    result = replay_node("n", *_one_broker_node(tmp_path / "b", broker, other_port))
    [v] = result.violations
    assert v.record == "RegisterBrokerRecord broker 1" and "port=1" in v.message


def test_the_bootstrap_snapshot_is_a_note_not_compared_with_the_log(tmp_path, history):
    """Snapshot 0-0 (Kafka's kafka-storage format writes it) holds what the cluster starts
    from, which the log holds only later: it is left out of the replay, with a note."""
    from kraftcore.metadata.image import METADATA_VERSION

    log_dir, snaps = _node(tmp_path, history, history.cuts[:2])
    bootstrap = os.path.join(log_dir, file_name((0, 0)))
    image = replay_all(EMPTY_IMAGE, [R.FeatureLevelRecord(name=METADATA_VERSION,
                                                          feature_level=21)], 0, 0, TS)
    with open(bootstrap, "wb") as f:
        f.write(encode_snapshot(image))
    result = replay_node("n", log_dir, [(bootstrap, (0, 0))] + snaps)
    assert result.violations == [] and result.compared == 2 and result.not_covered == 0
    [note] = result.notes
    assert note.startswith(f"{bootstrap}: not compared with the log") and "bootstrap" in note
    report = verify_in_process(discover_nodes([os.path.dirname(log_dir)], []))
    assert report.ok and report.checked["log-replay"] == 2 and len(report.notes) == 1


# ------------------------------------------------------------------ inputs and report

def test_inputs_are_checked(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    (a / "sub").mkdir(parents=True)
    b.mkdir()
    (a / "sub" / "00000000000000000010-0000000001.checkpoint").write_bytes(b"x")
    (a / ".hidden.checkpoint").write_bytes(b"x")
    [node] = discover_nodes([str(a)])
    assert node.name == "a" and [os.path.basename(f) for f in node.files] == [
        "00000000000000000010-0000000001.checkpoint"]
    with pytest.raises(InputError, match="no .checkpoint file under"):
        discover_nodes([str(a), str(b)])
    with pytest.raises(InputError, match="is inside"):
        discover_nodes([str(a), str(a / "sub")])
    with pytest.raises(InputError, match="no such directory"):
        discover_nodes([str(tmp_path / "missing")])
    with pytest.raises(InputError, match="no metadata log under"):
        discover_nodes([str(a)], [])
    with pytest.raises(InputError, match="one log directory per snapshot directory"):
        discover_nodes([str(a)], [str(a), str(b)])


def test_nodes_with_the_same_base_name_are_named_by_path(tmp_path):
    for parent in ("x", "y"):
        d = tmp_path / parent / "node"
        d.mkdir(parents=True)
        (d / "00000000000000000010-0000000001.checkpoint").write_bytes(b"x")
    nodes = discover_nodes([str(tmp_path / "x" / "node"), str(tmp_path / "y" / "node")])
    assert [n.name for n in nodes] == [str(tmp_path / "x" / "node"),
                                       str(tmp_path / "y" / "node")]


def test_the_report_as_text_and_json(cluster, tmp_path):
    c, _ = damage_all(cluster, tmp_path / "c")
    report = verify_in_process(nodes_of(c, logs=True))
    text = report.render()
    assert "FAIL batch-crc" in text and "ok   topics-unique" in text
    # counts of what each snapshot holds add up over the snapshots, and say so
    assert re.search(r"ok   topics-unique +\d+ topics checked \(over all the snapshots\)", text)
    assert re.search(r"FAIL batch-crc +\d+ violations? \(\d+ files checked\)$", text, re.M)
    assert "[leader-in-isr] node-1:" in text
    assert text.splitlines()[-1].startswith("FAILED: 6 of 13 checks")
    path = tmp_path / "report.json"
    report.write_json(path)
    doc = json.loads(path.read_text())
    assert doc["ok"] is False and doc["summary"]["files"] == len(report.files)
    assert {c["name"]: c["status"] for c in doc["checks"]}["footer-last"] == "failed"
    assert {v["check"] for v in doc["violations"]} == {
        "batch-crc", "batch-format", "leader-in-isr", "log-replay", "footer-last",
        "nodes-agree"}
