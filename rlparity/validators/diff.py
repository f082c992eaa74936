"""`rlparity diff`: is a candidate ONNX a drop-in replacement for the reference?

Structure before numbers, and every difference collected before any is reported:

1. The contract: opset, IR version and producer; inputs and outputs by name, order,
   dtype, shape and dynamic axes; constant outputs by value; initializers by name, else
   by value; operator histograms.
2. The numbers: the same inputs (generated from the reference's I/O, or loaded with
   ``--inputs``) through onnxruntime on both graphs, judged by compare.py's rules: the
   roles come from the reference graph itself (``io_spec_from_onnx``).
3. Where it starts: when an output differs, the first diverging node (localize.py).

Every difference has a kind, a severity and a message. ``error``: the candidate cannot
replace the reference because of it alone (a renamed input breaks every caller).
``note``: worth knowing, but the numbers decide (another opset, a folded constant).
The candidate is a drop-in when there is no error and every output is within tolerance.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from rlparity.errors import UserError
from rlparity.spec import IOSpec, TensorSpec
from rlparity.validators.compare import compare_outputs
from rlparity.validators.feeds import Feeds, make_feeds
from rlparity.validators.localize import (
    ancestors,
    first_divergence,
    lineage,
    node_values,
    producers,
    tolerance,
)
from rlparity.validators.ort import OrtRuntime

SCHEMA = "rlparity.diff/1"
BATCH = "batch"  # what the reference's leading dynamic input axis is called in the IOSpec
# ML-Agents exports carry their discrete branch sizes as this constant output.
BRANCH_SIZES_OUTPUT = "discrete_action_output_shape"


@dataclass
class Difference:
    kind: str        # e.g. "renamed-input", "fixed-axis", "changed-initializer"
    severity: str    # "error": not a drop-in by itself; "note": the numbers decide
    message: str
    subject: str = ""  # the input, output, initializer or node concerned
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class DiffOptions:
    inputs: Path | None = None   # an .npz of inputs keyed by the reference's input names
    atol: float | None = None    # override the per-dtype defaults for every output
    rtol: float | None = None
    batch: int = 64
    seed: int = 0
    draws: int = 512             # samples per element for sampled outputs
    draw_rows: int = 8


@dataclass
class DiffResult:
    reference: dict[str, Any]
    candidate: dict[str, Any]
    io_spec: dict[str, Any]
    differences: list[Difference] = field(default_factory=list)
    inputs: dict[str, Any] = field(default_factory=dict)
    tolerances: dict[str, Any] = field(default_factory=dict)
    comparison: dict[str, Any] | None = None
    first_divergence: dict[str, Any] | None = None
    versions: dict[str, str] = field(default_factory=dict)
    host: dict[str, str] = field(default_factory=dict)
    command: str = ""
    created: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    schema: str = SCHEMA

    @property
    def errors(self) -> list[Difference]:
        return [d for d in self.differences if d.severity == "error"]

    @property
    def drop_in(self) -> bool:
        return not self.errors and self.comparison is not None and bool(self.comparison["passed"])

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["drop_in"] = self.drop_in
        data["verdict"] = "drop-in" if self.drop_in else "not-drop-in"
        return data


# -- reading ---------------------------------------------------------------------------------

def load_onnx(path: str | Path):
    """The model at ``path``, checked; anything unreadable is a one-line UserError."""
    import onnx
    from google.protobuf.message import DecodeError

    path = Path(path)
    if not path.exists():
        raise UserError("no such file", path)
    if not path.is_file():
        raise UserError("not a file (expected an .onnx model)", path)
    try:
        model = onnx.load(str(path))
    except (DecodeError, RuntimeError, ValueError, OSError, UnicodeDecodeError) as e:
        raise UserError(f"not a readable ONNX model (truncated or not ONNX): {_one_line(e)}", path) from None
    if not model.graph.output:
        raise UserError("not a readable ONNX model (truncated or not ONNX): it has no graph outputs", path)
    try:
        onnx.checker.check_model(model)
    except Exception as e:  # ValidationError, and C++ errors surfacing as other types
        raise UserError(f"not a valid ONNX model (onnx checker: {_one_line(e)[:200]})", path) from None
    return model


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())[:240] or type(e).__name__


class GraphInfo:
    """What diff needs to know about one graph: its I/O, weights and each tensor's lineage."""

    def __init__(self, model):
        import onnx

        self.model = model
        graph = model.graph
        self.initializers = {t.name: t for t in graph.initializer}
        # Before IR 4 every initializer was also listed as an input (an overridable default).
        self.inputs = [v for v in graph.input if v.name not in self.initializers]
        self.outputs = list(graph.output)
        self.depends, self.random = lineage(graph, {v.name for v in self.inputs})
        try:  # declared output types can be missing; shape inference fills them in
            inferred = onnx.shape_inference.infer_shapes(model).graph
            self.types = {v.name: v.type for v in [*inferred.value_info, *inferred.output]}
        except Exception:
            self.types = {}
        self.types.update({v.name: v.type for v in [*graph.input, *graph.output] if v.type.HasField("tensor_type")})

    def role(self, output: str) -> str:
        if output in self.random:
            return "stochastic"
        return "deterministic" if output in self.depends else "constant"

    def opsets(self) -> dict[str, int]:
        return {(o.domain or "ai.onnx"): o.version for o in self.model.opset_import}

    def operators(self) -> Counter:
        return Counter(_op_label(n) for n in self.model.graph.node)


