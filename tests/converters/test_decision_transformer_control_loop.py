"""The Decision Transformer control loop: the Hugging Face example's, driven by any runtime.

The oracle is the example's own loop (transcribed below) running transformers' model in a
real MuJoCo Hopper-v5; the controller must take the same actions when fed the same
observations, with the torch rebuild, the ONNX export in onnxruntime, or transformers'
model itself as the runtime.
"""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from rlparity.converters.decision_transformer import (
    HOPPER_MEDIUM_MEAN,
    HOPPER_MEDIUM_STD,
    DecisionTransformer,
    DecisionTransformerController,
    RolloutSettings,
)
from rlparity.errors import UserError
from rlparity.validators.ort import OrtRuntime
from rlparity.validators.rollout import play
from rlparity.validators.torch_runtime import TorchRuntime
from tests.conftest import FIXTURES, TINYHOPPER

HOPPER_FIXTURE = FIXTURES / "dt" / "decision-transformer-gym-hopper-medium"
MODELS = {"TinyHopper": TINYHOPPER, "hopper-medium": HOPPER_FIXTURE}


def _family(name):
    if not MODELS[name].exists():
        pytest.skip(f"fixture {MODELS[name]} not present")
    return DecisionTransformer.load(MODELS[name])


def _runtimes(family):
    torch_cpu = TorchRuntime(family.io_spec())
    torch_cpu.prepare(family.build_torch())
    ort_cpu = OrtRuntime("ort-cpu")
    ort_cpu.prepare(family.export())
    return {"torch-cpu": torch_cpu.run, "ort-cpu": ort_cpu.run}


def _hopper(**kwargs):
    gym = pytest.importorskip("gymnasium")
    pytest.importorskip("mujoco")
    return gym.make("Hopper-v5", **kwargs)


# -- the loop's bookkeeping ---------------------------------------------------------------------

def _recording_run(act_dim, calls):
    def run(feeds):
        calls.append({k: v.copy() for k, v in feeds.items()})
        steps = feeds["states"].shape[1]
        return {"action_preds": np.full((1, steps, act_dim), 0.25 * len(calls), np.float32)}
    return run


def _step(controller, observation, reward, run):
    """One step of the rollout protocol: the reward the last action earned, then the next action."""
    if reward is not None:
        controller.observe(reward)
    return controller.act(observation, run)


def test_first_step_is_left_padded_to_the_context():
    settings = RolloutSettings(np.zeros(2), np.full(2, 2.0), target_return=3600.0, return_scale=1000.0, context_length=4)
    controller = DecisionTransformerController(state_dim=2, act_dim=1, max_ep_len=10, settings=settings)
    calls = []
    controller.reset(np.array([2.0, 4.0]))
    action = controller.act(np.array([2.0, 4.0]), _recording_run(1, calls))
    assert action.tolist() == [0.25]
    feeds = calls[0]
    assert feeds["attention_mask"].tolist() == [[0, 0, 0, 1]]
    assert feeds["states"][0].tolist() == [[0, 0], [0, 0], [0, 0], [1.0, 2.0]]
    assert feeds["returns_to_go"][0, :, 0].tolist() == [0, 0, 0, np.float32(3.6)]
    assert feeds["timesteps"].tolist() == [[0, 0, 0, 0]]
    assert feeds["actions"][0].tolist() == [[0], [0], [0], [0]]  # the step being decided has no action yet
    assert {k: v.dtype.name for k, v in feeds.items()} == {
        "states": "float32", "actions": "float32", "timesteps": "int64", "returns_to_go": "float32",
        "attention_mask": "int64"}


def test_window_slides_returns_drop_and_timesteps_stop_at_max_ep_len():
    settings = RolloutSettings(np.zeros(1), np.ones(1), target_return=10.0, return_scale=10.0, context_length=3)
    controller = DecisionTransformerController(state_dim=1, act_dim=1, max_ep_len=5, settings=settings)
    calls = []
    run = _recording_run(1, calls)
    controller.reset(np.array([0.0]))
    _step(controller, np.array([0.0]), None, run)
    for t in range(1, 7):
        _step(controller, np.array([float(t)]), 2.0, run)  # each step earns 2.0, i.e. 0.2 scaled
    last = calls[-1]
    assert last["attention_mask"].tolist() == [[1, 1, 1]]
    assert last["states"][0, :, 0].tolist() == [4.0, 5.0, 6.0]
    assert last["timesteps"].tolist() == [[4, 4, 4]]  # 4, 5, 6 capped at max_ep_len - 1
    expected = np.float32(1.0)
    for _ in range(6):
        expected = np.float32(expected - np.float32(0.2))
    assert last["returns_to_go"][0, -1, 0] == expected
    # the actions taken before are fed back; the newest slot is zeros
    assert last["actions"][0, :, 0].tolist() == [0.25 * 5, 0.25 * 6, 0.0]
    with pytest.raises(ValueError, match="observation given to reset"):
        controller.reset(np.array([1.0]))
        _step(controller, np.array([2.0]), None, run)


