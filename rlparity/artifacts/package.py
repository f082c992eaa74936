"""`rlparity package`: a folder holding a converted model and the evidence that it is exact.

    README.md          the model card, rendered from report.json (card.py)
    <model>.onnx       the export that was validated (its sha256 is in the report)
    report.json        the validation, plus sections merged from other reports (bench, rollout, ...)
    inputs.npz         the inputs every runtime received
    outputs.npz        what each runtime returned, keyed "runtime/output"
    bench.png          the latency plot, when a merged bench section has one
    environment.json   every installed library and its version, the host, the devices
    MANIFEST.sha256    sha256 of every other file, in `sha256sum -c` format

The folder is built beside its destination and moved into place only when complete, so
a failure never leaves half a package, nor damages the one that was there.
"""
from __future__ import annotations

import io
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from rlparity.artifacts.card import (
    PACKAGE_FILES,
    model_name,
    render_card,
    section_problem,
)
from rlparity.artifacts.report import Report
from rlparity.converters.safe_load import sha256_file
from rlparity.errors import UserError
from rlparity.validators.validate import Validation

MANIFEST = "MANIFEST.sha256"
# Sections of extra that belong to the run that made a report, not to what it measured.
RUN_SECTIONS = {"outputs_digest", "package"}
PLOT_SUFFIXES = (".png", ".svg", ".jpg", ".jpeg", ".webp")
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass
class Package:
    folder: Path
    files: dict[str, int]                 # relative path -> size in bytes
    report: Report
    notes: list[str] = field(default_factory=list)


@dataclass
class MergedReport:
    path: Path
    report: Report
    sections: list[str]


def read_reports(paths: list[Path], source_sha256: str | None) -> tuple[list[MergedReport], list[str]]:
    """Reports whose sections (bench, rollout, precision, ...) go into the package.

    Each must be about the same checkpoint; two reports may not hold the same section.
    Read before validating, so that a bad report fails fast.
    """
    merged: list[MergedReport] = []
    notes: list[str] = []
    seen: dict[str, Path] = {}
    for path in paths:
        report = Report.read(path)
        theirs = report.source.get("sha256")
        if source_sha256 and theirs and theirs != source_sha256:
            raise UserError(f"is a report on another checkpoint (sha256 {theirs[:12]}..., this one is "
                            f"{source_sha256[:12]}...)", path)
        sections = [name for name in report.extra if name not in RUN_SECTIONS]
        if not sections:
            raise UserError("holds no section to merge (bench, rollout, precision ...); the validation "
                            "itself is run by `rlparity package`", path)
        for name in sections:
            if name in seen:
                raise UserError(f"holds a {name!r} section, and so does {seen[name]}: pass only one", path)
            problem = section_problem(name, report.extra[name])
            if problem:
                raise UserError(f"its {name!r} section is not in the shape rlparity writes ({problem})", path)
            seen[name] = path
        if report.comparisons:
            ran = ", ".join(r.name for r in report.runtimes if r.ran)
            notes.append(f"{path}: its sections {', '.join(sections)} are merged; its own validation ({ran}) is "
                         f"not: the package holds the validation run now (use --device to include an accelerator)")
        if "bench" in sections:
            _bench_plot(report.extra["bench"], path)  # fail now, not after the validation
        merged.append(MergedReport(Path(path), report, sections))
    return merged, notes


def _bench_plot(bench: dict[str, Any], report_path: Path) -> Path | None:
    """The bench plot a report names: a relative path inside the report's folder, nothing else."""
    name = bench.get("plot") if isinstance(bench, dict) else None
    if not name:
        return None
    if not isinstance(name, str) or not _safe_relative(name):
        raise UserError(f"its bench plot must be a path relative to the report, inside its folder, not {name!r}",
                        report_path)
    if PurePosixPath(name).suffix.lower() not in PLOT_SUFFIXES:
        raise UserError(f"its bench plot must be an image ({', '.join(PLOT_SUFFIXES)}), not {name!r}", report_path)
    folder = Path(report_path).parent
    plot = folder / name
    if plot.is_symlink() or not plot.is_file():
        raise UserError(f"the bench plot it names, {name}, is not a file beside it", report_path)
    if folder.resolve() not in plot.resolve().parents:  # a linked folder on the way
        raise UserError(f"the bench plot it names, {name}, lies outside its folder (through a symbolic link)",
                        report_path)
    return plot


def check_destination(folder: Path, force: bool) -> None:
    """Refuse a non-empty folder without --force, and anything but a package even with it."""
    if folder.exists() and not folder.is_dir():
        raise UserError("exists and is not a folder", folder)
    if not folder.is_dir() or not any(folder.iterdir()):
        return
    if not force:
        raise UserError("exists and is not empty; pass --force to replace it", folder)
    if not (folder / MANIFEST).is_file():
        raise UserError(f"is not an rlparity package (no {MANIFEST}); refusing to replace it, even with --force",
                        folder)


def check_base_model(base_model: str | None) -> None:
    if base_model is not None and not _REPO_ID.match(base_model):
        raise UserError(f"--base-model must be a Hub model id such as owner/name, not {base_model!r}")