def _np_dtype(type_proto) -> str:
    import onnx

    elem = type_proto.tensor_type.elem_type if type_proto is not None and type_proto.HasField("tensor_type") else 0
    if not elem:
        return "undefined"
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem)).name
    except (KeyError, TypeError, ValueError):
        return onnx.TensorProto.DataType.Name(elem).lower()


def _dims(type_proto) -> tuple | None:
    """Each axis as an int (fixed), a str (named dynamic) or None (unnamed dynamic)."""
    if type_proto is None or not type_proto.HasField("tensor_type") or not type_proto.tensor_type.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                 for d in type_proto.tensor_type.shape.dim)


def _shape_text(dims: tuple | None) -> str:
    if dims is None:
        return "[?]"
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def constant_values(info: GraphInfo, names: list[str]) -> dict[str, np.ndarray]:
    """The values of outputs that depend on no graph input, computed by onnx's reference
    evaluator on just the nodes they need. An output it cannot evaluate is left out."""
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    values = {}
    for name in names:
        if name in info.initializers:
            values[name] = numpy_helper.to_array(info.initializers[name])
            continue
        needed = ancestors(info.model.graph, {name})
        nodes = [n for n in info.model.graph.node if any(o in needed for o in n.output)]
        inits = [t for t in info.model.graph.initializer if t.name in needed]
        graph = helper.make_graph(nodes, "constant", [], [helper.make_empty_tensor_value_info(name)], inits)
        try:
            model = helper.make_model(graph, opset_imports=info.model.opset_import, ir_version=info.model.ir_version)
            values[name] = np.asarray(ReferenceEvaluator(model).run(None, {})[0])
        except Exception:  # evaluated from onnxruntime's outputs instead
            continue
    return values


def io_spec_from_onnx(model) -> IOSpec:
    """The IOSpec of an ONNX graph, roles inferred from the graph itself.

    Outputs that depend on no input are constants; outputs computed from a random draw
    (RandomNormalLike, Multinomial, ...) are stochastic; the rest are deterministic
    (integers then compared by agreement). Inputs named like a mask are masks (ML-Agents
    action_masks: branch sizes from the discrete_action_output_shape constant when the
    graph has it); integer inputs are index-like. The leading dynamic axis of the inputs
    is called ``batch``.
    """
    info = model if isinstance(model, GraphInfo) else GraphInfo(model)
    constants = constant_values(info, [o.name for o in info.outputs if info.role(o.name) == "constant"])
    segments = None
    if BRANCH_SIZES_OUTPUT in constants:
        sizes = constants[BRANCH_SIZES_OUTPUT].reshape(-1)
        if sizes.size and np.all(sizes >= 1) and np.all(sizes == np.round(sizes)):
            segments = tuple(int(s) for s in sizes)

    inputs = []
    for v in info.inputs:
        dtype, dims = _np_dtype(v.type), _dims(v.type)
        if dtype == "undefined" or dims is None:
            raise UserError(f"input {v.name!r} is not a tensor of known type and rank; rlparity diff compares tensor inputs")
        shape = tuple(BATCH if i == 0 and not isinstance(d, int) else (d if d is not None else f"{v.name}_dim_{i}")
                      for i, d in enumerate(dims))
        if "mask" in v.name.lower():
            width = shape[-1] if shape else None
            seg = segments if segments and isinstance(width, int) and sum(segments) == width else None
            inputs.append(TensorSpec(v.name, dtype, shape, "mask", segments=seg, description="1 = allowed"))
        elif not np.issubdtype(np.dtype(dtype), np.floating):
            inputs.append(TensorSpec(v.name, dtype, shape, "index"))
        else:
            inputs.append(TensorSpec(v.name, dtype, shape, "observation"))

    outputs = []
    for v in info.outputs:
        dtype = _np_dtype(info.types.get(v.name, v.type))
        dims = _dims(info.types.get(v.name, v.type)) or ()
        shape = tuple(d if d is not None else f"{v.name}_dim_{i}" for i, d in enumerate(dims))
        role = info.role(v.name)
        if dtype == "undefined":
            dtype = "float32"
        seg = None
        if segments and not np.issubdtype(np.dtype(dtype), np.floating) and dims and dims[-1] == len(segments):
            seg = segments
        outputs.append(TensorSpec(v.name, dtype, shape, role, segments=seg))
    axes = {BATCH: 1}
    for t in inputs:
        axes.update({d: 1 for d in t.shape if isinstance(d, str) and d != BATCH})
    return IOSpec(tuple(inputs), tuple(outputs), axes)


# -- the contract -------------------------------------------------------------------------------

