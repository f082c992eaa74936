"""`rlparity validate`: the same inputs through every runtime, compared to the reference.

The reference is ``torch-cpu``, the pure-PyTorch rebuild of the checkpoint. Every other
runtime is compared to it, and our export (``ort-cpu``) is also compared to the
library's own export (``ort-ref``) when one is available. A runtime that is unavailable
or fails is recorded with its reason; the others still run and are reported.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from rlparity.artifacts.report import Report, RuntimeResult, library_versions
from rlparity.converters.family import Family
from rlparity.converters.safe_load import sha256_file
from rlparity.errors import UsageError, UserError
from rlparity.spec import IOSpec
from rlparity.validators.compare import compare_outputs
from rlparity.validators.feeds import Feeds, digest_arrays
from rlparity.validators.ort import OrtRuntime
from rlparity.validators.runtimes import (
    OFFICIAL,
    OURS,
    REFERENCE,
    Runtime,
    choose_runtimes,
    host_info,
)
from rlparity.validators.torch_runtime import TorchRuntime

# Rows of the inputs shown with the scores and actions behind them (Family.decision_view).
DECISION_ROWS = 8


@dataclass
class ValidateOptions:
    runtimes: list[str] | None = None  # None: torch-cpu, ort-cpu, ort-ref when found, --device
    device: str | None = None
    reference: Path | None = None      # the official export; default: found beside the checkpoint
    batch: int = 64
    seed: int = 0
    opset: int | None = None
    draws: int = 512                   # samples per element for stochastic outputs
    draw_rows: int = 8                 # rows of the batch the draws are taken on
    repeats: int = 20                  # timed calls per runtime after the first
    dtypes: list[str] | None = None    # precision sweep: torch on the device in each dtype
    extra_pairs: list[tuple[str, str]] | None = None  # (reference, candidate) comparisons to add
    save_run: Path | None = None       # write inputs, every runtime's outputs and metadata here
    command: str = ""                  # the command line, recorded in the report


def runtime_names(family: Family, options: ValidateOptions) -> list[str]:
    default = [REFERENCE, OURS] + ([OFFICIAL] if options.reference or family.reference_export() else [])
    return choose_runtimes(options.runtimes, options.device, default)


def make_runtime(name: str, spec: IOSpec, seed: int) -> Runtime:
    if name in (OURS, OFFICIAL):
        return OrtRuntime(name)
    choose_runtimes([name], None, [])  # an unknown name is a usage error
    return TorchRuntime(spec, name.removeprefix("torch-"), seed=seed)


@dataclass
class Validation:
    """A validation run: the report, and the arrays and export it was computed from."""
    report: Report
    export: bytes                               # our ONNX export, as validated
    inputs: dict[str, np.ndarray]               # the feeds every runtime received
    outputs: dict[str, dict[str, np.ndarray]]   # runtime -> output name -> array


def validate(family: Family, options: ValidateOptions, on_step: Callable[[str], None] = lambda _: None) -> Report:
    return validate_with_arrays(family, options, on_step).report


def validate_with_arrays(family: Family, options: ValidateOptions,
                         on_step: Callable[[str], None] = lambda _: None) -> Validation:
    """``validate``, keeping what the report's digests refer to (for `rlparity package`)."""
    spec = family.io_spec()
    names = runtime_names(family, options)
    runtimes = {name: make_runtime(name, spec, options.seed) for name in names}  # usage errors first
    reference_path = options.reference or family.reference_export()
    if OFFICIAL in names and reference_path is None:
        raise UsageError("runtime ort-ref needs the official export: none was found beside the checkpoint; pass --ref FILE.onnx")

    on_step("exporting")
    ours = family.export(opset=options.opset)
    # Every shape the family asks for (several sequence lengths for sequence models); the
    # first is the one timed, sampled, saved and packaged, and the one "inputs" describes.
    shapes = family.validation_shapes(options.batch)
    all_feeds = [family.make_feeds(shape["batch"], options.seed, **_other_axes(shape)) for shape in shapes]
    feeds = all_feeds[0]
    stochastic = [t.name for t in spec.outputs if t.role == "stochastic"]
    draw_feeds = feeds.take(min(options.draw_rows, feeds.batch)) if stochastic else None
    models = {OURS: ours, OFFICIAL: reference_path}

    report = new_report(family, ours, options.opset, inputs={
        "seed": options.seed, "batch": feeds.batch, "rows": _row_summary(feeds), "digest": feeds.digest,
        "draws": options.draws if stochastic else 0, "draw_rows": draw_feeds.batch if draw_feeds else 0})
    report.command = options.command
    if len(shapes) > 1:
        report.inputs["shapes"] = [{"axes": dict(shape), "rows": _row_summary(f), "digest": f.digest}
                                   for shape, f in zip(shapes, all_feeds)]
    if reference_path is not None:
        report.reference_export = {"path": str(reference_path), **reference_facts(reference_path, ours)}

    per_shape: list[dict[str, dict[str, np.ndarray]]] = [{} for _ in shapes]  # shape -> runtime -> outputs
    draws: dict[str, dict[str, np.ndarray]] = {}
    for name, runtime in runtimes.items():
        on_step(f"running {name}")
        result = RuntimeResult(name, runtime.kind, runtime.device)
        report.runtimes.append(result)
        result.available, result.reason = runtime.available()
        if not result.available:
            continue
        model = models[name] if name in models else family.build_torch()
        try:
            runtime.prepare(model)
            result.info = runtime.info()
            per_shape[0][name], result.timing = _timed_runs(runtime, feeds.arrays, options.repeats)
            if draw_feeds is not None:
                draws[name] = _draw(runtime, draw_feeds, stochastic, options.draws)
            for i, (shape, shape_feeds) in enumerate(zip(shapes[1:], all_feeds[1:]), start=1):
                on_step(f"running {name} at {_shape_text(shape)}")
                try:
                    per_shape[i][name] = runtime.run(shape_feeds.arrays)
                except Exception as e:  # the shapes already run keep their results
                    result.error = f"{type(e).__name__} at {_shape_text(shape)}: {' '.join(str(e).split())[:300]}"
                    break
        except UserError as e:  # e.g. an unreadable official export: its own clear message
            result.error = str(e)
        except Exception as e:  # recorded, so that the other runtimes' results survive
            result.error = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
        finally:
            runtime.close()

    on_step("comparing")
    outputs = per_shape[0]
    reference_name = REFERENCE if REFERENCE in outputs else next(iter(outputs), None)
    # Per shape, the reference scores behind discrete actions and the elements compared.
    all_scores = [family.scores(f.arrays) for f in all_feeds]
    all_valid = [family.valid_elements(f.arrays) for f in all_feeds]
    for i, shape in enumerate(shapes):
        shape_outputs, scores, valid = per_shape[i], all_scores[i], all_valid[i]
        # A reference that failed at this shape leaves nothing to compare with (its error is recorded).
        pairs = [(reference_name, name) for name in shape_outputs
                 if name != reference_name and reference_name in shape_outputs]
        if OURS in shape_outputs and OFFICIAL in shape_outputs and reference_name != OFFICIAL:
            pairs.append((OFFICIAL, OURS))
        for pair in options.extra_pairs or []:
            if pair[0] in shape_outputs and pair[1] in shape_outputs and pair[0] != pair[1] and pair not in pairs:
                pairs.append(pair)
        for ref, cand in pairs:
            comparison = compare_outputs(
                spec, shape_outputs[ref], shape_outputs[cand], reference_name=ref, candidate_name=cand,
                tolerances=family.tolerances(), scores=scores,
                reference_draws=draws.get(ref) if i == 0 else None,
                candidate_draws=draws.get(cand) if i == 0 else None,
                valid=valid,
            )
            data = comparison.to_json()
            if len(shapes) > 1:
                data["shape"] = dict(shape)
            report.comparisons.append(data)
    if any(v is not None for v in all_valid) and family.excluded_from_comparison:
        report.notes.append(f"excluded from every comparison: {family.excluded_from_comparison}")
    report.extra["outputs_digest"] = {name: digest_arrays(out) for name, out in outputs.items()}
    if outputs:
        first = feeds.take(min(DECISION_ROWS, feeds.batch))
        ordered = {reference_name: outputs[reference_name], **outputs}  # the reference first
        view = family.decision_view(first, ordered)
        if view:
            report.extra["decisions"] = {"reference": reference_name, "inputs_digest": first.digest, **view}
    if options.dtypes:
        from rlparity.validators.precision import precision_sweep

        report.extra["precision"] = precision_sweep(
            family, options.dtypes, options.device or "cpu", feeds, seed=options.seed,
            draw_feeds=draw_feeds, draws=options.draws,
            reference=outputs.get(REFERENCE), reference_draws=draws.get(REFERENCE),
            scores=all_scores[0], on_step=on_step,
        )
    if options.save_run is not None:
        from rlparity.artifacts.saved_run import save_run

        on_step("saving the run")
        report.extra["saved_run"] = str(options.save_run)
        save_run(options.save_run, report, spec, feeds, outputs, draws, reference=reference_name,
                 tolerances=family.tolerances(), scores=all_scores[0], valid=all_valid[0])
    return Validation(report, ours, feeds.arrays, outputs)


