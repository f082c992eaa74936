"""The command line as a user meets it: tables, JSON report, exit codes."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import onnx
import pytest

from tests.conftest import (
    REPO,
    TINYBRANCHES,
    TINYWALKER,
    bias_plus_1e2,
    fixture_path,
    tampered_onnx,
    without_npu,
)


@pytest.mark.parametrize("path", [TINYWALKER, TINYBRANCHES, "Huggy"])
def test_validate_passes_on_every_mlagents_fixture(run_cli, tmp_path, path):
    if path == "Huggy":
        path = fixture_path("mlagents/Huggy")
    result = run_cli("validate", path, "--json", tmp_path / "report.json")
    assert result.exit_code == 0, result.output
    for table in ("Runtimes", "ort-cpu vs torch-cpu", "ort-ref vs torch-cpu", "ort-cpu vs ort-ref", "verdict: PASS"):
        assert table in result.output
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["verdict"] == "pass"
    assert report["reference_export"]["graph_identical"] is True
    assert [r["name"] for r in report["runtimes"]] == ["torch-cpu", "ort-cpu", "ort-ref"]
    assert report["inputs"]["digest"].startswith("sha256:")
    ours_vs_official = report["comparisons"][-1]
    assert (ours_vs_official["candidate"], ours_vs_official["reference"]) == ("ort-cpu", "ort-ref")
    deterministic = [o for o in ours_vs_official["outputs"] if o["output"].startswith("deterministic")]
    # the same graph in the same runtime: every bit equal
    assert all(o["metrics"].get("bit_match_rate", o["metrics"].get("agreement")) == 1.0 for o in deterministic)


def test_validate_json_to_stdout_is_machine_readable(run_cli):
    result = run_cli("validate", TINYWALKER, "--json", "-", "--batch", "8", "--draws", "64")
    start = result.output.index("{\n")
    report = json.loads(result.output[start:result.output.rindex("}") + 1])
    assert report["inputs"]["batch"] == 8 and report["schema"] == "rlparity.report/1"
    assert {"torch", "onnx", "onnxruntime", "numpy", "python"} <= set(report["versions"])


def test_validate_reports_a_mismatch_with_exit_3(run_cli, tmp_path):
    """A reference export with one weight moved by 1e-2 must fail, and say where."""
    tampered = tampered_onnx(TINYWALKER / "TinyWalker-1000.onnx", tmp_path,
                             "action_model._continuous_distribution.mu.bias", bias_plus_1e2)
    result = run_cli("validate", TINYWALKER, "--ref", tampered, "--json", tmp_path / "r.json")
    assert result.exit_code == 3, result.output
    assert "MISMATCH" in result.output
    report = json.loads((tmp_path / "r.json").read_text())
    failed = {(c["candidate"], o["output"]) for c in report["comparisons"] for o in c["outputs"] if o["passed"] is False}
    assert ("ort-ref", "deterministic_continuous_actions") in failed
    assert ("ort-cpu", "deterministic_continuous_actions") in failed  # ours vs the tampered reference


@without_npu
def test_missing_accelerator_exits_4_and_keeps_the_other_results(run_cli, tmp_path):
    result = run_cli("validate", TINYWALKER, "--device", "npu:0", "--json", tmp_path / "r.json")
    assert result.exit_code == 4, result.output
    assert "torch_npu is not installed" in result.output
    report = json.loads((tmp_path / "r.json").read_text())
    by_name = {r["name"]: r for r in report["runtimes"]}
    assert by_name["torch-npu:0"]["available"] is False
    assert by_name["ort-cpu"]["timing"]["median_ms"] > 0
    assert all(c["passed"] for c in report["comparisons"])


def test_unknown_runtime_is_a_usage_error(run_cli):
    result = run_cli("validate", TINYWALKER, "--runtimes", "torch-cpu,tensorrt")
    assert result.exit_code == 2
    assert "unknown runtime 'tensorrt'" in result.output


def test_corrupt_reference_is_reported_after_the_other_results(run_cli, tmp_path):
    broken = tmp_path / "broken.onnx"
    broken.write_bytes((TINYWALKER / "TinyWalker-1000.onnx").read_bytes()[:2000])
    result = run_cli("validate", TINYWALKER, "--ref", broken, "--json", tmp_path / "r.json")
    assert result.exit_code == 1
    assert "ort-cpu vs torch-cpu" in result.output  # computed results were not lost
    assert "onnxruntime cannot load this model" in result.output and str(broken) in result.output
    assert json.loads((tmp_path / "r.json").read_text())["verdict"] == "incomplete"


def test_export_writes_the_official_graph(run_cli, tmp_path):
    out = tmp_path / "nested" / "TinyBranches.onnx"
    result = run_cli("export", TINYBRANCHES, "-o", out)
    assert result.exit_code == 0, result.output
    assert "identical to the official export" in result.output
    assert onnx.load(str(out)).graph == onnx.load(str(TINYBRANCHES / "TinyBranches-5000.onnx")).graph


def test_export_at_another_opset(run_cli, tmp_path):
    out = tmp_path / "walker17.onnx"
    assert run_cli("export", TINYWALKER, "-o", out, "--opset", "17").exit_code == 0
    model = onnx.load(str(out))
    assert model.opset_import[0].version == 17
    onnx.checker.check_model(model, full_check=True)


def test_inspect_shows_facts_and_writes_json(run_cli, tmp_path):
    result = run_cli("inspect", TINYWALKER, "--json", tmp_path / "i.json")
    assert result.exit_code == 0
    for fact in ("obs_0: 12, obs_1: 5", "[batch, 12]", "deterministic_continuous_actions", "20001", "1768"):
        assert fact in result.output
    info = json.loads((tmp_path / "i.json").read_text())
    assert info["summary"]["training_step"] == 1000 and info["family"] == "mlagents"
    assert len(info["source"]["sha256"]) == 64


def test_bundled_samples_and_unknown_sample(run_cli):
    assert run_cli("inspect", "sample:tinybranches").exit_code == 0
    result = run_cli("inspect", "sample:nope")
    assert result.exit_code == 1 and "no bundled sample 'nope'" in result.output


def test_cli_shim_runs_from_a_checkout(tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "cli.py"), "validate", "sample:tinywalker", "--batch", "4",
                           "--draws", "32", "--json", str(tmp_path / "r.json")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "verdict: PASS" in done.stderr and done.stdout == ""
    assert json.loads((tmp_path / "r.json").read_text())["verdict"] == "pass"


def test_validate_on_a_copied_run_folder_without_official_export(run_cli, tmp_path):
    """No official export beside it: torch-cpu and ort-cpu only, and the report says which file."""
    shutil.copy(TINYWALKER / "TinyWalker-1000.pt", tmp_path / "TinyWalker-1000.pt")
    result = run_cli("validate", tmp_path, "--json", tmp_path / "r.json")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert [r["name"] for r in report["runtimes"]] == ["torch-cpu", "ort-cpu"]
    assert report["source"]["path"].endswith("TinyWalker-1000.pt")
    assert np.isclose(report["inputs"]["batch"], 64)


def test_a_wider_sampler_is_caught_by_distribution(run_cli, tmp_path):
    """Only the sampling noise changes (sigma doubled): deterministic outputs still pass."""
    tampered = tampered_onnx(TINYWALKER / "TinyWalker-1000.onnx", tmp_path,
                              "action_model._continuous_distribution.log_sigma",
                              lambda v: (v + np.log(2.0)).astype(np.float32))
    result = run_cli("validate", TINYWALKER, "--ref", tampered, "--json", tmp_path / "r.json")
    assert result.exit_code == 3, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    official = next(c for c in report["comparisons"] if c["candidate"] == "ort-ref")
    verdicts = {o["output"]: o["passed"] for o in official["outputs"]}
    assert verdicts["continuous_actions"] is False
    assert verdicts["deterministic_continuous_actions"] is True


def test_a_sampler_ignoring_masks_is_caught(run_cli, tmp_path):
    """Multinomial fed the unmasked logits: blocked actions get sampled."""
    model = onnx.load(str(TINYBRANCHES / "TinyBranches-5000.onnx"))
    # Re-route the first Log (input of the first Multinomial) to the raw branch-0 logits' softmax-free path
    log = next(n for n in model.graph.node if n.op_type == "Log")
    log.input[0] = "/_discrete_distribution/branches.0/Gemm_output_0"
    tampered = tmp_path / "unmasked.onnx"
    onnx.save(model, tampered)
    result = run_cli("validate", TINYBRANCHES, "--ref", tampered, "--json", tmp_path / "r.json")
    assert result.exit_code == 3, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    official = next(c for c in report["comparisons"] if c["candidate"] == "ort-ref")
    sampled = next(o for o in official["outputs"] if o["output"] == "discrete_actions")
    assert sampled["passed"] is False and sampled["metrics"]["blocked_sampled"] > 0
    deterministic = next(o for o in official["outputs"] if o["output"] == "deterministic_discrete_actions")
    assert deterministic["passed"] is True


def test_cpu_validation_never_imports_torch_npu(tmp_path):
    code = ("import sys; from rlparity.cli import main\n"
            "try:\n    main(['validate', 'sample:tinywalker', '--batch', '4', '--draws', '32'])\n"
            "except SystemExit as e:\n    assert e.code == 0, e.code\n"
            "print('torch_npu' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_module_entry_point_and_version():
    done = subprocess.run([sys.executable, "-m", "rlparity", "--version"], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0 and done.stdout.startswith("rlparity, version ")
