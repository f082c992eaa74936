"""Saved runs: one validation's inputs, every runtime's outputs and its metadata, on disk.

An accelerator host runs ``rlparity validate ... --save-run DIR``; a laptop later runs
``rlparity compare DIR [DIR ...]`` and judges it, with the same comparison rules and
tables as validate (as Polygraphy's ``--save-outputs`` / ``--load-outputs``).

    DIR/run.json              metadata: host, versions, runtimes, IOSpec, tolerances, digests
    DIR/inputs.npz            the inputs every runtime was fed
    DIR/outputs/<rt>.npz      each runtime's outputs
    DIR/draws/<rt>.npz        each runtime's repeated samples of its sampled outputs
    DIR/scores.npz            reference scores behind discrete actions (ties), when any
    DIR/valid.npz             elements to compare per output (padding excluded), when any

Arrays are read with ``allow_pickle=False`` and metadata as JSON: a saved run from an
untrusted host cannot run code here.
"""
from __future__ import annotations

import json
import platform
import re
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rlparity.artifacts.report import Report, RuntimeResult, dumps_json
from rlparity.errors import UsageError, UserError
from rlparity.spec import IOSpec, TensorSpec
from rlparity.validators.compare import DEFAULT_TOLERANCES, compare_outputs
from rlparity.validators.feeds import Feeds, digest_arrays

SCHEMA = "rlparity.run/1"
METADATA = "run.json"


# -- arrays ------------------------------------------------------------------------------------

def read_arrays(path: str | Path) -> dict[str, np.ndarray]:
    """The named arrays of an .npz file, never unpickling anything."""
    path = Path(path)
    if not path.is_file():
        raise UserError("no such file", path)
    try:
        loaded = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
        raise UserError(f"not a readable .npz archive: {_one_line(e)}", path) from None
    if isinstance(loaded, np.ndarray):
        raise UserError("a single .npy array; expected an .npz archive of named arrays", path)
    try:
        with loaded:
            return {name: loaded[name] for name in loaded.files}
    except (ValueError, OSError, EOFError, KeyError, zipfile.BadZipFile) as e:
        raise UserError(f"not a readable .npz archive: {_one_line(e)}", path) from None


def _write_arrays(path: Path, arrays: dict[str, np.ndarray]) -> dict[str, str]:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **{k: np.ascontiguousarray(v) for k, v in arrays.items()})
    return {"file": path.as_posix(), "digest": digest_arrays(arrays)}


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())[:200] or type(e).__name__


