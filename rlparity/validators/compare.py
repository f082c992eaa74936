"""How far a candidate runtime's outputs are from the reference's, output by output.

The rule follows the output's role in the IOSpec (DESIGN.md, "Comparison rules"):

- constant outputs: exact (dtype, shape and every bit);
- deterministic floats: element-wise |a-b| <= atol + rtol*|b|, with bit-match rate,
  max_abs, mean_abs, max_rel, cosine, a ULP histogram and the smallest atol that passes;
- deterministic integers (discrete actions): agreement rate; a disagreement whose top-2
  reference scores are within tolerance is a tie, reported and not counted as a failure;
- stochastic outputs (sampled inside the graph): by distribution over many draws, per
  element mean and spread (continuous) or category frequencies (discrete).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from rlparity.spec import IOSpec, TensorSpec

# Per-dtype (atol, rtol) defaults, keyed by the precision the candidate ran in. fp32 per
# DESIGN.md. float16 and bfloat16 (the rebuild cast, normalizers kept float32, compared with
# the float32 reference) were set from measurements on the CPU: over 5 seeds x 512 rows of
# TinyWalker and Huggy (3 x 512, outputs in [-1, 1]) the smallest atol that passed was
# 2.8e-3 at rtol 1e-2 for float16 and 2.2e-2 at rtol 5e-2 for bfloat16 (float16 keeps 11
# significant bits, bfloat16 8); the defaults leave a margin of 3.6x and 2.3x for deeper
# networks and accelerator kernels that accumulate differently.
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-8, 1e-7),
    "float32": (1e-5, 1e-4),
    "float16": (1e-2, 1e-2),
    "bfloat16": (5e-2, 5e-2),
}
# A sampled output passes while no element's statistic is further than this many standard
# errors from the reference's. At 5.5 a correct runtime fails about once in 10^5 checks of
# a thousand elements; with the default 512 draws a shift of half a standard deviation in
# a single element is caught.
DISTRIBUTION_Z = 5.5
ULP_BUCKETS = [(0, 0, "0"), (1, 1, "1"), (2, 4, "2-4"), (5, 16, "5-16"), (17, 256, "17-256"), (257, None, ">256")]


@dataclass
class OutputComparison:
    output: str
    rule: str             # exact | elementwise | agreement | distribution | absent
    passed: bool | None   # None: not compared (absent from one side)
    metrics: dict[str, Any] = field(default_factory=dict)
    atol: float | None = None
    rtol: float | None = None
    note: str = ""
    # Where the comparison was restricted (e.g. unpadded positions only), what it covered.
    scope: str = ""


@dataclass
class Comparison:
    reference: str
    candidate: str
    outputs: list[OutputComparison]

    @property
    def passed(self) -> bool:
        return all(o.passed is not False for o in self.outputs)

    def to_json(self) -> dict:
        return {"reference": self.reference, "candidate": self.candidate, "passed": self.passed,
                "outputs": [asdict(o) for o in self.outputs]}


def tolerance_for(spec: TensorSpec, overrides: dict[str, tuple[float, float]] | None = None,
                  dtype: str | None = None) -> tuple[float, float]:
    if overrides and spec.name in overrides:
        return overrides[spec.name]
    return DEFAULT_TOLERANCES.get(dtype or spec.dtype, DEFAULT_TOLERANCES["float32"])


def compare_outputs(
    spec: IOSpec,
    reference: dict[str, np.ndarray],
    candidate: dict[str, np.ndarray],
    *,
    reference_name: str = "reference",
    candidate_name: str = "candidate",
    tolerances: dict[str, tuple[float, float]] | None = None,
    scores: dict[str, np.ndarray] | None = None,
    reference_draws: dict[str, np.ndarray] | None = None,
    candidate_draws: dict[str, np.ndarray] | None = None,
    valid: dict[str, np.ndarray] | None = None,
    dtype: str | None = None,
) -> Comparison:
    """Compare every output of ``spec`` present on either side.

    ``scores``: reference scores behind discrete actions (see TensorSpec.scores).
    ``*_draws``: for stochastic outputs, arrays [draws, rows, ...] from repeated sampling.
    ``valid``: per output, a boolean mask of the elements to compare (padding excluded).
    ``dtype``: the precision the candidate ran in, which picks the default tolerance.
    """
    results = []
    for t in spec.outputs:
        if t.name not in reference or t.name not in candidate:
            side = reference_name if t.name not in reference else candidate_name
            results.append(OutputComparison(t.name, "absent", None, note=f"not produced by {side}"))
            continue
        a, b = np.asarray(candidate[t.name]), np.asarray(reference[t.name])
        mask = None if valid is None else valid.get(t.name)
        if t.role == "constant":
            results.append(compare_exact(t.name, a, b))
        elif t.role == "stochastic":
            draws_b = (reference_draws or {}).get(t.name)
            draws_a = (candidate_draws or {}).get(t.name)
            if draws_a is None or draws_b is None:
                results.append(OutputComparison(t.name, "distribution", None, note="no draws collected"))
            else:
                # A lower precision moves the sampled distribution as much as the values:
                # the dtype's tolerance is allowed on each statistic before it counts.
                allow = DEFAULT_TOLERANCES.get(dtype) if dtype else None
                results.append(compare_distribution(t, draws_a, draws_b, scores=scores, tolerance=allow))
        elif not t.is_float:
            ref_scores = None
            if t.scores:
                ref_scores = reference.get(t.scores, (scores or {}).get(t.scores))
            results.append(compare_agreement(t, a, b, ref_scores, tolerance_for(t, tolerances, dtype)))
        else:
            atol, rtol = tolerance_for(t, tolerances, dtype)
            results.append(compare_elementwise(t.name, a, b, atol, rtol, mask))
    return Comparison(reference_name, candidate_name, results)


# -- exact ---------------------------------------------------------------------------------

def compare_exact(name: str, a: np.ndarray, b: np.ndarray) -> OutputComparison:
    same = a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    note = "" if same else f"candidate {a.dtype}{list(a.shape)} {_preview(a)} vs reference {b.dtype}{list(b.shape)} {_preview(b)}"
    return OutputComparison(name, "exact", same, {"equal": same}, note=note)


def _preview(a: np.ndarray) -> str:
    flat = a.reshape(-1)
    return np.array2string(flat[:4], precision=6) + ("..." if flat.size > 4 else "")


# -- element-wise ------------------------------------------------------------------------------

def compare_elementwise(name: str, a: np.ndarray, b: np.ndarray, atol: float, rtol: float,
                        mask: np.ndarray | None = None) -> OutputComparison:
    if a.shape != b.shape:
        return OutputComparison(name, "elementwise", False, atol=atol, rtol=rtol,
                                note=f"shape {list(a.shape)} vs reference {list(b.shape)}")
    scope = ""
    if mask is not None:
        mask = np.broadcast_to(mask, a.shape)
        scope = f"{int(mask.sum())} of {mask.size} elements (padding excluded)"
        a, b = a[mask], b[mask]
    metrics = float_metrics(a, b, rtol)
    metrics["failing"] = int(_failing(a, b, atol, rtol).sum())
    passed = metrics["failing"] == 0
    return OutputComparison(name, "elementwise", passed, metrics, atol, rtol, scope=scope)


def _failing(a: np.ndarray, b: np.ndarray, atol: float, rtol: float) -> np.ndarray:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    both_nan = np.isnan(a64) & np.isnan(b64)
    with np.errstate(invalid="ignore"):
        close = np.abs(a64 - b64) <= atol + rtol * np.abs(b64)
        same_inf = np.isinf(a64) & (a64 == b64)
    return ~(close | both_nan | same_inf)


def float_metrics(a: np.ndarray, b: np.ndarray, rtol: float = 0.0) -> dict[str, Any]:
    """Every float metric of DESIGN.md for two arrays of the same shape."""
    n = int(a.size)
    if n == 0:
        return {"elements": 0}
    a64, b64 = a.astype(np.float64).reshape(-1), b.astype(np.float64).reshape(-1)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(a64 - b64)
        finite = np.isfinite(diff)
        d = diff[finite]
        max_abs = float(d.max()) if d.size else 0.0
        rel = d / np.maximum(np.abs(b64[finite]), 1e-12)
        needed_atol = float(np.maximum(d - rtol * np.abs(b64[finite]), 0).max()) if d.size else 0.0
    norm = float(np.linalg.norm(a64[finite]) * np.linalg.norm(b64[finite]))
    if norm > 0:
        cosine = float(np.dot(a64[finite], b64[finite]) / norm)
    else:
        cosine = 1.0 if np.array_equal(a64[finite], b64[finite]) else 0.0
    metrics = {
        "elements": n,
        "bit_match_rate": bit_match_rate(a, b),
        "max_abs": max_abs,
        "mean_abs": float(d.mean()) if d.size else 0.0,
        "max_rel": float(rel.max()) if rel.size else 0.0,
        "cosine": cosine,
        "needed_atol": needed_atol,
        "nonfinite_mismatch": int((~finite & ~(np.isnan(a64) & np.isnan(b64)) & (a64 != b64)).sum()),
    }
    hist = ulp_histogram(a, b)
    if hist is not None:
        metrics["ulp_histogram"] = hist
    return metrics


def bit_match_rate(a: np.ndarray, b: np.ndarray) -> float:
    if a.dtype != b.dtype or a.size == 0:
        return 0.0 if a.size else 1.0
    width = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
    return float(np.mean(np.ascontiguousarray(a).view(width) == np.ascontiguousarray(b).view(width)))


def ulp_histogram(a: np.ndarray, b: np.ndarray) -> dict[str, int] | None:
    """Distance in units in the last place, bucketed, for float32 and float16 pairs."""
    if a.dtype != b.dtype or a.dtype not in (np.float32, np.float16):
        return None
    signed = np.int32 if a.dtype == np.float32 else np.int16
    lowest = np.int64(np.iinfo(signed).min)

    def ordered(x: np.ndarray) -> np.ndarray:
        i = np.ascontiguousarray(x).view(signed).astype(np.int64)
        return np.where(i < 0, lowest - i, i)

    finite = np.isfinite(a) & np.isfinite(b)
    distance = np.abs(ordered(a[finite]) - ordered(b[finite]))
    hist = {}
    for low, high, label in ULP_BUCKETS:
        inside = distance >= low if high is None else (distance >= low) & (distance <= high)
        hist[label] = int(inside.sum())
    return hist


# -- agreement of discrete decisions ---------------------------------------------------------

def compare_agreement(t: TensorSpec, a: np.ndarray, b: np.ndarray, scores: np.ndarray | None,
                      tol: tuple[float, float]) -> OutputComparison:
    if a.shape != b.shape:
        return OutputComparison(t.name, "agreement", False, note=f"shape {list(a.shape)} vs reference {list(b.shape)}")
    disagree = a != b
    agreement = float(1.0 - disagree.mean()) if a.size else 1.0
    ties, real = 0, int(disagree.sum())
    tie_examples: list[dict] = []
    if real and scores is not None:
        ties, tie_examples = _count_ties(t, a, b, scores, tol)
        real -= ties
    metrics = {"elements": int(a.size), "agreement": agreement, "disagreements": int(disagree.sum()),
               "ties": ties}
    note = ""
    if ties:
        note = f"{ties} disagreement(s) are ties: the reference's top two scores differ by <= tolerance"
        metrics["tie_examples"] = tie_examples[:3]
    if real and scores is None:
        note = "no reference scores available to tell ties from disagreements"
    return OutputComparison(t.name, "agreement", real == 0, metrics, note=note)


def _count_ties(t: TensorSpec, a: np.ndarray, b: np.ndarray, scores: np.ndarray,
                tol: tuple[float, float]) -> tuple[int, list[dict]]:
    atol, rtol = tol
    segments = t.segments or (scores.shape[-1],)
    a2, b2 = a.reshape(a.shape[0], -1), b.reshape(b.shape[0], -1)
    bounds = np.cumsum([0, *segments])
    ties, examples = 0, []
    for row, col in zip(*np.nonzero(a2 != b2)):
        branch = scores[row, bounds[col]:bounds[col + 1]]
        if not (0 <= a2[row, col] < branch.size and 0 <= b2[row, col] < branch.size):
            continue  # an action outside its branch is a real disagreement, never a tie
        chosen_a, chosen_b = branch[a2[row, col]], branch[b2[row, col]]
        margin = float(abs(chosen_b - chosen_a))
        if margin <= atol + rtol * abs(float(chosen_b)):
            ties += 1
            examples.append({"row": int(row), "branch": int(col), "candidate": int(a2[row, col]),
                             "reference": int(b2[row, col]), "score_margin": margin})
    return ties, examples


# -- distributions of sampled outputs ----------------------------------------------------------

def compare_distribution(t: TensorSpec, draws_a: np.ndarray, draws_b: np.ndarray,
                         scores: dict[str, np.ndarray] | None = None,
                         z_limit: float = DISTRIBUTION_Z,
                         tolerance: tuple[float, float] | None = None) -> OutputComparison:
    """Two-sample test per element: do both runtimes sample from the same distribution?

    ``draws_*``: [draws, rows, ...]. Continuous outputs compare per-element mean and
    standard deviation; discrete outputs compare per-category frequencies (one-hot means).
    Each statistic's difference is expressed in standard errors (z); the largest is reported.
    ``tolerance`` (atol, rtol): a difference up to atol + rtol*|statistic| is allowed before
    it counts (a candidate run in a lower precision).
    """
    if draws_a.shape[1:] != draws_b.shape[1:]:
        return OutputComparison(t.name, "distribution", False,
                                note=f"shape {list(draws_a.shape[1:])} vs reference {list(draws_b.shape[1:])}")
    if t.is_float:
        a, b = draws_a.astype(np.float64), draws_b.astype(np.float64)
        metrics = {"draws": int(a.shape[0]), "elements": int(np.prod(a.shape[1:]))}
        # First and second moments, each judged by its own sample variance: this stays
        # valid for clipped draws (mostly +-1 with a rare unclipped value), where the
        # normal-theory standard error of a standard deviation would cry wolf.
        metrics["z_mean"] = _moment_z(a, b, tolerance)
        metrics["z_second_moment"] = _moment_z(a**2, b**2, tolerance)
        metrics["max_mean_diff"] = float(np.abs(a.mean(0) - b.mean(0)).max())
        metrics["max_std_diff"] = float(np.abs(a.std(0) - b.std(0)).max())
        worst = max(metrics["z_mean"], metrics["z_second_moment"])
    else:
        # Both sides counted over the same categories, even when the spec does not size them.
        branches = int(np.prod(draws_b.shape[2:]))
        segments = t.segments or (int(max(draws_a.max(), draws_b.max())) + 1,) * branches
        fa, fb = _frequencies(draws_a, segments), _frequencies(draws_b, segments)
        metrics = {"draws": int(draws_a.shape[0]), "elements": int(np.prod(draws_a.shape[1:]))}
        na, nb = draws_a.shape[0], draws_b.shape[0]
        metrics["z_frequency"] = _max_z(fa, fb, fa * (1 - fa) / na, fb * (1 - fb) / nb, floor=1.0 / max(na, nb),
                                        allowance=_allowance(fa, fb, tolerance))
        metrics["max_frequency_diff"] = float(np.abs(fa - fb).max())
        worst = metrics["z_frequency"]
        # A sampled action no branch has never shows in the frequencies: counted on its own.
        metrics["out_of_range"] = _out_of_range(draws_a, segments)
        if metrics["out_of_range"]:
            worst = float("inf")
        probabilities = _scores_for(t, scores, draws_b.shape[1])
        if probabilities is not None:
            blocked = probabilities <= 0.0
            metrics["blocked_sampled"] = int(((fa > 0) & blocked).sum())
            if metrics["blocked_sampled"]:
                worst = float("inf")
    metrics["z_limit"] = z_limit
    if tolerance is not None:
        metrics["allowed"] = {"atol": tolerance[0], "rtol": tolerance[1]}
    passed = bool(worst <= z_limit)
    note = "" if passed else "the sampled values do not follow the reference's distribution"
    if metrics.get("out_of_range"):
        note = f"{metrics['out_of_range']} sampled action(s) lie outside their branch"
    if metrics.get("blocked_sampled"):
        note = f"{metrics['blocked_sampled']} blocked (masked) action(s) were sampled"
    return OutputComparison(t.name, "distribution", passed, metrics, note=note)


def _moment_z(a: np.ndarray, b: np.ndarray, tolerance: tuple[float, float] | None = None) -> float:
    """Largest per-element difference of means over draws, in standard errors."""
    ma, mb = a.mean(0), b.mean(0)
    floor = 1e-7 + 1e-6 * np.maximum(np.abs(ma), np.abs(mb))  # float noise, not signal
    return _max_z(ma, mb, a.var(0) / len(a), b.var(0) / len(b), floor, _allowance(ma, mb, tolerance))


def _allowance(ma, mb, tolerance: tuple[float, float] | None) -> float | np.ndarray:
    if tolerance is None:
        return 0.0
    atol, rtol = tolerance
    return atol + rtol * np.abs(mb)


def _max_z(ma, mb, va, vb, floor: float | np.ndarray = 1e-6, allowance: float | np.ndarray = 0.0) -> float:
    se = np.sqrt(va + vb) + floor
    excess = np.maximum(np.abs(ma - mb) - allowance, 0.0)
    return float((excess / se).max()) if np.size(ma) else 0.0


def _frequencies(draws: np.ndarray, segments: tuple[int, ...]) -> np.ndarray:
    """[draws, rows, branches] integer samples -> [rows, sum(segments)] category frequencies."""
    draws = draws.reshape(draws.shape[0], draws.shape[1], -1)
    columns = []
    for branch, size in enumerate(segments):
        values = draws[:, :, branch]
        columns.append(np.stack([(values == k).mean(0) for k in range(size)], axis=-1))
    return np.concatenate(columns, axis=-1)


def _out_of_range(draws: np.ndarray, segments: tuple[int, ...]) -> int:
    """How many samples are no category of their branch (below 0, or past its size)."""
    draws = draws.reshape(draws.shape[0], draws.shape[1], -1)
    return int(((draws < 0) | (draws >= np.array(segments))).sum())


def _scores_for(t: TensorSpec, scores: dict[str, np.ndarray] | None, rows: int) -> np.ndarray | None:
    """The reference probabilities behind a sampled discrete output, when the family gave them."""
    if not scores:
        return None
    for value in scores.values():
        if value.ndim == 2 and value.shape[1] == sum(t.segments or ()) and value.shape[0] >= rows:
            return value[:rows]
    return None
