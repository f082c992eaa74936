"""Is `rlparity bench` honest? Its ort-cpu and torch-cpu p50 against bare hand-written loops.

    python benchmarks/bench_vs_bare_loop.py [RUN_FOLDER] [--runs 2000] [--warmup 200] [--rounds 5]

RUN_FOLDER defaults to ../shared/fixtures/mlagents/Huggy. At batch 1 and 64, each round
runs `bench` for one runtime and then the bare loop on the same inputs, one after the
other so that machine noise hits both. Each side's p50 is taken as its best over the
rounds (as timeit takes the best repeat: other processes only ever add time); the
medians over rounds are printed beside. Goal: bench within 10% of the bare loop at p50.

The bare loops, timed call by call with perf_counter_ns and nothing else:
  ort-cpu    session.run(None, feeds)                            vs bench p50
  torch-cpu  module(*tensors) under inference_mode               vs bench forward_p50 (same work)
             from_numpy -> module -> .numpy() of every output    vs bench p50 (host to host)
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rlparity import converters  # noqa: E402
from rlparity.validators.bench import BenchOptions, bench  # noqa: E402

GOAL = 0.10


def bare_p50(call, runs: int, warmup: int) -> float:
    for _ in range(warmup):
        call()
    times = np.empty(runs)
    for i in range(runs):
        start = time.perf_counter_ns()
        call()
        times[i] = time.perf_counter_ns() - start
    return float(np.median(times)) / 1e6


def bare_loops(family, batch: int, seed: int):
    """The hand-written calls, on the inputs bench uses."""
    import onnxruntime as ort
    import torch

    feeds = family.make_feeds(batch, seed).arrays
    session = ort.InferenceSession(family.export(), providers=["CPUExecutionProvider"])
    ort_feeds = {i.name: feeds[i.name] for i in session.get_inputs()}
    module = family.build_torch()
    names = family.io_spec().input_names
    tensors = [torch.from_numpy(feeds[n]) for n in names]

    def torch_forward():
        with torch.inference_mode():
            module(*tensors)

    def torch_host_to_host():
        with torch.inference_mode():
            outputs = module(*[torch.from_numpy(feeds[n]) for n in names])
        return [o.numpy() for o in outputs]

    return {
        "ort-cpu": lambda: session.run(None, ort_feeds),
        "torch-cpu forward": torch_forward,
        "torch-cpu": torch_host_to_host,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_folder", nargs="?", default=str(REPO.parent / "shared" / "fixtures" / "mlagents" / "Huggy"))
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", default="1,64")
    args = parser.parse_args()

    family = converters.load(args.run_folder)
    print(f"model: {family.source}")
    print(f"command: python {' '.join(sys.argv)}  (runs {args.runs}, warmup {args.warmup}, rounds {args.rounds})")
    print(f"{'batch':>5}  {'what':<22} {'bench p50 us':>13} {'bare p50 us':>12} {'bench/bare':>10}  "
          f"goal <= {1 + GOAL:.2f}   (medians over rounds: bench, bare)")
    worst = 0.0
    for batch in [int(b) for b in args.batch.split(",")]:
        figures: dict[str, dict[str, list[float]]] = {}
        for _ in range(args.rounds):
            loops = bare_loops(family, batch, seed=0)
            for runtime in ("ort-cpu", "torch-cpu"):
                report = bench(family, BenchOptions(runtimes=[runtime], batches=[batch], runs=args.runs,
                                                    warmup=args.warmup))
                result = report.extra["bench"]["results"][0]
                pairs = {runtime: ("p50_ms", runtime)}
                if runtime == "torch-cpu":
                    pairs["torch-cpu forward"] = ("forward_p50_ms", "torch-cpu forward")
                for what, (field, loop) in pairs.items():
                    row = figures.setdefault(what, {"bench": [], "bare": []})
                    row["bench"].append(result[field])
                    row["bare"].append(bare_p50(loops[loop], args.runs, args.warmup))
        for what, row in figures.items():
            bench_ms, bare_ms = min(row["bench"]), min(row["bare"])
            ratio = bench_ms / bare_ms
            worst = max(worst, ratio)
            print(f"{batch:>5}  {what:<22} {bench_ms * 1e3:>13.1f} {bare_ms * 1e3:>12.1f} {ratio:>10.3f}  "
                  f"{'ok' if ratio <= 1 + GOAL else 'OVER':<4}   "
                  f"({np.median(row['bench']) * 1e3:.1f}, {np.median(row['bare']) * 1e3:.1f})")
    print(f"worst bench/bare ratio {worst:.3f}: {'within' if worst <= 1 + GOAL else 'NOT within'} {GOAL:.0%} at p50")
    sys.exit(0 if worst <= 1 + GOAL else 1)


if __name__ == "__main__":
    main()
