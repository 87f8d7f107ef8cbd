"""`kraftcore verify` benchmarks: 1000 snapshot files of mixed sizes, checked through Spark
(local[2]) and in one process without Spark, with the time split into its parts.

The data (built once per run, fixed seed, outside the timed part): a QuorumController (over
`kraftcore.controller.local.LocalQuorum`) with 6 brokers creates 500 topics of 1 to 20 partitions
(replication factor 3; a broker is fenced and unfenced now and then, so leaders move); the
log is cut at 150 batch boundaries spread over its growth, and 10 nodes each hold the
snapshots of 100 of those cuts: 1000 `.checkpoint` files from a few records to ~6000,
~3 million records in all, under `<tmp>/node-<i>/__cluster_metadata-0/`.

Groups (records/s counts the metadata records of all 1000 files):

* `verify-1000-decode`: reading and decoding the files.
  `kraftcore-c` reads each file and decodes it (`decode_batches` + `decode_values`) in this
  process: the baseline; `in-process-read` only reads; `in-process-analyze` reads and runs
  `checks.analyze_file` (decode + the per-file checks + the table rows).
  `spark-local[2]-read` and `spark-local[2]-decode` do the same reading / decoding in
  Spark's executors (`binaryFile` + `mapInArrow`) on a warm session.
* `verify-1000-all-checks`: every check (nodes compared, epochs over time; no --logs):
  `in-process` (`verify_in_process`) against `spark-local[2]` (`verify_with_spark` on a warm
  session; its phases are printed at the end) and `spark-local[2]-cold` (what one
  `kraftcore verify` run costs, in a process of its own: start Spark, verify, stop).
* `spark-start`: `jvm` (`java -version`: the JVM's own start) against a process that
  starts the quiet session and stops it: `spark-session-local[2]-cds-off` (no class-data
  archive, KRAFTCORE_SPARK_CDS=0: the start before the archive existed),
  `spark-session-local[2]-cold` (none yet, the first start of an installation: it goes
  without and leaves a recorder process to write one once it has stopped, waited for
  outside the time) and `spark-session-local[2]-warm` (the archive in place, as a first
  `kraftcore verify` left it); `python-import-pyspark` is the imports alone. These
  run interleaved, one of each per round (the machine is shared: one after the other,
  the load would differ between them), each in its own cache directory; the times are
  handed to pytest-benchmark afterwards (interleave.py). `spark-local[2]-cold` runs with the
  archive in place too.

Nothing asserts on a timing; the numbers and where the time goes are printed at the end.
"""

import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time

import pytest
from interleave import REPLAY, interleaved

from kraftcore import codec
from kraftcore.controller.replication import NewTopic
from kraftcore.metadata import records as R
from kraftcore.metadata.snapshot import encode_snapshot
from kraftcore.types import Uuid
from kraftcore.controller.local import LocalQuorum
from kraftcore.spark import checks as C
from kraftcore.spark.inputs import discover_nodes
from kraftcore.spark.local import verify_in_process
from kraftcore.spark.sample import SampleHistory, snapshot_images

pyspark = pytest.importorskip("pyspark", reason="the spark extra is not installed")

SEED = 0x7665_7269
BROKERS = 6
TOPICS = 500
PARTITIONS_MAX = 20
CUTS = 150
NODES = 10
PER_NODE = 100
MASTER = "local[2]"
ROUNDS = 3
COLD_ROUNDS = 2
START_ROUNDS = 5
_STATE = {}  # name -> (median seconds, extra)


# ------------------------------------------------------------------ data

