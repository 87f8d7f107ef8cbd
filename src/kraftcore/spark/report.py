"""The result of a verification: per-check status, the violations, the summary, the time
each phase took; as text for a terminal and as JSON for `--output`.

Both engines (Spark and in-process) fill a `Report` the same way, so their reports differ
only in `engine`, `master` and the timings.

A check is `passed` when it found no violation, `failed` when it found one or more, and
`skipped` when it could not run (`log-replay` without `--logs`). `checked` counts what the
check looked at, in the unit `CHECK_UNITS` names (files, partitions, ...).
"""

import json
import os
import time

import kraftcore
from kraftcore.limits import SPARK_SHOWN_VIOLATIONS_MAX
from kraftcore.spark.checks import CHECK_NAMES, CHECKS, snapshot_id_text

__all__ = ["Report", "CHECK_UNITS"]

CHECK_UNITS = {
    "batch-crc": "files", "batch-format": "files", "header-first": "files",
    "footer-last": "files", "batch-epoch": "files", "nodes-agree": "snapshot ids",
    "log-replay": "snapshots", "leader-in-isr": "partitions", "isr-subset": "partitions",
    "replicas-registered": "partitions", "topics-unique": "topics",
    "partitions-have-topics": "partitions", "epochs-monotonic": "partition pairs",
}
# The checks that count what each snapshot holds: their counts add up over the snapshots
# (3 topics in 12 snapshots is 36 topics checked), which the report says.
PER_SNAPSHOT = frozenset(("leader-in-isr", "isr-subset", "replicas-registered",
                          "topics-unique", "partitions-have-topics", "epochs-monotonic"))
_FILE_CHECKS = ("batch-crc", "batch-format", "header-first", "footer-last", "batch-epoch")
_PARTITION_CHECKS = ("leader-in-isr", "isr-subset", "replicas-registered",
                     "partitions-have-topics")


