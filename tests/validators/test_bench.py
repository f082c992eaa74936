"""`rlparity bench`: the timing harness, the report's shape, the plot, and honest failures.

No timing thresholds here: speed goals live in benchmarks/.
"""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from rlparity import converters
from rlparity.artifacts.report import Report
from rlparity.errors import UsageError
from rlparity.validators.bench import (
    BenchOptions,
    DeviceClock,
    GraphRuntime,
    Series,
    bench,
    series_for,
    summarize,
)
from rlparity.validators.torch_runtime import TorchRuntime
from tests.conftest import TINYBRANCHES, TINYWALKER, without_npu

RESULT_FIELDS = {
    "runtime": str, "device": str, "dtype": str, "batch": int, "graph": bool, "first_call_ms": float,
    "min_ms": float, "p50_ms": float, "p90_ms": float, "p95_ms": float, "p99_ms": float, "max_ms": float,
    "decisions_per_s": float,
}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_bench_json_has_the_agreed_shape_and_a_png_plot(run_cli, tmp_path):
    out = tmp_path / "out"
    result = run_cli("bench", TINYWALKER, "--batch", "1,4", "--runs", "7", "--warmup", "2",
                     "--json", out / "bench.json", "--plot", out / "plots" / "latency.png")
    assert result.exit_code == 0, result.output
    assert "Latency per call" in result.output and "harness overhead" in result.output
    report = json.loads((out / "bench.json").read_text())
    assert report["schema"] == "rlparity.report/1" and report["verdict"] == "pass"
    section = report["extra"]["bench"]
    assert (section["runs"], section["warmup"]) == (7, 2)
    assert isinstance(section["overhead_ms"], float) and section["overhead_ms"] > 0
    assert section["plot"] == "plots/latency.png"  # relative to the report
    results = section["results"]
    assert [(r["runtime"], r["batch"]) for r in results] == [
        ("torch-cpu", 1), ("ort-cpu", 1), ("torch-cpu", 4), ("ort-cpu", 4)]
    for r in results:
        for name, kind in RESULT_FIELDS.items():
            assert isinstance(r[name], kind), (name, r[name])
        assert r["min_ms"] <= r["p50_ms"] <= r["p90_ms"] <= r["p95_ms"] <= r["p99_ms"] <= r["max_ms"]
        assert r["decisions_per_s"] == pytest.approx(r["batch"] * 1e3 / r["p50_ms"])
        assert (r["device"], r["dtype"], r["graph"]) == ("cpu", "float32", False)
    torch_row, ort_row = results[0], results[1]
    assert torch_row["forward_p50_ms"] > 0 and "forward_p50_ms" not in ort_row  # torch only
    assert ort_row["matches_reference"] is True and torch_row["matches_reference"] is True
    # every (runtime, batch) was checked against a separate run of the reference
    assert [c["candidate"] for c in report["comparisons"]] == [
        "torch-cpu batch 1", "ort-cpu batch 1", "torch-cpu batch 4", "ort-cpu batch 4"]

    png = (out / "plots" / "latency.png").read_bytes()
    assert png.startswith(PNG_MAGIC)
    from matplotlib.image import imread

    assert imread(out / "plots" / "latency.png").shape[2] in (3, 4)
    assert Report.read(out / "bench.json").extra["bench"]["results"] == results  # renders offline


def test_bench_in_float16_with_the_discrete_family(tmp_path):
    family = converters.load(TINYBRANCHES)
    report = bench(family, BenchOptions(runtimes=["torch-cpu"], batches=[3], runs=3, warmup=1, dtype="fp16"))
    [row] = report.extra["bench"]["results"]
    assert (row["dtype"], row["batch"], row["matches_reference"]) == ("float16", 3, True)
    assert report.verdict == "pass"


