"""First divergence: the earliest node whose value differs between two ONNX graphs.

When a candidate's output differs from the reference's, the output alone does not say
where the difference starts. As Polygraphy does, every intermediate value is exposed as
a graph output in both models and computed by onnxruntime with graph optimizations off
(so nothing is fused away). Values are paired across the graphs by tensor name where the
names agree and otherwise by topological position, op type and shape, then walked in the
reference's topological order: the first pair beyond tolerance is the first divergence.

Values downstream of a random operator (RandomNormalLike, Multinomial, ...) differ by
design and are skipped; so is everything that does not feed a failing output.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from rlparity.validators.compare import DEFAULT_TOLERANCES, compare_elementwise
from rlparity.validators.ort import OrtRuntime

STOCHASTIC_OPS = frozenset({
    "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli",
})


# -- what each tensor depends on -----------------------------------------------------------

def _subgraphs(node) -> list:
    graphs = []
    for attribute in node.attribute:
        if attribute.HasField("g"):
            graphs.append(attribute.g)
        graphs.extend(attribute.graphs)
    return graphs


def subgraph_inputs(node) -> list[str]:
    """Names a control-flow node's subgraphs (If, Loop, Scan) read, besides its own inputs."""
    names = []
    for graph in _subgraphs(node):
        for inner in graph.node:
            names += [n for n in inner.input if n]
            names += subgraph_inputs(inner)
    return names


def _subgraph_ops(node) -> set[str]:
    ops = set()
    for graph in _subgraphs(node):
        for inner in graph.node:
            ops.add(inner.op_type)
            ops |= _subgraph_ops(inner)
    return ops


def lineage(graph, input_names: set[str]) -> tuple[set[str], set[str]]:
    """(tensors that depend on a graph input, tensors computed from a random draw).

    ONNX graphs are topologically sorted (the checker enforces it), so one pass suffices.
    """
    depends, random = set(input_names), set()
    for node in graph.node:
        reads = [n for n in node.input if n] + subgraph_inputs(node)
        node_depends = any(n in depends for n in reads)
        node_random = (node.op_type in STOCHASTIC_OPS or any(n in random for n in reads)
                       or bool(_subgraph_ops(node) & STOCHASTIC_OPS))
        for out in node.output:
            if not out:
                continue
            if node_depends:
                depends.add(out)
            if node_random:
                random.add(out)
    return depends, random


def producers(graph) -> dict[str, Any]:
    return {out: node for node in graph.node for out in node.output if out}


def ancestors(graph, tensors: set[str]) -> set[str]:
    """Every tensor that ``tensors`` are computed from, themselves included."""
    made_by = producers(graph)
    seen, todo = set(), list(tensors)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        node = made_by.get(name)
        if node is not None:
            todo += [n for n in node.input if n] + subgraph_inputs(node)
    return seen


# -- exposing and computing intermediate values ------------------------------------------------

def expose(model, names: list[str]):
    """A copy of ``model`` whose graph outputs also include ``names`` (types from shape inference)."""
    import onnx

    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    try:
        inferred = onnx.shape_inference.infer_shapes(model).graph.value_info
        types = {v.name: v for v in inferred}
    except Exception:  # shape inference is a help here, not a requirement
        types = {}
    present = {o.name for o in exposed.graph.output}
    for name in names:
        if name in present:
            continue
        info = types.get(name)
        if info is not None and info.type.HasField("tensor_type"):
            exposed.graph.output.append(info)
        elif info is None:
            exposed.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
        # sequences and maps are left out: they cannot be compared element-wise
        present.add(name)
    return exposed


