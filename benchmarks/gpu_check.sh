#!/usr/bin/env bash
# Accelerator evidence on a CUDA host, in one short run (a few minutes of device time):
#
#   bash benchmarks/gpu_check.sh OUT_DIR            (from the repository root)
#
# Needs a Python with a CUDA build of torch and rlparity's dependencies (PYTHON=..., default
# python3; matplotlib for the plots). Writes under OUT_DIR every report (JSON), every plot
# (PNG), each command's log, and summary.txt.
#
#   1. npu-check --device cuda:0 on the bundled sample and on Huggy: versions, devices, an
#      operation, every tensor on the GPU, validation against torch-cpu and ort-cpu;
#   2. bench on Huggy at batch 1, 8, 64, 512: torch-cpu, ort-cpu and torch-cuda:0 eager,
#      then torch-cuda:0 eager and captured as a CUDA graph (--graph);
#   3. the same two benches on CartPole when this checkout has `sample:cartpole` (skipped
#      cleanly otherwise);
#   4. the precision sweep on the GPU: validate Huggy --dtype float32,float16,bfloat16.
#
# Goal: Huggy at batch 1 under 50 µs per decision with --graph (summary.txt states the
# host-to-host p50 and the replay-only p50 against it). For scale, the seed adaptation
# measured 0.37 ms per Huggy step and 0.93 ms per CartPole batch of 8 eager on an Ascend 910B.
set -uo pipefail

OUT=${1:?usage: bash benchmarks/gpu_check.sh OUT_DIR}
PY=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda:0}
RUNS=${RUNS:-1000}
WARMUP=${WARMUP:-100}
STEP_LIMIT=${STEP_LIMIT:-90}  # seconds per command, so that one hang cannot eat the budget
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."

HUGGY=${HUGGY:-}
for candidate in "$HUGGY" ../shared/fixtures/mlagents/Huggy shared/fixtures/mlagents/Huggy; do
    if [ -n "$candidate" ] && [ -d "$candidate" ]; then HUGGY=$candidate; break; fi
done
if [ ! -d "$HUGGY" ]; then
    echo "error: Huggy not found (set HUGGY=path/to/mlagents/Huggy)" >&2
    exit 1
fi

failures=0
step() {  # step NAME COMMAND...: run with a time limit, log it, keep going on failure
    local name=$1; shift
    echo "== $name: rlparity $*"
    timeout "$STEP_LIMIT" "$PY" -m rlparity "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    tail -n 40 "$OUT/$name.log"
    echo "== $name: exit $rc"
    echo "$name exit $rc" >>"$OUT/exits.txt"
    [ "$rc" -eq 0 ] || failures=$((failures + 1))
}

: >"$OUT/exits.txt"
command -v nvidia-smi >/dev/null && nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())" \
    | tee "$OUT/torch.txt"

step npu-check-sample npu-check sample:tinywalker --device "$DEVICE" --json "$OUT/npu-check-sample.json"
step npu-check-huggy npu-check "$HUGGY" --device "$DEVICE" --json "$OUT/npu-check-huggy.json"

BENCH=(--batch 1,8,64,512 --runs "$RUNS" --warmup "$WARMUP")
plot() {  # --plot FILE when matplotlib is there; the figures matter more than the picture
    if "$PY" -c "import matplotlib" 2>/dev/null; then echo "--plot $OUT/$1.png"; fi
}
# shellcheck disable=SC2046  # plot prints two words or nothing
step bench-huggy-eager bench "$HUGGY" --device "$DEVICE" "${BENCH[@]}" \
    --json "$OUT/bench-huggy-eager.json" $(plot bench-huggy-eager)
# shellcheck disable=SC2046
step bench-huggy-graph bench "$HUGGY" --runtimes "torch-$DEVICE" --graph "${BENCH[@]}" \
    --json "$OUT/bench-huggy-graph.json" $(plot bench-huggy-graph)

if "$PY" -m rlparity inspect sample:cartpole >/dev/null 2>&1; then
    # shellcheck disable=SC2046
    step bench-cartpole-eager bench sample:cartpole --device "$DEVICE" "${BENCH[@]}" \
        --json "$OUT/bench-cartpole-eager.json" $(plot bench-cartpole-eager)
    # shellcheck disable=SC2046
    step bench-cartpole-graph bench sample:cartpole --runtimes "torch-$DEVICE" --graph "${BENCH[@]}" \
        --json "$OUT/bench-cartpole-graph.json" $(plot bench-cartpole-graph)
else
    echo "== skip: this checkout has no sample:cartpole" | tee -a "$OUT/exits.txt"
fi

step precision-huggy validate "$HUGGY" --device "$DEVICE" --dtype float32,float16,bfloat16 \
    --json "$OUT/precision-huggy.json"

# The figures against the goal, read from the reports.
"$PY" - "$OUT" <<'EOF' | tee "$OUT/summary.txt"
import json, sys
from pathlib import Path

out = Path(sys.argv[1])
GOAL_US = 50.0
for report in sorted(out.glob("bench-*.json")):
    bench = json.loads(report.read_text())["extra"]["bench"]
    print(f"{report.name}: harness overhead {bench['overhead_ms'] * 1e3:.2f} us per call")
    for r in bench["results"]:
        label = r["runtime"] + (" graph" if r["graph"] else "")
        forward = r.get("forward_p50_ms")
        print(f"  {label:<22} batch {r['batch']:>4}  p50 {r['p50_ms'] * 1e3:>9.1f} us"
              f"  forward p50 {forward * 1e3 if forward else float('nan'):>8.1f} us"
              f"  first call {r['first_call_ms']:>8.1f} ms  {r['decisions_per_s']:>12,.0f} decisions/s"
              f"  outputs {'ok' if r.get('matches_reference') in (True, None) else 'MISMATCH'}")
graph = out / "bench-huggy-graph.json"
if graph.exists():
    rows = [r for r in json.loads(graph.read_text())["extra"]["bench"]["results"] if r["graph"] and r["batch"] == 1]
    for r in rows:
        host, replay = r["p50_ms"] * 1e3, r.get("forward_p50_ms", float("nan")) * 1e3
        print(f"goal: Huggy batch 1 with --graph under {GOAL_US:.0f} us: host-to-host p50 {host:.1f} us "
              f"({'met' if host < GOAL_US else 'not met'}), replay-only p50 {replay:.1f} us "
              f"({'met' if replay < GOAL_US else 'not met'})")
EOF
echo "failed steps: $failures (see $OUT/exits.txt)"
exit $((failures > 0))
