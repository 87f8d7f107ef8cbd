"""The Spark job of `kraftcore verify` on real snapshot files, in local mode, on the one
session of the run (conftest.py): a clean set passes, and a set with one file broken in
each way (a flipped byte, a missing footer, two nodes disagreeing at one snapshot id, a
leader outside its ISR, snapshots that differ from their log replay, a record of a type
no Kafka version has, which must be named) has each problem
caught and named — with exactly the violations the in-process engine reports. Then the
command itself: on the shared session, and once as a real process (quiet, no traceback,
exit status)."""

import io
import json
import os
import subprocess
import sys

import pytest

from kraftcore.cli import verify as verify_cli
from kraftcore.cli.main import build_parser
from kraftcore.spark.checks import CHECK_NAMES
from kraftcore.spark.job import TABLES, snapshot_tables, verify_with_spark
from kraftcore.spark.local import verify_in_process

from tests.spark.util import damage_all, nodes_of, problem_keys

pytestmark = pytest.mark.spark


def _same_reports(spark_report, local_report):
    assert [tuple(v) for v in spark_report.violations] == [
        tuple(v) for v in local_report.violations]
    assert spark_report.counts == local_report.counts
    assert spark_report.checked == local_report.checked
    assert spark_report.records == local_report.records
    assert spark_report.not_covered == local_report.not_covered


def test_a_clean_set_passes_and_exports_parquet(spark, cluster, tmp_path):
    import pyarrow.parquet as pq

    nodes = nodes_of(cluster, logs=True)
    out = tmp_path / "export"
    report = verify_with_spark(spark, nodes, export_dir=str(out))
    assert report.ok, report.render()
    assert all(report.status(c) == "passed" for c in CHECK_NAMES)
    _same_reports(report, verify_in_process(nodes))
    files = sum(len(n.files) for n in nodes)
    assert report.checked["log-replay"] == files
    assert {"read+decode+file checks", "epochs-monotonic", "log-replay",
            "export"} <= set(report.timings)

    tables = {name: pq.read_table(out / name) for name in TABLES}
    assert tables["snapshots"].num_rows == files
    assert tables["violations"].num_rows == 0
    snapshots = tables["snapshots"].to_pylist()
    assert {r["path"] for r in snapshots} == {f for n in nodes for f in n.files}
    assert sum(r["records"] for r in snapshots) == report.records
    assert tables["partitions"].num_rows == report.checked["leader-in-isr"]
    assert tables["topics"].num_rows == report.checked["topics-unique"]
    partition = tables["partitions"].to_pylist()[0]
    assert set(partition) >= {"node", "path", "end_offset", "epoch", "topic_id",
                              "topic_name", "partition_id", "replicas", "isr", "leader",
                              "leader_recovery_state", "leader_epoch", "partition_epoch",
                              "offset"}
    assert tables["brokers"].num_rows > 0 and tables["configs"].num_rows > 0

    frames = snapshot_tables(spark, nodes)  # the same tables, as DataFrames
    try:
        assert frames["partitions"].count() == report.checked["leader-in-isr"]
        assert frames["file_violations"].count() == 0
    finally:
        frames["files"].unpersist()


def test_each_problem_is_caught_and_named_as_in_process(spark, cluster, tmp_path):
    damaged, expected = damage_all(cluster, tmp_path / "damaged")
    nodes = nodes_of(damaged, logs=True)
    report = verify_with_spark(spark, nodes)
    assert problem_keys(report) == expected
    _same_reports(report, verify_in_process(nodes))
    by_check = {v.check: v for v in report.violations}
    assert by_check["batch-crc"].position is not None
    assert by_check["leader-in-isr"].record.startswith("PartitionRecord ")
    assert by_check["nodes-agree"].record == "RegisterBrokerRecord broker 0"
    assert by_check["nodes-agree"].other_file
    assert "unknown metadata record type 9999" in by_check["batch-format"].message


def test_the_command_on_a_running_session(spark, cluster, tmp_path):
    damaged, expected = damage_all(cluster, tmp_path / "damaged")
    report_path = tmp_path / "report.json"
    args = build_parser().parse_args(
        ["verify", "--snapshots", *damaged.node_dirs, "--logs", "--output",
         str(report_path)])
    out, err = io.StringIO(), io.StringIO()
    status = verify_cli.run(args, spark=spark, out=out, err=err)
    assert status == 1, err.getvalue()
    text = out.getvalue()
    for check, node, name in expected:
        assert any(line.startswith(f"  [{check}] {node}:") and name in line
                   for line in text.splitlines()), (check, node, name, text)
    assert "Traceback" not in err.getvalue()
    doc = json.loads(report_path.read_text())
    assert doc["ok"] is False and doc["engine"] == "spark"
    assert {(v["check"], v["node"], os.path.basename(v["file"])) for v in doc["violations"]
            } == expected


def test_the_command_as_a_process_is_quiet(cluster, tmp_path):
    """`kraftcore verify` started as users start it: its own embedded Spark, whose
    start-up chatter must not reach the terminal."""
    result = subprocess.run(
        [sys.executable, "-m", "kraftcore.cli.main", "verify", "--snapshots",
         *cluster.node_dirs, "--master", "local[1]"],
        capture_output=True, text=True, timeout=300, cwd=str(tmp_path),
        env={**os.environ, "PYTHONWARNINGS": "default"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1].startswith("OK: 12 checks passed, 1 skipped")
    # Only the progress lines (stderr is not a terminal: one line per phase).
    assert all(line.startswith("verify: ") for line in result.stderr.splitlines()), (
        result.stderr)
    assert "WARN" not in result.stdout + result.stderr