def facts(info: GraphInfo, path: Path) -> dict[str, Any]:
    from rlparity.converters.safe_load import sha256_file

    model = info.model

    def io(values):
        return [{"name": v.name, "dtype": _np_dtype(v.type), "shape": _shape_text(_dims(v.type))} for v in values]

    return {
        "path": str(path),
        "sha256": sha256_file(path),
        "bytes": path.stat().st_size,
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
        "ir_version": model.ir_version,
        "opsets": info.opsets(),
        "inputs": io(info.inputs),
        "outputs": io(info.outputs),
        "nodes": len(model.graph.node),
        "initializers": len(info.initializers),
        "parameters": int(sum(int(np.prod(t.dims)) for t in info.initializers.values())),
        "operators": dict(sorted(info.operators().items())),
    }


def contract_differences(ref: GraphInfo, cand: GraphInfo, atol: float | None = None, rtol: float | None = None
                         ) -> tuple[list[Difference], dict[str, str], dict[str, str]]:
    """Every structural difference, and the reference -> candidate name maps of the
    inputs and outputs (renamed ones included) that the numbers use."""
    diffs: list[Difference] = []
    diffs += _model_differences(ref, cand)
    input_map, found = _io_differences("input", ref.inputs, cand.inputs, ref, cand)
    diffs += found
    output_map, found = _io_differences("output", ref.outputs, cand.outputs, ref, cand)
    diffs += found
    diffs += _unused_inputs(ref, cand)
    diffs += _role_and_constant_differences(ref, cand, output_map)
    diffs += _initializer_differences(ref, cand, atol, rtol)
    diffs += _operator_differences(ref, cand)
    return diffs, input_map, output_map


def _model_differences(ref: GraphInfo, cand: GraphInfo) -> list[Difference]:
    diffs = []
    ref_opsets, cand_opsets = ref.opsets(), cand.opsets()
    if ref_opsets.get("ai.onnx") != cand_opsets.get("ai.onnx"):
        diffs.append(Difference(
            "opset", "note", f"opset {cand_opsets.get('ai.onnx')} where the reference has {ref_opsets.get('ai.onnx')}: "
            "every runtime that loads the reference must also support this one",
            details={"reference": ref_opsets.get("ai.onnx"), "candidate": cand_opsets.get("ai.onnx")}))
    for domain in sorted(set(cand_opsets) - set(ref_opsets) - {"ai.onnx"}):
        used = any(n.domain == domain for n in cand.model.graph.node)
        if used:
            diffs.append(Difference(
                "opset-domain", "error", f"the candidate uses operators of domain {domain!r} (version "
                f"{cand_opsets[domain]}) that the reference does not need; runtimes without them cannot load it",
                subject=domain, details={"domain": domain, "version": cand_opsets[domain]}))
    if ref.model.ir_version != cand.model.ir_version:
        diffs.append(Difference(
            "ir-version", "note", f"IR version {cand.model.ir_version} where the reference has {ref.model.ir_version}",
            details={"reference": ref.model.ir_version, "candidate": cand.model.ir_version}))
    ref_producer = f"{ref.model.producer_name} {ref.model.producer_version}".strip()
    cand_producer = f"{cand.model.producer_name} {cand.model.producer_version}".strip()
    if ref_producer != cand_producer:
        diffs.append(Difference(
            "producer", "note", f"produced by {cand_producer or '(unnamed)'}; the reference by {ref_producer or '(unnamed)'}",
            details={"reference": ref_producer, "candidate": cand_producer}))
    return diffs


def _io_differences(what: str, ref_values: list, cand_values: list, ref: GraphInfo, cand: GraphInfo
                    ) -> tuple[dict[str, str], list[Difference]]:
    """Inputs or outputs: name, order, dtype, shape, dynamic axes."""
    diffs: list[Difference] = []
    ref_names = [v.name for v in ref_values]
    cand_names = [v.name for v in cand_values]
    cand_by_name = {v.name: v for v in cand_values}
    mapping = {n: n for n in ref_names if n in cand_by_name}

    # An unmatched name at the same position, with the same dtype and rank, was renamed.
    for i, v in enumerate(ref_values):
        if v.name in mapping or i >= len(cand_values):
            continue
        other = cand_values[i]
        if other.name in ref_names or other.name in mapping.values():
            continue
        ref_dims, cand_dims = _dims(v.type), _dims(other.type)
        if _np_dtype(v.type) == _np_dtype(other.type) and (ref_dims is None or cand_dims is None or len(ref_dims) == len(cand_dims)):
            mapping[v.name] = other.name
            diffs.append(Difference(
                f"renamed-{what}", "error", f"{what} {v.name!r} is called {other.name!r} in the candidate (position {i})",
                subject=v.name, details={"reference": v.name, "candidate": other.name, "position": i}))

    mapped = set(mapping.values())
    for i, v in enumerate(ref_values):
        if v.name not in mapping:
            detail = ""
            if what == "input" and not _is_read(ref, v.name):
                detail = " (the reference graph never reads it, but callers feed it)"
            diffs.append(Difference(
                f"missing-{what}", "error",
                f"the candidate has no {what} {v.name!r} {_np_dtype(v.type)}{_shape_text(_dims(v.type))}{detail}",
                subject=v.name, details={"position": i}))
    for i, v in enumerate(cand_values):
        if v.name not in mapped:
            diffs.append(Difference(
                f"extra-{what}", "error",
                f"the candidate has an {what} {v.name!r} {_np_dtype(v.type)}{_shape_text(_dims(v.type))} "
                f"that the reference does not" + (" (and never reads it)" if what == "input" and not _is_read(cand, v.name) else ""),
                subject=v.name, details={"position": i}))

    # Order of the names both sides have: positional callers see a reordering.
    common = [n for n in ref_names if n in mapping]
    cand_order = sorted(common, key=lambda n: cand_names.index(mapping[n]))
    if common != cand_order:
        diffs.append(Difference(
            f"reordered-{what}s", "error",
            f"{what}s are in another order: candidate {[mapping[n] for n in cand_order]}, reference {common}",
            details={"reference": common, "candidate": [mapping[n] for n in cand_order]}))

    for ref_name, cand_name in mapping.items():
        r = next(v for v in ref_values if v.name == ref_name)
        c = cand_by_name[cand_name]
        diffs += _tensor_type_differences(what, ref_name, r.type, c.type)
    return mapping, diffs


