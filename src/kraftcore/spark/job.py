"""The Spark job of `kraftcore verify`.

1. **Decode, in the executors.** The snapshot files are read with Spark's `binaryFile`
   source (one row per file; the file list comes from `kraftcore.spark.inputs`, one
   DataFrame per node carrying the node's name) and decoded by `mapInArrow`: each Arrow
   batch's `content` column is read through zero-copy views (`pyarrow.Buffer` ->
   `memoryview`) by kraftcore's native decoder, `checks.analyze_file` runs the per-file
   checks, and the result goes back as one Arrow row per file, with the file's brokers,
   topics, partitions, configs and violations as nested lists. That DataFrame is cached:
   everything after reads it, not the files.
2. **Tables.** `snapshots`, `brokers`, `topics`, `partitions`, `configs` (and
   `violations`) are projections of it (`inline` of the nested lists); `--export DIR`
   writes each as Parquet under `DIR/<table>/`.
3. **Checks across files, as Spark SQL.** `epochs-monotonic`: a window over the partitions
   of each node ordered by snapshot id, `lag` of both epochs. `nodes-agree`: the digests
   (one per file, collected with the per-file summaries) are grouped by snapshot id on the
   driver; only the files that disagree are read again (fingerprints of their records,
   in the executors) and joined record by record. `log-replay`: one task per node replays
   its metadata log (`kraftcore.spark.replay`) and compares its snapshots.

The violations are formatted by the same functions the in-process engine uses
(`kraftcore.spark.checks`), so both engines report the same lines.
"""

import contextlib
import functools
import os
import threading
import time
import warnings

from kraftcore.spark import checks as C
from kraftcore.spark.replay import replay_node
from kraftcore.limits import SPARK_CROSS_VIOLATIONS_MAX, SPARK_PAIR_DIFFERENCES_MAX
from kraftcore.spark.report import Report

__all__ = ["verify_with_spark", "snapshot_tables", "decoded_files", "tables", "TABLES",
           "FILE_SCHEMA", "local_path"]

# ------------------------------------------------------------------ schema

_SCALARS = (("node", "string"), ("path", "string"), ("end_offset", "long"),
            ("epoch", "int"), ("size_bytes", "long"), ("batches", "int"),
            ("records", "long"), ("timestamp_ms", "long"), ("metadata_version", "int"),
            ("digest", "string"), ("damaged", "boolean"))
_NESTED = {
    "brokers": (("broker_id", "int"), ("broker_epoch", "long"), ("incarnation_id", "string"),
                ("rack", "string"), ("fenced", "boolean"),
                ("in_controlled_shutdown", "boolean"), ("offset", "long")),
    "topics": (("topic_id", "string"), ("name", "string"), ("offset", "long")),
    "partitions": (("topic_id", "string"), ("topic_name", "string"), ("partition_id", "int"),
                   ("replicas", "array<int>"), ("isr", "array<int>"),
                   ("removing_replicas", "array<int>"), ("adding_replicas", "array<int>"),
                   ("leader", "int"), ("leader_recovery_state", "int"),
                   ("leader_epoch", "int"), ("partition_epoch", "int"), ("offset", "long")),
    "configs": (("resource_type", "int"), ("resource_name", "string"), ("name", "string"),
                ("value", "string"), ("offset", "long")),
    "violations": (("check", "string"), ("offset", "long"), ("position", "long"),
                   ("record", "string"), ("message", "string"), ("other_file", "string")),
    "violation_counts": (("check", "string"), ("total", "long")),
}
TABLES = ("snapshots", "brokers", "topics", "partitions", "configs", "violations")

assert tuple(n for n, _ in _NESTED["brokers"]) == C.BROKER_FIELDS
assert tuple(n for n, _ in _NESTED["topics"]) == C.TOPIC_FIELDS
assert tuple(n for n, _ in _NESTED["partitions"]) == C.PARTITION_FIELDS
assert tuple(n for n, _ in _NESTED["configs"]) == C.CONFIG_FIELDS


def _ddl(fields):
    return ", ".join(f"{name} {kind}" for name, kind in fields)


def _struct_ddl(fields):
    return "struct<" + ", ".join(f"{name}: {kind}" for name, kind in fields) + ">"


