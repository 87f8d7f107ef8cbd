"""Helpers of the verification tests: where a node's snapshot files are, and the ways the
tests damage a copy of a clean cluster (each one a single, known problem).

The cluster directories come from a *source* (see conftest.py): anything that returns a
`kraftcore.spark.sample.SampleCluster` (node directories, their metadata log directories,
each node's snapshot ids, the ids every node holds). The helpers here only rely on that.
"""

import os
import shutil
import stat

from kraftcore.log.snapshots import file_name
from kraftcore.metadata import records as R
from kraftcore.metadata.delta import replay_all
from kraftcore.metadata.image import EMPTY_IMAGE
from kraftcore.metadata.snapshot import decode_snapshot, encode_snapshot
from kraftcore.spark.inputs import discover_nodes
from kraftcore.spark.sample import SampleCluster

__all__ = ["copy_cluster", "snapshot_path", "own_ids", "flip_byte", "drop_footer",
           "rewrite", "change_rack", "leader_outside_isr", "add_unknown_record", "nodes_of",
           "problem_keys", "damage_all", "UNKNOWN_TYPE_VALUE"]


def copy_cluster(cluster, dest):
    """A writable copy of `cluster` under `dest`, as a `SampleCluster`."""
    shutil.copytree(cluster.root, dest)
    for dirpath, _, filenames in os.walk(dest):
        for name in filenames:
            path = os.path.join(dirpath, name)
            os.chmod(path, os.stat(path).st_mode | stat.S_IWUSR)

    def moved(path):
        return os.path.join(dest, os.path.relpath(path, cluster.root))

    return SampleCluster(str(dest), [moved(d) for d in cluster.node_dirs],
                         [moved(d) for d in cluster.log_dirs],
                         {moved(d): ids for d, ids in cluster.snapshots.items()},
                         cluster.shared_ids)


def nodes_of(cluster, logs=False):
    return discover_nodes(cluster.node_dirs, [] if logs else None)


def snapshot_path(node_dir, snapshot_id):
    """The file of snapshot `snapshot_id` under `node_dir` (found at any depth)."""
    name = file_name(snapshot_id)
    for dirpath, _, filenames in os.walk(node_dir):
        if name in filenames:
            return os.path.join(dirpath, name)
    raise FileNotFoundError(f"no {name} under {node_dir}")


def own_ids(cluster, node_index):
    """The snapshot ids only node `node_index` holds (not shared by every node)."""
    node_dir = cluster.node_dirs[node_index]
    shared = set(map(tuple, cluster.shared_ids))
    return [sid for sid in cluster.snapshots[node_dir] if tuple(sid) not in shared]


def flip_byte(path):
    """Flip one byte inside the records of the file's second batch (the first data batch):
    its CRC no longer matches. Returns the batch's byte position."""
    with open(path, "rb") as f:
        data = bytearray(f.read())
    first = 12 + int.from_bytes(data[8:12], "big")
    data[first + 61 + 3] ^= 0x40
    with open(path, "wb") as f:
        f.write(data)
    return first


def drop_footer(path):
    """Cut the last batch (the SnapshotFooter) off the file."""
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    last = 0
    while pos < len(data):
        last = pos
        pos += 12 + int.from_bytes(data[pos + 8:pos + 12], "big")
    with open(path, "wb") as f:
        f.write(data[:last])


def rewrite(path, snapshot_id, edit):
    """Re-encode the snapshot in `path` after `edit(records)` returned its changed records
    (the file stays a well-formed snapshot of the same id)."""
    with open(path, "rb") as f:
        records, timestamp = decode_snapshot(f.read())
    image = replay_all(EMPTY_IMAGE, edit(list(records)), snapshot_id[0], snapshot_id[1],
                       timestamp)
    with open(path, "wb") as f:
        f.write(encode_snapshot(image))


def change_rack(records):
    """Another rack for the first registered broker."""
    for i, r in enumerate(records):
        if type(r) is R.RegisterBrokerRecord:
            records[i] = r.replace(rack="rack-moved")
            return records
    raise AssertionError("no RegisterBrokerRecord in the snapshot")


