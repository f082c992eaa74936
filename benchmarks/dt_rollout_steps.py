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
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rlparity import converters  # noqa: E402
from rlparity.validators.ort import OrtRuntime  # noqa: E402
from rlparity.validators.rollout import (  # noqa: E402
    closed_loop_drift,
    fingerprint,
    first_divergence,
    play,
)
from rlparity.validators.torch_runtime import TorchRuntime  # noqa: E402

DEFAULT_MODEL = REPO.parent / "shared" / "fixtures" / "dt" / "decision-transformer-gym-hopper-medium"


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

    import gymnasium
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
    print(f"model: {family.source} ({family.summary()['transformer']})")
    print(f"env: {args.env}, seeds {args.seed}..{args.seed + args.episodes - 1}, context {settings.context_length}, "
          f"target return {settings.target_return:g} / {settings.return_scale:g}, normalization: {settings.source}; "
          f"{'no termination, ' if args.no_termination else ''}max {args.max_steps} steps")
    print(f"torch {torch.__version__} ({torch.get_num_threads()} threads), onnxruntime {onnxruntime.__version__}")
    print(f"{'runtime':<10} {'steps/s':>9} {'model calls/s':>14} {'steps':>6}  {'returns':<28} fingerprint")
    warmup = family.controller()
    warmup.reset(np.zeros(family.config["state_dim"]))
    records = {}
    for name, run in (("torch-cpu", torch_cpu.run), ("ort-cpu", ort_cpu.run)):
        run(warmup.feeds())  # first-call costs stay out of the timing
        env = gymnasium.make(args.env, terminate_when_unhealthy=not args.no_termination,
                             max_episode_steps=args.max_steps)
        record = play(env, family.controller(), run, args.episodes, args.seed, args.max_steps)
        env.close()
        records[name] = record
        returns = ", ".join(f"{r:.2f}" for r in record.returns)
        print(f"{name:<10} {record.steps / record.total_s:>9.1f} {record.steps / record.policy_s:>14.1f} "
              f"{record.steps:>6}  {returns:<28} {fingerprint(record.actions)[:23]}")

    first = first_divergence(records["torch-cpu"], records["ort-cpu"])
    drift = closed_loop_drift(records["torch-cpu"], records["ort-cpu"])
    for episode, worst in enumerate(drift["max_abs_per_episode"]):
        a, b = records["torch-cpu"].returns[episode], records["ort-cpu"].returns[episode]
        print(f"episode {episode}: max |a-b| {worst:.3g}; |return difference| {abs(a - b):.3g}")
    if first is None:
        print("finding: torch-cpu and ort-cpu took identical actions (every bit) in every episode")
    else:
        beyond = drift["beyond_tolerance"]
        print(f"finding: the action sequences are NOT identical: first difference at episode {first['episode']}, "
              f"step {first['step']}, max |a-b| {first['max_abs']:.3g} "
              f"({'within' if first['within_tolerance'] else 'beyond'} float tolerance); the largest difference "
              f"over all compared steps is {drift['max_abs']:.3g}"
              + (f", beyond tolerance from episode {beyond['episode']} step {beyond['step']}" if beyond else "")
              + f"; episode lengths {records['torch-cpu'].lengths} (torch-cpu) vs {records['ort-cpu'].lengths} (ort-cpu)")


if __name__ == "__main__":
    main()
