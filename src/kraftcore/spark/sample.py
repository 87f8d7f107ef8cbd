"""Sample cluster directories to try `kraftcore verify` on, and the fixtures of its tests and
benchmark: a metadata log written by a real `QuorumController` (over the one-voter
`kraftcore.controller.local.LocalQuorum`), copied to every node, and snapshots of it taken at
offsets that differ from node to node (with some ids shared by all nodes, so the nodes are
compared).

    python -m kraftcore.spark.sample DIR [--nodes 3] [--topics 8]
    kraftcore verify --snapshots DIR/node-* --logs

Layout (Kafka's, kafka-facts §4.1, §4.4):

    DIR/node-<i>/__cluster_metadata-0/00000000000000000000.log (+ .index, .timeindex, ...)
    DIR/node-<i>/__cluster_metadata-0/<end offset>-<epoch>.checkpoint

The history: brokers register and are unfenced; topics are created; a topic config is set;
the controller resigns and is elected again (a new epoch); a broker is fenced (leaders move,
ISRs shrink) and comes back; a partition loses every in-sync replica and gets a leader by an
unclean election (leader recovery state RECOVERING); a topic is deleted; more topics come;
a preferred leader election runs. A snapshot can be taken after each step ("cuts").
"""

import argparse
import os
import random
import sys
from typing import NamedTuple

from kraftcore.controller.replication import UNCLEAN_LEADER_ELECTION, NewTopic
from kraftcore.runtime.raft_storage import FileRaftStorage
from kraftcore.metadata.image import CONFIG_TOPIC
from kraftcore.metadata.loader import MetadataLoader
from kraftcore.metadata.snapshot import encode_snapshot
from kraftcore.types import Uuid
from kraftcore.controller.local import LocalQuorum

__all__ = ["SampleCluster", "SampleHistory", "build_history", "write_sample_cluster",
           "snapshot_images", "METADATA_DIR"]

METADATA_DIR = "__cluster_metadata-0"


class SampleHistory(NamedTuple):
    """A metadata log (`CommittedBatch`es) and the offsets after each step of it."""

    batches: list
    cuts: list  # batch-aligned end offsets, one per step, increasing


class SampleCluster(NamedTuple):
    root: str
    node_dirs: list  # the directories to give --snapshots, one per node
    log_dirs: list  # each node's __cluster_metadata-0
    snapshots: dict  # node dir -> [(end offset, epoch)]
    shared_ids: list  # snapshot ids every node holds


def _heartbeat_all(quorum, epochs, **kwargs):
    for b, epoch in epochs.items():
        quorum.call("broker_heartbeat", b, epoch, metadata_offset=quorum.next_offset(),
                    **kwargs.get(b, {}))


def build_history(*, brokers=4, topics=8, partitions=3, seed=7, extra_topics=None):
    """Drive a controller through the history of the module docstring; returns a
    `SampleHistory`. `extra_topics` (default `topics`) topics are created near the end, so
    later snapshots are larger."""
    if brokers < 3:
        raise ValueError("the sample history needs at least 3 brokers")
    quorum = LocalQuorum(seed=seed)
    rng = random.Random(seed)
    cuts = []

    def cut():
        cuts.append(quorum.next_offset())

    epochs = {b: quorum.call("register_broker", b, Uuid.random(rng),
                             rack=f"rack-{b % 2}").broker_epoch for b in range(brokers)}
    _heartbeat_all(quorum, epochs)
    cut()
    for t in range(topics):
        quorum.call("create_topics", [NewTopic(f"topic-{t}", partitions, 3)])
    quorum.call("create_topics", [NewTopic("solo", assignments={0: [1, 2]})])
    cut()
    quorum.call("incremental_alter_configs", [
        (CONFIG_TOPIC, "topic-0", [("min.insync.replicas", "set", "2")]),
        (CONFIG_TOPIC, "solo", [(UNCLEAN_LEADER_ELECTION, "set", "true")])])
    cut()
    quorum.resign()
    for _ in range(50):
        quorum.run(quorum.now_ms + 500)
        if quorum.controller.active:
            break
    else:
        raise RuntimeError("the sample quorum did not elect a leader again")
    _heartbeat_all(quorum, epochs)
    cut()
    # Broker 2 leaves: leaders move away from it, ISRs shrink ("solo" keeps only 1).
    quorum.call("broker_heartbeat", 2, epochs[2], metadata_offset=quorum.next_offset(),
                want_fence=True)
    cut()
    # Broker 1 leaves too: "solo" has no in-sync replica left (leader -1, ISR [1]).
    quorum.call("broker_heartbeat", 1, epochs[1], metadata_offset=quorum.next_offset(),
                want_fence=True)
    cut()
    # Broker 2 comes back; "solo" allows unclean elections, so 2 leads it, RECOVERING.
    quorum.call("broker_heartbeat", 2, epochs[2], metadata_offset=quorum.next_offset())
    quorum.call("elect_leaders", "unclean", [("solo", 0)])
    quorum.call("broker_heartbeat", 1, epochs[1], metadata_offset=quorum.next_offset())
    cut()
    quorum.call("delete_topics", ["topic-1"])
    extra = topics if extra_topics is None else extra_topics
    for t in range(extra):
        quorum.call("create_topics", [NewTopic(f"later-{t}", partitions, 3)])
    cut()
    quorum.call("elect_leaders", "preferred")
    _heartbeat_all(quorum, epochs)
    cut()
    batches = quorum.storage.batches()
    cuts = sorted(set(c for c in cuts if c > 0))
    return SampleHistory(batches, cuts)


