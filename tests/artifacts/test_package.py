"""`rlparity package`: the export, the evidence and the card, consistent with each other."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from huggingface_hub import ModelCard

from rlparity.validators.feeds import digest_arrays
from tests.artifacts.conftest import (
    bench_section,
    png,
    rollout_section,
    tree,
    write_section_report,
)
from tests.conftest import TINYBRANCHES, TINYWALKER, bias_plus_1e2, tampered_onnx

EXPECTED_FILES = {"README.md", "TinyWalker-1000.onnx", "report.json", "inputs.npz", "outputs.npz",
                  "environment.json", "MANIFEST.sha256"}


@pytest.fixture(scope="module")
def walker_package(tmp_path_factory):
    from click.testing import CliRunner

    from rlparity.cli import main

    folder = tmp_path_factory.mktemp("package") / "TinyWalker"
    result = CliRunner().invoke(main, ["package", str(TINYWALKER), "-o", str(folder), "--base-model",
                                       "Unity/TinyWalker"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return folder, result.output


def test_package_holds_the_validated_export_and_its_evidence(walker_package):
    folder, output = walker_package
    assert {p.name for p in folder.iterdir()} == EXPECTED_FILES
    assert "verdict: PASS" in output and "MANIFEST.sha256" in output
    report = json.loads((folder / "report.json").read_text())
    assert report["verdict"] == "pass" and report["schema"] == "rlparity.report/1"

    export = (folder / "TinyWalker-1000.onnx").read_bytes()
    import hashlib
    assert hashlib.sha256(export).hexdigest() == report["export"]["sha256"]
    # the validated export is the official graph (ML-Agents' own exporter)
    assert onnx.load_from_string(export).graph == onnx.load(str(TINYWALKER / "TinyWalker-1000.onnx")).graph

    # the arrays are exactly those the report's digests name
    inputs = dict(np.load(folder / "inputs.npz"))
    assert digest_arrays(inputs) == report["inputs"]["digest"]
    assert inputs["obs_0"].shape == (64, 12) and inputs["obs_1"].shape == (64, 5)
    with np.load(folder / "outputs.npz") as saved:
        by_runtime: dict[str, dict] = {}
        for key in saved.files:
            runtime, name = key.split("/", 1)
            by_runtime.setdefault(runtime, {})[name] = saved[key]
    assert set(by_runtime) == {"torch-cpu", "ort-cpu", "ort-ref"}
    for runtime, outputs in by_runtime.items():
        assert digest_arrays(outputs) == report["extra"]["outputs_digest"][runtime]

    environment = json.loads((folder / "environment.json").read_text())
    for dist in ("torch", "onnx", "onnxruntime", "numpy", "huggingface_hub", "click"):
        assert dist in {k.lower().replace("-", "_") for k in environment["packages"]}
    assert environment["host"] == report["host"] and [d["name"] for d in environment["devices"]] == [
        "torch-cpu", "ort-cpu", "ort-ref"]
    assert report["command"] == f"rlparity validate {TINYWALKER} --json report.json"


def test_manifest_checks_with_sha256sum(walker_package):
    folder, _ = walker_package
    lines = (folder / "MANIFEST.sha256").read_text().splitlines()
    assert sorted(line.split("  ", 1)[1] for line in lines) == sorted(EXPECTED_FILES - {"MANIFEST.sha256"})
    done = subprocess.run(["sha256sum", "-c", "MANIFEST.sha256"], cwd=folder, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(": OK") == len(EXPECTED_FILES) - 1


def test_the_cards_example_runs_and_reproduces_the_saved_outputs(walker_package):
    folder, _ = walker_package
    card = ModelCard.load(folder / "README.md")
    assert card.data.base_model == "Unity/TinyWalker" and card.data.library_name == "onnx"
    code = card.text.split("```python\n", 1)[1].split("```", 1)[0]
    done = subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) == 0.0  # the shipped export gives the shipped outputs, bit for bit


def test_a_non_empty_folder_is_kept_unless_forced(run_cli, tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    result = run_cli("package", TINYWALKER, "-o", folder)
    assert result.exit_code == 1
    assert f"error: {folder}: exists and is not empty; pass --force to replace it" in result.output
    result = run_cli("package", TINYWALKER, "-o", folder, "--force")
    assert result.exit_code == 1 and "is not an rlparity package" in result.output
    assert tree(folder) == {"notes.txt": b"mine"}


def test_force_replaces_a_previous_package(run_cli, tmp_path):
    folder = tmp_path / "pkg"
    assert run_cli("package", TINYWALKER, "-o", folder).exit_code == 0
    first = json.loads((folder / "report.json").read_text())
    result = run_cli("package", TINYBRANCHES, "-o", folder, "--force", "--batch", "16")
    assert result.exit_code == 0, result.output
    assert {p.name for p in folder.iterdir()} == EXPECTED_FILES - {"TinyWalker-1000.onnx"} | {"TinyBranches-5000.onnx"}
    second = json.loads((folder / "report.json").read_text())
    assert second["source"]["sha256"] != first["source"]["sha256"] and second["inputs"]["batch"] == 16
    assert "--batch 16" in second["command"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging folder left behind


def test_sections_from_other_reports_are_merged_with_the_plot(run_cli, tmp_path, walker_report):
    measured = tmp_path / "measured"
    bench = write_section_report(walker_report, measured, "bench.json", {"bench": bench_section("plots/latency.png")},
                                 "rlparity bench sample:tinywalker --json bench.json --plot plots/latency.png")
    (measured / "plots").mkdir()
    (measured / "plots" / "latency.png").write_bytes(png())
    rollout = write_section_report(walker_report, measured, "rollout.json", {"rollout": rollout_section()},
                                   "rlparity rollout sample:tinywalker --json rollout.json")
    folder = tmp_path / "pkg"
    result = run_cli("package", TINYWALKER, "-o", folder, "--from-report", bench, "--from-report", rollout)
    assert result.exit_code == 0, result.output
    assert (folder / "latency.png").read_bytes() == png()
    report = json.loads((folder / "report.json").read_text())
    assert report["extra"]["bench"] == bench_section("latency.png")
    assert report["extra"]["rollout"] == rollout_section()
    merged = report["extra"]["package"]["merged"]
    assert [(m["file"], m["sections"]) for m in merged] == [("bench.json", ["bench"]), ("rollout.json", ["rollout"])]
    card = (folder / "README.md").read_text()
    assert "![latency against batch size per runtime](latency.png)" in card
    assert "| `latency.png` | latency against batch size, per runtime |" in card
    assert "on measuring-host" in card and "rlparity bench sample:tinywalker" in card
    assert ModelCard(card).data.eval_results[0].metric_value == "486.25 +/- 13.50"
    done = subprocess.run(["sha256sum", "-c", "MANIFEST.sha256"], cwd=folder, capture_output=True, text=True)
    assert done.returncode == 0 and "latency.png: OK" in done.stdout


@pytest.mark.parametrize("case", ["another checkpoint", "escaping plot", "plot not an image", "missing plot",
                                  "no section", "same section twice", "not a report", "malformed section",
                                  "malformed field", "plot through a linked folder"])
def test_bad_reports_are_refused_before_anything_runs(run_cli, tmp_path, walker_report, case):
    folder = tmp_path / "reports"
    secret = tmp_path / "secret.png"
    secret.write_bytes(png())
    paths = []
    if case == "another checkpoint":
        other = json.loads(json.dumps(walker_report))
        other["source"]["sha256"] = "0" * 64
        paths = [write_section_report(other, folder, "r.json", {"rollout": rollout_section()}, "x")]
        expected = "is a report on another checkpoint (sha256 000000000000..."
    elif case == "escaping plot":
        paths = [write_section_report(walker_report, folder, "r.json", {"bench": bench_section("../secret.png")}, "x")]
        expected = "its bench plot must be a path relative to the report, inside its folder, not '../secret.png'"
    elif case == "plot not an image":
        paths = [write_section_report(walker_report, folder, "r.json", {"bench": bench_section("README.md")}, "x")]
        (folder / "README.md").write_text("not a plot")
        expected = "its bench plot must be an image (.png, .svg, .jpg, .jpeg, .webp), not 'README.md'"
    elif case == "missing plot":
        paths = [write_section_report(walker_report, folder, "r.json", {"bench": bench_section()}, "x")]
        expected = "the bench plot it names, bench.png, is not a file beside it"
    elif case == "no section":
        paths = [write_section_report(walker_report, folder, "r.json", {}, "x")]
        expected = "holds no section to merge"
    elif case == "same section twice":
        paths = [write_section_report(walker_report, folder, f"r{i}.json", {"rollout": rollout_section()}, "x")
                 for i in range(2)]
        expected = "holds a 'rollout' section, and so does"
    elif case == "plot through a linked folder":
        paths = [write_section_report(walker_report, folder, "r.json", {"bench": bench_section("plots/secret.png")}, "x")]
        (folder / "plots").symlink_to(tmp_path)
        expected = "the bench plot it names, plots/secret.png, lies outside its folder (through a symbolic link)"
    elif case == "malformed section":
        paths = [write_section_report(walker_report, folder, "r.json", {"rollout": {"results": "x"}}, "x")]
        expected = "its 'rollout' section is not in the shape rlparity writes (TypeError"
    elif case == "malformed field":
        other = json.loads(json.dumps(walker_report))
        other["source"] = ["not", "an", "object"]
        paths = [write_section_report(other, folder, "r.json", {"rollout": rollout_section()}, "x")]
        expected = "not an rlparity report: source is list, expected dict[str, Any]"
    else:
        folder.mkdir()
        paths = [folder / "r.json"]
        paths[0].write_text("[1, 2")
        expected = "not an rlparity report"
    args = [a for p in paths for a in ("--from-report", p)]
    result = run_cli("package", TINYWALKER, "-o", tmp_path / "pkg", *args)
    assert result.exit_code == 1, result.output
    (line,) = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert expected in line and str(paths[-1]) in line
    assert "verdict" not in result.output  # refused before validating
    assert not (tmp_path / "pkg").exists()


def test_a_mismatch_is_packaged_with_exit_3_and_says_so(run_cli, tmp_path):
    """A failing port is still evidence: the folder is written, the card leads with MISMATCH."""
    tampered = tampered_onnx(TINYWALKER / "TinyWalker-1000.onnx", tmp_path,
                             "action_model._continuous_distribution.mu.bias", bias_plus_1e2)
    result = run_cli("package", TINYWALKER, "-o", tmp_path / "pkg", "--ref", tampered)
    assert result.exit_code == 3, result.output
    card = (tmp_path / "pkg" / "README.md").read_text()
    assert "**Verdict: MISMATCH** in ort-ref vs torch-cpu, ort-cpu vs ort-ref." in card


def test_bad_base_model_is_a_clean_error(run_cli, tmp_path):
    result = run_cli("package", TINYWALKER, "-o", tmp_path / "pkg", "--base-model", "not a repo")
    assert result.exit_code == 1
    assert "--base-model must be a Hub model id such as owner/name" in result.output
    assert "verdict" not in result.output and not (tmp_path / "pkg").exists()
