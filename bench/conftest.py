"""Shared fixtures and the end-of-run report of the codec benchmarks.

Run from the repository root (see docs/benchmarks.md):

    .venv/bin/python -m pytest bench -q -p no:cacheprovider

Every benchmark test sets `benchmark.extra_info["peer"]` (who is measured) and, for the
record-batch groups, `records` and `bytes` (what one call processes). A fixture collects the
statistics of every benchmark that ran; at the end of the run a table is printed with, per
group and peer, the median time of one call, the throughput, and the speedup of kraftcore-c
over that peer (peer median / kraftcore-c median: 3.0x means kraftcore-c does the same work
in a third of the time). The same table is written as JSON to bench/results/latest.json.

Nothing here asserts on timings: a shared machine is too noisy for that. Benchmarks report;
the goals below are evaluated and printed, never enforced.
"""

import datetime
import json
import os
import platform
import random
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import NamedTuple

import plots
import pytest

# ------------------------------------------------------------------------------ data set

SEED = 0x6B72_6166  # fixed: every run and every peer sees the same bytes
RECORD_COUNT = 1000
KEY_BYTES = 16
VALUE_BYTES = 100
TIMESTAMP_MS = 1_700_000_000_000  # one fixed CreateTime for every record

RESULTS_DIR = Path(__file__).resolve().parent / "results"  # git-ignored
RESULTS_PATH = RESULTS_DIR / "latest.json"

# The goals the numbers are read against (speedup = peer median / kraftcore-c median).
GOALS = (
    {
        "goal": "encode and decode+validate of 1000-record batches: kraftcore c >= 3x aiokafka",
        "checks": (("encode-1000", "aiokafka", 3.0), ("decode-validate-1000", "aiokafka", 3.0)),
    },
    {
        "goal": "the users' paths: encode with a timestamp per record, and decode+validate "
                "reading every key and value: kraftcore c >= 3x aiokafka",
        "checks": (("encode-1000-timestamps", "aiokafka", 3.0),
                   ("decode-validate-read-1000", "aiokafka", 3.0)),
    },
    {
        "goal": "CRC-32C at 1 MiB >= 0.9x google-crc32c",
        "checks": (("crc32c-1MiB", "google-crc32c", 0.9),),
    },
    {
        "goal": "CRC-32C at 1 KiB >= 1.0x google-crc32c",
        "checks": (("crc32c-1KiB", "google-crc32c", 1.0),),
    },
)

BASELINE = "kraftcore-c"

# Order of the groups in the report; groups not listed follow in run order.
GROUP_ORDER = (
    "encode-1000", "encode-1000-timestamps", "encode-1000-headers", "decode-validate-1000",
    "decode-validate-read-1000", "decode-validate-read-1000-headers", "validate-1000",
    "encode-1000-lz4", "decode-validate-1000-lz4", "crc32c-1KiB", "crc32c-64KiB", "crc32c-1MiB",
)

# Defaults for this suite, used unless the option is given on the command line (or in
# PYTEST_ADDOPTS). Each benchmark runs for about 2 s (the pure-Python peers for a fixed
# number of rounds, see test_bench_records.py), so a full run takes 1-1.5 minutes.
SUITE_DEFAULTS = (
    ("--benchmark-max-time", "benchmark_max_time", "2.0"),
    ("--benchmark-min-rounds", "benchmark_min_rounds", 5),
    ("--benchmark-warmup", "benchmark_warmup", True),
    ("--benchmark-warmup-iterations", "benchmark_warmup_iterations", 20),
    # where --benchmark-save/--benchmark-autosave keep runs (instead of ./.benchmarks)
    ("--benchmark-storage", "benchmark_storage", "file://" + str(RESULTS_DIR / "storage")),
)
_OPTION_KEYS = {  # BenchmarkSession.options keys (None: read only at session start)
    "benchmark_storage": None,
    "benchmark_max_time": "max_time",
    "benchmark_min_rounds": "min_rounds",
    "benchmark_warmup": "warmup",
    "benchmark_warmup_iterations": "warmup_iterations",
}


