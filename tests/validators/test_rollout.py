"""Closed-loop rollouts in the real environment: the policy plays, every runtime the same episodes."""
from __future__ import annotations

import json

import numpy as np
import pytest

from rlparity import converters
from rlparity.validators.ort import OrtRuntime
from rlparity.validators.rollout import (
    Controller,
    fingerprint,
    first_divergence,
    make_env,
    play,
)
from rlparity.validators.torch_runtime import TorchRuntime
from tests.conftest import without_npu
from tests.converters.test_bad_input import assert_clean_error

pytest.importorskip("gymnasium")
pytest.importorskip("seals")

CARTPOLE = "sample:cartpole"
ENV = "seals/CartPole-v0"


def test_cartpole_scores_500_with_identical_actions_on_every_runtime(run_cli, tmp_path):
    result = run_cli("rollout", CARTPOLE, "--env", ENV, "--episodes", "10", "--seed", "0", "--json", tmp_path / "r.json")
    assert result.exit_code == 0, result.output
    assert "verdict: PASS (identical actions on all 2 runtimes)" in result.output
    report = json.loads((tmp_path / "r.json").read_text())
    section = report["extra"]["rollout"]
    assert (section["env_id"], section["episodes"], section["seed"]) == (ENV, 10, 0)
    assert [r["runtime"] for r in section["results"]] == ["torch-cpu", "ort-cpu"]
    for r in section["results"]:
        assert r["mean_return"] == 500.0 and r["std_return"] == 0.0
        assert r["mean_length"] == 500.0 and r["std_length"] == 0.0 and r["returns"] == [500.0] * 10
        assert r["fingerprint"].startswith("sha256:") and len(r["fingerprint"]) == 7 + 64
    assert section["results"][0]["fingerprint"] == section["results"][1]["fingerprint"]
    assert section["identical_actions"] is True and section["first_divergence"] is None
    assert report["verdict"] == "pass" and report["comparisons"][0]["outputs"][0]["rule"] == "closed-loop"
    assert report["comparisons"][0]["outputs"][0]["metrics"]["steps"] == 5000
    assert {"gymnasium", "seals"} <= set(report["versions"])
    by_name = {r["name"]: r for r in report["runtimes"]}
    assert by_name["ort-cpu"]["timing"]["steps"] == 5000 and by_name["ort-cpu"]["timing"]["steps_per_s"] > 0


def test_a_runtime_that_acts_differently_is_caught_at_its_first_step(run_cli, tmp_path, monkeypatch):
    """Fault injection: onnxruntime's 730th decision is flipped (episode 1, step 230)."""
    calls = {"n": 0}
    real_run = OrtRuntime.run

    def flipped(self, feeds):
        out = real_run(self, feeds)
        calls["n"] += 1
        if calls["n"] == 731:
            out["actions"] = 1 - out["actions"]
        return out

    monkeypatch.setattr(OrtRuntime, "run", flipped)
    result = run_cli("rollout", CARTPOLE, "--env", ENV, "--episodes", "3", "--json", tmp_path / "r.json")
    assert result.exit_code == 3, result.output
    assert "MISMATCH" in result.output and "episode 1, step 230" in result.output
    report = json.loads((tmp_path / "r.json").read_text())
    section = report["extra"]["rollout"]
    assert section["identical_actions"] is False
    assert section["first_divergence"] == {"episode": 1, "step": 230, "runtimes": ["torch-cpu", "ort-cpu"], "max_abs": 1.0,
                                           "within_tolerance": False}
    fingerprints = {r["runtime"]: r["fingerprint"] for r in section["results"]}
    assert fingerprints["torch-cpu"] != fingerprints["ort-cpu"]
    assert report["verdict"] == "mismatch"
    metrics = report["comparisons"][0]["outputs"][0]["metrics"]
    assert metrics["identical_episodes"] == 2 and metrics["first_divergence"]["episode"] == 1


@pytest.mark.parametrize("env_id, fragment", [
    ("NoSuchEnv-v0", "unknown or unusable environment id"),
    ("seals/NoSuch-v0", "unknown or unusable environment id"),
    ("Pendulum-v1", "the environment observes shape [3], the policy takes [4]"),
    ("Acrobot-v1", "the environment observes shape [6]"),
])
def test_unusable_environment_is_one_clean_line(run_cli, tmp_path, env_id, fragment):
    result = run_cli("rollout", CARTPOLE, "--env", env_id, "--json", tmp_path / "r.json")
    assert_clean_error(result, env_id, fragment)
    assert not (tmp_path / "r.json").exists()


def test_families_without_a_controller_say_so(run_cli):
    result = run_cli("rollout", "sample:tinywalker", "--env", "CartPole-v1")
    assert result.exit_code == 1 and "in an environment (rollout) is not supported yet" in result.output


