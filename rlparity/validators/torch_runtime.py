"""PyTorch on the CPU or on an accelerator (CUDA, or Ascend NPU through torch_npu).

One code path for every device: tensors go to ``torch.device(name)`` and synchronisation
goes through the device's backend module (``torch.cuda``, ``torch.npu``), which every
torch release that NPU hosts run provides. torch_npu is imported only
when an ``npu`` device is asked for; without it, the reason is stated, never a traceback.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from rlparity.errors import AcceleratorUnavailable
from rlparity.spec import IOSpec
from rlparity.validators.runtimes import Runtime


def parse_device(device: str) -> tuple[str, int | None]:
    """``"npu:1"`` -> ``("npu", 1)``; ``"cpu"`` -> ``("cpu", None)``."""
    kind, _, index = device.strip().lower().partition(":")
    if not kind.isidentifier() or (index and not index.isdigit()):
        raise AcceleratorUnavailable(f"cannot read device {device!r}: expected cpu, cuda[:N] or npu[:N]")
    return kind, (int(index) if index else (None if kind == "cpu" else 0))


def device_status(device: str) -> tuple[bool, str]:
    """Whether ``device`` can be used here, and if not, what is missing."""
    import torch

    kind, index = parse_device(device)
    if kind == "cpu":
        return True, ""
    if kind == "npu":
        try:
            import torch_npu  # noqa: F401  (registers the npu device with torch)
        except ImportError:
            return False, "torch_npu is not installed (pip install torch_npu, with Ascend CANN)"
        except Exception as e:  # torch_npu raises various errors when CANN is missing
            return False, f"torch_npu cannot load: {' '.join(str(e).split())[:160]} (is CANN installed and sourced?)"
        backend = getattr(torch, "npu", None)
        if backend is None or not backend.is_available():
            return False, "torch_npu is installed but no NPU is visible (check npu-smi info and drivers)"
        count = backend.device_count()
    elif kind == "cuda":
        if not torch.cuda.is_available():
            reason = "this torch build has no CUDA" if torch.version.cuda is None else "no CUDA device is visible"
            return False, reason
        count = torch.cuda.device_count()
    else:
        return False, f"unknown device type {kind!r}: expected cpu, cuda or npu"
    if index is not None and index >= count:
        return False, f"{kind}:{index} does not exist ({count} {kind} device(s) visible)"
    return True, ""


class TorchRuntime(Runtime):
    kind = "torch"

    def __init__(self, spec: IOSpec, device: str = "cpu", seed: int = 0):
        kind, index = parse_device(device)
        self.spec = spec  # the module takes inputs and returns outputs in its order
        self.device = kind if index is None else f"{kind}:{index}"
        self.name = f"torch-{self.device}"
        self.seed = seed  # sampled outputs draw from torch's generator: seeded per call
        # Seeding costs ~80 us a call, as much as a small policy's forward: only when sampled.
        self.samples = any(t.role == "stochastic" for t in spec.outputs)
        self.module = None

    def available(self) -> tuple[bool, str]:
        return device_status(self.device)

    def prepare(self, model: Any) -> None:
        import copy

        import torch

        ok, reason = self.available()
        if not ok:
            raise AcceleratorUnavailable(f"{self.device}: {reason}")
        # The CPU reference keeps the family's module; other devices get their own copy.
        self.module = model if self.device == "cpu" else copy.deepcopy(model).to(torch.device(self.device))
        self.module.eval()

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch

        device = torch.device(self.device)
        args = [torch.from_numpy(np.ascontiguousarray(feeds[n])).to(device) for n in self.spec.input_names]
        if self.samples:
            torch.manual_seed(self.seed)
        with torch.inference_mode():
            outputs = self.module(*args)
        return {n: o.detach().cpu().numpy() for n, o in zip(self.spec.output_names, outputs)}

    def synchronize(self) -> None:
        import torch

        if self.device != "cpu":
            # torch.cuda / torch.npu: works on the older torch releases NPU hosts run.
            kind, index = parse_device(self.device)
            getattr(torch, kind).synchronize(index)

    def close(self) -> None:
        self.module = None

    def info(self) -> dict[str, Any]:
        import torch

        info = super().info()
        info["torch"] = torch.__version__
        if self.device != "cpu":
            try:
                kind, index = parse_device(self.device)
                backend = getattr(torch, kind)
                info["device_name"] = backend.get_device_name(index)
            except Exception:  # a name is nice to have, never worth failing for
                pass
        return info