FILE_SCHEMA = ", ".join([_ddl(_SCALARS)] + [f"{name} array<{_struct_ddl(fields)}>"
                                            for name, fields in _NESTED.items()])
"""The Spark schema (DDL) of the decoded DataFrame: one row per file."""

_FINGERPRINT_SCHEMA = "path string, key string, offset long, hash string, value binary"


def _arrow_type(kind):
    import pyarrow as pa

    return {"string": pa.string(), "long": pa.int64(), "int": pa.int32(),
            "boolean": pa.bool_(), "binary": pa.binary(),
            "array<int>": pa.list_(pa.int32())}[kind]


# ------------------------------------------------------------------ executors

def local_path(uri):
    """A local path from the path Spark's binaryFile gives ("file:/a/b" -> "/a/b")."""
    if uri.startswith("file://"):
        return uri[len("file://"):]
    if uri.startswith("file:"):
        return uri[len("file:"):]
    return uri


def _file_views(batch):
    """(node, local path, memoryview of the content) of every row of an Arrow batch; the
    views point into the Arrow buffers (no copy)."""
    names = batch.schema.names
    paths = batch.column(names.index("path")).to_pylist()
    nodes = batch.column(names.index("node")).to_pylist()
    content = batch.column(names.index("content"))
    for i in range(batch.num_rows):
        value = content[i]
        view = memoryview(value.as_buffer()) if value.is_valid else memoryview(b"")
        yield nodes[i], local_path(paths[i]), view


def _nested(pa, per_file, fields):
    """A list<struct> Arrow column: one list of row tuples per file."""
    offsets = [0]
    flat = []
    for rows in per_file:
        flat.extend(rows)
        offsets.append(len(flat))
    columns = list(zip(*flat)) if flat else [()] * len(fields)
    arrays = [pa.array(list(col), type=_arrow_type(kind))
              for col, (_, kind) in zip(columns, fields)]
    struct = pa.StructArray.from_arrays(
        arrays, fields=[pa.field(name, _arrow_type(kind)) for name, kind in fields])
    return pa.ListArray.from_arrays(pa.array(offsets, type=pa.int32()), struct)


def results_to_arrow(results):
    """One Arrow RecordBatch (FILE_SCHEMA) holding `results` (`checks.FileResult`s)."""
    import pyarrow as pa

    sid = [r.snapshot_id for r in results]
    scalars = {
        "node": [r.node for r in results], "path": [r.path for r in results],
        "end_offset": [None if s is None else s[0] for s in sid],
        "epoch": [None if s is None else s[1] for s in sid],
        "size_bytes": [r.size_bytes for r in results],
        "batches": [r.batches for r in results], "records": [r.records for r in results],
        "timestamp_ms": [r.timestamp_ms for r in results],
        "metadata_version": [r.metadata_version for r in results],
        "digest": [r.digest for r in results], "damaged": [r.damaged for r in results],
    }
    arrays = [pa.array(scalars[name], type=_arrow_type(kind)) for name, kind in _SCALARS]
    nested = {
        "brokers": [r.brokers for r in results],
        "topics": [r.topics for r in results],
        "partitions": [r.partitions for r in results],
        "configs": [r.configs for r in results],
        "violations": [[(v.check, v.offset, v.position, v.record, v.message, v.other_file)
                        for v in r.violations] for r in results],
        "violation_counts": [sorted(r.violation_counts.items()) for r in results],
    }
    arrays += [_nested(pa, nested[name], fields) for name, fields in _NESTED.items()]
    names = [name for name, _ in _SCALARS] + list(_NESTED)
    return pa.RecordBatch.from_arrays(arrays, names=names)


def decode_files(batches):
    """The `mapInArrow` function of step 1 (runs in the executors). The cyclic garbage
    collector is paused per Arrow batch (the records form no cycles) and the Python
    objects are freed before it resumes, so it never scans them."""
    from kraftcore.metadata.records import cyclic_gc_paused

    for batch in batches:
        with cyclic_gc_paused():
            results = [C.analyze_file(node, path, view)
                       for node, path, view in _file_views(batch)]
            out = results_to_arrow(results)
            del results
        yield out


