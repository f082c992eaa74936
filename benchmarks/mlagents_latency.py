"""ML-Agents benchmark: onnxruntime latency of our export against the official one, and
the wall time of `rlparity validate` on Huggy.

    python benchmarks/mlagents_latency.py [RUN_FOLDER] [--runs 2000]

RUN_FOLDER defaults to ../shared/fixtures/mlagents/Huggy. Our export must not be slower
than the official (goal) and validate should finish in under 3 s on a 2-core machine.
The two sessions are timed interleaved, call by call, so that machine noise hits both.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rlparity import converters  # noqa: E402


def session(model) -> ort.InferenceSession:
    options = ort.SessionOptions()
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def interleaved_latency(sessions: dict[str, ort.InferenceSession], feeds: dict, runs: int) -> dict[str, list[float]]:
    times = {name: [] for name in sessions}
    for s in sessions.values():  # warm-up
        for _ in range(50):
            s.run(None, feeds)
    for _ in range(runs):
        for name, s in sessions.items():
            start = time.perf_counter_ns()
            s.run(None, feeds)
            times[name].append((time.perf_counter_ns() - start) / 1e3)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_folder", nargs="?", default=str(REPO.parent / "shared" / "fixtures" / "mlagents" / "Huggy"))
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--validate-runs", type=int, default=5)
    args = parser.parse_args()

    family = converters.load(args.run_folder)
    official = family.reference_export()
    if official is None:
        sys.exit(f"{args.run_folder}: no official export beside the checkpoint to compare with")
    sessions = {"ours": session(family.export()), "official": session(str(official))}
    rng = np.random.default_rng(0)
    print(f"model: {family.source}  (official: {official})")
    print(f"{'batch':>5} {'export':>9} {'p50 us':>9} {'p90 us':>9} {'min us':>9}")
    for batch in (1, 64):
        feeds = {i.name: rng.normal(size=(batch, i.shape[1])).astype(np.float32) for i in sessions["ours"].get_inputs()}
        times = interleaved_latency(sessions, feeds, args.runs)
        for name, t in times.items():
            q = np.percentile(t, [50, 90])
            print(f"{batch:>5} {name:>9} {q[0]:>9.1f} {q[1]:>9.1f} {min(t):>9.1f}")
        ratio = np.median(times["ours"]) / np.median(times["official"])
        print(f"{batch:>5} {'ratio':>9} {ratio:>9.3f}  (ours / official at p50)")

    walls = []
    for _ in range(args.validate_runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, str(REPO / "cli.py"), "validate", args.run_folder],
                       check=True, capture_output=True)
        walls.append(time.perf_counter() - start)
    print(f"rlparity validate {args.run_folder}: median {statistics.median(walls):.2f} s "
          f"(min {min(walls):.2f} s, {args.validate_runs} runs, goal < 3 s)")


if __name__ == "__main__":
    main()
