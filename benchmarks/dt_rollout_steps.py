"""Decision Transformer closed loop in MuJoCo: rollout steps per second per runtime, and
whether the runtimes take the same actions.

    python benchmarks/dt_rollout_steps.py [MODEL] [--episodes 3] [--seed 0] [--torch-threads N]
                                          [--no-termination] [--max-steps 1000]

MODEL defaults to ../shared/fixtures/dt/decision-transformer-gym-hopper-medium (the bundled
sample:tinyhopper when the fixtures are absent). Each runtime drives its own Hopper-v5
episodes with the same seeds through the Hugging Face example's control loop. Reported per
runtime: environment steps per second (model + MuJoCo + loop), model calls per second, the
returns, and a fingerprint of the action sequence; then whether torch-cpu and ort-cpu
took identical actions and, if not, the first step where they differ and by how much, and
how far apart the trajectories end up (a chaotic system amplifies float32 noise: a finding,
not something to hide).

--no-termination keeps Hopper running when it falls (terminate_when_unhealthy=False), for
full-length episodes: models with untrained weights fall within a few dozen steps.
"""
from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rlparity import converters  # noqa: E402
from rlparity.validators.ort import OrtRuntime  # noqa: E402
from rlparity.validators.torch_runtime import TorchRuntime  # noqa: E402

DEFAULT_MODEL = REPO.parent / "shared" / "fixtures" / "dt" / "decision-transformer-gym-hopper-medium"


def run_episodes(family, run, env_id, seeds, max_steps, terminate):
    import gymnasium as gym

    env = gym.make(env_id, terminate_when_unhealthy=terminate, max_episode_steps=max_steps)
    episodes, model_seconds, wall_seconds = [], 0.0, 0.0

    def timed_run(feeds):
        nonlocal model_seconds
        start = time.perf_counter()
        out = run(feeds)
        model_seconds += time.perf_counter() - start
        return out

    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        controller = family.controller()
        start = time.perf_counter()
        controller.reset(obs)
        reward, actions, rewards = None, [], []
        while True:
            actions.append(controller.act(obs, reward, timed_run))
            obs, reward, terminated, truncated, _ = env.step(actions[-1])
            rewards.append(reward)
            if terminated or truncated:
                break
        wall_seconds += time.perf_counter() - start
        episodes.append({"actions": np.array(actions), "return": float(np.sum(rewards)), "length": len(actions)})
    env.close()
    steps = sum(e["length"] for e in episodes)
    return episodes, steps / wall_seconds, steps / model_seconds


def fingerprint(episodes) -> str:
    digest = hashlib.sha256()
    for e in episodes:
        digest.update(np.ascontiguousarray(e["actions"], dtype=np.float32).tobytes())
    return "sha256:" + digest.hexdigest()[:16]


def divergence(a_episodes, b_episodes):
    """First (episode, step) whose actions differ, its max |a-b|, and the largest difference seen."""
    first, largest = None, 0.0
    for i, (a, b) in enumerate(zip(a_episodes, b_episodes)):
        n = min(a["length"], b["length"])
        diff = np.abs(a["actions"][:n] - b["actions"][:n]).max(axis=1)
        if first is None:
            differing = np.flatnonzero(diff > 0)
            if differing.size:
                first = {"episode": i, "step": int(differing[0]), "max_abs": float(diff[differing[0]])}
            elif a["length"] != b["length"]:
                first = {"episode": i, "step": n, "max_abs": float("nan")}
        largest = max(largest, float(diff.max()) if n else 0.0)
    return first, largest


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", nargs="?", default=str(DEFAULT_MODEL if DEFAULT_MODEL.exists() else "sample:tinyhopper"))
    parser.add_argument("--env", default="Hopper-v5")
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-steps", type=int, default=1000)
    parser.add_argument("--no-termination", action="store_true", help="Hopper keeps going when it falls")
    parser.add_argument("--torch-threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    args = parser.parse_args()

    import onnxruntime
    import torch

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    family = converters.load(args.model)
    settings = family.rollout_settings()
    torch_cpu = TorchRuntime(family.io_spec())
    torch_cpu.prepare(family.build_torch())
    ort_cpu = OrtRuntime("ort-cpu")
    ort_cpu.prepare(family.export())
    seeds = [args.seed + i for i in range(args.episodes)]
    print(f"model: {family.source} ({family.summary()['transformer']})")
    print(f"env: {args.env}, seeds {seeds}, context {settings.context_length}, target return "
          f"{settings.target_return:g} / {settings.return_scale:g}, normalization: {settings.source}; "
          f"{'no termination, ' if args.no_termination else ''}max {args.max_steps} steps")
    print(f"torch {torch.__version__} ({torch.get_num_threads()} threads), onnxruntime {onnxruntime.__version__}")
    print(f"{'runtime':<10} {'steps/s':>9} {'model calls/s':>14} {'steps':>6}  {'returns':<28} fingerprint")
    warmup = family.controller()
    warmup.reset(np.zeros(family.config["state_dim"]))
    warmup_feeds = warmup.feeds()
    results = {}
    for name, run in (("torch-cpu", torch_cpu.run), ("ort-cpu", ort_cpu.run)):
        run(warmup_feeds)  # first-call costs stay out of the timing
        episodes, steps_per_s, calls_per_s = run_episodes(family, run, args.env, seeds, args.max_steps,
                                                          not args.no_termination)
        results[name] = episodes
        returns = ", ".join(f"{e['return']:.2f}" for e in episodes)
        print(f"{name:<10} {steps_per_s:>9.1f} {calls_per_s:>14.1f} {sum(e['length'] for e in episodes):>6}  "
              f"{returns:<28} {fingerprint(episodes)}")
    first, largest = divergence(results["torch-cpu"], results["ort-cpu"])
    lengths = {n: [e["length"] for e in eps] for n, eps in results.items()}
    for i, (a, b) in enumerate(zip(results["torch-cpu"], results["ort-cpu"])):
        n = min(a["length"], b["length"])
        diff = np.abs(a["actions"][:n] - b["actions"][:n]).max(axis=1)
        quarters = ", ".join(f"{q.max():.2g}" for q in np.array_split(diff, min(4, n)))
        print(f"episode {i}: max |a-b| per quarter of the episode {quarters}; "
              f"|return difference| {abs(a['return'] - b['return']):.3g}")
    if first is None:
        print("finding: torch-cpu and ort-cpu took identical actions (every bit) in every episode")
    else:
        print(f"finding: the action sequences are NOT identical: first difference at episode {first['episode']}, "
              f"step {first['step']}, max |a-b| {first['max_abs']:.3g}; the largest difference over all "
              f"compared steps is {largest:.3g}; episode lengths {lengths['torch-cpu']} (torch-cpu) vs "
              f"{lengths['ort-cpu']} (ort-cpu)")


if __name__ == "__main__":
    main()
