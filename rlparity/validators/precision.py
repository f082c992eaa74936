"""The precision sweep of ``validate --dtype float32,float16,bfloat16``.

For each dtype the rebuild is cast on the device (``TorchRuntime(dtype=...)``): weights
and float inputs in that dtype, except the modules the family keeps in float32
(``Family.float32_modules``: ML-Agents' normalizers, whose accumulated running variance
overflows float16). Every output is compared, in float32, with the float32 CPU reference
under that dtype's own default tolerance (``compare.DEFAULT_TOLERANCES``).

Where the family keeps modules in float32, the sweep also runs the naive cast (every
floating tensor cast, as ``module.half()`` does) and records how far it lands, so the
report shows why the mixed cast exists.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from rlparity.converters.family import Family
from rlparity.spec import IOSpec
from rlparity.validators.compare import DEFAULT_TOLERANCES, compare_outputs
from rlparity.validators.feeds import Feeds
from rlparity.validators.runtimes import REFERENCE
from rlparity.validators.torch_runtime import TorchRuntime, parse_dtype


def precision_sweep(
    family: Family,
    dtypes: list[str],
    device: str,
    feeds: Feeds,
    *,
    seed: int = 0,
    draw_feeds: Feeds | None = None,
    draws: int = 0,
    reference: dict[str, np.ndarray] | None = None,
    reference_draws: dict[str, np.ndarray] | None = None,
    scores: dict[str, np.ndarray] | None = None,
    on_step: Callable[[str], None] = lambda _: None,
) -> list[dict[str, Any]]:
    """``Report.extra["precision"]``: one entry per dtype, with its comparisons."""
    spec = family.io_spec()
    dtypes = [parse_dtype(d) for d in dtypes]
    stochastic = [t.name for t in spec.outputs if t.role == "stochastic"]
    if draw_feeds is None or not draws:
        draw_feeds = None
    if reference is None:  # the float32 CPU reference, when validate did not run it
        on_step("running the float32 reference for the precision sweep")
        reference, reference_draws = _run(TorchRuntime(spec, "cpu", seed=seed), family, feeds, draw_feeds,
                                          stochastic, draws)
    kept = family.float32_modules()
    sweep = []
    for dtype in dtypes:
        runtime = TorchRuntime(spec, device, seed=seed, dtype=dtype, keep_float32=kept)
        on_step(f"precision {dtype} on {runtime.device}")
        entry: dict[str, Any] = {
            "dtype": dtype,
            "device": runtime.device,
            "runtime": runtime.name,
            "float32_modules": kept if dtype != "float32" else [],
            "tolerance": {"atol": DEFAULT_TOLERANCES[dtype][0], "rtol": DEFAULT_TOLERANCES[dtype][1]},
            "comparisons": [],
        }
        sweep.append(entry)
        ok, reason = runtime.available()
        if not ok:
            entry["error"] = f"unavailable: {reason}"
            continue
        try:
            out, out_draws = _run(runtime, family, feeds, draw_feeds, stochastic, draws)
        except Exception as e:  # recorded; the other dtypes still run
            entry["error"] = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
            continue
        comparison = compare_outputs(
            spec, reference, out, reference_name=REFERENCE, candidate_name=f"{runtime.name} {dtype}",
            tolerances=dtype_tolerances(family, dtype), scores=scores,
            reference_draws=reference_draws, candidate_draws=out_draws,
            valid=family.valid_elements(feeds.arrays), dtype=dtype,
        )
        entry["comparisons"].append(comparison.to_json())
        if dtype != "float32" and kept:
            entry["naive_cast"] = _naive_cast(family, spec, runtime.device, dtype, feeds, reference, scores, seed)
    return sweep


def _run(runtime: TorchRuntime, family: Family, feeds: Feeds, draw_feeds: Feeds | None,
         stochastic: list[str], draws: int) -> tuple[dict, dict | None]:
    """Outputs on ``feeds`` and, for sampled outputs, ``draws`` samples per element."""
    runtime.prepare(family.build_torch())
    try:
        out = runtime.run(feeds.arrays)
        sampled = None
        if draw_feeds is not None and stochastic:
            tiled = runtime.run(draw_feeds.tile(draws))
            sampled = {n: tiled[n].reshape(draws, draw_feeds.batch, *tiled[n].shape[1:]) for n in stochastic}
        return out, sampled
    finally:
        runtime.close()


def dtype_tolerances(family: Family, dtype: str) -> dict[str, tuple[float, float]]:
    """The family's per-output overrides, never tighter than the dtype's default."""
    atol, rtol = DEFAULT_TOLERANCES[dtype]
    return {name: (max(a, atol), max(r, rtol)) for name, (a, r) in family.tolerances().items()}


def _naive_cast(family: Family, spec: IOSpec, device: str, dtype: str, feeds: Feeds,
                reference: dict[str, np.ndarray], scores: dict | None, seed: int) -> dict[str, Any]:
    """How the plain cast of every floating tensor (``module.to(dtype)``) compares."""
    runtime = TorchRuntime(spec, device, seed=seed, dtype=dtype, keep_float32=())
    try:
        out, _ = _run(runtime, family, feeds, None, [], 0)
    except Exception as e:
        return {"error": f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"}
    comparison = compare_outputs(spec, reference, out, tolerances=dtype_tolerances(family, dtype), scores=scores,
                                 valid=family.valid_elements(feeds.arrays), dtype=dtype)
    elementwise = [o for o in comparison.outputs if o.rule == "elementwise"]
    return {
        "passed": comparison.passed,
        "max_abs": max((o.metrics.get("max_abs", 0.0) for o in elementwise), default=None),
        "failing_outputs": [o.output for o in comparison.outputs if o.passed is False],
    }
