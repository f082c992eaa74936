"""The one interface every runtime sits behind, and the names users pick them by.

    runtime.available() -> (ok, reason)   can it run on this host at all
    runtime.prepare(model)                load the model (an ONNX file, a torch module)
    runtime.run(feeds) -> {name: array}   one call, outputs as numpy on the host
    runtime.close()                       release it (safe to call twice)

Names: ``torch-cpu`` (the rebuild: the reference), ``ort-cpu`` (our export in
onnxruntime), ``ort-ref`` (the library's own export in onnxruntime), ``torch-<device>``
for an accelerator (``torch-cuda:0``, ``torch-npu:1``).
"""
from __future__ import annotations

import platform
from typing import Any

import numpy as np

REFERENCE = "torch-cpu"
OURS = "ort-cpu"
OFFICIAL = "ort-ref"


class Runtime:
    name: str
    kind: str    # "torch" or "onnxruntime"
    device: str  # where the computation happens, e.g. "cpu", "cuda:0"

    def available(self) -> tuple[bool, str]:
        return True, ""

    def prepare(self, model: Any) -> None:
        raise NotImplementedError

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def synchronize(self) -> None:
        """Wait for queued device work, so that timings measure the work itself."""

    def close(self) -> None:
        pass

    def info(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "device": self.device}


def host_info() -> dict[str, str]:
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
    }


def runtime_for_device(device: str) -> str:
    """The runtime name for ``--device``: ``cuda`` -> ``torch-cuda:0``, ``cpu`` -> ``torch-cpu``."""
    device = device.strip().lower()
    if device.partition(":")[0] == "cpu":
        return REFERENCE
    if ":" not in device:
        device += ":0"
    return f"torch-{device}"


def choose_runtimes(requested: list[str] | None, device: str | None, default: list[str]) -> list[str]:
    """The runtimes a command runs: those asked for (or ``default``), plus ``--device``'s."""
    names = list(dict.fromkeys(requested)) if requested else list(default)
    if device and runtime_for_device(device) not in names:
        names.append(runtime_for_device(device))
    for name in names:
        if name not in (OURS, OFFICIAL) and not name.startswith("torch-"):
            from rlparity.errors import UsageError

            raise UsageError(f"unknown runtime {name!r}: expected torch-cpu, ort-cpu, ort-ref or torch-<device> "
                             "(torch-cuda:0, torch-npu:0)")
    return names
