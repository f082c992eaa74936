"""The Report: everything a validation established, as JSON.

JSON is the source of truth: the rich tables, the model card and offline comparisons
all render from it, so the evidence shown can never drift from what was measured.
"""
from __future__ import annotations

import datetime as _dt
import json
import sys
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from rlparity.errors import UserError

SCHEMA = "rlparity.report/1"


@dataclass
class RuntimeResult:
    name: str
    kind: str
    device: str
    available: bool = True
    reason: str = ""           # why it is unavailable
    error: str | None = None   # why it failed after starting
    info: dict[str, Any] = field(default_factory=dict)
    timing: dict[str, Any] = field(default_factory=dict)

    @property
    def ran(self) -> bool:
        return self.available and self.error is None


@dataclass
class Report:
    family: str
    title: str
    source: dict[str, Any]
    io_spec: dict[str, Any]
    graph_contents: dict[str, str] = field(default_factory=dict)
    export: dict[str, Any] = field(default_factory=dict)
    reference_export: dict[str, Any] | None = None
    inputs: dict[str, Any] = field(default_factory=dict)
    runtimes: list[RuntimeResult] = field(default_factory=list)
    comparisons: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    host: dict[str, str] = field(default_factory=dict)
    command: str = ""
    created: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    schema: str = SCHEMA
    # Sections that later commands add (bench, rollout, ...), keyed by their name.
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        """pass: every comparison passed; mismatch: one failed; incomplete: a runtime failed.

        The comparisons of a precision sweep (``extra["precision"]``) count too.
        """
        sweep = self.extra.get("precision") or []
        comparisons = self.comparisons + [c for entry in sweep for c in entry.get("comparisons", [])]
        if any(not c["passed"] for c in comparisons):
            return "mismatch"
        if any(r.available and r.error for r in self.runtimes) or not self.comparisons:
            return "incomplete"
        if any(entry.get("error") for entry in sweep):
            return "incomplete"
        return "pass"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["verdict"] = self.verdict
        return data

    def dumps(self) -> str:
        return dumps_json(self.to_json())

    def write(self, path: str | Path) -> None:
        """Write the JSON; ``-`` means standard output."""
        write_output(self.dumps(), path)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Report":
        data = dict(data)
        data.pop("verdict", None)
        data["runtimes"] = [RuntimeResult(**r) for r in data.get("runtimes", [])]
        return cls(**data)

    @classmethod
    def read(cls, path: str | Path) -> "Report":
        try:
            data = json.loads(Path(path).read_text())
            if data.get("schema") != SCHEMA:
                raise ValueError(f"schema {data.get('schema')!r}, expected {SCHEMA!r}")
            report = cls.from_json(data)
            for item in (report, *report.runtimes):
                _check_field_types(item)
            return report
        except FileNotFoundError:
            raise UserError("no such file", path) from None
        except (OSError, ValueError, TypeError, AttributeError) as e:
            raise UserError(f"not an rlparity report: {' '.join(str(e).split())[:160]}", path) from None


def _check_field_types(item: Any) -> None:
    """A dataclass read from JSON holds the container types its annotations name (a dict,
    a list, a str, a bool, or None where allowed): what every renderer relies on."""
    kinds = {"dict": dict, "list": list, "str": str, "bool": bool}
    for f in fields(item):
        kind = kinds.get(f.type.split("[")[0].split(" ")[0])  # "dict[str, Any] | None" -> dict
        value = getattr(item, f.name)
        if kind is not None and not isinstance(value, kind) and not (value is None and "None" in f.type):
            raise ValueError(f"{f.name} is {type(value).__name__}, expected {f.type}")


def write_output(text: str, path: str | Path) -> None:
    """Write ``text`` to ``path`` (folders created), or to standard output for ``-``."""
    if str(path) == "-":
        sys.stdout.write(text)
        return
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
    except OSError as e:
        raise UserError(f"cannot write: {e.strerror or e}", path) from None


def dumps_json(data: Any) -> str:
    return json.dumps(data, indent=2, default=_json_default) + "\n"


def _json_default(value: Any) -> Any:
    import numpy as np

    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot serialise {type(value).__name__}")


def library_versions() -> dict[str, str]:
    """Versions of everything that can change a number: python, torch, onnx, ORT, numpy."""
    import platform

    dists = ["rlparity", "torch", "onnx", "onnxruntime", "numpy"] + (["torch_npu"] if "torch_npu" in sys.modules else [])
    return {"python": platform.python_version(), **installed_versions(dists)}


def installed_versions(dists) -> dict[str, str]:
    """The version of each distribution in ``dists`` that is installed."""
    from importlib import metadata

    versions = {}
    for dist in dists:
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return versions