class DataSet(NamedTuple):
    keys: list
    values: list
    timestamp: int


class FullDataSet(NamedTuple):
    """What a producer passes: a timestamp per record, and (for the headers groups) one
    header per record."""

    keys: list
    values: list
    timestamps: list
    headers: list


def make_dataset(count=RECORD_COUNT, seed=SEED):
    rng = random.Random(seed)
    keys = [rng.randbytes(KEY_BYTES) for _ in range(count)]
    values = [rng.randbytes(VALUE_BYTES) for _ in range(count)]
    return DataSet(keys, values, TIMESTAMP_MS)


@pytest.fixture(scope="session")
def dataset():
    """1000 records: 16-byte random keys, 100-byte random values, one fixed timestamp."""
    return make_dataset()


def _reference_encode(data, compression=None):
    # The pure-Python encoder is the format's specification; the native encoder produces
    # the same bytes (checked in test_bench_records.py).
    from kraftcore import codec

    return codec.implementations()["py"].records.encode_batch(
        data.values, keys=data.keys, timestamp=data.timestamp, compression=compression
    )


@pytest.fixture(scope="session")
def full_dataset(dataset):
    """The data set with a timestamp per record (1 ms apart) and one header per record
    ("trace": 8 random bytes)."""
    rng = random.Random(SEED + 1)
    count = len(dataset.values)
    return FullDataSet(dataset.keys, dataset.values,
                       [dataset.timestamp + i for i in range(count)],
                       [[("trace", rng.randbytes(8))] for _ in range(count)])


@pytest.fixture(scope="session")
def batch_1000_headers(full_dataset):
    """The full data set (timestamps and headers) as one uncompressed batch."""
    from kraftcore import codec

    d = full_dataset
    return codec.implementations()["py"].records.encode_batch(
        d.values, keys=d.keys, timestamps=d.timestamps, headers=d.headers)


@pytest.fixture(scope="session")
def batch_1000(dataset):
    """The data set as one uncompressed record batch (bytes), the input of every decoder."""
    return _reference_encode(dataset)


@pytest.fixture(scope="session")
def batch_1000_lz4(dataset):
    """The data set as one lz4-compressed record batch (bytes)."""
    return _reference_encode(dataset, compression="lz4")


# ------------------------------------------------------------------------------ configuration


def _given_on_command_line(config, flag):
    args = list(config.invocation_params.args) + os.environ.get("PYTEST_ADDOPTS", "").split()
    return any(a == flag or a.startswith(flag + "=") for a in args)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "benchmark: pytest-benchmark settings (group) of a benchmark test"
    )
    if not config.pluginmanager.hasplugin("benchmark"):
        raise pytest.UsageError(
            "the benchmarks need pytest-benchmark: pip install -e '.[bench]'"
        )
    session = getattr(config, "_benchmarksession", None)
    for flag, dest, value in SUITE_DEFAULTS:
        if _given_on_command_line(config, flag):
            continue
        setattr(config.option, dest, value)
        key = _OPTION_KEYS[dest]
        if session is not None and key is not None:  # loaded after pytest-benchmark set up
            session.options[key] = value


# ------------------------------------------------------------------------------ collection

_RESULTS = []  # one dict per benchmark that produced statistics, in run order
_SKIPPED = []  # (group, peer, reason) of benchmark tests that were skipped


def _benchmark_group(item):
    marker = item.get_closest_marker("benchmark")
    return marker.kwargs.get("group") if marker is not None else None