class Report:
    def __init__(self, engine, master=None):
        self.engine = engine
        self.master = master
        self.started = time.monotonic()
        self.seconds = None
        self.nodes = []
        self.files = []  # dicts, one per file
        self.violations = []
        self.counts = dict.fromkeys(CHECK_NAMES, 0)
        self.checked = dict.fromkeys(CHECK_NAMES, 0)
        self.skipped = {}  # check -> why
        self.timings = {}  # phase -> seconds
        self.records = 0
        self.bytes = 0
        self.not_covered = 0
        self.notes = []  # one line each: what a check left out and why (not a violation)
        self.export_dir = None

    # ------------------------------------------------------------------ filling

    def add_file(self, *, node, path, snapshot_id, size_bytes, batches, records, digest,
                 damaged, partitions, topics, violations, violation_counts):
        """One file's facts; `violations` are the ones it lists, `violation_counts` every
        one per check."""
        self.files.append({
            "node": node, "path": path, "snapshot_id": snapshot_id_text(snapshot_id),
            "size_bytes": size_bytes, "batches": batches, "records": records,
            "digest": digest, "damaged": damaged,
            "violations": sum(violation_counts.values()),
        })
        self.records += records
        self.bytes += size_bytes
        for check in _FILE_CHECKS:
            self.checked[check] += 1
        if not damaged:
            for check in _PARTITION_CHECKS:
                self.checked[check] += partitions
            self.checked["topics-unique"] += topics
        self.violations += violations
        for check, count in violation_counts.items():
            self.counts[check] += count

    def add_violations(self, check, violations, total=None, checked=0):
        self.violations += violations
        self.counts[check] += len(violations) if total is None else total
        self.checked[check] += checked

    def add_notes(self, node, notes):
        """Lines worth knowing that are no violation (a segment file left out of a log
        replay), each prefixed with its node."""
        self.notes += [f"{node}: {note}" for note in notes]

    def skip(self, check, why):
        self.skipped[check] = why

    def time_phase(self, name, seconds):
        self.timings[name] = self.timings.get(name, 0.0) + seconds

    def finish(self):
        self.seconds = time.monotonic() - self.started
        order = {name: i for i, name in enumerate(CHECK_NAMES)}
        self.violations.sort(key=lambda v: (order[v.check], v.node, v.file or "",
                                            -1 if v.offset is None else v.offset,
                                            v.message))
        return self

    # ------------------------------------------------------------------ reading

    @property
    def ok(self):
        return not any(self.counts.values())

    def status(self, check):
        if self.counts[check]:
            return "failed"
        if check in self.skipped:
            return "skipped"
        return "passed"

    def snapshot_ids(self):
        return len({f["snapshot_id"] for f in self.files if f["snapshot_id"] is not None})

    def violation_keys(self):
        """(check, node, file, offset) of every listed violation: what tests compare."""
        return sorted((v.check, v.node, v.file or "", -1 if v.offset is None else v.offset)
                      for v in self.violations)

    def to_dict(self):
        return {
            "ok": self.ok,
            "kraftcore_version": kraftcore.__version__,
            "engine": self.engine,
            "master": self.master,
            "summary": {
                "files": len(self.files), "nodes": len(self.nodes),
                "snapshot_ids": self.snapshot_ids(), "records": self.records,
                "bytes": self.bytes, "seconds": self.seconds,
                "snapshots_not_covered_by_logs": self.not_covered,
                "checks_passed": sum(self.status(c) == "passed" for c in CHECK_NAMES),
                "checks_failed": sum(self.status(c) == "failed" for c in CHECK_NAMES),
                "checks_skipped": sum(self.status(c) == "skipped" for c in CHECK_NAMES),
                "violations": sum(self.counts.values()),
            },
            "nodes": [{"name": n.name, "snapshots": n.root, "log": n.log_dir,
                       "files": len(n.files)} for n in self.nodes],
            "checks": [{"name": c.name, "description": c.description,
                        "status": self.status(c.name), "checked": self.checked[c.name],
                        "unit": CHECK_UNITS[c.name], "violations": self.counts[c.name],
                        "skipped_because": self.skipped.get(c.name)} for c in CHECKS],
            "violations": [v.as_dict() for v in self.violations],
            "notes": self.notes,
            "files": self.files,
            "timings_s": self.timings,
            "export": self.export_dir,
        }

    def write_json(self, path):
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_dict(), f, indent=2)
            f.write("\n")

    # ------------------------------------------------------------------ text

    def render(self, shown=SPARK_SHOWN_VIOLATIONS_MAX):
        """The report for a terminal: the summary, one line per check, the first `shown`
        violations and the verdict."""
        lines = []
        where = self.engine if not self.master else f"{self.engine} {self.master}"
        nodes = len(self.nodes) or len({f["node"] for f in self.files})
        start = self.timings.get("spark start")
        took = f"{self.seconds or 0:.1f} s" + (f" (+{start:.1f} s to start Spark)"
                                                if start is not None else "")
        lines.append(f"verified {len(self.files):,} snapshot files of {nodes} node"
                     f"{'s' if nodes != 1 else ''} ({self.snapshot_ids():,} snapshot ids, "
                     f"{self.records:,} records, {_size(self.bytes)}) in {took} [{where}]")
        width = max(len(n) for n in CHECK_NAMES)
        for check in CHECK_NAMES:
            status = self.status(check)
            unit = CHECK_UNITS[check]
            if status == "skipped":
                detail = f"skipped: {self.skipped[check]}"
            elif status == "failed":
                count = self.counts[check]
                detail = (f"{count:,} violation{'s' if count != 1 else ''} "
                          f"({self.checked[check]:,} {unit} checked)")
            else:
                detail = f"{self.checked[check]:,} {unit} checked"
                if check in PER_SNAPSHOT and len(self.files) > 1:
                    detail += " (over all the snapshots)"
            label = {"passed": "ok  ", "failed": "FAIL", "skipped": "skip"}[status]
            lines.append(f"  {label} {check:<{width}}  {detail}")
        if self.not_covered:
            lines.append(f"  note: {self.not_covered} snapshot(s) are not covered by their "
                         "node's log (older than its first segment, or past its end)")
        for note in self.notes:
            lines.append(f"  note: {note}")
        if self.violations:
            total = sum(self.counts.values())
            lines.append(f"violations ({total:,}):")
            for v in self.violations[:shown]:
                lines.append("  " + format_violation(v))
            if total > min(shown, len(self.violations)):
                lines.append(f"  ... {total - min(shown, len(self.violations)):,} more "
                             "(--output FILE writes them all as JSON)")
        passed = sum(self.status(c) == "passed" for c in CHECK_NAMES)
        failed = [c for c in CHECK_NAMES if self.status(c) == "failed"]
        if failed:
            lines.append(f"FAILED: {len(failed)} of {len(CHECK_NAMES)} checks found "
                         f"violations ({', '.join(failed)})")
        else:
            skipped = len(self.skipped)
            tail = f", {skipped} skipped" if skipped else ""
            lines.append(f"OK: {passed} checks passed{tail}")
        return "\n".join(lines)


def display_path(path):
    if not path:
        return "-"
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def format_violation(v):
    where = display_path(v.file)
    if v.offset is not None:
        where += f" offset {v.offset}"
    elif v.position is not None:
        where += f" byte {v.position}"
    return f"[{v.check}] {v.node}: {where}: {v.message}"


def _size(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