def _history():
    quorum = LocalQuorum(seed=SEED)
    rng = random.Random(SEED)
    epochs = {b: quorum.call("register_broker", b, Uuid.random(rng)).broker_epoch
              for b in range(BROKERS)}

    def heartbeat(b, **kwargs):
        quorum.call("broker_heartbeat", b, epochs[b], metadata_offset=quorum.next_offset(),
                    **kwargs)

    for b in range(BROKERS):
        heartbeat(b)
    cuts = []
    for t in range(TOPICS):
        result = quorum.call("create_topics", [NewTopic(f"topic-{t}",
                                                        rng.randint(1, PARTITIONS_MAX), 3)])
        assert result[0].error_code == 0, result
        if t % 50 == 25:  # a broker leaves and comes back: leaders move, ISRs shrink
            b = rng.randrange(BROKERS)
            heartbeat(b, want_fence=True)
            heartbeat(b)
        cuts.append(quorum.next_offset())
    step = len(cuts) / CUTS
    chosen = sorted({cuts[min(len(cuts) - 1, int(i * step))] for i in range(CUTS)})
    return SampleHistory(quorum.storage.batches(), chosen)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("verify-1000")
    history = _history()
    images = snapshot_images(history, history.cuts)
    encoded = {cut: encode_snapshot(images[cut]) for cut in history.cuts}
    rng = random.Random(SEED)
    for n in range(NODES):
        directory = root / f"node-{n + 1}" / "__cluster_metadata-0"
        directory.mkdir(parents=True)
        for cut in sorted(rng.sample(history.cuts, PER_NODE)):
            image = images[cut]
            name = f"{image.end_offset:020d}-{image.epoch:010d}.checkpoint"
            (directory / name).write_bytes(encoded[cut])
    nodes = discover_nodes(sorted(str(p) for p in root.iterdir()))
    files = [f for node in nodes for f in node.files]
    records = sum(_decode(_read(f)) for f in files)
    sizes = sorted(os.path.getsize(f) for f in files)
    info = {"files": len(files), "records": records, "bytes": sum(sizes),
            "smallest_bytes": sizes[0], "largest_bytes": sizes[-1],
            "median_bytes": sizes[len(sizes) // 2]}
    _STATE["dataset"] = info
    return nodes, files, info


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def _decode(data):
    batches = codec.decode_batches(data)
    values = [r.value for b in batches if not b.is_control for r in b.records]
    return len(R.decode_values(values))


def _extra(benchmark, info, peer):
    benchmark.extra_info.update(peer=peer, records=info["records"], bytes=info["bytes"])


def _keep(name, benchmark, **extra):
    """Keep the median for the summary printed at the end (none with --benchmark-disable)."""
    if benchmark.stats is not None:
        _STATE[name] = (benchmark.stats.stats.median, extra)


# ------------------------------------------------------------------ in process

@pytest.mark.benchmark(group="verify-1000-decode")
def test_in_process_read(benchmark, dataset):
    _, files, info = dataset
    total = benchmark.pedantic(lambda: sum(len(_read(f)) for f in files), rounds=ROUNDS,
                               warmup_rounds=1)
    assert total == info["bytes"]
    _extra(benchmark, info, "in-process-read")
    _keep("read", benchmark)


@pytest.mark.benchmark(group="verify-1000-decode")
def test_in_process_decode(benchmark, dataset):
    _, files, info = dataset
    with R.cyclic_gc_paused():
        total = benchmark.pedantic(lambda: sum(_decode(_read(f)) for f in files),
                                   rounds=ROUNDS, warmup_rounds=1)
    assert total == info["records"]
    _extra(benchmark, info, "kraftcore-c")
    _keep("decode", benchmark)


@pytest.mark.benchmark(group="verify-1000-decode")
def test_in_process_analyze(benchmark, dataset):
    nodes, _, info = dataset

    def run():
        records = violations = 0
        for n in nodes:
            for f in n.files:
                r = C.analyze_file(n.name, f, _read(f))
                records += r.records
                violations += len(r.violations)
        return records, violations

    with R.cyclic_gc_paused():  # as the engines run it
        records, violations = benchmark.pedantic(run, rounds=ROUNDS, warmup_rounds=1)
    assert records == info["records"] and violations == 0
    _extra(benchmark, info, "in-process-analyze")
    _keep("analyze", benchmark)


@pytest.mark.benchmark(group="verify-1000-all-checks")
def test_in_process_verify(benchmark, dataset):
    nodes, _, info = dataset
    report = benchmark.pedantic(lambda: verify_in_process(nodes), rounds=ROUNDS)
    assert report.ok and report.records == info["records"]
    _extra(benchmark, info, "in-process")
    _keep("verify-in-process", benchmark, timings=dict(report.timings))


# ------------------------------------------------------------------ spark

@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    from kraftcore.spark.session import build_session

    # Warm once started; no class-data archive, whose recorder would run after it. The
    # view of Spark's home the driver starts from goes to a cache of the run, not the
    # user's (XDG_CACHE_HOME is read while the session starts).
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("spark-cache")))
        handle = build_session(MASTER, app_name="kraftcore-bench", cds=False)
    yield handle.session
    handle.stop()