def fingerprint_files(batches):
    """The `mapInArrow` function of the second read of `nodes-agree` (executors)."""
    import pyarrow as pa

    for batch in batches:
        rows = []
        names = batch.schema.names
        paths = batch.column(names.index("path")).to_pylist()
        content = batch.column(names.index("content"))
        for i in range(batch.num_rows):
            path = local_path(paths[i])
            for fp in C.fingerprints(memoryview(content[i].as_buffer())):
                rows.append((path, fp.key, fp.offset, fp.hash, fp.value))
        columns = list(zip(*rows)) if rows else [()] * 5
        kinds = (pa.string(), pa.string(), pa.int64(), pa.string(), pa.binary())
        yield pa.RecordBatch.from_arrays(
            [pa.array(list(c), type=t) for c, t in zip(columns, kinds)],
            names=["path", "key", "offset", "hash", "value"])


def replay_task(task):
    """One node's log replay (runs in an executor)."""
    return replay_node(*task)


# ------------------------------------------------------------------ progress

class _TaskPoller:
    """Reports the finished / total tasks of the running Spark stages every 0.3 s."""

    def __init__(self, spark, phase, progress):
        self.tracker = spark.sparkContext.statusTracker()
        self.phase = phase
        self.progress = progress
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name="kraftcore-progress",
                                       daemon=True)

    def _run(self):
        while not self.stop_event.wait(0.3):
            done = total = 0
            try:
                for stage_id in self.tracker.getActiveStageIds():
                    info = self.tracker.getStageInfo(stage_id)
                    if info is not None:
                        done += info.numCompletedTasks
                        total += info.numTasks
            except Exception:  # the session is stopping
                return
            if total:
                self.progress(self.phase, done, total, "tasks")

    def __enter__(self):
        if self.progress:
            self.progress(self.phase, None, None, None)
            self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_event.set()
        if self.thread.is_alive():
            self.thread.join()


# ------------------------------------------------------------------ the job

def _union(frames):
    return functools.reduce(lambda a, b: a.unionByName(b), frames)