def new_report(family: Family, ours: bytes | None, opset: int | None, inputs: dict) -> Report:
    """A Report with what every command states: the model, its I/O, our export, versions, host."""
    return Report(
        family=family.name,
        title=family.title,
        source=_source_facts(family),
        io_spec=family.io_spec().to_json(),
        graph_contents=family.graph_contents(),
        export={"opset": opset or family.default_opset, "sha256": _sha256(ours), "bytes": len(ours)} if ours else {},
        inputs=inputs,
        versions=library_versions(),
        host=host_info(),
    )


def _other_axes(shape: dict[str, int]) -> dict[str, int]:
    return {axis: size for axis, size in shape.items() if axis != "batch"}


def _shape_text(shape: dict[str, int]) -> str:
    return ", ".join(f"{axis} {size}" for axis, size in shape.items())


def _timed_runs(runtime: Runtime, feeds: dict[str, np.ndarray], repeats: int) -> tuple[dict, dict]:
    start = time.perf_counter()
    first = runtime.run(feeds)
    runtime.synchronize()
    first_ms = (time.perf_counter() - start) * 1e3
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        runtime.run(feeds)
        runtime.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    timing = {"first_call_ms": first_ms, "repeats": repeats}
    if times:
        timing.update(median_ms=float(np.median(times)), min_ms=float(np.min(times)))
    return first, timing