def _spark_sum(spark, nodes, function):
    from pyspark.sql import functions as F

    from kraftcore.spark.job import _union

    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "64")
    spark.conf.set("spark.sql.execution.arrow.maxBytesPerBatch", str(64 * 1024 * 1024))
    spark.conf.set("spark.sql.sources.parallelPartitionDiscovery.threshold", "100000")
    frames = [spark.read.format("binaryFile").load(list(n.files))
              .select("path", "content", F.lit(n.name).alias("node")) for n in nodes]
    return _union(frames).mapInArrow(function, "n long").agg(F.sum("n")).first()[0]


@pytest.mark.benchmark(group="verify-1000-decode")
def test_spark_read(benchmark, dataset, spark):
    from kraftcore.spark.job import read_only

    nodes, _, info = dataset
    total = benchmark.pedantic(lambda: _spark_sum(spark, nodes, read_only), rounds=ROUNDS,
                               warmup_rounds=1)
    assert total == info["bytes"]
    _extra(benchmark, info, f"spark-{MASTER}-read")
    _keep("spark-read", benchmark)


@pytest.mark.benchmark(group="verify-1000-decode")
def test_spark_decode(benchmark, dataset, spark):
    from kraftcore.spark.job import decode_only

    nodes, _, info = dataset
    total = benchmark.pedantic(lambda: _spark_sum(spark, nodes, decode_only), rounds=ROUNDS,
                               warmup_rounds=1)
    assert total == info["records"]
    _extra(benchmark, info, f"spark-{MASTER}-decode")
    _keep("spark-decode", benchmark)