@without_npu
def test_runtime_options(run_cli, tmp_path):
    result = run_cli("rollout", CARTPOLE, "--env", ENV, "--runtimes", "torch-cpu,ort-ref")
    assert result.exit_code == 2 and "ort-ref cannot play rollouts" in result.output
    result = run_cli("rollout", CARTPOLE, "--env", ENV, "--episodes", "1", "--device", "npu:0",
                     "--json", tmp_path / "r.json")
    assert result.exit_code == 4 and "torch_npu is not installed" in result.output
    section = json.loads((tmp_path / "r.json").read_text())["extra"]["rollout"]
    assert [r["runtime"] for r in section["results"]] == ["torch-cpu", "ort-cpu"]  # the others still played
    result = run_cli("rollout", CARTPOLE, "--env", ENV, "--episodes", "2", "--runtimes", "ort-cpu",
                     "--max-steps", "40", "--json", tmp_path / "one.json")
    assert result.exit_code == 0 and "one runtime: nothing to compare" in result.output
    section = json.loads((tmp_path / "one.json").read_text())["extra"]["rollout"]
    one = section["results"][0]
    assert one["lengths"] == [40, 40] and one["mean_return"] == 40.0
    assert section["identical_actions"] is False  # nothing compared: nothing established


def _ort_cartpole():
    family = converters.load(CARTPOLE)
    runtime = OrtRuntime()
    runtime.prepare(family.export())
    return family, runtime


def test_episode_i_is_reset_with_seed_s_plus_i():
    family, runtime = _ort_cartpole()
    env = make_env("CartPole-v1")
    controller = family.rollout_controller()
    three = play(env, controller, runtime.run, episodes=3, seed=10, max_steps=60)
    last = play(env, controller, runtime.run, episodes=1, seed=12, max_steps=60)
    assert [a.tobytes() for a in three.actions[2]] == [a.tobytes() for a in last.actions[0]]
    assert [a.tobytes() for a in three.actions[0]] != [a.tobytes() for a in three.actions[1]]
    assert first_divergence(three, three) is None
    assert fingerprint(three.actions) == fingerprint([list(e) for e in three.actions])
    changed = [list(e) for e in three.actions]
    changed[1][5] = 1 - changed[1][5]
    assert fingerprint(changed) != fingerprint(three.actions)


class RecordingController(Controller):
    """A stateful controller, as a Decision Transformer's would be: it keeps the episode's
    history of observations, actions and rewards, and asks the runtime about the latest."""

    def __init__(self, obs_size: int):
        self.obs_size = obs_size
        self.episodes = []

    def reset(self, observation):
        self.episodes.append({"first": np.array(observation), "observations": [], "actions": [], "rewards": []})

    def act(self, observation, run):
        history = self.episodes[-1]
        history["observations"].append(np.array(observation))
        action = run({"obs": np.asarray(history["observations"][-1:], dtype=np.float32)})["actions"][0]
        history["actions"].append(int(action))
        return action

    def observe(self, reward):
        self.episodes[-1]["rewards"].append(reward)


def test_a_stateful_controller_sees_reset_act_observe_in_order():
    family = converters.load(CARTPOLE)
    runtime = TorchRuntime(family.io_spec())
    runtime.prepare(family.build_torch())
    controller = RecordingController(4)
    record = play(make_env(ENV), controller, runtime.run, episodes=2, seed=3, max_steps=25)
    assert len(controller.episodes) == 2
    for history, actions, total in zip(controller.episodes, record.actions, record.returns):
        assert np.array_equal(history["first"], history["observations"][0])
        assert len(history["observations"]) == len(history["rewards"]) == len(actions) == 25
        assert history["actions"] == [int(a) for a in actions] and sum(history["rewards"]) == total


def _verdict(runtimes: list[tuple[str, str | None]], comparisons: list[tuple[str, bool, dict]], divergence):
    """rollout_verdict_line of a report: runtimes (name, error), comparisons against torch-cpu."""
    from rlparity.artifacts.tables import rollout_verdict_line

    report = {
        "runtimes": [{"name": n, "available": True, "error": e} for n, e in runtimes],
        "comparisons": [{"reference": "torch-cpu", "candidate": n, "passed": ok,
                         "outputs": [{"metrics": {"first_divergence": d}}]} for n, ok, d in comparisons],
        "extra": {"rollout": {"results": [{"runtime": n} for n, e in runtimes if e is None],
                              "first_divergence": divergence}},
    }
    return rollout_verdict_line(report).plain


def test_the_rollout_verdict_line_agrees_with_the_exit_code():
    within = {"episode": 0, "step": 5, "max_abs": 2e-7, "runtimes": ["torch-cpu", "ort-cpu"]}
    beyond = {"episode": 1, "step": 3, "max_abs": 0.5}
    # a runtime that failed: incomplete (exit 1), even when the others diverged within tolerance
    line = _verdict([("torch-cpu", None), ("ort-cpu", None), ("torch-cuda:0", "RuntimeError: lost")],
                    [("ort-cpu", True, within)], within)
    assert line.startswith("verdict: INCOMPLETE")
    # the mismatch named is the failing pair, not the earliest divergence (which passed)
    line = _verdict([("torch-cpu", None), ("ort-cpu", None), ("torch-cuda:0", None)],
                    [("ort-cpu", True, within), ("torch-cuda:0", False, beyond)], within)
    assert line == "verdict: MISMATCH: torch-cuda:0 acted differently from torch-cpu first at episode 1, step 3 (max_abs 0.5)"
    line = _verdict([("torch-cpu", None), ("ort-cpu", None)], [("ort-cpu", True, within)], within)
    assert line.startswith("verdict: PASS within tolerance: ort-cpu first acted differently from torch-cpu at episode 0")