# -- the Hugging Face example's loop as the oracle ----------------------------------------------

def hf_example_rollout(model, env, seed, steps, state_mean, state_std, target_return=3.6, scale=1000.0, context=20):
    """The evaluation loop of the Hugging Face Decision Transformer example, step for step
    (gymnasium's reset/step signatures; K fixed at 20, the example's max_length)."""
    state_dim, act_dim = model.config.state_dim, model.config.act_dim
    state_mean = torch.from_numpy(np.array(state_mean))
    state_std = torch.from_numpy(np.array(state_std))

    def get_action(states, actions, rewards, returns_to_go, timesteps):
        states = states.reshape(1, -1, state_dim)[:, -context:]
        actions = actions.reshape(1, -1, act_dim)[:, -context:]
        returns_to_go = returns_to_go.reshape(1, -1, 1)[:, -context:]
        timesteps = timesteps.reshape(1, -1)[:, -context:]
        padding = context - states.shape[1]
        attention_mask = torch.cat([torch.zeros(padding), torch.ones(states.shape[1])]).to(torch.long).reshape(1, -1)
        states = torch.cat([torch.zeros((1, padding, state_dim)), states], dim=1).to(torch.float32)
        actions = torch.cat([torch.zeros((1, padding, act_dim)), actions], dim=1).to(torch.float32)
        returns_to_go = torch.cat([torch.zeros((1, padding, 1)), returns_to_go], dim=1).to(torch.float32)
        timesteps = torch.cat([torch.zeros((1, padding), dtype=torch.long), timesteps], dim=1).to(torch.long)
        with torch.no_grad():
            _, action_preds, _ = model(states=states, actions=actions, rewards=rewards, returns_to_go=returns_to_go,
                                       timesteps=timesteps, attention_mask=attention_mask, return_dict=False)
        return action_preds[0, -1]

    state, _ = env.reset(seed=seed)
    observations, rewards_seen, actions_taken = [state], [], []
    target = torch.tensor(target_return, dtype=torch.float32).reshape(1, 1)
    states = torch.from_numpy(state).reshape(1, state_dim).to(dtype=torch.float32)
    actions = torch.zeros((0, act_dim), dtype=torch.float32)
    rewards = torch.zeros(0, dtype=torch.float32)
    timesteps = torch.tensor(0, dtype=torch.long).reshape(1, 1)
    for t in range(steps):
        actions = torch.cat([actions, torch.zeros((1, act_dim))], dim=0)
        rewards = torch.cat([rewards, torch.zeros(1)])
        action = get_action((states - state_mean) / state_std, actions, rewards, target, timesteps)
        actions[-1] = action
        action = action.detach().numpy()
        actions_taken.append(action.copy())
        state, reward, terminated, truncated, _ = env.step(action)
        observations.append(state)
        rewards_seen.append(reward)
        states = torch.cat([states, torch.from_numpy(state).reshape(1, state_dim)], dim=0)
        rewards[-1] = reward
        target = torch.cat([target, (target[0, -1] - (reward / scale)).reshape(1, 1)], dim=1)
        timesteps = torch.cat([timesteps, torch.ones((1, 1), dtype=torch.long) * (t + 1)], dim=1)
        if terminated or truncated:
            break
    return observations, rewards_seen, np.array(actions_taken)


@pytest.mark.parametrize("name", list(MODELS))
def test_controller_takes_the_hf_example_actions_with_every_runtime(name):
    """30 steps of Hopper-v5 (kept upright so the window slides past K=20) by the example's loop
    with transformers' model; the controller, fed the same observations, acts the same."""
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    family = _family(name)
    model = transformers.DecisionTransformerModel.from_pretrained(family.folder).eval()
    env = _hopper(terminate_when_unhealthy=False)
    observations, rewards, hf_actions = hf_example_rollout(model, env, seed=3, steps=30,
                                                           state_mean=HOPPER_MEDIUM_MEAN, state_std=HOPPER_MEDIUM_STD)
    assert len(hf_actions) == 30

    def transformers_run(feeds):
        with torch.no_grad():
            out = model(**{k: torch.from_numpy(v) for k, v in feeds.items()}, return_dict=True)
        return {"action_preds": out.action_preds.numpy()}

    settings = family.rollout_settings()
    assert settings.context_length == 20 and settings.target_return / settings.return_scale == pytest.approx(3.6)
    for runtime, run in {"transformers": transformers_run, **_runtimes(family)}.items():
        controller = family.controller()
        controller.reset(observations[0])
        actions = [_step(controller, observations[t], rewards[t - 1] if t else None, run) for t in range(30)]
        # The example casts the first state to float32 before normalizing; the controller
        # normalizes in float64: the only difference, far below float32 model noise.
        np.testing.assert_allclose(np.array(actions), hf_actions, atol=1e-5, rtol=0, err_msg=runtime)


