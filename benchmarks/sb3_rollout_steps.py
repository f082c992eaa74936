"""Closed-loop speed: environment steps per second with the policy on each runtime.

    python benchmarks/sb3_rollout_steps.py [MODEL] [--env seals/CartPole-v0] [--episodes 10]
                                           [--device cuda:0] [--repeats 3]

MODEL defaults to the bundled sample:cartpole. Each runtime plays the same seeded episodes
(``rlparity.validators.rollout.play``, the loop `rlparity rollout` runs), ``--repeats`` times;
the best repeat is reported, split into the time inside the runtime and the rest (the
environment and the loop). The environment alone, stepping with a fixed action, gives the
ceiling no policy can beat.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rlparity import converters  # noqa: E402
from rlparity.validators.rollout import fingerprint, make_env, play  # noqa: E402
from rlparity.validators.runtimes import runtime_for_device  # noqa: E402
from rlparity.validators.validate import make_runtime  # noqa: E402


def environment_alone(env_id: str, steps: int, seed: int) -> float:
    """Steps per second of the environment with a constant action, resetting as it ends."""
    env = make_env(env_id)
    action = env.action_space.sample() * 0
    env.reset(seed=seed)
    start = time.perf_counter()
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset()
    elapsed = time.perf_counter() - start
    env.close()
    return steps / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", nargs="?", default="sample:cartpole")
    parser.add_argument("--env", default="seals/CartPole-v0")
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default=None, help="also torch on this device (cuda:0, npu:0)")
    args = parser.parse_args()

    family = converters.load(args.model)
    spec = family.io_spec()
    names = ["torch-cpu", "ort-cpu"] + ([runtime_for_device(args.device)] if args.device else [])
    controller = family.rollout_controller()
    console = Console(width=None if sys.stdout.isatty() else 120)
    table = Table(title=f"{args.env}: {args.episodes} episodes x {args.repeats} repeats, best repeat")
    for column in ("runtime", "steps", "steps/s", "policy us/step", "env+loop us/step", "mean return", "fingerprint"):
        table.add_column(column, justify="left" if column in ("runtime", "fingerprint") else "right")

    for name in names:
        runtime = make_runtime(name, spec, args.seed)
        ok, reason = runtime.available()
        if not ok:
            table.add_row(name, "-", f"unavailable: {reason}", "-", "-", "-", "-")
            continue
        runtime.prepare(family.export() if runtime.kind == "onnxruntime" else family.build_torch())
        env = make_env(args.env)
        play(env, controller, runtime.run, 1, args.seed, 50)  # warm-up
        best = min((play(env, controller, runtime.run, args.episodes, args.seed, None) for _ in range(args.repeats)),
                   key=lambda record: record.total_s)
        env.close()
        runtime.close()
        steps = best.steps
        table.add_row(name, f"{steps:,}", f"{steps / best.total_s:,.0f}", f"{1e6 * best.policy_s / steps:.1f}",
                      f"{1e6 * (best.total_s - best.policy_s) / steps:.1f}", f"{np.mean(best.returns):g}",
                      fingerprint(best.actions)[:23] + "...")

    ceiling = environment_alone(args.env, 20_000, args.seed)
    table.add_row("environment alone", "20,000", f"{ceiling:,.0f}", "-", f"{1e6 / ceiling:.1f}", "-", "-")
    console.print(table)


if __name__ == "__main__":
    main()
