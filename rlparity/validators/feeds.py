"""Inputs for validation: seeded random rows plus edge cases, all drawn from the IOSpec.

Edge cases come first so that a small ``--batch`` still exercises them:

    zeros, +1, -1, +0.5, -0.5, +1e3, -1e3, alternating +-1e3

The large magnitudes drive any observation normalizer into its +-5 clip. Action masks
allow everything on even edge rows and only the last action of each branch on odd ones,
so blocked actions are always exercised; random rows get random masks with at least one
allowed action per branch. The digest identifies the exact inputs in the report.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from rlparity.spec import IOSpec, TensorSpec

EDGE_ROWS: list[tuple[str, float | str]] = [
    ("zeros", 0.0),
    ("ones", 1.0),
    ("minus ones", -1.0),
    ("halves", 0.5),
    ("minus halves", -0.5),
    ("large +1e3 (normalizer clip)", 1e3),
    ("large -1e3 (normalizer clip)", -1e3),
    ("alternating +-1e3", "alternating"),
]
RANDOM_SCALES = (1.0, 5.0)  # random rows alternate between N(0, 1) and N(0, 5^2)


@dataclass
class Feeds:
    arrays: dict[str, np.ndarray]
    rows: list[str]  # what each batch row is: an edge case or "random"
    seed: int

    @property
    def batch(self) -> int:
        return len(self.rows)

    @property
    def digest(self) -> str:
        return digest_arrays(self.arrays)

    def take(self, rows: int) -> "Feeds":
        """The first ``rows`` rows of every batched input."""
        return Feeds({k: v[:rows] for k, v in self.arrays.items()}, self.rows[:rows], self.seed)

    def tile(self, times: int) -> dict[str, np.ndarray]:
        """Every row repeated ``times`` times in a row-major block: [r0, r1, ..., r0, r1, ...]."""
        return {k: np.concatenate([v] * times, axis=0) for k, v in self.arrays.items()}


def digest_arrays(arrays: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return "sha256:" + h.hexdigest()


def make_feeds(spec: IOSpec, batch: int = 64, seed: int = 0, edge_cases: bool = True,
               axes: dict[str, int] | None = None) -> Feeds:
    """``axes``: sizes of symbolic axes other than batch (default: ``spec.axes``)."""
    if batch < 1:
        raise ValueError("batch must be at least 1")
    rng = np.random.default_rng(seed)
    n_edge = min(batch, len(EDGE_ROWS)) if edge_cases else 0
    rows = [name for name, _ in EDGE_ROWS[:n_edge]] + ["random"] * (batch - n_edge)
    arrays = {}
    for t in spec.inputs:
        shape = t.concrete_shape(**{**spec.axes, **(axes or {}), "batch": batch})
        arrays[t.name] = _draw(t, shape, n_edge, rng)
    return Feeds(arrays, rows, seed)


def _draw(t: TensorSpec, shape: tuple[int, ...], n_edge: int, rng: np.random.Generator) -> np.ndarray:
    if t.role == "mask":
        return _draw_mask(t, shape, n_edge, rng).astype(t.np_dtype)
    if t.role == "index" or not t.is_float:
        low, high = t.value_range or (0, 2)
        return rng.integers(low, high, size=shape).astype(t.np_dtype)
    scales = np.array([RANDOM_SCALES[i % len(RANDOM_SCALES)] for i in range(shape[0])])
    values = rng.standard_normal(shape) * scales.reshape(-1, *[1] * (len(shape) - 1))
    for row, (_, pattern) in enumerate(EDGE_ROWS[:n_edge]):
        if pattern == "alternating":
            values[row] = np.where(np.arange(values[row].size) % 2 == 0, 1e3, -1e3).reshape(values[row].shape)
        else:
            values[row] = pattern
    return values.astype(t.np_dtype)


def _draw_mask(t: TensorSpec, shape: tuple[int, ...], n_edge: int, rng: np.random.Generator) -> np.ndarray:
    segments = t.segments or (shape[-1],)
    mask = (rng.random(shape) < 0.7).astype(np.float64)
    start = 0
    for size in segments:
        branch = mask[..., start:start + size]
        for row in range(shape[0]):
            if row < n_edge:
                branch[row] = 1.0 if row % 2 == 0 else np.eye(size)[-1]
            elif not branch[row].any():
                branch[row, rng.integers(size)] = 1.0
        start += size
    return mask