@pytest.mark.parametrize("name", list(MODELS))
def test_closed_loop_torch_and_onnxruntime_in_hopper(name):
    """Free-running episodes of real Hopper-v5: both runtimes stay within float32 noise."""
    family = _family(name)
    runs = _runtimes(family)
    for seed in range(2):
        trajectories = {}
        for runtime, run in runs.items():
            # the rollout command's own loop: reset, then act and observe at every step
            record = play(_hopper(), family.controller(), run, episodes=1, seed=seed, max_steps=60)
            trajectories[runtime] = (np.array(record.actions[0]), record.returns[0])
        (a, ra), (b, rb) = trajectories.values()
        assert a.shape == b.shape and len(a) > 1
        assert np.abs(a).max() <= 1.0  # tanh-squashed actions
        np.testing.assert_allclose(a, b, atol=1e-4, rtol=0)
        assert ra == pytest.approx(rb, abs=1e-3)


# -- settings: rollout.json beside the model ----------------------------------------------------

def _with_rollout_json(tmp_path, content):
    folder = tmp_path / "model"
    shutil.copytree(TINYHOPPER, folder)
    (folder / "rollout.json").write_text(content if isinstance(content, str) else json.dumps(content))
    return folder


def test_rollout_json_is_read_and_overrides_win(tmp_path):
    folder = _with_rollout_json(tmp_path, {"state_mean": [0.5] * 11, "state_std": [2.0] * 11,
                                           "target_return": 1800, "context_length": 8})
    family = DecisionTransformer.load(folder)
    settings = family.rollout_settings()
    assert settings.target_return == 1800 and settings.context_length == 8 and settings.return_scale == 1000.0
    assert settings.state_mean.tolist() == [0.5] * 11 and settings.source == str(folder / "rollout.json")
    assert family.context_length == 8 and family.io_spec().axes["sequence"] == 8
    controller = family.controller(target_return=3000.0)
    assert controller.target == np.float32(3.0) and controller.context == 8


def test_defaults_are_hopper_medium_and_need_11_states(tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(TINYHOPPER, folder)
    (folder / "rollout.json").unlink()
    settings = DecisionTransformer.load(folder).rollout_settings()
    assert settings.source == "hopper-medium defaults"
    assert settings.state_mean.tolist() == list(HOPPER_MEDIUM_MEAN) and settings.target_return == 3600.0
    config = json.loads((folder / "config.json").read_text())
    assert config["state_dim"] == 11


@pytest.mark.parametrize("content,fragment", [
    ("{not json", "not valid JSON"),
    ({"state_mean": [0.0] * 11}, "state_mean and state_std go together"),
    ({"state_mean": [0.0] * 3, "state_std": [1.0] * 3}, "state_mean has 3 values, the model's state_dim is 11"),
    ({"state_mean": [0.0] * 11, "state_std": [1.0] * 10 + [0.0]}, "state_std must be positive"),
    ({"state_mean": ["zero"] * 11, "state_std": [1.0] * 11}, "state_mean must be a list of 11 numbers"),
    ({"state_mean": [0.0] * 11, "state_std": {"std": 1}}, "state_std must be a list of 11 numbers"),
    ({"target_return": "high"}, "target_return must be a number"),
    ({"context_length": 0}, "context_length must be a positive integer"),
    ({"target": 3600}, "unknown key 'target'"),
])
def test_bad_rollout_json_is_one_clean_line(tmp_path, content, fragment):
    folder = _with_rollout_json(tmp_path, content)
    with pytest.raises(UserError) as error:
        DecisionTransformer.load(folder).rollout_settings()
    assert fragment in error.value.message and error.value.path == str(folder / "rollout.json")


def test_no_normalization_for_other_state_sizes(tmp_path):
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    config = transformers.DecisionTransformerConfig(state_dim=17, act_dim=6, hidden_size=8, n_layer=1, max_ep_len=50)
    transformers.DecisionTransformerModel(config).save_pretrained(tmp_path / "cheetah")
    family = DecisionTransformer.load(tmp_path / "cheetah")
    assert family.summary()["rollout_settings"].startswith("none")
    with pytest.raises(UserError, match="no state normalization for state_dim 17: add rollout.json"):
        family.controller()