def _is_read(info: GraphInfo, name: str) -> bool:
    from rlparity.validators.localize import subgraph_inputs

    graph = info.model.graph
    return any(name in n.input or name in subgraph_inputs(n) for n in graph.node) or name in {o.name for o in graph.output}


def _tensor_type_differences(what: str, name: str, ref_type, cand_type) -> list[Difference]:
    diffs = []
    ref_dtype, cand_dtype = _np_dtype(ref_type), _np_dtype(cand_type)
    if ref_dtype != cand_dtype:
        diffs.append(Difference(f"retyped-{what}", "error", f"{what} {name!r} is {cand_dtype} in the candidate, "
                                f"{ref_dtype} in the reference", subject=name,
                                details={"reference": ref_dtype, "candidate": cand_dtype}))
    ref_dims, cand_dims = _dims(ref_type), _dims(cand_type)
    if ref_dims is None or cand_dims is None:
        return diffs
    shapes = {"reference": _shape_text(ref_dims), "candidate": _shape_text(cand_dims)}
    if len(ref_dims) != len(cand_dims):
        diffs.append(Difference(f"reshaped-{what}", "error", f"{what} {name!r} has shape {shapes['candidate']} in the "
                                f"candidate, {shapes['reference']} in the reference", subject=name, details=shapes))
        return diffs
    for axis, (r, c) in enumerate(zip(ref_dims, cand_dims)):
        if isinstance(r, int) and isinstance(c, int) and r != c:
            diffs.append(Difference(f"reshaped-{what}", "error", f"{what} {name!r} axis {axis} is {c} in the candidate, "
                                    f"{r} in the reference", subject=name, details={**shapes, "axis": axis}))
        elif not isinstance(r, int) and isinstance(c, int):
            diffs.append(Difference("fixed-axis", "error", f"{what} {name!r} axis {axis} is dynamic "
                                    f"({r or 'unnamed'}) in the reference but fixed to {c} in the candidate",
                                    subject=name, details={**shapes, "axis": axis, "what": what, "size": c}))
        elif isinstance(r, int) and not isinstance(c, int):
            diffs.append(Difference("dynamic-axis", "note", f"{what} {name!r} axis {axis} is fixed to {r} in the "
                                    f"reference but dynamic ({c or 'unnamed'}) in the candidate", subject=name,
                                    details={**shapes, "axis": axis, "what": what}))
        elif r and c and r != c:
            diffs.append(Difference("axis-name", "note", f"{what} {name!r} axis {axis} is called {c!r} in the "
                                    f"candidate, {r!r} in the reference", subject=name,
                                    details={**shapes, "axis": axis, "what": what}))
    return diffs


def _unused_inputs(ref: GraphInfo, cand: GraphInfo) -> list[Difference]:
    """An input one graph declares but never reads (its exporter kept it; the other dropped it)."""
    diffs = []
    for side, info in (("reference", ref), ("candidate", cand)):
        for v in info.inputs:
            if not _is_read(info, v.name):
                diffs.append(Difference("unused-input", "note", f"the {side} declares input {v.name!r} but never reads it",
                                        subject=v.name, details={"side": side}))
    return diffs


def _role_and_constant_differences(ref: GraphInfo, cand: GraphInfo, output_map: dict[str, str]) -> list[Difference]:
    diffs = []
    constant_pairs = []
    for ref_name, cand_name in output_map.items():
        r, c = ref.role(ref_name), cand.role(cand_name)
        if r != c:
            diffs.append(Difference("output-role", "error", f"output {ref_name!r} is {c} in the candidate, {r} in the "
                                    "reference", subject=ref_name, details={"reference": r, "candidate": c}))
        elif r == "constant":
            constant_pairs.append((ref_name, cand_name))
    ref_values = constant_values(ref, [r for r, _ in constant_pairs])
    cand_values = constant_values(cand, [c for _, c in constant_pairs])
    for ref_name, cand_name in constant_pairs:
        if ref_name not in ref_values or cand_name not in cand_values:
            continue  # compared exactly from onnxruntime's outputs with the numbers
        a, b = cand_values[cand_name], ref_values[ref_name]
        if a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes():
            diffs.append(Difference("constant-output", "error", f"constant output {ref_name!r} is "
                                    f"{_preview(a)} in the candidate, {_preview(b)} in the reference", subject=ref_name,
                                    details={"reference": b.tolist(), "candidate": a.tolist()}))
    return diffs


