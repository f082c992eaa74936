"""PyTorch on the CPU or on an accelerator (CUDA, or Ascend NPU through torch_npu).

One code path for every device: tensors go to ``torch.device(name)`` and synchronisation
goes through the device's backend module (``torch.cuda``, ``torch.npu``), which every
torch release that NPU hosts run provides. torch_npu is imported only
when an ``npu`` device is asked for; without it, the reason is stated, never a traceback.

Lower precisions (``dtype="float16"`` / ``"bfloat16"``) cast the rebuild and its float
inputs, except the modules the family names as keeping float32 (ML-Agents' observation
normalizers, whose accumulated variance overflows float16): those keep float32 weights,
get float32 inputs and hand their output back in the lower precision. Float outputs are
returned as float32, so they compare directly with the float32 reference.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from rlparity.errors import AcceleratorUnavailable, UsageError
from rlparity.spec import IOSpec
from rlparity.validators.runtimes import Runtime

DTYPES = ("float32", "float16", "bfloat16")
_DTYPE_ALIASES = {"fp32": "float32", "float": "float32", "fp16": "float16", "half": "float16", "bf16": "bfloat16"}


def parse_dtype(name: str) -> str:
    """``"fp16"`` -> ``"float16"``; an unknown name is a usage error."""
    key = name.strip().lower()
    key = _DTYPE_ALIASES.get(key, key)
    if key not in DTYPES:
        raise UsageError(f"unknown dtype {name!r}: expected one of {', '.join(DTYPES)}")
    return key


def parse_device(device: str) -> tuple[str, int | None]:
    """``"npu:1"`` -> ``("npu", 1)``; ``"cpu"`` and ``"cpu:0"`` -> ``("cpu", None)``."""
    kind, _, index = device.strip().lower().partition(":")
    if not kind.isidentifier() or (index and not index.isdigit()):
        raise AcceleratorUnavailable(f"cannot read device {device!r}: expected cpu, cuda[:N] or npu[:N]")
    if kind == "cpu":  # one CPU device, however it is numbered
        return kind, None
    return kind, int(index) if index else 0


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


def cast_module(module, dtype, keep_float32: tuple[str, ...] | list[str] = ()) -> None:
    """Cast ``module``'s floating parameters and buffers to ``dtype`` in place, except
    inside the submodules named in ``keep_float32``: those keep their float32 tensors,
    receive float32 inputs and return their outputs in ``dtype`` (forward hooks)."""
    import torch

    kept = [module.get_submodule(name) for name in keep_float32]
    inside_kept = {id(m) for k in kept for m in k.modules()}
    for m in module.modules():
        if id(m) in inside_kept:
            continue
        for p in m.parameters(recurse=False):
            if p.is_floating_point():
                p.data = p.data.to(dtype)
        for key, b in list(m.named_buffers(recurse=False)):
            if b.is_floating_point():
                setattr(m, key, b.to(dtype))
    for k in kept:
        k.register_forward_pre_hook(lambda _m, args: _cast_floats(args, torch.float32))
        k.register_forward_hook(lambda _m, _args, out: _cast_floats(out, dtype))


def _cast_floats(value, dtype):
    """Floating tensors in ``value`` (a tensor, or tuples and lists of them) cast to ``dtype``."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() else value
    if isinstance(value, (tuple, list)):
        return type(value)(_cast_floats(v, dtype) for v in value)
    return value


class TorchRuntime(Runtime):
    kind = "torch"

    def __init__(self, spec: IOSpec, device: str = "cpu", seed: int = 0, dtype: str = "float32",
                 keep_float32: tuple[str, ...] | list[str] = (), seed_each_call: bool = True):
        kind, index = parse_device(device)
        self.spec = spec  # the module takes inputs and returns outputs in its order
        self.device = kind if index is None else f"{kind}:{index}"
        self.name = f"torch-{self.device}"
        self.seed = seed
        self.dtype = parse_dtype(dtype)
        self.keep_float32 = tuple(keep_float32)  # module names that stay float32 (see cast_module)
        # Validation reseeds before every call so sampled outputs are reproducible; a
        # benchmark seeds once, as a deployment would.
        self.seed_each_call = seed_each_call
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
        # The float32 CPU reference keeps the family's module; anything else gets its own copy.
        if self.device == "cpu" and self.dtype == "float32":
            self.module = model
        else:
            module = copy.deepcopy(model)
            if self.dtype != "float32":
                cast_module(module, getattr(torch, self.dtype), self.keep_float32)
            self.module = module.to(torch.device(self.device))
        self.module.eval()
        if not self.seed_each_call:
            torch.manual_seed(self.seed)
        # Looked up once: run() is timed by `bench`, where microseconds count.
        self._device, self._dtype = torch.device(self.device), getattr(torch, self.dtype)
        self._on_host = self.device == "cpu"
        self._outputs = [(t.name, getattr(torch, t.dtype) if t.is_float else None) for t in self.spec.outputs]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.to_host(self.forward(self.to_device(feeds)))

    # The three steps of run(), apart, for device graphs and for checks of where tensors live.
    def to_device(self, feeds: dict[str, np.ndarray]) -> list:
        """The module's positional inputs on the device, float inputs in the runtime's dtype."""
        import torch

        args = []
        for name in self.spec.input_names:
            x = torch.from_numpy(np.ascontiguousarray(feeds[name]))
            if x.is_floating_point() and x.dtype != self._dtype:
                x = x.to(self._device, self._dtype)
            elif not self._on_host:
                x = x.to(self._device)
            args.append(x)
        return args

    def forward(self, args: list) -> tuple:
        import torch

        with torch.inference_mode():
            if self.seed_each_call and self.samples:
                torch.manual_seed(self.seed)
            return self.module(*args)

    def to_host(self, outputs: tuple) -> dict[str, np.ndarray]:
        """Outputs as numpy on the host; float outputs of a lower precision back in float32."""
        host = {}
        for (name, float_dtype), o in zip(self._outputs, outputs):
            if o.requires_grad:  # a parameter returned as is (a constant output)
                o = o.detach()
            if float_dtype is not None and o.dtype != float_dtype and o.is_floating_point():
                o = o.to("cpu", float_dtype)
            elif not self._on_host:
                o = o.cpu()
            host[name] = o.numpy()
        return host

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
        info["dtype"] = self.dtype
        if self.dtype != "float32" and self.keep_float32:
            info["kept_float32"] = list(self.keep_float32)
        if self.device != "cpu":
            try:
                kind, index = parse_device(self.device)
                backend = getattr(torch, kind)
                info["device_name"] = backend.get_device_name(index)
            except Exception:  # a name is nice to have, never worth failing for
                pass
        return info
