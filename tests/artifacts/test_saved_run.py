"""Saved runs: written by `validate --save-run` in one process, judged by `compare` in another."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import REPO, TINYBRANCHES, TINYWALKER


def cli(*args) -> subprocess.CompletedProcess:
    """`python cli.py ARGS` in a fresh interpreter, as a separate host would run it."""
    return subprocess.run([sys.executable, str(REPO / "cli.py"), *map(str, args)], capture_output=True, text=True)


def save(run_cli, sample, folder: Path, *extra) -> Path:
    result = run_cli("validate", sample, "--batch", "16", "--draws", "64", "--save-run", folder, *extra)
    assert result.exit_code == 0, result.output
    return folder


@pytest.fixture(scope="module")
def walker_run(tmp_path_factory) -> Path:
    """TinyWalker saved by a separate process, shared by the tests that only read it."""
    folder = tmp_path_factory.mktemp("saved") / "laptop"
    done = cli("validate", TINYWALKER, "--batch", "16", "--draws", "64", "--save-run", folder)
    assert done.returncode == 0, done.stderr
    assert "saved the run to" in done.stderr
    return folder


def perturb(folder: Path, runtime: str, output: str, delta: float) -> None:
    path = folder / "outputs" / f"{runtime}.npz"
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files}
    arrays[output] = arrays[output] + np.float32(delta)
    np.savez(path, **arrays)


def test_a_saved_run_compares_in_another_process(walker_run, tmp_path):
    meta = json.loads((walker_run / "run.json").read_text())
    assert meta["schema"] == "rlparity.run/1" and meta["reference_runtime"] == "torch-cpu"
    assert {"torch", "onnxruntime", "numpy"} <= set(meta["versions"]) and meta["host"]["machine"]
    assert [r["name"] for r in meta["runtimes"]] == ["torch-cpu", "ort-cpu", "ort-ref"]
    assert meta["inputs"]["digest"] == meta["report"]["inputs"]["digest"]
    assert meta["tolerances"] == {} and meta["default_tolerances"]["float32"] == [1e-5, 1e-4]
    for runtime in meta["runtimes"]:
        assert (walker_run / runtime["outputs"]["file"]).is_file() and (walker_run / runtime["draws"]["file"]).is_file()

    done = cli("compare", walker_run, "--json", tmp_path / "compare.json")
    assert done.returncode == 0, done.stderr
    assert "verdict: PASS" in done.stderr and "rlparity compare" in done.stderr
    report = json.loads((tmp_path / "compare.json").read_text())
    pairs = [(c["candidate"], c["reference"]) for c in report["comparisons"]]
    # the same comparisons validate made, from the saved arrays alone
    assert pairs == [(n, r) for n, r in [(c["candidate"], c["reference"]) for c in meta["report"]["comparisons"]]]
    saved = {(c["candidate"], c["reference"]): c for c in meta["report"]["comparisons"]}
    for c in report["comparisons"]:
        before = {o["output"]: o["metrics"] for o in saved[(c["candidate"], c["reference"])]["outputs"]}
        for o in c["outputs"]:
            if o["rule"] == "elementwise":
                assert o["metrics"]["max_abs"] == before[o["output"]]["max_abs"]


def test_a_perturbed_saved_output_is_a_mismatch(walker_run, tmp_path):
    other = shutil.copytree(walker_run, tmp_path / "npu-host")
    perturb(other, "ort-cpu", "deterministic_continuous_actions", 1e-3)
    done = cli("compare", walker_run, other, "--json", tmp_path / "r.json")
    assert done.returncode == 3, done.stderr
    assert "MISMATCH" in done.stderr and "changed since it was saved" in done.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    verdicts = {c["candidate"]: c["passed"] for c in report["comparisons"]}
    assert verdicts == {"torch-cpu@npu-host": True, "ort-cpu@npu-host": False, "ort-ref@npu-host": True}
    assert {c["reference"] for c in report["comparisons"]} == {"torch-cpu@laptop"}
    failed = next(c for c in report["comparisons"] if not c["passed"])
    output = next(o for o in failed["outputs"] if o["output"] == "deterministic_continuous_actions")
    assert output["metrics"]["max_abs"] == pytest.approx(1e-3, rel=1e-2)


def test_runs_from_two_hosts_compare_runtime_by_runtime(run_cli, walker_run, tmp_path):
    second = save(run_cli, TINYWALKER, tmp_path / "second", "--runtimes", "torch-cpu,ort-cpu")
    result = run_cli("compare", walker_run, second, "--json", tmp_path / "r.json")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert [(c["candidate"], c["reference"]) for c in report["comparisons"]] == [
        ("torch-cpu@second", "torch-cpu@laptop"), ("ort-cpu@second", "torch-cpu@laptop")]
    assert [r["path"] for r in report["extra"]["runs"]] == [str(walker_run), str(second)]
    # against another reference runtime of the first run
    result = run_cli("compare", walker_run, second, "--reference", "ort-ref", "--json", tmp_path / "r2.json")
    assert result.exit_code == 0, result.output
    assert {c["reference"] for c in json.loads((tmp_path / "r2.json").read_text())["comparisons"]} == {"ort-ref@laptop"}


def test_discrete_runs_keep_their_scores_and_draws(run_cli, tmp_path):
    folder = save(run_cli, TINYBRANCHES, tmp_path / "branches")
    assert (folder / "scores.npz").is_file()
    result = run_cli("compare", folder, "--json", tmp_path / "r.json")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    rules = {o["output"]: o["rule"] for o in report["comparisons"][0]["outputs"]}
    assert rules["discrete_actions"] == "distribution" and rules["deterministic_discrete_actions"] == "agreement"
    sampled = next(o for o in report["comparisons"][0]["outputs"] if o["output"] == "discrete_actions")
    assert sampled["passed"] is True and sampled["metrics"]["draws"] == 64


def test_tolerances_on_compare(walker_run, run_cli, tmp_path):
    other = shutil.copytree(walker_run, tmp_path / "other")
    perturb(other, "ort-cpu", "deterministic_continuous_actions", 1e-3)
    assert run_cli("compare", walker_run, other).exit_code == 3
    assert run_cli("compare", walker_run, other, "--atol", "2e-3").exit_code == 0


def test_runs_on_other_inputs_are_refused(run_cli, walker_run, tmp_path):
    other = save(run_cli, TINYWALKER, tmp_path / "seed1", "--seed", "1", "--runtimes", "torch-cpu,ort-cpu")
    result = run_cli("compare", walker_run, other)
    assert result.exit_code == 1
    assert "are not those of" in result.output and len(result.output.strip().splitlines()) == 1


def test_unknown_reference_runtime_is_a_usage_error(run_cli, walker_run):
    result = run_cli("compare", walker_run, "--reference", "torch-npu:0")
    assert result.exit_code == 2 and "has no outputs of runtime 'torch-npu:0'" in result.output


@pytest.mark.parametrize("damage", ["no-folder", "empty", "foreign", "bad-json", "other-schema", "truncated-npz",
                                    "missing-npz", "escaping-path", "malformed", "no-inputs", "bad-tolerances",
                                    "report-not-an-object"])
def test_corrupt_or_foreign_folders_are_one_line_errors(walker_run, run_cli, tmp_path, damage):
    folder = shutil.copytree(walker_run, tmp_path / "run")
    meta_path = folder / "run.json"
    meta = json.loads(meta_path.read_text())
    if damage == "no-folder":
        folder = tmp_path / "nothing"
    elif damage == "empty":
        folder = tmp_path / "empty"
        folder.mkdir()
    elif damage == "foreign":
        folder = REPO / "tests" / "data"
    elif damage == "bad-json":
        meta_path.write_text("{ not json")
    elif damage == "other-schema":
        meta_path.write_text(json.dumps({"schema": "rlparity.report/1"}))
    elif damage == "truncated-npz":
        npz = folder / "outputs" / "ort-cpu.npz"
        npz.write_bytes(npz.read_bytes()[:100])
    elif damage == "missing-npz":
        (folder / "inputs.npz").unlink()
    elif damage == "escaping-path":
        meta["inputs"]["file"] = "../../../etc/passwd"
        meta_path.write_text(json.dumps(meta))
    elif damage == "malformed":
        del meta["runtimes"][0]["name"]
        meta_path.write_text(json.dumps(meta))
    elif damage in ("no-inputs", "bad-tolerances", "report-not-an-object"):
        key, value = {"no-inputs": ("inputs", None), "bad-tolerances": ("tolerances", {"actions": [1e-5]}),
                      "report-not-an-object": ("report", [])}[damage]
        meta[key] = value
        meta_path.write_text(json.dumps(meta))
    result = run_cli("compare", folder)
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output


def test_a_hostile_saved_array_never_runs(walker_run, run_cli, tmp_path):
    folder = shutil.copytree(walker_run, tmp_path / "run")
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    np.savez(folder / "outputs" / "ort-cpu.npz", deterministic_continuous_actions=np.array([Payload()], dtype=object))
    result = run_cli("compare", folder)
    assert result.exit_code == 1 and "not a readable .npz archive" in result.output
    assert not marker.exists()


def test_save_run_refuses_a_folder_in_use_before_validating(run_cli, tmp_path):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    result = run_cli("validate", TINYWALKER, "--save-run", tmp_path / "busy")
    assert result.exit_code == 1 and "is not a saved run" in result.output
    assert "Runtimes" not in result.output  # refused before any work
    assert (tmp_path / "busy" / "notes.txt").read_text() == "mine"


def test_names_from_a_saved_run_are_shown_as_text(walker_run, run_cli, tmp_path):
    """run.json comes from another host: a runtime named like rich markup is printed as written."""
    folder = shutil.copytree(walker_run, tmp_path / "run")
    meta = json.loads((folder / "run.json").read_text())
    meta["runtimes"][1]["name"] = "[/odd]"
    meta["created"] = "[/when]"
    meta["report"]["family"] = "[/family]"
    (folder / "run.json").write_text(json.dumps(meta))
    result = run_cli("compare", folder)
    assert result.exit_code == 0, result.output
    assert "[/odd] vs torch-cpu" in result.output and "[/when]" in result.output and "[/family]" in result.output
