"""`kraftcore verify` on the snapshots kraftcore itself writes: every node of a simulator
run (the controller workload: controllers and brokers under crashes and partitions, each
snapshotting its own image) and every node of a real local cluster (`kraftcore cluster up`,
processes on 127.0.0.1). A clean set passes with Spark as in one process; then one file per
node is broken — a flipped byte, a leader outside its ISR, a missing footer, a snapshot
unlike its log, two nodes disagreeing at one snapshot id — and each is caught and named."""

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from kraftcore.log.snapshots import parse_file_name
from kraftcore.spark.inputs import discover_nodes
from kraftcore.spark.job import verify_with_spark
from kraftcore.spark.local import verify_in_process

from tests.spark.util import (change_rack, drop_footer, flip_byte, leader_outside_isr,
                              problem_keys, rewrite)

pytestmark = pytest.mark.spark

WAIT_S = 90
METADATA_DIR = "__cluster_metadata-0"


def _simulator(root):
    from kraftcore.sim.controller import ControllerSimulation
    from kraftcore.sim.export import export_node
    from kraftcore.sim.params import params_for_seed

    # The first seed whose every node ends with a snapshot holding brokers and a partition
    # of two replicas or more, which the edits below need (what a seed gives follows the
    # Raft core's schedule, so it is searched rather than fixed).
    for seed in range(1, 21):
        params = params_for_seed(seed, observers=3, workload="controller")
        params = dataclasses.replace(
            params, controller=dataclasses.replace(params.controller, snapshot_bytes=2048))
        sim = ControllerSimulation(params)
        sim.run()
        if all(_editable(node.storage) for node in sim.nodes.values()):
            break
    else:
        raise AssertionError("no seed in 1-20 leaves snapshots the edits can break")
    nodes = []
    for node_id, node in sorted(sim.nodes.items()):
        node_dir = os.path.join(root, f"node-{node_id}")
        export_node(node.storage, os.path.join(node_dir, METADATA_DIR))
        nodes.append(node_dir)
    return nodes


def _editable(storage):
    from kraftcore.metadata import records as R
    from kraftcore.metadata.snapshot import decode_snapshot

    snapshot_id = storage.latest_snapshot_id()
    if snapshot_id is None:
        return False
    data = storage.read_snapshot(snapshot_id, 0, storage.snapshot_size(snapshot_id))
    records, _ = decode_snapshot(data)
    return (any(type(r) is R.RegisterBrokerRecord for r in records)
            and any(type(r) is R.PartitionRecord and len(r.replicas) >= 2 for r in records))


def _kraftcore(*args):
    return subprocess.run([sys.executable, "-m", "kraftcore.cli.main", *args],
                          capture_output=True, text=True, timeout=WAIT_S)


def _local_cluster(root):
    directory = os.path.join(root, "cluster")
    settings = ["controller.quorum.election.timeout.ms=300",
                "controller.quorum.fetch.timeout.ms=600", "broker.heartbeat.interval.ms=200",
                "broker.session.timeout.ms=2000", "metadata.log.max.snapshot.interval.ms=500"]
    args = [sys.executable, "-m", "kraftcore.cli.main", "cluster", "up", "--foreground",
            "--controllers", "3",
            "--brokers", "3", "--dir", directory]
    for setting in settings:
        args += ["--set", setting]
    supervisor = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        path = os.path.join(directory, "cluster.json")
        deadline = time.monotonic() + WAIT_S
        while not os.path.exists(path):
            if supervisor.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("kraftcore cluster up did not start")
            time.sleep(0.1)
        with open(path) as f:
            nodes = json.load(f)["nodes"]
        bootstrap = f"127.0.0.1:{nodes[0]['port']}"
        metadata = [n["dirs"][-1] for n in nodes]
        for i in range(4):
            # Retried: the first requests may reach the quorum before the brokers are up.
            while _kraftcore("topics", "create", "--bootstrap-controller", bootstrap,
                             "--topic", f"t{i}", "--partitions", "3",
                             "--replication-factor", "2").returncode != 0:
                if time.monotonic() > deadline:
                    raise AssertionError("topics could not be created")
                time.sleep(0.2)
            time.sleep(0.6)  # past the snapshot interval: each node snapshots again

        def snapshots(d):
            return [f for f in os.listdir(os.path.join(d, METADATA_DIR))
                    if f.endswith(".checkpoint")]
        while not all(len(snapshots(d)) >= 1 for d in metadata):
            if time.monotonic() > deadline:
                raise AssertionError("not every node wrote a snapshot")
            time.sleep(0.2)
    finally:
        _kraftcore("cluster", "down", "--dir", directory)
        supervisor.wait(WAIT_S)
    return metadata