@pytest.mark.benchmark(group="verify-1000-all-checks")
def test_spark_verify(benchmark, dataset, spark):
    from kraftcore.spark.job import verify_with_spark

    nodes, _, info = dataset
    reports = []

    def run():
        reports.append(verify_with_spark(spark, nodes))
        return reports[-1]

    report = benchmark.pedantic(run, rounds=ROUNDS, warmup_rounds=1)
    assert report.ok and report.records == info["records"]
    timings = {}
    for r in reports[1:]:  # the timed rounds
        for phase, seconds in r.timings.items():
            timings.setdefault(phase, []).append(seconds)
    _extra(benchmark, info, f"spark-{MASTER}")
    _keep("verify-spark", benchmark,
          timings={k: sorted(v)[len(v) // 2] for k, v in timings.items()})


@pytest.mark.benchmark(group="verify-1000-all-checks")
def test_spark_verify_cold(benchmark, dataset, warm_cache, tmp_path):
    """One `kraftcore verify` run as users start it, in a process of its own: import,
    start Spark (a JVM of its own, with the class-data archive an earlier run left),
    verify, stop."""
    nodes, _, info = dataset
    report_path = tmp_path / "report.json"
    command = [sys.executable, "-m", "kraftcore.cli.main", "verify", "--snapshots",
               *[n.root for n in nodes], "--master", MASTER, "--quiet", "--output",
               str(report_path)]

    def run():
        subprocess.run(command, check=True, capture_output=True, timeout=900,
                       env=_env(warm_cache))

    benchmark.pedantic(run, rounds=COLD_ROUNDS)
    report = json.loads(report_path.read_text())
    assert report["ok"] and report["summary"]["records"] == info["records"]
    _extra(benchmark, info, f"spark-{MASTER}-cold")
    _keep("verify-spark-cold", benchmark, timings=report["timings_s"])


# ------------------------------------------------------------------ spark start

_START = f"""
import json, time
from kraftcore.spark.session import build_session
started = time.perf_counter()
handle = build_session({MASTER!r})
start_s = time.perf_counter() - started
print(json.dumps({{"cds": handle.cds, "recorder": handle.cds_recorder,
                  "start_s": start_s}}))
handle.stop()
"""
_IMPORTS = "import pyspark.sql, pyarrow, kraftcore.spark.job"
_CDS_STATES = {"cds-off": "off", "cold": "scheduled", "warm": "used"}


def _env(cache, **extra):
    env = {k: v for k, v in os.environ.items() if k != "KRAFTCORE_SPARK_CDS"}
    return {**env, "XDG_CACHE_HOME": str(cache), **extra}


def _run(command, env=None):
    started = time.perf_counter()
    done = subprocess.run(command, check=True, capture_output=True, text=True, timeout=600,
                          env=env)
    return time.perf_counter() - started, done.stdout


def _recorder_exited(pid, timeout=600):
    """Wait for the recorder a first start left behind (it exits once its JVM has written
    the archive)."""
    from kraftcore.spark.cds import wait_for_exit

    if not wait_for_exit(pid, timeout):
        raise TimeoutError(f"the recorder {pid} still runs after {timeout} s")


def _archive_written(cache, timeout=600):
    """Wait until the archive a `kraftcore verify` process left to its JVM is written."""
    from kraftcore.spark.cds import has_header

    directory = os.path.join(cache, "kraftcore", "spark-cds")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name in os.listdir(directory) if os.path.isdir(directory) else ():
            path = os.path.join(directory, name)
            if has_header(path) and time.time() - os.stat(path).st_mtime > 2:
                return
        time.sleep(0.5)
    raise TimeoutError(f"no class-data archive in {directory} after {timeout} s")


@pytest.fixture(scope="module")
def warm_cache(tmp_path_factory):
    """A cache directory holding the class-data archive as a user's first `kraftcore
    verify` (of a small sample cluster) leaves it."""
    from kraftcore.spark.sample import write_sample_cluster

    root = tmp_path_factory.mktemp("warm-cache")
    cluster = write_sample_cluster(str(root / "sample"), nodes=3, topics=6, partitions=3)
    cache = root / "cache"
    _run([sys.executable, "-m", "kraftcore.cli.main", "verify", "--snapshots",
          *cluster.node_dirs, "--master", MASTER, "--quiet"], env=_env(cache))
    _archive_written(cache)
    _, out = _run([sys.executable, "-c", _START], env=_env(cache))  # puts it in place
    assert json.loads(out.splitlines()[-1])["cds"] == "used", out
    return cache


@pytest.fixture(scope="module")
def start_rounds(warm_cache, tmp_path_factory):
    """START_ROUNDS rounds of: the JVM alone, the imports, and a session start without
    the class-data archive (off), before it exists (cold: an empty cache; the recorder it
    starts is waited for, outside the time) and using it (warm), in a different order
    each round. Per kind: each round's wall time, and `build_session`'s own time and
    archive state."""
    empty = tmp_path_factory.mktemp("cold-cache")

    def session(kind):
        cache = empty / "cache" if kind == "cold" else warm_cache
        extra = {"KRAFTCORE_SPARK_CDS": "0"} if kind == "cds-off" else {}
        wall, out = _run([sys.executable, "-c", _START], env=_env(cache, **extra))
        sample = dict(json.loads(out.splitlines()[-1]), wall=wall)
        assert sample["cds"] == _CDS_STATES[kind], (kind, sample)
        if kind == "cold":
            _recorder_exited(sample["recorder"])
            shutil.rmtree(cache)
        return sample

    kinds = {
        "jvm": lambda: {"wall": _run(["java", "-version"])[0]},
        "imports": lambda: {"wall": _run([sys.executable, "-c", _IMPORTS])[0]},
        **{kind: (lambda kind=kind: session(kind)) for kind in _CDS_STATES},
    }
    samples = interleaved(kinds, START_ROUNDS)
    _STATE["start-rounds"] = {
        kind: {key: statistics.median([s[key] for s in rows]) for key in ("wall", "start_s")
               if key in rows[0]}
        for kind, rows in samples.items()}
    return samples



def _replay(benchmark, samples, peer):
    REPLAY.replay(benchmark, [s["wall"] for s in samples])
    benchmark.extra_info.update(peer=peer)
    if "start_s" in samples[0]:
        benchmark.extra_info.update(
            build_session_s=statistics.median([s["start_s"] for s in samples]))


@pytest.mark.benchmark(group="spark-start", timer=REPLAY)
def test_jvm_start(benchmark, start_rounds):
    _replay(benchmark, start_rounds["jvm"], "jvm")


@pytest.mark.benchmark(group="spark-start", timer=REPLAY)
def test_python_import(benchmark, start_rounds):
    _replay(benchmark, start_rounds["imports"], "python-import-pyspark")


@pytest.mark.benchmark(group="spark-start", timer=REPLAY)
@pytest.mark.parametrize("kind", list(_CDS_STATES))
def test_spark_session_start(benchmark, start_rounds, kind):
    """A fresh process that starts the quiet embedded session and stops it (the Python
    imports are measured on their own, `python-import-pyspark`)."""
    _replay(benchmark, start_rounds[kind], f"spark-session-{MASTER}-{kind}")


# ------------------------------------------------------------------ summary

def _rate(records, seconds):
    return f"{records / seconds / 1e6:.2f} M records/s"


def _verify_summary(tr, info):
    n = info["records"]
    tr.write_line(
        f"verify data: {info['files']} files, {n:,} records, "
        f"{info['bytes'] / 1e6:.1f} MB (files of {info['smallest_bytes']:,} to "
        f"{info['largest_bytes']:,} bytes, median {info['median_bytes']:,})")
    for key, label in (("read", "in process: read the files"),
                       ("decode", "in process: read + decode"),
                       ("analyze", "in process: read + decode + per-file checks + rows"),
                       ("verify-in-process", "in process: all checks"),
                       ("spark-read", f"spark {MASTER}: read (binaryFile -> Arrow -> "
                                      "Python)"),
                       ("spark-decode", f"spark {MASTER}: read + decode"),
                       ("verify-spark", f"spark {MASTER}: all checks (warm session)"),
                       ("verify-spark-cold", f"spark {MASTER}: start + all checks + "
                                             "stop")):
        if key in _STATE:
            seconds, extra = _STATE[key]
            line = f"  {label}: {seconds:.2f} s, {_rate(n, seconds)}"
            if extra.get("timings"):
                parts = ", ".join(f"{k} {v:.2f} s" for k, v in extra["timings"].items())
                line += f" [{parts}]"
            if "start_s" in extra:
                line += f" [spark start {extra['start_s']:.2f} s]"
            tr.write_line(line)


def terminal_summary(tr):
    """What this file prints after the suite's summary table (conftest.py)."""
    info = _STATE.get("dataset")
    if info:
        _verify_summary(tr, info)
    rounds = _STATE.get("start-rounds")
    if rounds:
        parts = [f"{label} {rounds[kind]['wall']:.2f} s (build_session "
                 f"{rounds[kind]['start_s']:.2f} s)"
                 for kind, label in (("cds-off", "without the class-data archive"),
                                     ("cold", "first start, archive recorded after"),
                                     ("warm", "with it"))]
        tr.write_line(f"  spark start ({START_ROUNDS} interleaved rounds, medians): JVM "
                      f"alone {rounds['jvm']['wall']:.2f} s, Python imports "
                      f"{rounds['imports']['wall']:.2f} s; a process starting and stopping "
                      f"the quiet session: {'; '.join(parts)}")