def _preview(a: np.ndarray) -> str:
    flat = a.reshape(-1)
    body = np.array2string(flat[:6], precision=6, separator=", ")
    return f"{a.dtype}{list(a.shape)} {body}{'...' if flat.size > 6 else ''}"


def _initializer_differences(ref: GraphInfo, cand: GraphInfo, atol: float | None, rtol: float | None) -> list[Difference]:
    """Weights matched by name, else by value (the same tensor under another name is the
    same weight); the ones that changed or have no counterpart are listed."""
    from onnx import numpy_helper

    ref_arrays = {n: numpy_helper.to_array(t) for n, t in ref.initializers.items()}
    cand_arrays = {n: numpy_helper.to_array(t) for n, t in cand.initializers.items()}

    def key(a: np.ndarray) -> tuple:
        return a.dtype.str, a.shape, hashlib.sha256(np.ascontiguousarray(a).tobytes()).digest()

    ref_keys = {n: key(a) for n, a in ref_arrays.items()}
    cand_keys = {n: key(a) for n, a in cand_arrays.items()}
    ref_left = [n for n in ref_arrays if not (n in cand_keys and cand_keys[n] == ref_keys[n])]
    cand_left = [n for n in cand_arrays if not (n in ref_keys and ref_keys[n] == cand_keys[n])]

    diffs = []
    by_value: dict[tuple, list[str]] = {}
    for n in cand_left:
        by_value.setdefault(cand_keys[n], []).append(n)
    renamed = []
    for n in list(ref_left):
        same = by_value.get(ref_keys[n])
        if same:
            other = same.pop(0)
            renamed.append((n, other))
            ref_left.remove(n)
            cand_left.remove(other)
    if renamed:
        diffs.append(Difference(
            "renamed-initializer", "note", f"{len(renamed)} weight(s) carry another name in the candidate, same values "
            f"(e.g. {renamed[0][0]!r} is {renamed[0][1]!r})",
            details={"pairs": [{"reference": r, "candidate": c} for r, c in renamed]}))

    for n in list(ref_left):
        if n not in cand_arrays:
            continue
        a, b = cand_arrays[n], ref_arrays[n]
        ref_left.remove(n)
        cand_left.remove(n)
        if a.shape != b.shape or a.dtype != b.dtype:
            diffs.append(Difference("changed-initializer", "error", f"weight {n!r} is {a.dtype}{list(a.shape)} in the "
                                    f"candidate, {b.dtype}{list(b.shape)} in the reference", subject=n,
                                    details={"reference": f"{b.dtype}{list(b.shape)}", "candidate": f"{a.dtype}{list(a.shape)}"}))
            continue
        with np.errstate(invalid="ignore", over="ignore"):
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            delta = np.abs(a64 - b64)
        max_abs = float(np.nanmax(delta)) if delta.size else 0.0
        tol_a, tol_r = tolerance(b.dtype.name, atol, rtol)
        beyond = int(np.sum(~(delta <= tol_a + tol_r * np.abs(b64)))) if np.issubdtype(b.dtype, np.floating) \
            else int(np.sum(a != b))
        severity = "error" if beyond else "note"
        where = np.unravel_index(int(np.nanargmax(delta)), delta.shape) if delta.size else ()
        diffs.append(Difference(
            "changed-initializer", severity,
            f"weight {n!r} differs: max_abs {max_abs:.3g} at {list(map(int, where))}, "
            f"{int(np.sum(a != b))} of {a.size} values" + ("" if beyond else " (all within tolerance)"),
            subject=n, details={"max_abs": max_abs, "changed": int(np.sum(a != b)), "elements": int(a.size),
                                "beyond_tolerance": beyond, "at": [int(i) for i in where]}))
    for side, names, arrays in (("reference", ref_left, ref_arrays), ("candidate", cand_left, cand_arrays)):
        for n in names:
            a = arrays[n]
            other = "candidate" if side == "reference" else "reference"
            diffs.append(Difference(
                "unmatched-initializer", "note", f"{side} weight {n!r} {a.dtype}{list(a.shape)} has no counterpart in "
                f"the {other}, by name or by value", subject=n, details={"side": side, "shape": list(a.shape)}))
    return diffs


def _operator_differences(ref: GraphInfo, cand: GraphInfo) -> list[Difference]:
    diffs = []
    ref_ops, cand_ops = ref.operators(), cand.operators()
    if ref_ops != cand_ops:
        changed = {op: [ref_ops.get(op, 0), cand_ops.get(op, 0)] for op in sorted(set(ref_ops) | set(cand_ops))
                   if ref_ops.get(op, 0) != cand_ops.get(op, 0)}
        text = ", ".join(f"{op} {r}->{c}" for op, (r, c) in changed.items())
        diffs.append(Difference("operator-histogram", "note", f"operator counts differ (reference->candidate): {text}",
                                details={"changed": changed}))
    cand_nodes = {n.name: n for n in cand.model.graph.node if n.name}
    for node in ref.model.graph.node:
        other = cand_nodes.get(node.name) if node.name else None
        if other is not None and _op_label(other) != _op_label(node):
            diffs.append(Difference("changed-operator", "note", f"node {node.name!r} is {_op_label(other)} in the "
                                    f"candidate, {_op_label(node)} in the reference", subject=node.name,
                                    details={"reference": _op_label(node), "candidate": _op_label(other)}))
    return diffs