def leader_outside_isr(recovering=False):
    """An edit: the first partition with two replicas or more gets its last replica as
    leader and the other replicas as ISR (epochs unchanged)."""
    def edit(records):
        for i, r in enumerate(records):
            if type(r) is R.PartitionRecord and len(r.replicas) >= 2:
                leader = r.replicas[-1]
                records[i] = r.replace(leader=leader, isr=[b for b in r.replicas
                                                          if b != leader],
                                       leader_recovery_state=1 if recovering else 0)
                return records
        raise AssertionError("no partition with two replicas in the snapshot")
    return edit


# Kafka's frame of a metadata record of type 9999 (a type no Kafka version has)
UNKNOWN_TYPE_VALUE = b"\x01\x8f\x4e\x00\x00"


def add_unknown_record(path):
    """Put a record of type 9999 after the file's records, in a batch of its own before the
    SnapshotFooter (which moves one offset on): the framing stays sound."""
    from kraftcore import codec
    from kraftcore.raft.control import SnapshotFooterRecord, encode_control_batch

    with open(path, "rb") as f:
        data = f.read()
    footer = codec.decode_batches(data)[-1]
    epoch, ts = footer.partition_leader_epoch, footer.max_timestamp
    with open(path, "wb") as f:
        f.write(data[:footer.position])
        f.write(codec.encode_batch([UNKNOWN_TYPE_VALUE], base_offset=footer.base_offset,
                                   leader_epoch=epoch, timestamp=ts))
        f.write(encode_control_batch([SnapshotFooterRecord(version=0)],
                                     base_offset=footer.base_offset + 1, leader_epoch=epoch,
                                     timestamp=ts))


def problem_keys(report):
    """{(check, node, file name)} of a report's violations."""
    return {(v.check, v.node, os.path.basename(v.file or "")) for v in report.violations}


def damage_all(cluster, dest):
    """A copy of `cluster` with one file broken in each way the verification must catch;
    returns `(copy, expected)`, `expected` being the {(check, node, file name)} a run with
    `--logs` reports (and nothing else):

    * node 1, its first own snapshot: a flipped byte (`batch-crc`);
    * node 1, its second own snapshot: a leader outside its ISR, no unclean election
      recorded (`leader-in-isr`; the file no longer matches the log: `log-replay`);
    * node 2, its first own snapshot: no SnapshotFooter (`footer-last`);
    * node 2, its second own snapshot: a broker's rack changed (`log-replay` only);
    * node 3, the last shared snapshot: a broker's rack changed (`nodes-agree`, and
      `log-replay`);
    * node 3, its first own snapshot: a record of a type no Kafka version has (9999), which
      must be named (`batch-format`), never skipped.
    """
    c = copy_cluster(cluster, dest)
    n1, n2, n3 = c.node_dirs[:3]
    names = [os.path.basename(d) for d in (n1, n2, n3)]
    ids1, ids2 = own_ids(c, 0), own_ids(c, 1)
    assert len(ids1) >= 2 and len(ids2) >= 2 and c.shared_ids, (
        "the source must give nodes 1 and 2 two snapshots each of their own, and one id "
        "every node holds")
    expected = set()

    path = snapshot_path(n1, ids1[0])
    flip_byte(path)
    expected.add(("batch-crc", names[0], os.path.basename(path)))

    path = snapshot_path(n1, ids1[1])
    rewrite(path, ids1[1], leader_outside_isr())
    expected |= {("leader-in-isr", names[0], os.path.basename(path)),
                 ("log-replay", names[0], os.path.basename(path))}

    path = snapshot_path(n2, ids2[0])
    drop_footer(path)
    expected.add(("footer-last", names[1], os.path.basename(path)))

    path = snapshot_path(n2, ids2[1])
    rewrite(path, ids2[1], change_rack)
    expected.add(("log-replay", names[1], os.path.basename(path)))

    shared = max(map(tuple, c.shared_ids))
    path = snapshot_path(n3, shared)
    rewrite(path, shared, change_rack)
    expected |= {("nodes-agree", names[2], os.path.basename(path)),
                 ("log-replay", names[2], os.path.basename(path))}

    ids3 = own_ids(c, 2)
    assert ids3, "the source must give node 3 a snapshot of its own"
    path = snapshot_path(n3, ids3[0])
    add_unknown_record(path)
    expected.add(("batch-format", names[2], os.path.basename(path)))
    return c, expected