def run_unoptimized(model, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every graph output of ``model``, computed with onnxruntime's graph optimizations off."""
    runtime = OrtRuntime("intermediate values", optimize=False)
    runtime.prepare(model.SerializeToString())
    return runtime.run(feeds)


def node_values(model, feeds: dict[str, np.ndarray], names: list[str]) -> dict[str, np.ndarray]:
    return run_unoptimized(expose(model, names), feeds)


# -- the walk ----------------------------------------------------------------------------------

def first_divergence(reference, candidate, reference_feeds: dict[str, np.ndarray],
                     candidate_feeds: dict[str, np.ndarray], failing_outputs: list[str],
                     atol: float | None = None, rtol: float | None = None,
                     output_names: dict[str, str] | None = None) -> dict[str, Any]:
    """The first node, in the reference's topological order, whose value differs.

    ``failing_outputs``: reference output names that differ; only their ancestors are
    examined. ``output_names``: reference output name -> candidate output name, for
    outputs the candidate renamed. ``atol``/``rtol``: override the per-dtype defaults.
    Returns ``{"found": False, ...}`` when every examined value agrees.
    """
    ref_graph, cand_graph = reference.graph, candidate.graph
    ref_inputs = _graph_inputs(ref_graph)
    cand_inputs = _graph_inputs(cand_graph)
    _, ref_random = lineage(ref_graph, ref_inputs)
    _, cand_random = lineage(cand_graph, cand_inputs)
    wanted = ancestors(ref_graph, set(failing_outputs))

    ref_nodes = [n for n in ref_graph.node if any(o and o in wanted and o not in ref_random for o in n.output)]
    ref_names = [o for n in ref_nodes for o in n.output if o and o not in ref_random]
    cand_names = [o for n in cand_graph.node for o in n.output if o and o not in cand_random]
    ref_values = node_values(reference, reference_feeds, ref_names)
    cand_values = node_values(candidate, candidate_feeds, cand_names)

    pairs = _match(ref_graph, cand_graph, ref_values, cand_values, ref_random, cand_random, output_names or {})
    ref_init = {t.name: t for t in ref_graph.initializer}
    cand_init = {t.name: t for t in cand_graph.initializer}
    cand_made_by = producers(cand_graph)
    agreed: set[str] = set(ref_inputs)
    compared = 0
    for node in ref_nodes:
        for tensor in node.output:
            if not tensor or tensor in ref_random or tensor not in wanted:
                continue
            match = pairs.get(tensor)
            if match is None or tensor not in ref_values:
                continue
            cand_tensor, matched_by = match
            a, b = cand_values[cand_tensor], ref_values[tensor]
            verdict = _compare(tensor, a, b, atol, rtol)
            compared += 1
            if verdict["passed"]:
                agreed.add(tensor)
                continue
            cand_node = cand_made_by.get(cand_tensor)
            unexplained = [n for n in node.input if n and n not in agreed and n not in ref_init]
            changed = _changed_weights(node, cand_node, ref_init, cand_init)
            return {
                "found": True,
                "node": node.name or tensor,
                "op_type": node.op_type,
                "tensor": tensor,
                "candidate_node": (cand_node.name or cand_tensor) if cand_node is not None else cand_tensor,
                "candidate_op_type": cand_node.op_type if cand_node is not None else None,
                "candidate_tensor": cand_tensor,
                "matched_by": matched_by,
                "shape": list(b.shape),
                **verdict["metrics"],
                # Every input agreed: the difference is made by this node (its operator or
                # its weights), not handed down from an unmatched upstream value.
                "inputs_agree": not unexplained,
                "unmatched_inputs": unexplained,
                "changed_weights": changed,
                "values_compared": compared,
            }
    return {"found": False, "values_compared": compared,
            "reference_values": len(ref_names), "matched": len(pairs)}


def _graph_inputs(graph) -> set[str]:
    initializers = {t.name for t in graph.initializer}
    return {v.name for v in graph.input if v.name not in initializers}


def _match(ref_graph, cand_graph, ref_values, cand_values, ref_random, cand_random,
           output_names: dict[str, str]) -> dict[str, tuple[str, str]]:
    """reference tensor -> (candidate tensor, "name" | "position")."""
    pairs: dict[str, tuple[str, str]] = {}
    for ref_name, cand_name in output_names.items():
        if ref_name in ref_values and cand_name in cand_values and cand_values[cand_name].shape == ref_values[ref_name].shape:
            pairs[ref_name] = (cand_name, "name")  # a renamed output is still the same output
    for name, value in ref_values.items():
        if name not in pairs and name in cand_values and name not in cand_random and cand_values[name].shape == value.shape:
            pairs[name] = (name, "name")
    taken = {c for c, _ in pairs.values()}

    def unmatched_by_signature(graph, values, random, done) -> dict[tuple, list[str]]:
        groups: dict[tuple, list[str]] = defaultdict(list)
        for node in graph.node:
            for index, out in enumerate(node.output):
                if out and out in values and out not in random and out not in done:
                    v = values[out]
                    groups[(node.domain, node.op_type, index, v.dtype.str, v.shape)].append(out)
        return groups

    ref_groups = unmatched_by_signature(ref_graph, ref_values, ref_random, set(pairs))
    cand_groups = unmatched_by_signature(cand_graph, cand_values, cand_random, taken)
    for signature, ref_list in ref_groups.items():
        for ref_name, cand_name in zip(ref_list, cand_groups.get(signature, [])):
            pairs[ref_name] = (cand_name, "position")
    return pairs


def tolerance(dtype: str, atol: float | None, rtol: float | None) -> tuple[float, float]:
    """The dtype's default (atol, rtol), each replaced by the one given, if any."""
    default_atol, default_rtol = DEFAULT_TOLERANCES.get(dtype, DEFAULT_TOLERANCES["float32"])
    return (default_atol if atol is None else atol), (default_rtol if rtol is None else rtol)


def _compare(name: str, a: np.ndarray, b: np.ndarray, atol: float | None, rtol: float | None) -> dict[str, Any]:
    if np.issubdtype(b.dtype, np.floating) and a.dtype == b.dtype:
        tol_a, tol_r = tolerance(b.dtype.name, atol, rtol)
        result = compare_elementwise(name, a, b, tol_a, tol_r)
        m = result.metrics
        return {"passed": bool(result.passed), "metrics": {
            "max_abs": m.get("max_abs"), "failing": m.get("failing"), "elements": m.get("elements", int(b.size)),
            "bit_match_rate": m.get("bit_match_rate"), "atol": tol_a, "rtol": tol_r}}
    same = a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
    metrics: dict[str, Any] = {"elements": int(b.size), "rule": "exact"}
    if a.shape == b.shape:
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
        metrics["failing"] = int((a != b).sum())
        metrics["max_abs"] = float(diff.max()) if diff.size else 0.0
    return {"passed": same, "metrics": metrics}


def _changed_weights(ref_node, cand_node, ref_init, cand_init) -> list[dict[str, Any]]:
    """The node's weights (initializer inputs) that differ from the candidate node's."""
    from onnx import numpy_helper

    if cand_node is None:
        return []
    changed = []
    for ref_name, cand_name in zip(ref_node.input, cand_node.input):
        if ref_name not in ref_init or cand_name not in cand_init:
            continue
        a = numpy_helper.to_array(cand_init[cand_name])
        b = numpy_helper.to_array(ref_init[ref_name])
        if a.shape != b.shape or a.dtype != b.dtype:
            changed.append({"reference": ref_name, "candidate": cand_name,
                            "note": f"{a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}"})
        elif not np.array_equal(a, b):
            with np.errstate(invalid="ignore", over="ignore"):
                max_abs = float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max())
            changed.append({"reference": ref_name, "candidate": cand_name, "max_abs": max_abs})
    return changed
