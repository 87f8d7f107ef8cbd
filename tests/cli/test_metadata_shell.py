"""`kraftcore metadata-shell`: images loaded from a snapshot file and from a metadata log
directory (newest snapshot + log replay) written by a real QuorumController, the tree's
layout, every command, relative paths and globs, the one-command / script / interactive
modes, and the errors a person can cause (one line, exit 2 at startup, no traceback)."""

import io
import json
import os
import random
import subprocess
import sys

import pytest

from kraftcore.cli import metadata_shell as ms
from kraftcore.cli.main import main
from kraftcore.layout import METADATA_PARTITION_DIR
from kraftcore.metadata.directory import load_directory, load_snapshot_file
from kraftcore.controller.replication import NewTopic
from kraftcore.runtime.raft_storage import FileRaftStorage
from kraftcore.metadata import records as R
from kraftcore.metadata.image import CONFIG_BROKER, CONFIG_TOPIC
from kraftcore.metadata.loader import MetadataLoader
from kraftcore.metadata.snapshot import encode_snapshot
from kraftcore.types import Uuid
from kraftcore.raft.types import CommittedBatch
from kraftcore.controller.local import LocalQuorum

ACL_ID = Uuid.from_ints(0xAC1, 1)


class History:
    """A metadata log written by a QuorumController, and a snapshot point inside it."""

    def __init__(self):
        quorum = LocalQuorum(seed=11)
        rng = random.Random(5)
        epochs = {}
        for b in (1, 2, 3):
            epochs[b] = quorum.call(
                "register_broker", b, Uuid.random(rng), rack=f"rack-{b % 2}",
                listeners=[("PLAINTEXT", "127.0.0.1", 9090 + b, 0)]).broker_epoch
        for b, epoch in epochs.items():
            quorum.call("broker_heartbeat", b, epoch, metadata_offset=quorum.next_offset())
        quorum.call("create_topics", [NewTopic("orders", 3, 3), NewTopic("payments", 1, 2)])
        results = quorum.call("incremental_alter_configs", [
            (CONFIG_TOPIC, "orders", [("unclean.leader.election.enable", "set", "true")]),
            (CONFIG_BROKER, "", [("min.insync.replicas", "set", "2")])])
        assert [code for code, _ in results] == [0, 0], results
        self.cut = quorum.next_offset()  # the snapshot in the directory ends here
        # After the snapshot: a topic, a fenced broker, a producer id block.
        quorum.call("create_topics", [NewTopic("audit", 2, 2)])
        quorum.call("broker_heartbeat", 3, epochs[3], metadata_offset=quorum.next_offset(),
                    want_fence=True)
        quorum.call("allocate_producer_ids", 1, epochs[1])
        batches = list(quorum.storage.batches())
        # What the controller does not write yet: quotas, an ACL, SCRAM, a token.
        last = batches[-1]
        extra = [
            R.ClientQuotaRecord(entity=[R.ClientQuotaRecord.EntityData(
                entity_type="user", entity_name="alice")], key="producer_byte_rate",
                value=1048576.0, remove=False),
            R.ClientQuotaRecord(entity=[R.ClientQuotaRecord.EntityData(
                entity_type="client-id", entity_name=None)], key="request_percentage",
                value=50.0, remove=False),
            R.AccessControlEntryRecord(id=ACL_ID, resource_type=2, resource_name="orders",
                                       pattern_type=3, principal="User:alice", host="*",
                                       operation=3, permission_type=3),
            R.UserScramCredentialRecord(name="alice", mechanism=1, salt=b"salt",
                                        stored_key=b"stored", server_key=b"server",
                                        iterations=4096),
            R.DelegationTokenRecord(owner="User:alice", requester="User:alice", renewers=[],
                                    issue_timestamp=1, max_timestamp=2,
                                    expiration_timestamp=3, token_id="token-1"),
        ]
        base = last.last_offset + 1
        data = R.encode_batch(extra, base_offset=base, leader_epoch=last.epoch,
                              timestamp=1_700_000_000_123)
        batches.append(CommittedBatch(base, base + len(extra) - 1, last.epoch, False, data))
        self.batches = batches
        self.image = self.replay(batches)
        before = [b for b in batches if b.last_offset < self.cut]
        assert before[-1].last_offset + 1 == self.cut
        self.cut_image = self.replay(before)

    @staticmethod
    def replay(batches):
        loader = MetadataLoader()
        loader.apply(batches)
        return loader.image


@pytest.fixture(scope="module")
def history():
    return History()


def snapshot_name(image):
    return f"{image.end_offset:020d}-{image.epoch:010d}.checkpoint"


