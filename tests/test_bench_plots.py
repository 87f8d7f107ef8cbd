"""bench/plots.py draws the pictures docs/benchmarks.md shows: one per failover group and
one per latency-distribution group of a benchmark report, nothing for the rest."""

import importlib.util
from pathlib import Path

SPEC = importlib.util.spec_from_file_location(
    "bench_plots", Path(__file__).resolve().parents[1] / "bench" / "plots.py")
plots = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(plots)


def test_failover_and_latency_groups_are_drawn_the_rest_left_alone(tmp_path):
    report = {"groups": [
        {"group": "cluster-failover-defaults", "peers": [
            {"peer": "kraftcore", "extra": {"failover_ms": [2100.0, 2300.0, 2250.0]}},
            {"peer": "kafka-4.4.0", "extra": {"failover_ms": [2900.0, 3100.0]}}]},
        {"group": "cluster-writes-create-1024", "peers": [
            {"peer": "kraftcore", "extra": {"latency_quantiles_ms": [
                1.0 + i / 10 for i in range(101)]}},
            {"peer": "kafka-4.4.0", "extra": {"latency_quantiles_ms": [
                2.0 + i / 5 for i in range(101)]}}]},
        {"group": "encode-1000", "peers": [{"peer": "kraftcore-c", "extra": {}}]},
    ]}
    written = plots.draw(report, tmp_path / "plots")
    assert sorted(Path(p).name for p in written) == [
        "failover-cluster-failover-defaults.png", "latency-cluster-writes-create-1024.png"]
    for path in written:
        data = Path(path).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert plots.draw({"groups": report["groups"][2:]}, tmp_path / "none") == []
    assert not (tmp_path / "none").exists()
    assert plots.main(["plots", str(tmp_path / "missing.json")]) == 1