@contextlib.contextmanager
def _pandas_warning_ignored():
    """pyspark warns that it does not fully support pandas 3: mapInArrow does not use
    pandas (only pyspark's import check does)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning, module="pyspark")
        yield


def _configure(spark, nodes, arrow_batch_files, arrow_batch_bytes):
    conf = spark.conf
    conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(arrow_batch_files))
    conf.set("spark.sql.execution.arrow.maxBytesPerBatch", str(arrow_batch_bytes))
    # Spark lists the explicit file paths on the driver, not in a Spark job of its own.
    total_files = sum(len(n.files) for n in nodes)
    conf.set("spark.sql.sources.parallelPartitionDiscovery.threshold",
             str(max(32, total_files + 1)))


def decoded_files(spark, nodes):
    """The decoded DataFrame (`FILE_SCHEMA`, one row per file) of the snapshot files of
    `nodes`: `binaryFile` over each node's files, decoded and checked by `mapInArrow`.
    Lazy: nothing is read before an action."""
    from pyspark.sql import functions as F

    frames = [spark.read.format("binaryFile").load(list(node.files))
              .select("path", "content", F.lit(node.name).alias("node"))
              for node in nodes]
    with _pandas_warning_ignored():
        return _union(frames).mapInArrow(decode_files, FILE_SCHEMA)


def tables(decoded):
    """The tables of a decoded DataFrame, as DataFrames: `snapshots` (one row per file),
    `brokers`, `topics`, `partitions`, `configs` (one row per record, with the file's
    `node`, `path`, `end_offset`, `epoch`) and `file_violations` (what the per-file checks
    found)."""
    from pyspark.sql import functions as F

    keys = ["node", "path", "end_offset", "epoch"]
    return {
        "snapshots": decoded.select(*[n for n, _ in _SCALARS]),
        "brokers": decoded.select(*keys, F.inline("brokers")),
        "topics": decoded.select(*keys, F.inline("topics")),
        "partitions": decoded.select(*keys, F.inline("partitions")),
        "configs": decoded.select(*keys, F.inline("configs")),
        "file_violations": decoded.select(*keys, F.inline("violations")),
    }


def snapshot_tables(spark, nodes, *, arrow_batch_files=64, arrow_batch_bytes=64 << 20):
    """The tables of the snapshot files of `nodes` (`kraftcore.spark.inputs.Node`), for a
    notebook or a job of your own: `tables()` of a cached decoded DataFrame (also returned,
    as "files"; `unpersist()` it when done).

        nodes = discover_nodes(["/data/node-1", "/data/node-2"])
        t = snapshot_tables(spark, nodes)
        t["partitions"].where("leader = -1").groupBy("node", "end_offset").count().show()
    """
    from pyspark import StorageLevel

    _configure(spark, nodes, arrow_batch_files, arrow_batch_bytes)
    decoded = decoded_files(spark, nodes).persist(StorageLevel.MEMORY_AND_DISK)
    return {"files": decoded, **tables(decoded)}


def verify_with_spark(spark, nodes, *, export_dir=None, progress=None, master=None,
                      arrow_batch_files=64, arrow_batch_bytes=64 * 1024 * 1024):
    """Verify the files of `nodes` (`kraftcore.spark.inputs.Node`) with the SparkSession
    `spark`; returns a `Report`. `progress(phase, done, total, unit)` is called from time to
    time (from another thread too). An Arrow batch handed to a Python worker holds the whole
    contents of up to `arrow_batch_files` files, and no more than `arrow_batch_bytes` unless
    one file is larger (`arrow_batch_bytes` needs Spark 4; larger batches cost less per
    file, see bench/test_bench_verify.py)."""
    with _pandas_warning_ignored():
        return _verify(spark, nodes, export_dir, progress, master, arrow_batch_files,
                       arrow_batch_bytes)


def _verify(spark, nodes, export_dir, progress, master, arrow_batch_files,
            arrow_batch_bytes):
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    report = Report("spark", master or spark.sparkContext.master)
    report.nodes = list(nodes)
    _configure(spark, nodes, arrow_batch_files, arrow_batch_bytes)
    total_files = sum(len(n.files) for n in nodes)

    started = time.monotonic()
    decoded = decoded_files(spark, nodes).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        with _TaskPoller(spark, f"decoding {total_files:,} snapshot files", progress):
            rows = decoded.select(
                *[n for n, _ in _SCALARS], F.size("partitions").alias("n_partitions"),
                F.size("topics").alias("n_topics"), "violations",
                "violation_counts").collect()
        report.time_phase("read+decode+file checks", time.monotonic() - started)
        summaries, usable = _summaries(report, rows, nodes)

        started = time.monotonic()
        with _TaskPoller(spark, "comparing nodes", progress):
            _compare_nodes(spark, report, summaries)
        report.time_phase("nodes-agree", time.monotonic() - started)

        started = time.monotonic()
        with _TaskPoller(spark, "checking epochs over time", progress):
            _epochs(spark, decoded, report)
        report.time_phase("epochs-monotonic", time.monotonic() - started)

        with_logs = [n for n in nodes if n.log_dir]
        if with_logs:
            started = time.monotonic()
            tasks = [(n.name, n.log_dir, usable.get(n.name, [])) for n in with_logs]
            with _TaskPoller(spark, f"replaying {len(tasks)} metadata logs", progress):
                results = (spark.sparkContext.parallelize(tasks, len(tasks))
                           .map(replay_task).collect())
            for result in results:
                report.add_violations("log-replay", result.violations,
                                      checked=result.compared)
                report.not_covered += result.not_covered
                report.add_notes(result.node, result.notes)
            report.time_phase("log-replay", time.monotonic() - started)
        else:
            report.skip("log-replay", "no --logs given")

        report.finish()
        if export_dir:
            started = time.monotonic()
            with _TaskPoller(spark, "writing Parquet", progress):
                export(spark, decoded, report, export_dir)
            report.time_phase("export", time.monotonic() - started)
            report.export_dir = os.path.abspath(export_dir)
            report.finish()
    finally:
        decoded.unpersist()
    return report


def _summaries(report, rows, nodes):
    """Fill the report from the per-file rows; returns the `FileSummary`s and, per node,
    the undamaged files with a snapshot id."""
    from kraftcore.spark.local import add_result, read_file

    seen = set()
    summaries, usable = [], {}
    for row in rows:
        sid = None if row.end_offset is None else (row.end_offset, row.epoch)
        path = row.path
        seen.add(path)
        violations = [C.Violation(v.check, row.node, path, C.snapshot_id_text(sid), v.offset,
                                  v.position, v.record, v.message, v.other_file)
                      for v in row.violations]
        report.add_file(node=row.node, path=path, snapshot_id=sid, size_bytes=row.size_bytes,
                        batches=row.batches, records=row.records, digest=row.digest,
                        damaged=row.damaged, partitions=row.n_partitions,
                        topics=row.n_topics, violations=violations,
                        violation_counts={c.check: c.total for c in row.violation_counts})
        summaries.append(C.FileSummary(row.node, path, sid, row.digest))
        if not row.damaged and sid is not None:
            usable.setdefault(row.node, []).append((path, sid))
    # Spark skips empty files: check what it did not return here.
    for node in nodes:
        for path in node.files:
            if path not in seen:
                try:
                    data = read_file(path)
                except OSError as exc:
                    missing = C.FileResult(node.name, path, C.parse_snapshot_id(path), 0)
                    missing.damaged = True
                    missing.violate("batch-format", f"the file cannot be read: {exc}")
                    add_result(report, missing)
                    continue
                r = C.analyze_file(node.name, path, data)
                add_result(report, r)
                summaries.append(C.FileSummary(r.node, r.path, r.snapshot_id, r.digest))
    return summaries, usable


def _compare_nodes(spark, report, summaries):
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    pairs, compared = C.plan_node_comparisons(summaries)
    if not pairs:
        report.add_violations("nodes-agree", [], checked=compared)
        return
    paths = sorted({s.path for pair in pairs for s in pair})
    prints = (spark.read.format("binaryFile").load(paths).select("path", "content")
              .mapInArrow(fingerprint_files, _FINGERPRINT_SCHEMA))
    prints = prints.cache()
    try:
        plan = spark.createDataFrame(
            [(i, mine.path, ref.path) for i, (mine, ref) in enumerate(pairs)],
            "pair int, mine string, ref string")
        a = (plan.join(prints, prints.path == plan.mine)
             .select("pair", "key", "offset", "hash", "value"))
        b = (plan.join(prints, prints.path == plan.ref)
             .select("pair", "key", F.col("offset").alias("other_offset"),
                     F.col("hash").alias("other_hash"), F.col("value").alias("other_value")))
        differ = (a.join(b, ["pair", "key"], "full_outer")
                  .where(F.col("hash").isNull() | F.col("other_hash").isNull()
                         | (F.col("hash") != F.col("other_hash"))))
        order = Window.partitionBy("pair").orderBy(
            F.col("offset").isNull(), F.coalesce("offset", "other_offset"), "key")
        ranked = (differ.withColumn("rank", F.row_number().over(order))
                  .withColumn("total", F.count(F.lit(1)).over(Window.partitionBy("pair"))))
        rows = ranked.where(F.col("rank") <= SPARK_PAIR_DIFFERENCES_MAX).collect()
        topics = prints.where(F.col("key").startswith("topic/")).select("path", "key",
                                                                        "value").collect()
    finally:
        prints.unpersist()
    names = {}
    for row in topics:
        names.setdefault(row.path, []).append(row)
    by_pair = {}
    for row in sorted(rows, key=lambda r: (r.pair, r.rank)):
        by_pair.setdefault(row.pair, []).append(row)
    violations, total = [], 0
    for i, pair in enumerate(pairs):
        found = by_pair.get(i, [])
        differences = [C.Difference(r.key, r.offset, r.value, r.other_offset, r.other_value)
                       for r in found]
        topic_names = {**C.topic_names(names.get(pair[1].path, [])),
                       **C.topic_names(names.get(pair[0].path, []))}
        listed = C.node_difference_violations(pair, differences,
                                              found[0].total if found else 0, topic_names)
        total += len(listed)
        violations += listed
    report.add_violations("nodes-agree", violations[:SPARK_CROSS_VIOLATIONS_MAX], total=total,
                          checked=compared)


def _epochs(spark, decoded, report):
    """`epochs-monotonic` as a window over each node's partitions. The window sorts only
    numbers and the partition key: each file is known by its index in the (node, path)
    order, joined in from a small broadcast table, and the paths come back on the driver
    for the few rows that break the rule."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    paths = sorted((f["node"], f["path"]) for f in report.files)
    index = {path: i for i, (_, path) in enumerate(paths)}
    files = spark.createDataFrame([(p, i) for p, i in index.items()],
                                  "path string, file_index int")
    parts = (decoded.where(~F.col("damaged") & F.col("end_offset").isNotNull())
             .join(F.broadcast(files), "path")
             .select("node", "file_index", "end_offset", "epoch", F.inline("partitions"))
             .select("node", "file_index", "end_offset", "epoch", "topic_id", "topic_name",
                     "partition_id", "offset", "leader_epoch", "partition_epoch"))
    order = Window.partitionBy("node", "topic_id", "partition_id").orderBy(
        "end_offset", "epoch", "file_index")
    lagged = parts.select(
        "*", *[F.lag(c).over(order).alias(f"prev_{c}") for c in
               ("file_index", "end_offset", "epoch", "leader_epoch", "partition_epoch")])
    regressed = ((F.col("leader_epoch") < F.col("prev_leader_epoch"))
                 | (F.col("partition_epoch") < F.col("prev_partition_epoch")))
    counts = lagged.agg(
        F.count(F.col("prev_file_index")).alias("compared"),
        F.sum(F.when(regressed, 1).otherwise(0)).alias("regressed")).first()
    rows = []
    if counts.regressed:
        rows = (lagged.where(regressed)
                .orderBy("node", "end_offset", "epoch", "file_index", "offset")
                .limit(SPARK_CROSS_VIOLATIONS_MAX).collect())
    path_of = [path for _, path in paths]
    violations = [C.epoch_violation(C.EpochRegression(
        r.node, path_of[r.file_index], (r.end_offset, r.epoch), r.topic_id, r.topic_name,
        r.partition_id, r.offset, r.leader_epoch, r.partition_epoch,
        path_of[r.prev_file_index], (r.prev_end_offset, r.prev_epoch), r.prev_leader_epoch,
        r.prev_partition_epoch)) for r in rows]
    report.add_violations("epochs-monotonic", violations, total=counts.regressed or 0,
                          checked=counts.compared or 0)


