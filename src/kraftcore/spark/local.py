"""The in-process engine: every check of `kraftcore verify`, in one Python process, without
Spark. It is the reference the Spark job is held to (the tests run both on the same files
and compare the violations), the baseline of the benchmark, and a way to check a handful of
files where starting a JVM is not worth it.

It reads each file whole, runs `checks.analyze_file`, then the cross-file checks with the
pure functions of `kraftcore.spark.checks` and `kraftcore.spark.replay`.
"""

import time

from kraftcore.metadata.records import cyclic_gc_paused
from kraftcore.spark import checks as C
from kraftcore.spark.replay import replay_node
from kraftcore.limits import SPARK_CROSS_VIOLATIONS_MAX, SPARK_PAIR_DIFFERENCES_MAX
from kraftcore.spark.report import Report

__all__ = ["verify_in_process", "read_file"]


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def add_result(report, r):
    report.add_file(node=r.node, path=r.path, snapshot_id=r.snapshot_id,
                    size_bytes=r.size_bytes, batches=r.batches, records=r.records,
                    digest=r.digest, damaged=r.damaged, partitions=len(r.partitions),
                    topics=len(r.topics), violations=r.violations,
                    violation_counts=r.violation_counts)


def verify_in_process(nodes, *, progress=None):
    """Verify the files of `nodes` (`kraftcore.spark.inputs.Node`); returns a `Report`.
    `progress`, if given, is called as `progress(phase, done, total)`. The cyclic garbage
    collector is paused meanwhile: the rows kept for the cross-file checks form no cycles,
    and it would rescan them again and again."""
    with cyclic_gc_paused():
        return _verify(nodes, progress)


def _verify(nodes, progress):
    report = Report("in-process")
    report.nodes = list(nodes)
    summaries, partition_rows, usable = [], [], {}
    total = sum(len(n.files) for n in nodes)
    done = 0
    started = time.monotonic()
    for node in nodes:
        for path in node.files:
            r = C.analyze_file(node.name, path, read_file(path))
            add_result(report, r)
            summaries.append(C.FileSummary(r.node, r.path, r.snapshot_id, r.digest))
            if not r.damaged and r.snapshot_id is not None:
                usable.setdefault(node.name, []).append((r.path, r.snapshot_id))
                partition_rows += [(r.node, r.path, r.snapshot_id, p[0], p[1], p[2], p[11],
                                    p[9], p[10]) for p in r.partitions]
            done += 1
            if progress:
                progress("decoding snapshot files", done, total)
    report.time_phase("read+decode+file checks", time.monotonic() - started)

    started = time.monotonic()
    compare_nodes(report, summaries)
    report.time_phase("nodes-agree", time.monotonic() - started)

    started = time.monotonic()
    regressions, compared = C.epoch_regressions(partition_rows)
    report.add_violations("epochs-monotonic",
                          [C.epoch_violation(r) for r in regressions[:SPARK_CROSS_VIOLATIONS_MAX]],
                          total=len(regressions), checked=compared)
    report.time_phase("epochs-monotonic", time.monotonic() - started)

    started = time.monotonic()
    with_logs = [n for n in nodes if n.log_dir]
    if not with_logs:
        report.skip("log-replay", "no --logs given")
    for i, node in enumerate(with_logs):
        result = replay_node(node.name, node.log_dir, usable.get(node.name, []))
        report.add_violations("log-replay", result.violations, checked=result.compared)
        report.not_covered += result.not_covered
        report.add_notes(result.node, result.notes)
        if progress:
            progress("replaying metadata logs", i + 1, len(with_logs))
    if with_logs:
        report.time_phase("log-replay", time.monotonic() - started)
    return report.finish()


def compare_nodes(report, summaries):
    """`nodes-agree` in process: compare the records of every file that disagrees with its
    snapshot id's reference file."""
    pairs, compared = C.plan_node_comparisons(summaries)
    violations, total = [], 0
    cache = {}

    def prints(path):
        if path not in cache:
            cache[path] = C.fingerprints(read_file(path))
        return cache[path]

    for pair in pairs:
        mine, ref = prints(pair[0].path), prints(pair[1].path)
        differences = C.diff_fingerprints(mine, ref)
        names = {**C.topic_names(ref), **C.topic_names(mine)}
        found = C.node_difference_violations(
            pair, differences[:SPARK_PAIR_DIFFERENCES_MAX], len(differences), names)
        total += len(found)
        violations += found
    report.add_violations("nodes-agree", violations[:SPARK_CROSS_VIOLATIONS_MAX], total=total,
                          checked=compared)