@pytest.fixture(autouse=True)
def _collect_benchmark_stats(request):
    yield
    bench = getattr(request.node, "funcargs", {}).get("benchmark")
    if bench is None or bench.stats is None or not bench.stats.stats.data:
        return
    stats = bench.stats.stats
    info = dict(bench.extra_info)
    _RESULTS.append(
        {
            "group": bench.group or "(no group)",
            "peer": info.pop("peer", request.node.name),
            "test": request.node.nodeid,
            "median_s": stats.median,
            "mean_s": stats.mean,
            "min_s": stats.min,
            "stddev_s": stats.stddev,
            "iqr_s": stats.iqr,
            "rounds": stats.rounds,
            "iterations": bench.stats.iterations,
            "records": info.pop("records", None),
            "bytes": info.pop("bytes", None),
            "extra": info,
        }
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and report.when in ("setup", "call"):
        group = _benchmark_group(item)
        if group is not None:
            peer = item.callspec.id if hasattr(item, "callspec") else item.name
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
            _SKIPPED.append((group, peer, reason.removeprefix("Skipped: ")))


# ------------------------------------------------------------------------------ report


def _version(dist):
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _cpu_model():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git_commit(root):
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=root, capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root, capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("-dirty" if dirty else "")


def _machine(config):
    from kraftcore import codec

    native = codec.implementations().get("c")
    crc_hardware = native.crc32c.HARDWARE if native is not None else None
    try:
        import google_crc32c

        google_impl = google_crc32c.implementation
    except ImportError:
        google_impl = None
    return {
        "cpu": _cpu_model(),
        "logical_cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "kraftcore_crc32c_hardware": crc_hardware,
        "google_crc32c_implementation": google_impl,
        "versions": {
            name: _version(name)
            for name in (
                "kraftcore", "aiokafka", "kafka-python", "google-crc32c", "lz4", "cramjam",
                "pytest-benchmark",
            )
        },
        "git_commit": _git_commit(config.rootpath),
    }


def _settings(config):
    return {
        "statistic": "median",
        "max_time_s": float(config.getoption("benchmark_max_time")),
        "min_rounds": config.getoption("benchmark_min_rounds"),
        "min_time_s": float(config.getoption("benchmark_min_time")),
        "warmup": bool(config.getoption("benchmark_warmup")),
        "warmup_iterations": config.getoption("benchmark_warmup_iterations"),
        "disable_gc": config.getoption("benchmark_disable_gc"),
        "timer": str(config.getoption("benchmark_timer")),
    }


def build_report(config):
    groups = {}
    for result in _RESULTS:
        groups.setdefault(result["group"], []).append(result)
    def position(name):
        return GROUP_ORDER.index(name) if name in GROUP_ORDER else len(GROUP_ORDER)

    out_groups = []
    for name, rows in sorted(groups.items(), key=lambda item: position(item[0])):
        rows = sorted(rows, key=lambda r: r["peer"] != BASELINE)  # stable: baseline first
        base = next((r for r in rows if r["peer"] == BASELINE), None)
        peers = []
        for r in rows:
            median = r["median_s"]
            entry = {k: r[k] for k in ("peer", "test", "median_s", "mean_s", "min_s",
                                       "stddev_s", "iqr_s", "rounds", "iterations",
                                       "records", "bytes")}
            entry["records_per_s"] = r["records"] / median if r["records"] else None
            entry["gb_per_s"] = r["bytes"] / median / 1e9 if r["bytes"] else None
            entry["kraftcore_c_speedup"] = median / base["median_s"] if base else None
            if r["extra"]:
                entry["extra"] = r["extra"]
            peers.append(entry)
        skipped = [{"peer": p, "reason": why} for g, p, why in _SKIPPED if g == name]
        out_groups.append({"group": name, "peers": peers, "skipped": skipped})
    for name in dict.fromkeys(g for g, _, _ in _SKIPPED):
        if name not in groups:
            out_groups.append({
                "group": name, "peers": [],
                "skipped": [{"peer": p, "reason": why} for g, p, why in _SKIPPED if g == name],
            })

    speedups = {
        (g["group"], p["peer"]): p["kraftcore_c_speedup"] for g in out_groups for p in g["peers"]
    }
    goals = []
    for goal in GOALS:
        checks = []
        for group, peer, target in goal["checks"]:
            value = speedups.get((group, peer))
            checks.append({"group": group, "peer": peer, "target": target, "speedup": value,
                           "met": None if value is None else value >= target})
        states = [c["met"] for c in checks]
        status = ("not measured" if None in states else "met" if all(states) else "not met")
        goals.append({"goal": goal["goal"], "status": status, "checks": checks})

    return {
        "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "note": "ratios come from one run on the machine below; speedup = peer median / "
                "kraftcore-c median of the same group",
        "machine": _machine(config),
        "settings": _settings(config),
        "groups": out_groups,
        "goals": goals,
    }


def _fmt_time(seconds):
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
        if seconds >= scale or unit == "ns":
            return f"{seconds / scale:.3g} {unit}" if seconds / scale < 100 else \
                f"{seconds / scale:.0f} {unit}"
    return str(seconds)  # unreachable


def _fmt_rate(value):
    if value is None:
        return "-"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.3g}"


