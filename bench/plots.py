"""Pictures of a benchmark run, drawn with matplotlib from its report (the dict
`bench/conftest.py` writes to bench/results/latest.json):

* `failover-<group>.png` for every group whose rows carry `failover_ms` (one time per
  trial): each trial as a dot per peer, the median as a bar, so a reader sees the spread
  and the outliers that a p50 hides;
* `latency-<group>.png` for every group whose rows carry `latency_quantiles_ms` (the
  latency at each percentile 0..100): the distributions of the peers as curves on a log
  scale, p50 and p99 marked.

`draw(report, directory)` writes them and returns their paths; the benchmark session calls
it after each run (into bench/results/plots/), and

    .venv/bin/python bench/plots.py [REPORT [DIRECTORY]]

draws them again from a saved report (default bench/results/latest.json into
bench/results/plots/); docs/benchmarks.md shows the ones in docs/images/.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

__all__ = ["draw"]

HERE = Path(__file__).resolve().parent
DEFAULT_REPORT = HERE / "results" / "latest.json"
DEFAULT_DIR = HERE / "results" / "plots"


def _rows(report, key):
    """[(group, [(peer, extra)])] of the groups whose rows carry `key` in their extra."""
    found = []
    for group in report.get("groups", []):
        rows = [(p["peer"], p.get("extra") or {}) for p in group.get("peers", [])
                if (p.get("extra") or {}).get(key)]
        if rows:
            found.append((group["group"], rows))
    return found


def _figure():
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    return plt


def draw(report, directory):
    """Write the report's pictures into `directory`; returns their paths (none when the
    report has nothing to draw)."""
    failovers = _rows(report, "failover_ms")
    latencies = _rows(report, "latency_quantiles_ms")
    if not failovers and not latencies:
        return []
    plt = _figure()
    os.makedirs(directory, exist_ok=True)
    written = []
    for group, rows in failovers:
        fig, ax = plt.subplots(figsize=(6, 3.6))
        for x, (peer, extra) in enumerate(rows):
            times = sorted(extra["failover_ms"])
            # spread the dots sideways a little so that equal times stay visible
            xs = [x + (i % 7 - 3) * 0.03 for i in range(len(times))]
            ax.scatter(xs, times, s=14, alpha=0.7)
            median = times[len(times) // 2] if len(times) % 2 else \
                (times[len(times) // 2 - 1] + times[len(times) // 2]) / 2
            ax.hlines(median, x - 0.25, x + 0.25, colors="black", linewidth=2)
            ax.annotate(f"p50 {median:.0f} ms", (x + 0.27, median), va="center", fontsize=8)
        ax.set_xticks(range(len(rows)), [f"{peer}\n({len(e['failover_ms'])} trials)"
                                         for peer, e in rows])
        ax.set_xlim(-0.6, len(rows) - 0.2)
        ax.set_ylim(bottom=0)
        ax.set_ylabel("ms until the first committed write")
        ax.set_title(group, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        path = os.path.join(directory, f"failover-{group}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    for group, rows in latencies:
        fig, ax = plt.subplots(figsize=(6, 3.6))
        for peer, extra in rows:
            quantiles = extra["latency_quantiles_ms"]
            percents = [100 * i / (len(quantiles) - 1) for i in range(len(quantiles))]
            line, = ax.plot(quantiles, percents, label=peer)
            for p in (50, 99):
                i = round(p * (len(quantiles) - 1) / 100)
                ax.plot([quantiles[i]], [p], "o", color=line.get_color(), markersize=4)
        ax.set_xscale("log")
        ax.set_xlabel("latency (ms, log scale)")
        ax.set_ylabel("percent of operations at or below")
        ax.set_yticks([0, 25, 50, 75, 90, 99])
        ax.set_title(group, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = os.path.join(directory, f"latency-{group}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def main(argv):
    report_path = Path(argv[1]) if len(argv) > 1 else DEFAULT_REPORT
    directory = Path(argv[2]) if len(argv) > 2 else DEFAULT_DIR
    try:
        report = json.loads(report_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"plots: cannot read {report_path}: {exc}", file=sys.stderr)
        return 1
    for path in draw(report, directory):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