def _op_label(node) -> str:
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"


# -- the numbers --------------------------------------------------------------------------------

def load_feeds(path: Path, spec: IOSpec) -> Feeds:
    """Inputs from an .npz keyed by the reference's input names (read without pickle)."""
    from rlparity.artifacts.saved_run import read_arrays

    arrays = read_arrays(path)
    batch = None
    feeds = {}
    for t in spec.inputs:
        if t.name not in arrays:
            raise UserError(f"no array named {t.name!r} (an input of the reference); it holds {sorted(arrays)}", path)
        a = arrays[t.name]
        if a.dtype != t.np_dtype:
            raise UserError(f"{t.name!r} is {a.dtype}, the reference takes {t.dtype}", path)
        if a.ndim != len(t.shape) or any(isinstance(d, int) and d != s for d, s in zip(t.shape, a.shape)):
            raise UserError(f"{t.name!r} has shape {list(a.shape)}, the reference takes {_shape_text(t.shape)}", path)
        if t.shape and t.shape[0] == BATCH:
            if a.shape[0] == 0:
                raise UserError(f"{t.name!r} has no rows", path)
            if batch is not None and a.shape[0] != batch:
                raise UserError(f"{t.name!r} has {a.shape[0]} rows, the other inputs {batch}", path)
            batch = a.shape[0]
        feeds[t.name] = a
    rows = batch or 1
    return Feeds(feeds, ["loaded"] * rows, seed=0)


def generate_feeds(spec: IOSpec, batch: int, seed: int) -> Feeds:
    """Seeded rows plus edge cases (feeds.py), or, when the reference fixes its batch axis,
    that many rows."""
    leading = {t.shape[0] for t in spec.inputs if t.shape}
    edge_cases = True
    if leading and BATCH not in leading:
        fixed = sorted(d for d in leading if isinstance(d, int))
        batch = fixed[0] if fixed else 1
        edge_cases = len(fixed) == 1  # edge rows need every input to have as many rows
    try:
        return make_feeds(spec, batch, seed, edge_cases=edge_cases)
    except (ValueError, IndexError) as e:
        raise UserError(f"cannot generate inputs for this model ({_one_line(e)}); pass --inputs FILE.npz") from None


def _chunk_size(spec: IOSpec, cand: GraphInfo, input_map: dict[str, str], batch: int) -> int:
    """Rows per candidate call: its fixed batch size when it fixed the reference's dynamic one."""
    fixed = set()
    by_name = {v.name: v for v in cand.inputs}
    for t in spec.inputs:
        dims = _dims(by_name[input_map[t.name]].type) if t.name in input_map else None
        if t.shape and t.shape[0] == BATCH and dims and isinstance(dims[0], int):
            fixed.add(dims[0])
    if len(fixed) == 1:
        size = fixed.pop()
        if 0 < size < batch and batch % size == 0:
            return size
    return batch


def _run(session, feeds: dict[str, np.ndarray], rows: int, chunk: int, batched: set[str]) -> dict[str, np.ndarray]:
    """One call, or one per ``chunk`` rows with batched outputs stacked back together."""
    if chunk >= rows:
        return session.run(feeds)
    parts = [session.run({k: (v[i:i + chunk] if v.ndim and v.shape[0] == rows else v) for k, v in feeds.items()})
             for i in range(0, rows, chunk)]
    return {name: (np.concatenate([p[name] for p in parts]) if name in batched else parts[0][name]) for name in parts[0]}


def _incomparable_inputs(spec: IOSpec, cand: GraphInfo, input_map: dict[str, str]) -> list[str]:
    """Why the reference's inputs cannot be fed to the candidate, if they cannot."""
    reasons = []
    mapped = set(input_map.values())
    for v in cand.inputs:
        if v.name not in mapped and _is_read(cand, v.name):
            reasons.append(f"it needs input {v.name!r} that the reference does not have")
    by_name = {v.name: v for v in cand.inputs}
    for t in spec.inputs:
        if t.name not in input_map:
            continue
        c = by_name[input_map[t.name]]
        dims = _dims(c.type)
        if _np_dtype(c.type) != t.dtype:
            reasons.append(f"input {c.name!r} takes {_np_dtype(c.type)}, not {t.dtype}")
        elif dims is not None and (len(dims) != len(t.shape) or any(
                isinstance(d, int) and isinstance(s, int) and d != s for d, s in zip(dims, t.shape))):
            reasons.append(f"input {c.name!r} has shape {_shape_text(dims)}, not {_shape_text(t.shape)}")
    return reasons