def format_table(report):
    header = ("group", "peer", "median", "rounds", "records/s", "GB/s", "kraftcore-c speedup")
    lines = []
    for g in report["groups"]:
        for p in g["peers"]:
            speedup = p["kraftcore_c_speedup"]
            lines.append((
                g["group"], p["peer"], _fmt_time(p["median_s"]), str(p["rounds"]),
                _fmt_rate(p["records_per_s"]),
                "-" if p["gb_per_s"] is None else f"{p['gb_per_s']:.3g}",
                "(baseline)" if p["peer"] == BASELINE else
                "-" if speedup is None else f"{speedup:.2f}x",
            ))
        for s in g["skipped"]:
            lines.append((g["group"], s["peer"], "skipped", "", "", "", s["reason"][:72]))
    widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]
    right = {2, 3, 4, 5}

    def fmt(row):
        return "  ".join(
            cell.rjust(w) if i in right else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths))
        ).rstrip()

    out = [fmt(header), fmt(tuple("-" * w for w in widths))]
    previous = None
    for row in lines:
        if previous is not None and row[0] != previous:
            out.append("")
        out.append(fmt(row))
        previous = row[0]
    return out


# The benchmark modules of the session that define `terminal_summary(terminalreporter)`:
# their own lines (goals with absolute targets, peer ratios), printed after the table.
_SUMMARY_MODULES = []


def pytest_collection_modifyitems(items):
    for item in items:
        module = getattr(item, "module", None)
        if hasattr(module, "terminal_summary") and module not in _SUMMARY_MODULES:
            _SUMMARY_MODULES.append(module)


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter, exitstatus, config):
    _write_suite_summary(terminalreporter, config)
    for module in _SUMMARY_MODULES:
        module.terminal_summary(terminalreporter)


def _write_suite_summary(terminalreporter, config):
    if not _RESULTS:  # e.g. --benchmark-disable or --benchmark-skip: nothing was timed
        return
    report = build_report(config)
    tr = terminalreporter
    tr.write_sep("=", "kraftcore codec benchmarks (median per call; speedup = peer / kraftcore-c)")
    for line in format_table(report):
        tr.write_line(line)
    tr.write_line("")
    for goal in report["goals"]:
        detail = ", ".join(
            f"{c['group']} vs {c['peer']}: "
            + ("n/a" if c["speedup"] is None else f"{c['speedup']:.2f}x")
            + f" (target {c['target']}x)"
            for c in goal["checks"]
        )
        tr.write_line(f"goal {goal['status'].upper()}: {goal['goal']} -- {detail}")
    m = report["machine"]
    tr.write_line(
        f"machine: {m['cpu']}, {m['logical_cpus']} logical CPUs, Python {m['python']}, "
        f"kraftcore CRC-32C: {m['kraftcore_crc32c_hardware']}, "
        f"google-crc32c: {m['google_crc32c_implementation']}"
    )
    if _RESULTS:
        RESULTS_PATH.parent.mkdir(parents=True, exist_ok=True)
        RESULTS_PATH.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        tr.write_line(f"written: {RESULTS_PATH}")
        for path in plots.draw(report, RESULTS_DIR / "plots"):
            tr.write_line(f"drawn: {path}")
