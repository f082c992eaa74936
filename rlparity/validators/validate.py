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
from rlparity.errors import UsageError
from rlparity.spec import IOSpec
from rlparity.validators.compare import compare_outputs
from rlparity.validators.feeds import Feeds, digest_arrays
from rlparity.validators.ort import OrtRuntime
from rlparity.validators.runtimes import OFFICIAL, OURS, REFERENCE, Runtime, host_info, runtime_for_device
from rlparity.validators.torch_runtime import TorchRuntime


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


def runtime_names(family: Family, options: ValidateOptions) -> list[str]:
    if options.runtimes:
        names = list(dict.fromkeys(options.runtimes))
    else:
        names = [REFERENCE, OURS]
        if options.reference or family.reference_export():
            names.append(OFFICIAL)
    if options.device:
        device_runtime = runtime_for_device(options.device)
        if device_runtime not in names:
            names.append(device_runtime)
    return names


def make_runtime(name: str, spec: IOSpec, seed: int) -> Runtime:
    if name in (OURS, OFFICIAL):
        return OrtRuntime(name)
    if name.startswith("torch-"):
        return TorchRuntime(spec, name.removeprefix("torch-"), seed=seed)
    raise UsageError(f"unknown runtime {name!r}: expected torch-cpu, ort-cpu, ort-ref or torch-<device> (torch-cuda:0, torch-npu:0)")


def validate(family: Family, options: ValidateOptions, on_step: Callable[[str], None] = lambda _: None) -> Report:
    spec = family.io_spec()
    names = runtime_names(family, options)
    runtimes = {name: make_runtime(name, spec, options.seed) for name in names}  # usage errors first
    reference_path = options.reference or family.reference_export()
    if OFFICIAL in names and reference_path is None:
        raise UsageError("runtime ort-ref needs the official export: none was found beside the checkpoint; pass --ref FILE.onnx")

    on_step("exporting")
    ours = family.export(opset=options.opset)
    feeds = family.make_feeds(options.batch, options.seed)
    stochastic = [t.name for t in spec.outputs if t.role == "stochastic"]
    draw_feeds = feeds.take(min(options.draw_rows, feeds.batch)) if stochastic else None
    models = {OURS: ours, OFFICIAL: reference_path}

    report = Report(
        family=family.name,
        title=family.title,
        source=_source_facts(family),
        io_spec=spec.to_json(),
        graph_contents=family.graph_contents(),
        export={"opset": options.opset or family.default_opset, "sha256": _sha256(ours), "bytes": len(ours)},
        inputs={"seed": options.seed, "batch": feeds.batch, "rows": _row_summary(feeds), "digest": feeds.digest,
                "draws": options.draws if stochastic else 0, "draw_rows": draw_feeds.batch if draw_feeds else 0},
        versions=library_versions(),
        host=host_info(),
    )
    if reference_path is not None:
        report.reference_export = {"path": str(reference_path), **_reference_facts(reference_path, ours)}

    outputs: dict[str, dict[str, np.ndarray]] = {}
    draws: dict[str, dict[str, np.ndarray]] = {}
    for name, runtime in runtimes.items():
        on_step(f"running {name}")
        result = RuntimeResult(name, runtime.kind, runtime.device)
        report.runtimes.append(result)
        result.available, result.reason = runtime.available()
        if not result.available:
            continue
        model = models.get(name, family.build_torch() if runtime.kind == "torch" else None)
        try:
            runtime.prepare(model)
            result.info = runtime.info()
            outputs[name], result.timing = _timed_runs(runtime, feeds.arrays, options.repeats)
            if draw_feeds is not None:
                draws[name] = _draw(runtime, draw_feeds, stochastic, options.draws)
        except Exception as e:  # recorded, so that the other runtimes' results survive
            result.error = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
        finally:
            runtime.close()

    on_step("comparing")
    scores = family.scores(feeds.arrays)
    reference_name = REFERENCE if REFERENCE in outputs else next(iter(outputs), None)
    pairs = [(reference_name, name) for name in outputs if name != reference_name]
    if OURS in outputs and OFFICIAL in outputs and reference_name != OFFICIAL:
        pairs.append((OFFICIAL, OURS))
    for pair in options.extra_pairs or []:
        if pair[0] in outputs and pair[1] in outputs and pair[0] != pair[1] and pair not in pairs:
            pairs.append(pair)
    for ref, cand in pairs:
        comparison = compare_outputs(
            spec, outputs[ref], outputs[cand], reference_name=ref, candidate_name=cand,
            tolerances=family.tolerances(), scores=scores,
            reference_draws=draws.get(ref), candidate_draws=draws.get(cand),
            valid=family.valid_elements(feeds.arrays),
        )
        report.comparisons.append(comparison.to_json())
    report.extra["outputs_digest"] = {name: digest_arrays(out) for name, out in outputs.items()}
    if options.dtypes:
        from rlparity.validators.precision import precision_sweep

        report.extra["precision"] = precision_sweep(
            family, options.dtypes, options.device or "cpu", feeds, seed=options.seed,
            draw_feeds=draw_feeds, draws=options.draws,
            reference=outputs.get(REFERENCE), reference_draws=draws.get(REFERENCE), scores=scores,
            on_step=on_step,
        )
    return report


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


def _reference_facts(path: Path, ours: bytes) -> dict:
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
