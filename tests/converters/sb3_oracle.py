"""Tiny Stable-Baselines3 models of every supported kind, saved by SB3 itself, with SB3's own
outputs on fixed observations as the oracle.

Only the tests import stable_baselines3; rlparity must never need it.
"""
from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

sb3 = pytest.importorskip("stable_baselines3")
gym = pytest.importorskip("gymnasium")

from gymnasium import spaces  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize  # noqa: E402


class ShapesEnv(gym.Env):
    """An environment that only has spaces: 2-D observations and asymmetric Box actions."""

    def __init__(self, obs_shape=(2, 3), low=(-1.0, 0.0), high=(2.0, 0.5)):
        self.observation_space = spaces.Box(-np.inf, np.inf, shape=obs_shape, dtype=np.float32)
        self.action_space = spaces.Box(np.array(low, np.float32), np.array(high, np.float32), dtype=np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample() * 0, {}

    def step(self, action):
        return self.observation_space.sample() * 0, 0.0, False, False, {}


def observations(shape, rows=32, seed=0, scale=3.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    obs = rng.standard_normal((rows, *shape)) * scale
    obs[0] = 0.0
    return obs.astype(np.float32)


def oracle(model, obs: np.ndarray, normalize: VecNormalize | None = None) -> dict[str, np.ndarray]:
    """What SB3 computes: predict's deterministic actions, and the scores and critic behind them."""
    seen = normalize.normalize_obs(obs) if normalize is not None else obs
    actions, _ = model.predict(seen, deterministic=True)
    policy = model.policy
    tensor, _ = policy.obs_to_tensor(seen)
    out = {"actions": actions}
    with torch.no_grad():
        if isinstance(model, sb3.DQN):
            out["q_values"] = policy.q_net(tensor).numpy()
            return out
        distribution = policy.get_distribution(tensor).distribution
        if isinstance(model.action_space, spaces.Discrete):
            out["logits"] = distribution.logits.numpy()
        else:
            out["mean"] = distribution.mean.numpy()
        out["values"] = policy.predict_values(tensor).numpy()
    return out


def scale_action_net(model, factor: float) -> None:
    """Untrained policies act near zero; larger weights reach the bounds (clip, squash)."""
    with torch.no_grad():
        model.policy.action_net.weight.mul_(factor)
        model.policy.action_net.bias.add_(0.3)


def build(kind: str, folder: Path):
    """(path of the saved zip, SB3 model, VecNormalize or None) for one kind of model."""
    vec_normalize = None
    if kind == "a2c-discrete-tanh":
        model = sb3.A2C("MlpPolicy", "CartPole-v1", seed=1, policy_kwargs=dict(net_arch=[32], activation_fn=torch.nn.Tanh))
        scale_action_net(model, 30.0)
    elif kind == "ppo-box-clip":  # no policy_kwargs at all: SB3's default Tanh and [64, 64]
        model = sb3.PPO("MlpPolicy", ShapesEnv(), seed=2, n_steps=64, batch_size=32)
        scale_action_net(model, 50.0)
    elif kind == "ppo-gsde-squash":
        model = sb3.PPO("MlpPolicy", ShapesEnv(), seed=3, use_sde=True, n_steps=64, batch_size=32,
                        policy_kwargs=dict(squash_output=True, net_arch=dict(pi=[16], vf=[24, 8]),
                                           activation_fn=torch.nn.ELU))
        scale_action_net(model, 50.0)
    elif kind == "dqn":
        model = sb3.DQN("MlpPolicy", "CartPole-v1", seed=4, policy_kwargs=dict(net_arch=[32, 16]))
    elif kind == "ppo-vecnormalize":
        venv = VecNormalize(DummyVecEnv([lambda: gym.make("Pendulum-v1")]), clip_obs=3.0)
        model = sb3.PPO("MlpPolicy", venv, seed=5, n_steps=64, batch_size=32,
                        policy_kwargs=dict(net_arch=dict(pi=[32], vf=[32]), activation_fn=torch.nn.ReLU))
        model.learn(192)  # real running statistics
        venv.training = False
        venv.save(str(folder / "vec_normalize.pkl"))
        vec_normalize = venv
    elif kind == "dqn-vecnormalize":  # its spaces carry a random generator: the pickle holds its state
        venv = VecNormalize(DummyVecEnv([lambda: gym.make("CartPole-v1")]))
        model = sb3.DQN("MlpPolicy", venv, seed=6, learning_starts=20, policy_kwargs=dict(net_arch=[16]))
        model.learn(100)
        venv.training = False
        venv.save(str(folder / "vec_normalize.pkl"))
        vec_normalize = venv
    else:
        raise KeyError(kind)
    path = folder / f"{kind}.zip"
    model.save(str(path))
    return path, model, vec_normalize


KINDS = ["a2c-discrete-tanh", "ppo-box-clip", "ppo-gsde-squash", "dqn", "ppo-vecnormalize", "dqn-vecnormalize"]


def rewrite_zip(source: Path, target: Path, data_edit=None, state_edit=None, extra: dict[str, bytes] | None = None,
                drop: tuple[str, ...] = ()) -> Path:
    """Copy an SB3 zip, editing the data JSON and/or the policy state dict on the way."""
    with zipfile.ZipFile(source) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    if data_edit is not None:
        data = json.loads(members["data"])
        data_edit(data)
        members["data"] = json.dumps(data).encode()
    if state_edit is not None:
        state = torch.load(io.BytesIO(members["policy.pth"]), weights_only=True)
        state = state_edit(state) or state
        buffer = io.BytesIO()
        torch.save(state, buffer)
        members["policy.pth"] = buffer.getvalue()
    members.update(extra or {})
    with zipfile.ZipFile(target, "w") as archive:
        for name, payload in members.items():
            if name not in drop:
                archive.writestr(name, payload)
    return target