def _draw(runtime: Runtime, feeds: Feeds, names: list[str], draws: int) -> dict[str, np.ndarray]:
    """Sample every stochastic output ``draws`` times per element in one batched call."""
    out = runtime.run(feeds.tile(draws))
    return {n: out[n].reshape(draws, feeds.batch, *out[n].shape[1:]) for n in names if n in out}


def _row_summary(feeds: Feeds) -> dict[str, int]:
    summary: dict[str, int] = {}
    for row in feeds.rows:
        summary[row] = summary.get(row, 0) + 1
    return summary


def _sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def _source_facts(family: Family) -> dict:
    facts = {"path": str(family.source), "sha256": sha256_file(family.source) if family.source.is_file() else None}
    if family.source_note:
        facts["note"] = family.source_note
    step = getattr(family, "step", None)
    if step is not None:
        facts["step"] = step
    return facts


def reference_facts(path: Path, ours: bytes) -> dict:
    """Hash of the official export, and whether our graph is identical to it."""
    import onnx

    facts = {"sha256": sha256_file(path) if Path(path).is_file() else None}
    try:
        theirs = onnx.load(str(path), load_external_data=False)
        mine = onnx.load_from_string(ours)
        facts["graph_identical"] = theirs.graph == mine.graph
        facts["producer"] = f"{theirs.producer_name} {theirs.producer_version}".strip()
        facts["opset"] = next((o.version for o in theirs.opset_import if o.domain in ("", "ai.onnx")), None)
    except Exception as e:  # reported here; the ort-ref runtime reports its own failure
        facts["error"] = " ".join(str(e).split())[:200]
    return facts