def argmax_scores(info: GraphInfo, output: str) -> list[str] | None:
    """The tensors an integer output is the ArgMax of (one per branch, concatenated on the
    last axis), so that a disagreement can be told from a tie; None when it is not that."""
    made_by = producers(info.model.graph)
    passthrough = {"Identity", "Cast", "Unsqueeze", "Squeeze", "Reshape"}

    def maker(tensor: str):
        """The node behind ``tensor``, past casts and reshapes."""
        node = made_by.get(tensor)
        while node is not None and node.op_type in passthrough:
            node = made_by.get(node.input[0])
        return node

    node = maker(output)
    branches = [maker(t) for t in node.input] if node is not None and node.op_type == "Concat" else [node]
    if all(b is not None and b.op_type == "ArgMax" for b in branches):
        return [b.input[0] for b in branches]
    return None


def _with_scores(spec: IOSpec, ref: GraphInfo, feeds: dict[str, np.ndarray]) -> tuple[IOSpec, dict[str, np.ndarray]]:
    """Scores behind the reference's ArgMax outputs, computed on the same inputs."""
    wanted = {}
    for t in spec.outputs:
        if t.role == "deterministic" and not t.is_float:
            sources = argmax_scores(ref, t.name)
            if sources and not any(s in ref.random for s in sources):
                wanted[t.name] = sources
    if not wanted:
        return spec, {}
    try:
        values = node_values(ref.model, feeds, sorted({s for sources in wanted.values() for s in sources}))
    except Exception:  # ties are then reported as unexplained disagreements
        return spec, {}
    scores, outputs = {}, []
    for t in spec.outputs:
        sources = wanted.get(t.name)
        if sources and all(s in values and values[s].ndim == 2 for s in sources):
            key = f"{t.name}:scores"
            scores[key] = np.concatenate([values[s] for s in sources], axis=-1)
            segments = tuple(values[s].shape[-1] for s in sources)
            t = replace(t, scores=key, segments=t.segments or segments)
        outputs.append(t)
    return replace(spec, outputs=tuple(outputs)), scores


def _session(model, path: str) -> OrtRuntime:
    """onnxruntime on the CPU, its load errors naming ``path``."""
    runtime = OrtRuntime(path)
    runtime.prepare(model.SerializeToString())
    return runtime


# -- the whole diff -----------------------------------------------------------------------------

def diff(candidate_path: str | Path, reference_path: str | Path, options: DiffOptions | None = None,
         on_step=lambda _: None) -> DiffResult:
    from rlparity.artifacts.report import library_versions
    from rlparity.validators.runtimes import host_info

    options = options or DiffOptions()
    candidate_path, reference_path = Path(candidate_path), Path(reference_path)
    on_step("reading the models")
    ref = GraphInfo(load_onnx(reference_path))
    cand = GraphInfo(load_onnx(candidate_path))
    try:
        spec = io_spec_from_onnx(ref)
        feeds = load_feeds(options.inputs, spec) if options.inputs else generate_feeds(spec, options.batch, options.seed)
    except UserError as e:  # what the reference's graph cannot give is said of the reference
        if e.path is not None:
            raise
        raise UserError(e.message, reference_path) from None

    on_step("comparing the contracts")
    differences, input_map, output_map = contract_differences(ref, cand, options.atol, options.rtol)
    tolerances = {t.name: tolerance(t.dtype, options.atol, options.rtol) for t in spec.outputs if t.is_float}
    result = DiffResult(
        reference=facts(ref, reference_path), candidate=facts(cand, candidate_path), io_spec=spec.to_json(),
        differences=differences, tolerances={k: list(v) for k, v in tolerances.items()},
        inputs={"source": str(options.inputs) if options.inputs else "generated", "seed": None if options.inputs else options.seed,
                "batch": feeds.batch, "rows": _row_summary(feeds.rows), "digest": feeds.digest},
        versions=library_versions(), host=host_info(),
    )

    reasons = _incomparable_inputs(spec, cand, input_map)
    if reasons:
        result.differences.append(Difference(
            "numbers-not-compared", "error", "the reference's inputs cannot be fed to the candidate: " + "; ".join(reasons)))
        return result
    on_step("running both models")
    _compare_numbers(result, ref, cand, spec, feeds, input_map, output_map, options, on_step)
    return result


def _row_summary(rows: list[str]) -> dict[str, int]:
    return dict(Counter(rows))