def _file_name(runtime: str) -> str:
    """``torch-npu:0`` -> ``torch-npu_0.npz``: portable file names."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", runtime) + ".npz"


# -- saving ------------------------------------------------------------------------------------

def prepare_dir(path: str | Path) -> Path:
    """Create the folder up front, so a bad path fails before minutes of validation."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserError("exists and is not a folder", path)
    if path.is_dir() and any(path.iterdir()) and not (path / METADATA).is_file():
        raise UserError("exists, is not empty and is not a saved run; choose a new folder", path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create the folder: {e.strerror or e}", path) from None
    return path


def save_run(path: str | Path, report: Report, spec: IOSpec, feeds: Feeds,
             outputs: dict[str, dict[str, np.ndarray]], draws: dict[str, dict[str, np.ndarray]], *,
             reference: str | None, tolerances: dict[str, tuple[float, float]],
             scores: dict[str, np.ndarray] | None = None, valid: dict[str, np.ndarray] | None = None) -> Path:
    """Write what ``validate`` computed: nothing is run again."""
    root = prepare_dir(path)
    try:
        def write(relative: str, arrays: dict[str, np.ndarray]) -> dict[str, str]:
            entry = _write_arrays(root / relative, arrays)
            entry["file"] = relative
            return entry

        runtimes = []
        for result in report.runtimes:
            entry = asdict(result)
            name = _file_name(result.name)
            entry["outputs"] = write(f"outputs/{name}", outputs[result.name]) if result.name in outputs else None
            entry["draws"] = write(f"draws/{name}", draws[result.name]) if draws.get(result.name) else None
            runtimes.append(entry)
        meta = {
            "schema": SCHEMA,
            "created": report.created,
            "command": report.command,
            "host": {**report.host, "hostname": platform.node()},
            "versions": report.versions,
            "reference_runtime": reference,
            "io_spec": {**spec.to_json(), "axes": dict(spec.axes)},
            "tolerances": {name: list(tol) for name, tol in tolerances.items()},
            "default_tolerances": {dtype: list(tol) for dtype, tol in DEFAULT_TOLERANCES.items()},
            "inputs": {**report.inputs, **write("inputs.npz", feeds.arrays), "rows_by_index": feeds.rows},
            "runtimes": runtimes,
            "scores": write("scores.npz", scores) if scores else None,
            "valid": write("valid.npz", {k: np.asarray(v) for k, v in valid.items()}) if valid else None,
            "report": report.to_json(),
        }
        (root / METADATA).write_text(dumps_json(meta))
    except OSError as e:
        raise UserError(f"cannot write the saved run: {e.strerror or e}", root) from None
    return root


# -- loading -----------------------------------------------------------------------------------

@dataclass
class SavedRun:
    path: Path
    meta: dict[str, Any]
    spec: IOSpec
    inputs: dict[str, np.ndarray]
    outputs: dict[str, dict[str, np.ndarray]]
    draws: dict[str, dict[str, np.ndarray]]
    runtimes: list[RuntimeResult]
    tolerances: dict[str, tuple[float, float]] = field(default_factory=dict)  # the family's, per output
    scores: dict[str, np.ndarray] | None = None
    valid: dict[str, np.ndarray] | None = None
    notes: list[str] = field(default_factory=list)  # e.g. a file changed since it was saved

    @property
    def reference(self) -> str | None:
        return self.meta.get("reference_runtime")

    @property
    def inputs_digest(self) -> str:
        return digest_arrays(self.inputs)


def load_run(path: str | Path) -> SavedRun:
    """A folder written by ``validate --save-run``; anything else is a one-line UserError."""
    root = Path(path)
    if not root.exists():
        raise UserError("no such folder", root)
    if not root.is_dir():
        raise UserError("not a saved run folder (expected the folder `rlparity validate --save-run` wrote)", root)
    meta_path = root / METADATA
    if not meta_path.is_file():
        raise UserError(f"not a saved rlparity run: no {METADATA} (write one with `rlparity validate --save-run`)", root)
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise UserError(f"unreadable {METADATA}: {_one_line(e)}", meta_path) from None
    if not isinstance(meta, dict) or meta.get("schema") != SCHEMA:
        found = meta.get("schema") if isinstance(meta, dict) else type(meta).__name__
        raise UserError(f"not a saved rlparity run: schema {found!r}, expected {SCHEMA!r}", meta_path)
    try:
        return _load(root, meta)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise UserError(f"malformed {METADATA}: {type(e).__name__} {_one_line(e)}", meta_path) from None


def _load(root: Path, meta: dict) -> SavedRun:
    notes: list[str] = []

    def arrays(entry: dict | None) -> dict[str, np.ndarray] | None:
        if entry is None:
            return None
        file = (root / entry["file"]).resolve()
        if root.resolve() not in file.parents:
            raise UserError(f"{METADATA} points outside the run folder: {entry['file']!r}", root)
        loaded = read_arrays(file)
        if digest_arrays(loaded) != entry.get("digest"):
            notes.append(f"{entry['file']} changed since it was saved (its digest differs from {METADATA})")
        return loaded

    spec = spec_from_json(meta["io_spec"])
    if not meta["inputs"]:
        raise ValueError("it names no inputs file")
    if not isinstance(meta.get("report", {}), dict):
        raise TypeError("its report is not an object")
    tolerances = {str(name): (float(atol), float(rtol)) for name, (atol, rtol) in (meta.get("tolerances") or {}).items()}
    inputs = arrays(meta["inputs"])
    outputs, draws, runtimes = {}, {}, []
    for entry in meta["runtimes"]:
        fields = {k: entry[k] for k in ("name", "kind", "device", "available", "reason", "error", "info", "timing") if k in entry}
        runtimes.append(RuntimeResult(**fields))
        if entry.get("outputs"):
            outputs[entry["name"]] = arrays(entry["outputs"])
        if entry.get("draws"):
            draws[entry["name"]] = arrays(entry["draws"])
    return SavedRun(root, meta, spec, inputs, outputs, draws, runtimes, tolerances,
                    scores=arrays(meta.get("scores")), valid=arrays(meta.get("valid")), notes=notes)


def spec_from_json(data: dict) -> IOSpec:
    def tensor(t: dict) -> TensorSpec:
        t = dict(t)
        for key in ("shape", "segments", "value_range"):
            if t.get(key) is not None:
                t[key] = tuple(t[key])
        return TensorSpec(**t)

    axes = data.get("axes") or {"batch": 1}
    return IOSpec(tuple(tensor(t) for t in data["inputs"]), tuple(tensor(t) for t in data["outputs"]), dict(axes))


# -- comparing ---------------------------------------------------------------------------------

def compare_runs(runs: list[SavedRun], reference: str | None = None, atol: float | None = None,
                 rtol: float | None = None) -> Report:
    """Compare saved runs as validate would have: one run against its own reference, or
    every runtime of the later runs against the first run's reference runtime."""
    first = runs[0]
    ref_name = reference or first.reference or next(iter(first.outputs), None)
    if ref_name not in first.outputs:
        have = ", ".join(first.outputs) or "none"
        raise UsageError(f"the first run has no outputs of runtime {ref_name!r} (it has: {have})")
    for run in runs[1:]:
        if run.inputs_digest != first.inputs_digest:
            raise UserError(f"its inputs ({run.inputs_digest[:23]}...) are not those of {first.path} "
                            f"({first.inputs_digest[:23]}...); save both runs with the same --batch and --seed", run.path)

    labels = _labels(runs)
    saved = first.meta.get("report", {})
    report = Report(
        family=saved.get("family", "unknown"), title=saved.get("title", "saved run"),
        source=saved.get("source", {"path": str(first.path)}), io_spec=first.spec.to_json(),
        graph_contents=saved.get("graph_contents", {}), export=saved.get("export", {}),
        reference_export=saved.get("reference_export"), inputs=saved.get("inputs", {}),
        versions=first.meta.get("versions", {}), host=first.meta.get("host", {}),
    )
    tolerances = _tolerances(first, atol, rtol)
    single = len(runs) == 1
    for i, run in enumerate(runs):
        for result in run.runtimes:
            if single or i > 0 or result.name == ref_name:
                report.runtimes.append(RuntimeResult(**{**asdict(result), "name": labels[i](result.name)}))
        report.notes += [note if single else f"{run.path}: {note}" for note in run.notes]

    if single:
        pairs = [(ref_name, name) for name in first.outputs if name != ref_name]
        if "ort-cpu" in first.outputs and "ort-ref" in first.outputs and ref_name != "ort-ref":
            pairs.append(("ort-ref", "ort-cpu"))
        pairs = [(first, a, first, b) for a, b in pairs]
    else:
        pairs = [(first, ref_name, run, name) for run in runs[1:] for name in run.outputs]
    index = {id(run): i for i, run in enumerate(runs)}
    for ref_run, a, cand_run, b in pairs:
        comparison = compare_outputs(
            first.spec, ref_run.outputs[a], cand_run.outputs[b],
            reference_name=labels[index[id(ref_run)]](a), candidate_name=labels[index[id(cand_run)]](b),
            tolerances=tolerances, scores=first.scores,
            reference_draws=ref_run.draws.get(a), candidate_draws=cand_run.draws.get(b), valid=first.valid,
        )
        report.comparisons.append(comparison.to_json())
    report.extra["runs"] = [{
        "path": str(run.path), "created": run.meta.get("created"), "command": run.meta.get("command"),
        "host": run.meta.get("host", {}), "versions": run.meta.get("versions", {}),
        "inputs_digest": run.inputs_digest, "runtimes": list(run.outputs),
    } for run in runs]
    report.extra["compare"] = {"reference": labels[0](ref_name), "atol": atol, "rtol": rtol}
    return report


def _labels(runs: list[SavedRun]):
    """Runtime names as shown: plain for one run, ``name@folder`` across several."""
    if len(runs) == 1:
        return [lambda name: name]
    folders = [run.path.resolve().name for run in runs]
    tags = folders if len(set(folders)) == len(folders) else [f"run{i + 1}" for i in range(len(runs))]
    return [(lambda name, tag=tag: f"{name}@{tag}") for tag in tags]


def _tolerances(run: SavedRun, atol: float | None, rtol: float | None) -> dict[str, tuple[float, float]]:
    """The family's per-output tolerances saved with the run, with --atol/--rtol on top."""
    saved = run.tolerances
    if atol is None and rtol is None:
        return dict(saved)
    result = {}
    for t in run.spec.outputs:
        base_atol, base_rtol = saved.get(t.name, DEFAULT_TOLERANCES.get(t.dtype, DEFAULT_TOLERANCES["float32"]))
        result[t.name] = (base_atol if atol is None else atol, base_rtol if rtol is None else rtol)
    return result