def build_package(validation: Validation, folder: str | Path, *, merged: list[MergedReport] = (),
                  base_model: str | None = None, force: bool = False, command: str = "",
                  notes: list[str] = ()) -> Package:
    folder = Path(folder)
    check_destination(folder, force)
    check_base_model(base_model)
    report = validation.report
    onnx_name = f"{model_name(report.to_json())}.onnx"
    files: dict[str, bytes | Path] = {onnx_name: validation.export}

    # Sections measured by other commands, and where each was measured.
    provenance = []
    for m in merged:
        for name in m.sections:
            section = json.loads(json.dumps(m.report.extra[name]))  # a copy, JSON-clean
            if name == "bench":
                plot = _bench_plot(section, m.path)
                if plot is not None:
                    section["plot"] = plot.name
                    files[plot.name] = plot
            report.extra[name] = section
        provenance.append({"file": m.path.name, "sections": m.sections, "command": m.report.command,
                           "created": m.report.created, "host": m.report.host, "versions": m.report.versions})
    report.extra["package"] = {"command": command, "folder": str(folder), "onnx": onnx_name,
                               "base_model": base_model, "merged": provenance}

    data = report.to_json()
    card_files = {onnx_name: "the ONNX export that was validated", **PACKAGE_FILES}
    if "plot" in data["extra"].get("bench", {}):
        card_files[data["extra"]["bench"]["plot"]] = "latency against batch size, per runtime"
    files["README.md"] = render_card(data, onnx_name, base_model=base_model, files=card_files).encode()
    files["report.json"] = report.dumps().encode()
    files["inputs.npz"] = npz_bytes(validation.inputs)
    files["outputs.npz"] = npz_bytes({f"{runtime}/{name}": array for runtime, out in validation.outputs.items()
                                      for name, array in out.items()})
    files["environment.json"] = (json.dumps(environment(report, merged), indent=2) + "\n").encode()

    parent = folder.resolve().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=parent))
        staging.chmod(0o755)  # mkdtemp's 0700 would otherwise stay on the package
    except OSError as e:
        raise UserError(f"cannot write: {e.strerror or e}", folder) from None
    try:
        sizes = {}
        for name, content in files.items():
            target = staging / name
            if isinstance(content, Path):
                shutil.copyfile(content, target)
            else:
                target.write_bytes(content)
            sizes[name] = target.stat().st_size
        manifest = write_manifest(staging)
        sizes[MANIFEST] = manifest.stat().st_size
        _move_into_place(staging, folder)
    except OSError as e:
        shutil.rmtree(staging, ignore_errors=True)
        raise UserError(f"cannot write: {e.strerror or e}", folder) from None
    return Package(folder, dict(sorted(sizes.items())), report, list(notes))


def _move_into_place(staging: Path, folder: Path) -> None:
    """Swap the finished package in; a replaced package is removed only after the swap."""
    old = None
    if folder.exists():
        old = folder.with_name(f".{folder.name}.old-{os.getpid()}")
        folder.rename(old)
    try:
        staging.rename(folder)
    except OSError:
        if old is not None:
            old.rename(folder)
        raise
    if old is not None:
        shutil.rmtree(old)


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def environment(report: Report, merged: list[MergedReport]) -> dict[str, Any]:
    """Every installed distribution with its version, the host and the devices of the run."""
    from importlib import metadata

    packages = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            packages[name] = dist.version
    return {
        "versions": report.versions,
        "host": report.host,
        "devices": [r.info or {"name": r.name, "device": r.device} for r in report.runtimes if r.available],
        "packages": dict(sorted(packages.items(), key=lambda kv: kv[0].lower())),
        "merged_reports": [{"file": m.path.name, "sections": m.sections, "host": m.report.host,
                            "versions": m.report.versions} for m in merged],
    }


# -- the manifest --------------------------------------------------------------------
def write_manifest(folder: Path) -> Path:
    """MANIFEST.sha256 for every file under ``folder``, as `sha256sum` writes it."""
    lines = [f"{sha256_file(folder / rel)}  {rel}" for rel in _walk(folder) if rel != MANIFEST]
    manifest = folder / MANIFEST
    manifest.write_text("\n".join(lines) + "\n")
    return manifest


def verify_package(folder: str | Path) -> dict[str, tuple[int, str]]:
    """Check a package against its manifest: {relative path: (size, sha256)}, manifest included.

    Refuses a folder whose files changed, went missing or were added since packaging,
    symbolic links, and manifest entries that point outside the folder.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError("no such folder", folder)
    manifest = folder / MANIFEST
    if not manifest.is_file() or manifest.is_symlink():
        raise UserError(f"is not an rlparity package: no {MANIFEST} (make one with `rlparity package`)", folder)
    listed: dict[str, str] = {}
    for number, line in enumerate(manifest.read_text(errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        match = re.fullmatch(r"([0-9a-f]{64}) [ *](.+)", line)
        if not match or not _safe_relative(match.group(2)):
            raise UserError(f"line {number} is not '<sha256>  <relative path>'", manifest)
        listed[match.group(2)] = match.group(1)
    present = set(_walk(folder)) - {MANIFEST}
    unlisted = sorted(present - set(listed))
    if unlisted:
        raise UserError(f"is not in {MANIFEST}: package again, or remove it", folder / unlisted[0])
    files = {}
    for rel, expected in sorted(listed.items()):
        path = folder / rel
        if rel not in present:
            raise UserError(f"is listed in {MANIFEST} but missing", path)
        if sha256_file(path) != expected:
            raise UserError(f"does not match its sha256 in {MANIFEST} (changed after packaging?)", path)
        files[rel] = (path.stat().st_size, expected)
    files[MANIFEST] = (manifest.stat().st_size, sha256_file(manifest))
    return files


def _safe_relative(rel: str) -> bool:
    p = PurePosixPath(rel)
    return not p.is_absolute() and "\\" not in rel and all(part not in ("", ".", "..") for part in rel.split("/"))


def _walk(folder: Path) -> list[str]:
    """Every file under ``folder`` as a relative POSIX path; symbolic links are refused."""
    found = []
    for root, dirs, names in os.walk(folder):
        for name in dirs + names:
            path = Path(root) / name
            if path.is_symlink():
                raise UserError("is a symbolic link; a package holds plain files only", path)
        for name in names:
            found.append((Path(root) / name).relative_to(folder).as_posix())
    return sorted(found)