def snapshot_images(history, offsets):
    """{end offset: MetadataImage} of the log replayed up to each of `offsets` (batch
    aligned)."""
    loader = MetadataLoader()
    images = {}
    pending = list(history.batches)
    for offset in sorted(set(offsets)):
        upto = [b for b in pending if b.base_offset < offset]
        pending = pending[len(upto):]
        loader.apply(upto)
        if loader.next_offset != offset:
            raise ValueError(f"offset {offset} is not a batch boundary of the sample log")
        images[offset] = loader.image
    return images


def _node_cuts(cuts, nodes):
    """Which cuts each node snapshots: the second cut and the last cut on every node (the
    shared ids), the others spread over the nodes."""
    shared = {cuts[min(1, len(cuts) - 1)], cuts[-1]}
    chosen = []
    for i in range(nodes):
        own = {c for j, c in enumerate(cuts) if j % nodes == i}
        chosen.append(sorted(shared | own))
    return chosen, sorted(shared)


def write_sample_cluster(root, *, nodes=3, history=None, **history_args):
    """Write the sample cluster under `root` (created; it must be empty or missing);
    returns a `SampleCluster`."""
    if nodes < 1:
        raise ValueError("a sample cluster needs at least one node")
    os.makedirs(root, exist_ok=True)
    if os.listdir(root):
        raise ValueError(f"{root} is not empty")
    history = history or build_history(**history_args)
    images = snapshot_images(history, history.cuts)
    per_node, shared = _node_cuts(history.cuts, nodes)
    encoded = {}
    node_dirs, log_dirs, snapshots = [], [], {}
    log_bytes = b"".join(b.data for b in history.batches)
    for i in range(nodes):
        node_dir = os.path.join(root, f"node-{i + 1}")
        log_dir = os.path.join(node_dir, METADATA_DIR)
        storage = FileRaftStorage.open(log_dir)
        try:
            storage.append_as_follower(log_bytes)
            storage.flush()
            ids = []
            for offset in per_node[i]:
                image = images[offset]
                sid = (image.end_offset, image.epoch)
                if offset not in encoded:
                    encoded[offset] = encode_snapshot(image)
                storage.write_snapshot(sid, encoded[offset])
                ids.append(sid)
        finally:
            storage.close()
        node_dirs.append(node_dir)
        log_dirs.append(log_dir)
        snapshots[node_dir] = ids
    shared_ids = [(images[o].end_offset, images[o].epoch) for o in shared]
    return SampleCluster(root, node_dirs, log_dirs, snapshots, shared_ids)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m kraftcore.spark.sample",
        description="Write sample KRaft node directories (metadata log + snapshots).")
    parser.add_argument("root", metavar="DIR", help="where to write (empty or missing)")
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--topics", type=int, default=8)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    try:
        cluster = write_sample_cluster(args.root, nodes=args.nodes, topics=args.topics,
                                       seed=args.seed)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for node_dir in cluster.node_dirs:
        ids = ", ".join(f"{o}-{e}" for o, e in cluster.snapshots[node_dir])
        print(f"{node_dir}: snapshots {ids}")
    print(f"try: kraftcore verify --snapshots {' '.join(cluster.node_dirs)} --logs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
