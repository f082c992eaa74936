"""The Decision Transformer's autoregressive loop through `rlparity rollout`, in real MuJoCo Hopper."""
from __future__ import annotations

import json

import pytest

from rlparity.validators.ort import OrtRuntime

pytest.importorskip("gymnasium")
pytest.importorskip("mujoco")

HOPPER = "sample:tinyhopper"


def test_hopper_rollout_reports_identity_or_where_and_how_much(run_cli, tmp_path):
    result = run_cli("rollout", HOPPER, "--env", "Hopper-v5", "--episodes", "3", "--max-steps", "40",
                     "--json", tmp_path / "r.json")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    section = report["extra"]["rollout"]
    assert [r["runtime"] for r in section["results"]] == ["torch-cpu", "ort-cpu"]
    output = report["comparisons"][0]["outputs"][0]
    assert output["rule"] == "closed-loop" and output["passed"] is True
    if section["identical_actions"]:
        assert section["first_divergence"] is None
        assert section["results"][0]["fingerprint"] == section["results"][1]["fingerprint"]
    else:  # float32 kernels differ: where, by how much, and the drift that followed are all stated
        first = section["first_divergence"]
        assert first["within_tolerance"] is True and 0 < first["max_abs"] <= 1e-5
        assert output["metrics"]["max_abs"] >= first["max_abs"]
        assert len(output["metrics"]["max_abs_per_episode"]) == 3
        assert "closed-loop drift" in output["note"]
        assert "PASS within tolerance" in result.output


def test_an_action_beyond_tolerance_at_identical_history_fails(run_cli, tmp_path, monkeypatch):
    """Fault injection: onnxruntime's very first decision (identical history) moves by 1e-3."""
    real_run = OrtRuntime.run
    calls = {"n": 0}

    def nudged(self, feeds):
        out = real_run(self, feeds)
        calls["n"] += 1
        if calls["n"] == 1:
            out["action_preds"] = out["action_preds"].copy()
            out["action_preds"][0, -1, 0] += 1e-3
        return out

    monkeypatch.setattr(OrtRuntime, "run", nudged)
    result = run_cli("rollout", HOPPER, "--env", "Hopper-v5", "--episodes", "1", "--max-steps", "20",
                     "--json", tmp_path / "r.json")
    assert result.exit_code == 3, result.output
    assert "MISMATCH" in result.output
    first = json.loads((tmp_path / "r.json").read_text())["extra"]["rollout"]["first_divergence"]
    assert (first["episode"], first["step"], first["within_tolerance"]) == (0, 0, False)
    assert first["max_abs"] == pytest.approx(1e-3, rel=1e-2)


def test_target_return_and_settings_file_reach_the_loop(run_cli, tmp_path):
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"state_mean": [0.0] * 11, "state_std": [1.0] * 11, "context_length": 5}))
    result = run_cli("rollout", HOPPER, "--env", "Hopper-v5", "--episodes", "1", "--max-steps", "10",
                     "--runtimes", "torch-cpu", "--settings", settings, "--target-return", "1800",
                     "--json", tmp_path / "r.json")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "r.json").read_text())["extra"]["rollout"]["results"][0]["mean_length"] == 10
    missing = run_cli("rollout", HOPPER, "--env", "Hopper-v5", "--settings", tmp_path / "nope.json")
    assert missing.exit_code == 1 and "nope.json: no such file" in missing.output


def test_a_stable_baselines3_policy_refuses_decision_transformer_settings(run_cli):
    result = run_cli("rollout", "sample:cartpole", "--env", "CartPole-v1", "--target-return", "10")
    assert result.exit_code == 2 and "takes no such setting" in result.output


def test_hopper_model_in_another_environment_is_one_clean_line(run_cli):
    result = run_cli("rollout", HOPPER, "--env", "Pendulum-v1", "--episodes", "1")
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 1
    assert "the model takes 11 states and gives 3 continuous actions" in lines[0]
