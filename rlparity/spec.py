"""The one I/O declaration each model family makes.

The exporter names the ONNX inputs and outputs from it, the input generator (feeds.py)
draws inputs from it and the comparator (compare.py) picks each output's rule from it, so
no part of rlparity re-derives a name, a shape or a role on its own.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Iterable, Literal

import numpy as np

Role = Literal[
    "observation",    # a model input drawn from the environment
    "mask",           # 0/1 input: which actions (or positions) are allowed
    "index",          # integer input such as a timestep
    "deterministic",  # output that must agree element-wise across runtimes
    "stochastic",     # output sampled inside the graph: compared by distribution
    "constant",       # output that does not depend on the inputs: compared exactly
    "recurrent",      # memory carried from one call to the next
]
Dim = int | str  # a fixed size, or a symbolic (dynamic) axis such as "batch"


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str                # numpy dtype name: "float32", "int64"
    shape: tuple[Dim, ...]
    role: Role
    # Sizes of consecutive groups along the last axis, e.g. the branches of a discrete
    # action mask ([3, 3, 2]) or of a multi-branch action output.
    segments: tuple[int, ...] | None = None
    # For integer inputs: the half-open range values are drawn from.
    value_range: tuple[int, int] | None = None
    # For discrete action outputs: the output (or reference diagnostic) holding the scores
    # that decided the action, used to tell ties from real disagreements.
    scores: str | None = None
    description: str = ""

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)

    @property
    def is_float(self) -> bool:
        return np.issubdtype(self.np_dtype, np.floating)

    @property
    def dynamic_axes(self) -> dict[int, str]:
        return {i: d for i, d in enumerate(self.shape) if isinstance(d, str)}

    def concrete_shape(self, **dims: int) -> tuple[int, ...]:
        """The shape with its symbolic axes replaced, e.g. ``concrete_shape(batch=8)``."""
        try:
            return tuple(d if isinstance(d, int) else dims[d] for d in self.shape)
        except KeyError as missing:
            raise ValueError(f"{self.name}: no size given for axis {missing}") from None

    def to_json(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items() if v not in (None, "")}


@dataclass(frozen=True)
class IOSpec:
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    # Symbolic axes and the sizes the export traces with.
    axes: dict[str, int] = field(default_factory=lambda: {"batch": 1})

    @property
    def input_names(self) -> list[str]:
        return [t.name for t in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [t.name for t in self.outputs]

    def input(self, name: str) -> TensorSpec:
        return _by_name(self.inputs, name)

    def output(self, name: str) -> TensorSpec:
        return _by_name(self.outputs, name)

    def outputs_with_role(self, *roles: str) -> list[TensorSpec]:
        return [t for t in self.outputs if t.role in roles]

    def to_json(self) -> dict:
        return {
            "inputs": [t.to_json() for t in self.inputs],
            "outputs": [t.to_json() for t in self.outputs],
        }


def _by_name(specs: Iterable[TensorSpec], name: str) -> TensorSpec:
    for spec in specs:
        if spec.name == name:
            return spec
    raise KeyError(name)