def _compare_numbers(result: DiffResult, ref: GraphInfo, cand: GraphInfo, spec: IOSpec, feeds: Feeds,
                     input_map: dict[str, str], output_map: dict[str, str], options: DiffOptions, on_step) -> None:
    cand_names = {v: k for k, v in output_map.items()}  # candidate output -> reference name

    unread = [v for v in cand.inputs if v.name not in input_map.values()]  # _incomparable_inputs: none is read

    def for_candidate(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        fed = {input_map[k]: v for k, v in arrays.items() if k in input_map}
        rows = max((v.shape[0] for v in arrays.values() if v.ndim), default=1)
        for v in unread:  # onnxruntime wants every declared input, read or not
            dims = _dims(v.type) or ()
            shape = tuple(d if isinstance(d, int) else (rows if i == 0 else 1) for i, d in enumerate(dims))
            fed[v.name] = np.zeros(shape, dtype=_np_dtype(v.type))
        return fed

    def as_reference(outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {cand_names[k]: v for k, v in outputs.items() if k in cand_names}

    batched_ref = {t.name for t in spec.outputs if t.shape and isinstance(t.shape[0], str)}
    batched_cand = {output_map[n] for n in batched_ref if n in output_map}
    chunk = _chunk_size(spec, cand, input_map, feeds.batch)
    if chunk < feeds.batch:
        result.inputs["candidate_rows_per_call"] = chunk

    ref_session = _session(ref.model, str(result.reference["path"]))
    try:
        ref_out = ref_session.run(feeds.arrays)
    except Exception as e:
        raise UserError(f"onnxruntime cannot run the reference on these inputs: {_one_line(e)}",
                        result.reference["path"]) from None
    try:
        cand_session = _session(cand.model, str(result.candidate["path"]))
        cand_out = as_reference(_run(cand_session, for_candidate(feeds.arrays), feeds.batch, chunk, batched_cand))
    except Exception as e:  # an ONNX file the runtime cannot load or run is no drop-in
        message = e.message if isinstance(e, UserError) else _one_line(e)
        message = message.replace("onnxruntime cannot load this model: : 1 : FAIL : ", "")
        result.differences.append(Difference("not-runnable", "error",
                                             f"onnxruntime cannot run the candidate on the reference's inputs: {message}"))
        return

    stochastic = [t.name for t in spec.outputs if t.role == "stochastic"]
    ref_draws = cand_draws = None
    if stochastic:
        on_step("sampling")
        draw_feeds = feeds.take(min(options.draw_rows, feeds.batch))
        tiled = draw_feeds.tile(options.draws)
        rows = draw_feeds.batch * options.draws
        ref_draws = _reshape_draws(ref_session.run(tiled), stochastic, options.draws, draw_feeds.batch)
        if rows % chunk == 0:
            out = as_reference(_run(cand_session, for_candidate(tiled), rows, chunk, batched_cand))
            cand_draws = _reshape_draws(out, stochastic, options.draws, draw_feeds.batch)
        result.inputs.update(draws=options.draws, draw_rows=draw_feeds.batch)

    spec_scored, scores = _with_scores(spec, ref, feeds.arrays)
    tolerances = {t.name: tolerance(t.dtype, options.atol, options.rtol) for t in spec.outputs}
    comparison = compare_outputs(spec_scored, ref_out, cand_out, reference_name="reference",
                                 candidate_name="candidate", tolerances=tolerances, scores=scores,
                                 reference_draws=ref_draws, candidate_draws=cand_draws)
    result.comparison = comparison.to_json()
    failing = [o for o in comparison.outputs if o.passed is False]
    for o in failing:
        result.differences.append(Difference("numeric-mismatch", "error", f"output {o.output!r} differs ({o.rule}): "
                                              + _numbers_summary(o), subject=o.output))
    if not failing:
        return

    on_step("localizing the first divergence")
    local_feeds = feeds.arrays
    if chunk < feeds.batch:  # the candidate takes `chunk` rows: localize on the worst chunk
        row = _worst_row(ref_out, cand_out, [o.output for o in failing])
        start = row - row % chunk
        local_feeds = {k: v[start:start + chunk] for k, v in feeds.arrays.items()}
    try:
        result.first_divergence = first_divergence(
            ref.model, cand.model, local_feeds, for_candidate(local_feeds), [o.output for o in failing],
            atol=options.atol, rtol=options.rtol, output_names=output_map)
    except Exception as e:  # the rest of the diff stands; say why this part is missing
        result.first_divergence = {"found": False, "error": f"localization failed: {_one_line(e)}"}


def _reshape_draws(out: dict[str, np.ndarray], names: list[str], draws: int, rows: int) -> dict[str, np.ndarray]:
    return {n: out[n].reshape(draws, rows, *out[n].shape[1:]) for n in names if n in out}


def _worst_row(ref_out, cand_out, names: list[str]) -> int:
    worst, row = -1.0, 0
    for n in names:
        a, b = cand_out.get(n), ref_out.get(n)
        if a is None or b is None or a.shape != b.shape or a.ndim == 0:
            continue
        with np.errstate(invalid="ignore", over="ignore"):
            per_row = np.abs(a.astype(np.float64) - b.astype(np.float64)).reshape(a.shape[0], -1).max(axis=1)
        per_row = np.nan_to_num(per_row, nan=np.inf)
        if per_row.size and per_row.max() > worst:
            worst, row = float(per_row.max()), int(per_row.argmax())
    return row


def _numbers_summary(o) -> str:
    m = o.metrics
    if o.rule == "elementwise":
        if "failing" in m:
            return f"{m['failing']} of {m['elements']} elements beyond tolerance, max_abs {m['max_abs']:.3g}"
        return o.note
    if o.rule == "agreement":
        if "disagreements" in m:
            return f"{m['disagreements'] - m.get('ties', 0)} of {m['elements']} decisions disagree"
        return o.note
    if o.rule == "exact":
        return o.note or "values differ"
    return o.note or "the draws follow another distribution"