SOURCES = {"simulator": _simulator, "local-cluster": _local_cluster}


@pytest.fixture(scope="module", params=sorted(SOURCES))
def node_dirs(request, tmp_path_factory):
    return SOURCES[request.param](str(tmp_path_factory.mktemp(request.param)))


def _snapshots(node_dir):
    found = []
    for dirpath, _, names in os.walk(node_dir):
        for name in names:
            if name.endswith(".checkpoint"):
                found.append((parse_file_name(name), os.path.join(dirpath, name)))
    return sorted(found)


def test_the_clean_snapshots_of_every_node_pass(spark, node_dirs):
    nodes = discover_nodes(node_dirs, [])
    report = verify_with_spark(spark, nodes)
    assert report.violations == []
    assert report.checked["batch-crc"] >= len(node_dirs)
    assert report.checked["log-replay"] >= 1
    local = verify_in_process(nodes)
    assert local.violations == [] and local.counts == report.counts


def _copy(node_dirs, dest):
    copies = []
    for i, node_dir in enumerate(node_dirs):
        copy = os.path.join(dest, f"node-{i + 1}")
        shutil.copytree(node_dir, copy)
        for dirpath, _, names in os.walk(copy):
            for name in names:
                os.chmod(os.path.join(dirpath, name), 0o644)
        copies.append(copy)
    return copies


def test_each_broken_file_is_caught_and_named(spark, node_dirs, tmp_path):
    copies = _copy(node_dirs, str(tmp_path))
    name = [os.path.basename(c) for c in copies]
    newest = [_snapshots(c)[-1] for c in copies]
    expected = set()
    flip_byte(newest[0][1])
    expected.add(("batch-crc", name[0], os.path.basename(newest[0][1])))
    rewrite(newest[1][1], newest[1][0], leader_outside_isr())
    expected.add(("leader-in-isr", name[1], os.path.basename(newest[1][1])))
    drop_footer(newest[2][1])
    expected.add(("footer-last", name[2], os.path.basename(newest[2][1])))
    rewrite(newest[3][1], newest[3][0], change_rack)
    expected.add(("log-replay", name[3], os.path.basename(newest[3][1])))
    nodes = discover_nodes(copies, [])
    found = problem_keys(verify_with_spark(spark, nodes))
    assert expected <= found, f"missed {expected - found}; found {found}"
    assert found == problem_keys(verify_in_process(nodes))


def test_two_nodes_disagreeing_at_one_snapshot_id_are_caught(spark, node_dirs, tmp_path):
    # Node 5 gets node 6's newest snapshot with a broker's rack changed.
    copies = _copy(node_dirs, str(tmp_path))
    sid, path = _snapshots(copies[5])[-1]
    target = os.path.join(os.path.dirname(_snapshots(copies[4])[-1][1]),
                          os.path.basename(path))
    if os.path.exists(target):
        os.remove(target)
    shutil.copyfile(path, target)
    rewrite(target, sid, change_rack)
    nodes = discover_nodes(copies, [])
    report = verify_with_spark(spark, nodes)
    disagree = [v for v in report.violations if v.check == "nodes-agree"]
    assert disagree and all(os.path.basename(v.file) == os.path.basename(target)
                            for v in disagree)
    assert {"node-5", "node-6"} & {v.node for v in disagree}
    assert problem_keys(report) == problem_keys(verify_in_process(nodes))