def test_a_wrong_runtime_fails_the_bench(run_cli, monkeypatch, tmp_path):
    """A fast answer is worth nothing if it is wrong: a tampered export makes bench exit 3."""
    from rlparity.converters.mlagents import MLAgentsPolicy

    original = MLAgentsPolicy.export

    def tampered_export(self, path=None, opset=None):
        model = onnx.load_from_string(original(self, path, opset))
        for init in model.graph.initializer:
            if init.name == "action_model._continuous_distribution.mu.bias":
                value = numpy_helper.to_array(init).copy()
                value[0] += 0.1
                init.CopyFrom(numpy_helper.from_array(value, init.name))
        return model.SerializeToString()

    monkeypatch.setattr(MLAgentsPolicy, "export", tampered_export)
    result = run_cli("bench", TINYWALKER, "--batch", "2", "--runs", "3", "--warmup", "0", "--json", tmp_path / "b.json")
    assert result.exit_code == 3, result.output
    report = json.loads((tmp_path / "b.json").read_text())
    assert report["verdict"] == "mismatch"
    ort_row = [r for r in report["extra"]["bench"]["results"] if r["runtime"] == "ort-cpu"][0]
    assert ort_row["matches_reference"] is False and ort_row["p50_ms"] > 0  # figures kept


def test_graph_on_the_cpu_is_a_usage_error(run_cli):
    result = run_cli("bench", TINYWALKER, "--graph")
    assert result.exit_code == 2
    assert "--graph captures torch on an accelerator" in result.output


@without_npu
def test_missing_accelerator_exits_4_and_keeps_the_cpu_figures(run_cli, tmp_path):
    result = run_cli("bench", TINYWALKER, "--device", "npu:0", "--graph", "--batch", "1", "--runs", "3",
                     "--warmup", "0", "--json", tmp_path / "b.json")
    assert result.exit_code == 4, result.output
    assert "torch_npu is not installed" in result.output
    report = json.loads((tmp_path / "b.json").read_text())
    by_name = {r["name"]: r for r in report["runtimes"]}
    assert not by_name["torch-npu:0"]["available"] and not by_name["torch-npu:0 graph"]["available"]
    assert {r["runtime"] for r in report["extra"]["bench"]["results"]} == {"torch-cpu", "ort-cpu"}


@pytest.mark.parametrize("args, message", [
    (["--runtimes", "torch-cpu,tensorrt"], "unknown runtime 'tensorrt'"),
    (["--batch", "1,x"], "expected comma-separated integers"),
    (["--dtype", "int8"], "unknown dtype 'int8'"),
])
def test_bench_usage_errors(run_cli, args, message):
    result = run_cli("bench", TINYWALKER, *args)
    assert result.exit_code == 2 and message in result.output


def test_plot_must_be_png(run_cli, tmp_path):
    result = run_cli("bench", TINYWALKER, "--plot", tmp_path / "bench.svg")
    assert result.exit_code == 1 and "PNG" in result.output


def test_device_clock_times_every_call_and_returns_the_last_result():
    calls = []
    clock = DeviceClock("cpu")
    wall, events, last = clock.time(lambda: calls.append(len(calls)) or len(calls), runs=5, warmup=2)
    assert len(calls) == 7 and last == 7
    assert wall.shape == (5,) and (wall >= 0).all()
    assert events is None  # the CPU has no device events


def test_summarize_percentiles():
    figures = summarize(np.arange(1, 101, dtype=float))
    assert (figures["min_ms"], figures["max_ms"]) == (1.0, 100.0)
    assert figures["p50_ms"] == pytest.approx(50.5) and figures["p99_ms"] == pytest.approx(99.01)


def test_graph_series_only_for_accelerators():
    family = converters.load(TINYWALKER)
    series = series_for(family, BenchOptions(device="cuda:0", graph=True))
    assert series == [Series("torch-cpu"), Series("ort-cpu"), Series("torch-cuda:0"), Series("torch-cuda:0", graph=True)]
    with pytest.raises(UsageError):
        series_for(family, BenchOptions(runtimes=["torch-cpu", "ort-cpu"], graph=True))
    runtime = GraphRuntime(TorchRuntime(family.io_spec(), "cpu"), family.make_feeds(1, 0).arrays)
    ok, reason = runtime.available()
    assert not ok and "needs cuda or npu" in reason


def test_plot_without_matplotlib_fails_before_measuring(run_cli, monkeypatch, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if the plot extra were not installed
    result = run_cli("bench", TINYWALKER, "--plot", tmp_path / "b.png", "--json", tmp_path / "b.json")
    assert result.exit_code == 1
    assert "the plot needs matplotlib" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "b.json").exists()  # nothing was measured, so nothing is lost