def write_dir(root, history, *, snapshot=True, segment_bytes=600):
    """A node's log dir: `root/__cluster_metadata-0` with the whole log (several segments)
    and a snapshot at `history.cut`; returns the __cluster_metadata-0 path."""
    path = os.path.join(str(root), METADATA_PARTITION_DIR)
    storage = FileRaftStorage.open(path, segment_bytes=segment_bytes)
    try:
        for batch in history.batches:
            storage.append_as_follower(batch.data)
        storage.flush()
        if snapshot:
            image = history.cut_image
            storage.write_snapshot((image.end_offset, image.epoch), encode_snapshot(image))
    finally:
        storage.close()
    return path


@pytest.fixture(scope="module")
def snapshot_file(history, tmp_path_factory):
    path = tmp_path_factory.mktemp("snap") / snapshot_name(history.image)
    path.write_bytes(encode_snapshot(history.image))
    return str(path)


@pytest.fixture(scope="module")
def log_root(history, tmp_path_factory):
    root = tmp_path_factory.mktemp("node")
    write_dir(root, history)
    return str(root)


def shell(capsys, *argv, stdin=None, monkeypatch=None):
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code = main(["metadata-shell", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def lines(text):
    return text.splitlines()


# ============================================================================ loading


def test_snapshot_mode_loads_the_whole_image(history, snapshot_file):
    loaded = load_snapshot_file(snapshot_file)
    assert loaded.image == history.image
    assert loaded.snapshot == os.path.abspath(snapshot_file)
    assert loaded.log_batches == 0 and loaded.warnings == []


def test_dir_mode_replays_the_log_after_the_newest_snapshot(history, log_root):
    metadata_dir = os.path.join(log_root, METADATA_PARTITION_DIR)
    segments = [n for n in os.listdir(metadata_dir) if n.endswith(".log")]
    assert len(segments) > 1  # the scan crosses segment files
    for path in (log_root, metadata_dir):  # the log dir, or __cluster_metadata-0 itself
        loaded = load_directory(path)
        assert loaded.warnings == []
        assert loaded.image == history.image
        assert os.path.basename(loaded.snapshot) == snapshot_name(history.cut_image)
        assert loaded.log_batches == sum(1 for b in history.batches
                                         if b.base_offset >= history.cut)


def test_dir_mode_takes_the_newest_of_several_snapshots(history, tmp_path):
    path = write_dir(tmp_path, history)
    older = history.replay(history.batches[:3])
    with open(os.path.join(path, snapshot_name(older)), "wb") as f:
        f.write(encode_snapshot(older))
    loaded = load_directory(path)
    assert os.path.basename(loaded.snapshot) == snapshot_name(history.cut_image)
    assert loaded.image == history.image


def test_dir_mode_without_a_snapshot_replays_the_whole_log(history, tmp_path):
    path = write_dir(tmp_path, history, snapshot=False)
    loaded = load_directory(path)
    assert loaded.snapshot is None
    assert loaded.log_batches == len(history.batches)
    assert loaded.image == history.image


def test_dir_mode_with_only_a_snapshot(history, tmp_path):
    path = tmp_path / METADATA_PARTITION_DIR
    path.mkdir()
    (path / snapshot_name(history.cut_image)).write_bytes(encode_snapshot(history.cut_image))
    loaded = load_directory(str(tmp_path))
    assert loaded.image == history.cut_image and loaded.log_batches == 0


def test_a_torn_log_tail_is_left_out_with_a_warning(history, tmp_path, capsys):
    path = write_dir(tmp_path, history, segment_bytes=1024 * 1024)
    segment = os.path.join(path, "00000000000000000000.log")
    last = history.batches[-1]
    size = os.path.getsize(segment)
    with open(segment, "r+b") as f:
        f.truncate(size - 7)  # the last batch is cut short
    loaded = load_directory(path)
    assert loaded.image == history.replay(history.batches[:-1])
    (warning,) = loaded.warnings
    assert f"from offset {last.base_offset} on are left out" in warning
    code, out, err = shell(capsys, "--dir", path, "cat", "/image/producerIds/nextProducerId")
    assert code == 0
    assert out.strip() != "-1"  # the producer ids before the torn batch are there
    assert len(lines(err)) == 1 and "warning:" in err and "stops at byte" in err


def test_a_crc_error_inside_the_log_stops_the_replay_there(history, tmp_path):
    path = write_dir(tmp_path, history, segment_bytes=1024 * 1024)
    segment = os.path.join(path, "00000000000000000000.log")
    target = [b for b in history.batches if b.base_offset >= history.cut][1]
    position = sum(len(b.data) for b in history.batches if b.base_offset < target.base_offset)
    with open(segment, "r+b") as f:
        f.seek(position + len(target.data) - 1)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    loaded = load_directory(path)
    expected = history.replay([b for b in history.batches if b.base_offset < target.base_offset])
    assert loaded.image == expected
    assert len(loaded.warnings) == 1 and f"at byte {position}" in loaded.warnings[0]


def test_a_log_older_than_the_snapshot_is_left_out(history, tmp_path):
    """A snapshot of a later epoch than the log after it (the log diverged): the node's
    recovery would drop that log, so the image is the snapshot's."""
    path = write_dir(tmp_path, history, snapshot=False)
    image = history.cut_image
    name = f"{image.end_offset:020d}-{99:010d}.checkpoint"
    with open(os.path.join(path, name), "wb") as f:
        f.write(encode_snapshot(image))
    loaded = load_directory(path)
    assert loaded.image.same_state(image) and loaded.image.epoch == 99
    assert loaded.log_batches == 0
    assert len(loaded.warnings) == 1 and "older than the snapshot's epoch 99" in \
        loaded.warnings[0]


def test_preallocated_zeros_after_the_log_end_are_not_damage(history, tmp_path):
    path = write_dir(tmp_path, history, segment_bytes=1024 * 1024)
    with open(os.path.join(path, "00000000000000000000.log"), "ab") as f:
        f.write(bytes(4096))
    loaded = load_directory(path)
    assert loaded.warnings == [] and loaded.image == history.image


def test_segment_files_that_are_not_part_of_the_log_are_left_out_with_a_warning(
        history, tmp_path, capsys):
    """Files a node's recovery would set aside (`<name>.stray`): an empty segment based
    inside the one before it, a copy whose first batch is not at its name's offset. The
    image is the log's; each file gets a warning, and the shell goes on."""
    path = write_dir(tmp_path, history)
    segments = sorted(n for n in os.listdir(path) if n.endswith(".log"))
    empty = f"{history.batches[0].base_offset + 1:020d}.log"
    assert empty not in segments
    open(os.path.join(path, empty), "wb").close()
    with open(os.path.join(path, segments[0]), "rb") as f:
        copy = f.read()
    misnamed = f"{history.batches[-1].last_offset + 100:020d}.log"
    with open(os.path.join(path, misnamed), "wb") as f:
        f.write(copy)  # its first batch is at offset 0
    loaded = load_directory(path)
    assert loaded.image == history.image
    assert [w.split(": ", 1)[0] for w in loaded.warnings] == [
        os.path.join(path, empty), os.path.join(path, misnamed)]
    assert all("left out" in w and "not part of the log" in w for w in loaded.warnings)
    assert "its first batch starts at offset 0" in loaded.warnings[1]
    code, out, err = shell(capsys, "--dir", path, "cat", "/image/producerIds/nextProducerId")
    assert code == 0 and out.strip() != "-1"
    assert len(lines(err)) == 2 and all("warning:" in line for line in lines(err))


def test_a_log_that_starts_above_the_snapshot_is_a_gap(history, tmp_path, capsys):
    """The newest snapshot ends at offset `cut`; the log after it must reach down to it.
    A first segment above it (the segments before it missing) leaves offsets neither holds:
    an error, whether or not that segment holds batches."""
    path = write_dir(tmp_path, history)
    segments = sorted(n for n in os.listdir(path) if n.endswith(".log"))
    bases = [int(n[:20]) for n in segments]
    keep = next(b for b in bases if b > history.cut)
    for base in bases:
        if base < keep:
            os.unlink(os.path.join(path, f"{base:020d}.log"))
    code, out, err = shell(capsys, "--dir", path, "ls")
    assert (code, out) == (2, "") and len(lines(err)) == 1
    assert (f"{os.path.join(path, f'{keep:020d}.log')}: the log has no batch at offset "
            f"{history.cut} (the next one starts at {keep}): records are missing") in err
    for name in os.listdir(path):
        if name.endswith(".log"):
            os.unlink(os.path.join(path, name))
    open(os.path.join(path, f"{history.cut + 1:020d}.log"), "wb").close()  # empty
    code, _, err = shell(capsys, "--dir", path, "ls")
    assert code == 2 and f"no batch at offset {history.cut}" in err
    os.rename(os.path.join(path, f"{history.cut + 1:020d}.log"),
              os.path.join(path, f"{history.cut:020d}.log"))  # at the snapshot's end: fine
    loaded = load_directory(path)
    assert loaded.image == history.cut_image and loaded.warnings == []


# ============================================================================ the tree


def test_the_tree_follows_kafkas_layout(capsys, snapshot_file):
    code, out, err = shell(capsys, "--snapshot", snapshot_file, "ls", "/", "/image",
                           "/image/cluster", "/image/topics", "/local")
    assert (code, err) == (0, "")
    assert out == (
        "/:\nimage\nlocal\n"
        "\n/image:\nacls\nclientQuotas\ncluster\nconfigs\ndelegationToken\nfeatures\n"
        "producerIds\nprovenance\nscram\ntopics\n"
        "\n/image/cluster:\nbrokers\ncontrollers\n"
        "\n/image/topics:\nbyId\nbyName\n"
        "\n/local:\nlogBatches\nsnapshot\nsource\nversion\n")


def test_topics_partitions_and_brokers(history, capsys, snapshot_file):
    image = history.image
    orders = image.topic("orders")
    code, out, err = shell(capsys, "--snapshot", snapshot_file, "ls",
                           "/image/topics/byName", "/image/topics/byName/orders",
                           "/image/cluster/brokers")
    assert (code, err) == (0, "")
    assert out == ("/image/topics/byName:\naudit\norders\npayments\n"
                   "\n/image/topics/byName/orders:\n0\n1\n2\nid\nname\n"
                   "\n/image/cluster/brokers:\n1\n2\n3\n")
    partition = orders.partitions[1]
    code, out, err = shell(capsys, "--snapshot", snapshot_file, "cat",
                           "/image/topics/byName/orders/id",
                           "/image/topics/byName/orders/1/replicas",
                           "/image/topics/byName/orders/1/isr",
                           "/image/topics/byName/orders/1/leader",
                           "/image/topics/byName/orders/1/leaderEpoch",
                           "/image/topics/byName/orders/1/partitionEpoch",
                           f"/image/topics/byId/{orders.topic_id}/name",
                           "/image/cluster/brokers/3/fenced",
                           "/image/cluster/brokers/1/fenced",
                           "/image/cluster/brokers/2/rack",
                           "/image/cluster/brokers/2/endPoints")
    assert (code, err) == (0, "")
    assert lines(out) == [
        str(orders.topic_id), json.dumps(partition.replicas), json.dumps(partition.isr),
        str(partition.leader), str(partition.leader_epoch), str(partition.partition_epoch),
        "orders", "true", "false", "rack-0",
        '[{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9092, "securityProtocol": 0}]']


def test_cat_of_a_record_directory_prints_the_record_as_json(history, capsys, snapshot_file):
    partition = history.image.topic("payments").partitions[0]
    code, out, _ = shell(capsys, "--snapshot", snapshot_file, "cat",
                         "/image/topics/byName/payments/0", "/image/cluster/brokers/2")
    assert code == 0
    first, second = lines(out)
    assert json.loads(first) == partition.to_json()
    assert json.loads(second) == history.image.brokers[2].to_json()


def test_configs_features_producer_ids_and_provenance(history, capsys, snapshot_file):
    image = history.image
    code, out, err = shell(capsys, "--snapshot", snapshot_file, "tree", "/image/configs")
    assert (code, err) == (0, "")
    assert out == ("BROKER:\n  min.insync.replicas: 2\n"
                   "TOPIC:orders:\n  unclean.leader.election.enable: true\n")
    code, out, _ = shell(capsys, "--snapshot", snapshot_file, "cat",
                         "/image/configs/TOPIC:orders/unclean.leader.election.enable",
                         "/image/features/metadataVersion",
                         "/image/features/finalized_metadata.version",
                         "/image/producerIds/nextProducerId", "/image/provenance")
    assert code == 0
    assert lines(out) == [
        "true", "3.9-IV0", "21", str(image.producer_ids.next_producer_id),
        f"offset {image.end_offset - 1}, epoch {image.epoch}, "
        "time 2023-11-14T22:13:20.123Z[UTC]"]


def test_quotas_acls_scram_and_tokens(capsys, snapshot_file):
    code, out, err = shell(capsys, "--snapshot", snapshot_file, "tree",
                           "/image/clientQuotas", "/image/scram")
    assert (code, err) == (0, "")
    assert out == ("/image/clientQuotas:\n"
                   "  clientId(<default>):\n    request_percentage: 50.0\n"
                   "  user(alice):\n    producer_byte_rate: 1048576.0\n"
                   "/image/scram:\n"
                   "  SCRAM-SHA-256:\n    alice:\n      name: alice\n      mechanism: 1\n"
                   "      salt: c2FsdA==\n      storedKey: c3RvcmVk\n"
                   "      serverKey: c2VydmVy\n      iterations: 4096\n"
                   "  SCRAM-SHA-512:\n")
    code, out, _ = shell(capsys, "--snapshot", snapshot_file, "cat",
                         f"/image/acls/byId/{ACL_ID}/principal",
                         "/image/delegationToken/token-1/owner")
    assert (code, lines(out)) == (0, ["User:alice", "User:alice"])


def test_dir_mode_shows_changes_made_after_the_snapshot(history, capsys, log_root):
    code, out, err = shell(capsys, "--dir", log_root, "cat",
                           "/image/cluster/brokers/3/fenced",
                           "/image/topics/byName/audit/name", "/local/logBatches")
    assert (code, err) == (0, "")
    replayed = sum(1 for b in history.batches if b.base_offset >= history.cut)
    assert lines(out) == ["true", "audit", str(replayed)]
    # ... which the snapshot alone does not hold
    snapshot = os.path.join(log_root, METADATA_PARTITION_DIR, snapshot_name(history.cut_image))
    code, out, err = shell(capsys, "--snapshot", snapshot, "cat",
                           "/image/cluster/brokers/3/fenced", "/image/topics/byName/audit")
    assert code == 1
    assert lines(out) == ["false"]
    assert err == "cat: /image/topics/byName/audit: no such file or directory\n"


# ============================================================================ commands


def test_tree_of_a_topic(history, capsys, snapshot_file):
    topic = history.image.topic("payments")
    p = topic.partitions[0]
    code, out, _ = shell(capsys, "--snapshot", snapshot_file, "tree",
                         "/image/topics/byName/payments")
    assert code == 0
    assert lines(out)[:4] == ["0:", "  partitionId: 0", f"  topicId: {topic.topic_id}",
                              f"  replicas: {json.dumps(p.replicas)}"]
    assert lines(out)[-2:] == [f"id: {topic.topic_id}", "name: payments"]
    assert f"  leader: {p.leader}" in lines(out)


def test_find_lists_paths_and_filters(history, capsys, snapshot_file):
    code, out, _ = shell(capsys, "--snapshot", snapshot_file, "find", "/image/cluster")
    assert code == 0
    found = lines(out)
    assert found[:3] == ["/image/cluster", "/image/cluster/brokers", "/image/cluster/brokers/1"]
    assert "/image/cluster/brokers/3/brokerEpoch" in found
    assert found[-1] == "/image/cluster/controllers"
    code, out, _ = shell(capsys, "--snapshot", snapshot_file, "find", "/image/topics/byName",
                         "-name", "leader")
    assert code == 0
    assert lines(out) == [f"/image/topics/byName/{t}/{p}/leader"
                          for t, n in (("audit", 2), ("orders", 3), ("payments", 1))
                          for p in range(n)]
    code, out, _ = shell(capsys, "--snapshot", snapshot_file, "find", "/image", "-type", "d",
                         "-name", "by*")
    assert lines(out) == ["/image/acls/byId", "/image/topics/byId", "/image/topics/byName"]
    code, out, err = shell(capsys, "--snapshot", snapshot_file, "find", "-type", "x")
    assert (code, out) == (1, "") and err.startswith("find: -type takes d")


def test_globs_in_ls_and_cat(capsys, snapshot_file):
    code, out, _ = shell(capsys, "--snapshot", snapshot_file, "cat",
                         "/image/topics/byName/*/name")
    assert (code, lines(out)) == (0, ["audit", "orders", "payments"])
    code, out, _ = shell(capsys, "--snapshot", snapshot_file, "cat",
                         "/image/topics/byName/{orders,payments}/name",
                         "/image/cluster/brokers/[12]/brokerId",
                         "/image/topics/byName/pay?ents/name")
    assert (code, lines(out)) == (0, ["orders", "payments", "1", "2", "payments"])
    code, out, _ = shell(capsys, "--snapshot", snapshot_file, "ls", "/image/topics/byName/o*")
    assert (code, lines(out)) == (0, ["0", "1", "2", "id", "name"])
    code, out, err = shell(capsys, "--snapshot", snapshot_file, "cat", "/image/nothing*")
    assert (code, out, err) == (1, "", "cat: /image/nothing*: no such file or directory\n")


def test_ls_of_a_file_prints_its_name_and_errors_continue(capsys, snapshot_file):
    code, out, err = shell(capsys, "--snapshot", snapshot_file, "ls", "/image/provenance",
                           "/image/nope", "/image/producerIds")
    assert code == 1
    assert out == "provenance\n\n/image/producerIds:\nnextProducerId\n"
    assert err == "ls: /image/nope: no such file or directory\n"


def test_cat_of_a_plain_directory_is_an_error(capsys, snapshot_file):
    code, out, err = shell(capsys, "--snapshot", snapshot_file, "cat", "/image/topics",
                           "/image/features/metadataVersion")
    assert (code, out, err) == (1, "3.9-IV0\n", "cat: /image/topics: is a directory\n")


def test_script_mode_with_relative_paths(history, monkeypatch, capsys, snapshot_file):
    image = history.image
    script = ("# a comment, then a blank line\n\n"
              "pwd\n"
              "cd image/topics\n"
              "pwd\n"
              "cd byName/orders/0\n"
              "cat ./leader ../name ../../../../provenance\n"
              "cd ..\n"
              "pwd\n"
              "cd /image/cluster/brokers/1/brokerId\n"  # a file: an error, no move
              "cd /does/not/exist\n"
              "pwd\n"
              "ls ../..\n"
              "cd\n"
              "pwd\n"
              "exit\n"
              "pwd\n")  # not run: exit ends the script
    code, out, err = shell(capsys, "--snapshot", snapshot_file, stdin=script,
                           monkeypatch=monkeypatch)
    assert code == 1  # two commands failed; the others ran
    assert lines(out) == [
        "/", "/image/topics", str(image.topic("orders").partitions[0].leader), "orders",
        ms.provenance_text(image), "/image/topics/byName/orders",
        "/image/topics/byName/orders", "byId", "byName", "/"]
    assert lines(err) == ["cd: /image/cluster/brokers/1/brokerId: not a directory",
                          "cd: /does/not/exist: no such file or directory"]
    assert ">>" not in out  # no prompt when stdin is not a terminal


def test_script_mode_exit_status_is_zero_when_all_commands_succeed(monkeypatch, capsys,
                                                                  snapshot_file):
    code, out, err = shell(capsys, "--snapshot", snapshot_file,
                           stdin="cd /image\nls producerIds\nquit\n", monkeypatch=monkeypatch)
    assert (code, out, err) == (0, "nextProducerId\n", "")
    code, out, err = shell(capsys, "--snapshot", snapshot_file, stdin="",
                           monkeypatch=monkeypatch)
    assert (code, out, err) == (0, "", "")


def test_help_unknown_commands_and_bad_quoting(monkeypatch, capsys, snapshot_file):
    code, out, err = shell(capsys, "--snapshot", snapshot_file, "help")
    assert code == 0 and err == ""
    for name in ("ls", "cd", "pwd", "cat", "tree", "find", "help", "exit"):
        assert any(line.strip().startswith(name) for line in lines(out)), name
    code, out, _ = shell(capsys, "--snapshot", snapshot_file, "man", "find")
    assert (code, lines(out)[0]) == (0, "find [PATH ...] [-name PATTERN] [-type d|f]")
    code, out, err = shell(capsys, "--snapshot", snapshot_file, "--", "pwd")
    assert (code, out, err) == (0, "/\n", "")
    code, out, err = shell(capsys, "--snapshot", snapshot_file, "rm", "/image")
    assert (code, out) == (1, "")
    assert err == "rm: unknown command; type help for the commands\n"
    code, out, err = shell(capsys, "--snapshot", snapshot_file,
                           stdin="cat '/image/provenance\npwd\n", monkeypatch=monkeypatch)
    assert (code, out) == (1, "/\n")
    assert lines(err) == ["cat: cannot parse the line: No closing quotation"]


def test_interactive_loop_prompts_and_completes(history, snapshot_file):
    loaded = load_snapshot_file(snapshot_file)
    out, err = io.StringIO(), io.StringIO()
    shell = ms.MetadataShell(ms.build_tree(loaded), out=out, err=err,
                             stdin=io.StringIO("cd /image/topics\nls\ncat nope\nexit\n"),
                             interactive=True)
    shell.cmdloop("hello")
    text = out.getvalue()
    assert text.startswith("hello\n[/] >> [/image/topics] >> byId  byName\n")
    assert err.getvalue() == "cat: nope: no such file or directory\n"
    assert shell.stopped
    # path completion (readline hands over the text after its last delimiter)
    assert shell.completedefault("by", "ls /image/topics/by", 3, 19) == ["byId/", "byName/"]
    assert shell.completedefault("ord", "cat byName/ord", 4, 14) == ["orders/"]
    assert shell.completedefault("zz", "cat zz", 4, 6) == []
    assert shell.completedefault("x", "cat /nowhere/x", 12, 14) == []
    assert shell.completedefault("is", "cat byName/orders/1/is", 20, 22) == ["isr"]
    assert shell.completenames("c") == ["cat", "cd"]
    # end of input (Ctrl-D) leaves the loop
    shell = ms.MetadataShell(ms.build_tree(loaded), out=io.StringIO(), err=io.StringIO(),
                             stdin=io.StringIO("pwd\n"), interactive=True)
    shell.cmdloop()
    assert shell.stopped


# ============================================================================ errors


def test_startup_errors_are_one_line_and_exit_2(history, tmp_path, capsys):
    log_file = tmp_path / "00000000000000000000.log"
    log_file.write_bytes(b"".join(b.data for b in history.batches))
    text_file = tmp_path / "notes.checkpoint"
    text_file.write_text("this is not a snapshot, just some text long enough to be read\n" * 3)
    good = encode_snapshot(history.image)
    corrupt = bytearray(good)
    corrupt[len(good) // 2] ^= 0x55
    corrupt_file = tmp_path / snapshot_name(history.image)
    corrupt_file.write_bytes(bytes(corrupt))
    cut_file = tmp_path / "00000000000000000001-0000000001.checkpoint"
    cut_file.write_bytes(good[:len(good) - 30])
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    cases = [
        (["--snapshot", str(tmp_path / "missing.checkpoint")],
         "cannot read", "No such file or directory"),
        (["--snapshot", str(tmp_path)], "is a directory; use --dir", ""),
        (["--snapshot", str(log_file)], "is not a valid KRaft snapshot", ""),
        (["--snapshot", str(text_file)], "is not a KRaft snapshot", ""),
        (["--snapshot", str(corrupt_file)], "is corrupt", ""),
        (["--snapshot", str(cut_file)], "is corrupt", ""),
        (["--dir", str(tmp_path / "missing")], "cannot read", "No such file or directory"),
        (["--dir", str(log_file)], "is not a directory; use --snapshot", ""),
        (["--dir", str(empty_dir)], "holds no metadata log", METADATA_PARTITION_DIR),
    ]
    for argv, want, also in cases:
        code, out, err = shell(capsys, *argv, "ls")
        assert code == 2, argv
        assert out == "", argv
        assert len(lines(err)) == 1, err
        assert err.startswith("kraftcore metadata-shell: ") and want in err and also in err, err


def test_dir_errors_name_the_problem(history, tmp_path, capsys):
    # the newest snapshot is corrupt: an error naming it (never a silently older image)
    path = write_dir(tmp_path / "a", history)
    newest = os.path.join(path, snapshot_name(history.cut_image))
    os.chmod(newest, 0o644)
    with open(newest, "r+b") as f:
        f.seek(100)
        f.write(b"\xff\xff\xff")
    code, out, err = shell(capsys, "--dir", path, "ls")
    assert (code, out) == (2, "")
    assert newest in err and "is corrupt" in err and len(lines(err)) == 1
    # no snapshot, and the log starts above offset 0: records are missing
    later = [b for b in history.batches if b.base_offset >= history.cut]
    b = tmp_path / "b"
    b.mkdir()
    (b / f"{later[0].base_offset:020d}.log").write_bytes(b"".join(x.data for x in later))
    code, out, err = shell(capsys, "--dir", str(b), "ls")
    assert code == 2
    assert f"records below offset {later[0].base_offset} are missing" in err
    # a gap between two segments
    c = tmp_path / "c"
    c.mkdir()
    early = [x for x in history.batches if x.base_offset < history.cut]
    (c / "00000000000000000000.log").write_bytes(b"".join(x.data for x in early))
    (c / f"{later[1].base_offset:020d}.log").write_bytes(b"".join(x.data for x in later[1:]))
    code, out, err = shell(capsys, "--dir", str(c), "ls")
    assert code == 2
    assert f"no batch at offset {history.cut}" in err and len(lines(err)) == 1
    # a directory with a __cluster_metadata-0 that is empty
    d = tmp_path / "d" / METADATA_PARTITION_DIR
    d.mkdir(parents=True)
    code, _, err = shell(capsys, "--dir", str(tmp_path / "d"), "ls")
    assert code == 2 and "holds no metadata log: no .log segment" in err


def test_records_that_do_not_replay_are_a_startup_error(history, tmp_path, capsys):
    # a snapshot whose partition has no topic: well-formed bytes, inconsistent records
    from kraftcore import codec
    from kraftcore.raft.control import (SnapshotFooterRecord, SnapshotHeaderRecord,
                                            encode_control_batch)

    orphan = history.image.topic("orders").partitions[0]
    data = b"".join([
        encode_control_batch([SnapshotHeaderRecord(version=0, last_contained_log_timestamp=0)],
                             base_offset=0, leader_epoch=1, timestamp=0),
        R.encode_batch([orphan], base_offset=1, leader_epoch=1, timestamp=0),
        encode_control_batch([SnapshotFooterRecord(version=0)], base_offset=2,
                             leader_epoch=1, timestamp=0)])
    snap = tmp_path / "00000000000000000003-0000000001.checkpoint"
    snap.write_bytes(data)
    code, out, err = shell(capsys, "--snapshot", str(snap), "ls")
    assert (code, out) == (2, "")
    assert "is not a valid KRaft snapshot" in err and len(lines(err)) == 1
    # a log batch with a valid CRC holding an unknown record type
    log_dir = tmp_path / "log"
    log_dir.mkdir()
    good = history.batches[:2]
    base = good[-1].last_offset + 1
    unknown = codec.encode_batch([bytes([1, 99, 0])], timestamp=0, base_offset=base,
                                 leader_epoch=good[-1].epoch)
    (log_dir / "00000000000000000000.log").write_bytes(b"".join(b.data for b in good)
                                                      + unknown)
    code, out, err = shell(capsys, "--dir", str(log_dir), "ls")
    assert (code, out) == (2, "")
    assert "the log does not replay" in err and "unknown metadata record type 99" in err
    assert len(lines(err)) == 1


def test_options_are_required_and_exclusive(capsys, snapshot_file):
    with pytest.raises(SystemExit) as exc:
        main(["metadata-shell", "ls"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        main(["metadata-shell", "--snapshot", snapshot_file, "--dir", "/tmp", "ls"])
    assert exc.value.code == 2
    capsys.readouterr()


def test_the_shell_is_read_only(history, tmp_path):
    root = tmp_path / "node"
    path = write_dir(root, history)
    before = {n: os.stat(os.path.join(path, n)).st_mtime_ns for n in os.listdir(path)}
    assert load_directory(str(root)).image == history.image
    after = {n: os.stat(os.path.join(path, n)).st_mtime_ns for n in os.listdir(path)}
    assert after == before


def test_subprocess_errors_have_no_traceback_and_scripts_no_prompt(tmp_path, snapshot_file):
    env = dict(os.environ)
    bad = tmp_path / "00000000000000000010-0000000001.checkpoint"
    bad.write_bytes(b"\x00" * 200)
    run = subprocess.run(
        [sys.executable, "-m", "kraftcore.cli.main", "metadata-shell", "--snapshot",
         str(bad), "ls"], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 2
    assert run.stdout == ""
    assert "Traceback" not in run.stderr and len(lines(run.stderr)) == 1
    assert "is not a KRaft snapshot" in run.stderr
    run = subprocess.run(
        [sys.executable, "-m", "kraftcore.cli.main", "metadata-shell", "--snapshot",
         snapshot_file], input="cd /image/topics/byName\nls\ncat nope\n",
        capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 1
    assert run.stdout == "audit\norders\npayments\n"
    assert run.stderr == "cat: nope: no such file or directory\n"


# ============================================================================ pieces


def test_names_in_the_tree():
    assert ms.config_resource_name(CONFIG_TOPIC, "orders") == "TOPIC:orders"
    assert ms.config_resource_name(CONFIG_BROKER, "") == "BROKER"
    assert ms.config_resource_name(CONFIG_BROKER, "1") == "BROKER:1"
    assert ms.config_resource_name(77, "x") == "TYPE_77:x"
    assert ms.quota_entity_name((("user", "a(b)\\"), ("client-id", "app"))) == \
        "clientId(app)_user(a\\(b\\)\\\\)"
    assert ms.quota_entity_name((("ip", None),)) == "ip(<default>)"
    assert ms.format_value(None) == "null"
    assert ms.format_value(True) == "true"
    assert ms.format_value([1, 2]) == "[1, 2]"
    assert ms.format_value(2.5) == "2.5"


def test_provenance_text():
    from kraftcore.metadata.image import MetadataImage

    assert ms.provenance_text(MetadataImage(end_offset=43, epoch=5, timestamp_ms=0)) == \
        "offset 42, epoch 5, time 1970-01-01T00:00:00Z[UTC]"
    assert ms.provenance_text(MetadataImage(end_offset=1, epoch=1,
                                            timestamp_ms=1_700_000_000_100)) == \
        "offset 0, epoch 1, time 2023-11-14T22:13:20.1Z[UTC]"
    assert ms.provenance_text(MetadataImage()) == "offset -1, epoch -1, time unknown"