_VIOLATION_DDL = ("check string, node string, file string, snapshot_id string, offset long, "
                  "position long, record string, message string, other_file string")


def export(spark, decoded, report, out_dir):
    """Write the tables as Parquet under `out_dir/<table>/` (each replaced if present)."""
    frames = tables(decoded)
    del frames["file_violations"]  # the report's violations replace them
    frames["violations"] = spark.createDataFrame([tuple(v) for v in report.violations],
                                                 _VIOLATION_DDL)
    for name, frame in frames.items():
        frame.write.mode("overwrite").parquet(os.path.join(os.path.abspath(out_dir), name))


# ------------------------------------------------------------------ benchmark probes

def read_only(batches):
    """A `mapInArrow` function that only touches each file's bytes (their count): with
    `decode_only`, it splits the job's time into Spark's reading and transport, and
    kraftcore's decoding (bench/test_bench_verify.py)."""
    import pyarrow as pa

    for batch in batches:
        sizes = [len(view) for _, _, view in _file_views(batch)]
        yield pa.RecordBatch.from_arrays([pa.array(sizes, type=pa.int64())], names=["n"])


def decode_only(batches):
    """A `mapInArrow` function that decodes every file (batches and metadata records, as
    `checks.analyze_file` does) and returns only the record counts: no checks, no tables."""
    import pyarrow as pa

    from kraftcore import codec
    from kraftcore.metadata import records as R

    for batch in batches:
        counts = []
        for _, _, view in _file_views(batch):
            decoded = codec.decode_batches(view)
            values = [r.value for b in decoded if not b.is_control for r in b.records]
            counts.append(len(R.decode_values(values)))
        yield pa.RecordBatch.from_arrays([pa.array(counts, type=pa.int64())], names=["n"])
