"""`rlparity npu-check`: is this accelerator host ready, and does the model really run on it?

The checks an Ascend (or CUDA) port used to do by hand, as one command:

1. the software: torch, torch_npu and the CANN toolkit versions (CUDA: the CUDA and cuDNN
   versions of the torch build);
2. the device: how many are visible, their names, and a small matmul run on the device
   whose result is checked against the CPU's, element by element;
3. residency: the rebuilt policy is moved to the device and run once with forward hooks
   on every module, proving that parameters and buffers, inputs, every module's output
   (the intermediate activations) and the final outputs are device tensors, and that no
   warning announced an operator falling back to the CPU (torch_npu warns when one does);
4. agreement: ``validate`` on the device against torch-cpu and ort-cpu.

``--device cpu`` takes exactly this path with the CPU as the device, so CI exercises it.
torch_npu is imported only for an ``npu`` device.
"""
from __future__ import annotations

import os
import platform
import re
import warnings
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from rlparity.validators.torch_runtime import TorchRuntime, device_status, parse_device

# Where CANN puts the toolkit when no environment variable says (root and user installs).
CANN_HOMES = ("/usr/local/Ascend/ascend-toolkit/latest", "/usr/local/Ascend/cann",
              "~/Ascend/ascend-toolkit/latest", "~/Ascend/cann")
CANN_ENV = ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH")
# Phrases torch_npu's fallback warnings use ("... will fall back to run on the CPU").
FALLBACK_WORDS = re.compile(r"fall(s|ing)? ?back|fallback", re.IGNORECASE)


def check(name: str, passed: bool | None, detail: str) -> dict[str, Any]:
    """One proof line: ``passed`` None means informational (nothing to fail)."""
    return {"check": name, "passed": passed, "detail": detail}


# -- the software ---------------------------------------------------------------------------

def _dist_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def cann_version() -> tuple[str | None, str]:
    """The CANN toolkit's version and where it was read, or (None, what was looked at)."""
    import torch

    from_torch = getattr(getattr(torch, "version", None), "cann", None)  # set by torch_npu once imported
    if from_torch:
        return str(from_torch), "torch.version.cann"
    homes = [os.environ[v] for v in CANN_ENV if os.environ.get(v)] + [os.path.expanduser(h) for h in CANN_HOMES]
    for home in homes:
        root = Path(home)
        candidates = sorted(root.glob("*-linux/ascend_toolkit_install.info")) + [
            root / "version.cfg", root / "compiler" / "version.info", root / "runtime" / "version.info"]
        for info in candidates:
            version = _read_version(info)
            if version:
                return version, str(info)
    env = ", ".join(f"${v}" + ("" if os.environ.get(v) else " (unset)") for v in CANN_ENV)
    return None, f"no version file under {env}, {', '.join(CANN_HOMES[:2])}"


def _read_version(path: Path) -> str | None:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    match = re.search(r"^\s*(?:version|Version)\s*=\s*([^\s#]+)", text, re.MULTILINE)
    return match.group(1).strip("\"'") if match else None


def environment(device: str) -> dict[str, Any]:
    """Versions and facts of the software stack for ``device`` (nothing here imports torch_npu)."""
    import torch

    kind, _ = parse_device(device)
    facts: dict[str, Any] = {"device": device, "torch": torch.__version__, "python": platform.python_version(),
                             "host": platform.platform()}
    if kind == "npu":
        facts["torch_npu"] = _dist_version("torch_npu") or _dist_version("torch-npu") or "not installed"
        version, where = cann_version()
        facts["cann"] = f"{version} ({where})" if version else f"not found ({where})"
    elif kind == "cuda":
        facts["cuda (torch build)"] = torch.version.cuda or "none: CPU-only torch build"
        cudnn = torch.backends.cudnn.version() if torch.version.cuda else None
        facts["cudnn"] = str(cudnn) if cudnn else "-"
    else:
        facts["processor"] = platform.processor() or platform.machine()
        facts["threads"] = torch.get_num_threads()
    return facts


def unavailable_reason(device: str) -> str | None:
    """Why ``device`` cannot be used here, naming what is missing; None when it can."""
    ok, reason = device_status(device)
    if ok:
        return None
    kind, _ = parse_device(device)
    if kind == "npu":
        version, where = cann_version()
        reason += f"; CANN {version} found ({where})" if version else f"; CANN not found ({where})"
    return reason


def device_facts(device: str) -> dict[str, Any]:
    """Count and names of the visible devices of ``device``'s kind (after device_status is ok)."""
    import torch

    kind, index = parse_device(device)
    if kind == "cpu":
        return {"count": 1, "names": [platform.processor() or platform.machine()]}
    backend = getattr(torch, kind)
    count = backend.device_count()
    names = []
    for i in range(count):
        try:
            names.append(backend.get_device_name(i))
        except Exception:  # a name is nice to have, never worth failing for
            names.append(f"{kind}:{i}")
    facts: dict[str, Any] = {"count": count, "names": names}
    if kind == "npu":  # imported by device_status already; the CANN version is now in torch
        version, where = cann_version()
        if version:
            facts["cann"] = f"{version} ({where})"
    return facts


# -- the proofs --------------------------------------------------------------------------------

def tiny_op(device: str) -> dict[str, Any]:
    """A 3x4 @ 4x3 matmul plus 1 on the device, checked against the CPU (small integers: exact)."""
    import torch

    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    expected = x @ x.T + 1
    on_device = x.to(device)
    result = on_device @ on_device.T + 1
    where = result.device
    got = result.cpu()
    exact = bool(torch.equal(got, expected))
    passed = exact and where == torch.device(device)
    return check("operation on the device", passed,
                 f"x @ x.T + 1 (3x4 float32) computed on {where}: {'equals' if exact else 'DIFFERS from'} the CPU result")


def residency(runtime: TorchRuntime, feeds: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    """Run the prepared ``runtime``'s module once with hooks on every module and say, for
    each kind of tensor, whether all of them lived on the runtime's device."""
    import torch

    device = torch.device(runtime.device)
    module = runtime.module
    lines = []

    tensors = list(module.named_parameters()) + list(module.named_buffers())
    off = [name for name, t in tensors if t.device != device]
    lines.append(check("parameters and buffers on the device", not off,
                       _count(len(tensors) - len(off), len(tensors), "tensors", device, off)))

    args = runtime.to_device(feeds)
    off = [name for name, t in zip(runtime.spec.input_names, args) if t.device != device]
    lines.append(check("inputs on the device", not off, _count(len(args) - len(off), len(args), "inputs", device, off)))

    seen: dict[str, list] = {}
    hooks = [m.register_forward_hook(_recorder(seen, name or "(model)")) for name, m in module.named_modules()]
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            outputs = runtime.forward(args)
    finally:
        for hook in hooks:
            hook.remove()
    activations = [(name, t) for name, ts in seen.items() for t in ts]
    off = sorted({name for name, t in activations if t.device != device})
    lines.append(check(
        "activations on the device", bool(activations) and not off,
        f"{len(activations) - sum(1 for _, t in activations if t.device != device)} of {len(activations)} "
        f"module outputs ({len(seen)} modules hooked) on {device}" + (f"; off the device: {', '.join(off[:5])}" if off else "")))

    off = [name for name, t in zip(runtime.spec.output_names, outputs) if t.device != device]
    lines.append(check("outputs on the device", not off,
                       _count(len(outputs) - len(off), len(outputs), "outputs", device, off)))

    fallbacks = sorted({" ".join(str(w.message).split())[:160] for w in caught if FALLBACK_WORDS.search(str(w.message))})
    lines.append(check("no CPU fallback", not fallbacks,
                       "no operator fallback was announced during the forward" if not fallbacks
                       else f"{len(fallbacks)} fallback warning(s): {fallbacks[0]}"))
    return lines


def _recorder(seen: dict[str, list], name: str):
    import torch

    def record(_module, _inputs, output):
        flat = output if isinstance(output, (tuple, list)) else [output]
        # every call counts: a module applied twice (a shared activation) is checked both times
        seen.setdefault(name, []).extend(t for t in flat if isinstance(t, torch.Tensor))
    return record


def _count(good: int, total: int, what: str, device, off: list[str]) -> str:
    text = f"{good} of {total} {what} on {device}"
    return text + (f"; off the device: {', '.join(off[:5])}" if off else "")


# -- the whole check ----------------------------------------------------------------------------

def npu_check(family, device: str, *, batch: int = 64, seed: int = 0, draws: int = 512,
              on_step=lambda _: None):
    """Every proof for ``device`` and ``family``: a Report whose ``extra["npu_check"]`` holds
    the environment, the devices and the proof lines, and whose comparisons are the
    validation on the device. An unavailable device gives a report with that one failing
    line (the caller exits 4)."""
    from rlparity.validators.runtimes import OURS, REFERENCE, runtime_for_device
    from rlparity.validators.validate import ValidateOptions, new_report, validate

    kind, index = parse_device(device)
    # "cpu:0" is torch.device("cpu") (its tensors report no index): spelt as tensors report it
    device = "cpu" if kind == "cpu" else f"{kind}:{index}"
    section: dict[str, Any] = {"device": device, "environment": environment(device), "devices": {}, "checks": []}
    checks = section["checks"]
    reason = unavailable_reason(device)
    checks.append(check("device available", reason is None, reason or f"{device} can be used"))
    if reason is not None:
        report = new_report(family, None, None, inputs={})
        report.extra["npu_check"] = section
        return report

    on_step(f"checking {device}")
    section["devices"] = device_facts(device)
    if "cann" in section["devices"]:  # torch_npu, now imported, knows it best
        section["environment"]["cann"] = section["devices"].pop("cann")
    checks.append(tiny_op(device))

    on_step(f"proving where the tensors live on {device}")
    runtime = TorchRuntime(family.io_spec(), device, seed=seed)
    runtime.prepare(family.build_torch())
    try:
        checks.extend(residency(runtime, family.make_feeds(8, seed).arrays))
    finally:
        runtime.close()

    device_runtime = runtime_for_device(device)
    names = list(dict.fromkeys([REFERENCE, OURS, device_runtime]))
    extra_pairs = [(OURS, device_runtime)] if device_runtime != REFERENCE else []
    report = validate(family, ValidateOptions(runtimes=names, batch=batch, seed=seed, draws=draws,
                                              extra_pairs=extra_pairs), on_step=on_step)
    for c in report.comparisons:
        failing = [o["output"] for o in c["outputs"] if o["passed"] is False]
        detail = (f"{sum(o['passed'] is True for o in c['outputs'])} of {len(c['outputs'])} outputs pass"
                  + (f"; failing: {', '.join(failing)}" if failing else ""))
        checks.append(check(f"{c['candidate']} agrees with {c['reference']}", c["passed"], detail))
    for r in report.runtimes:
        if r.error or not r.available:
            checks.append(check(f"{r.name} ran", False, r.error or r.reason))
    report.extra["npu_check"] = section
    return report


def passed(report) -> bool:
    """Every proof line of an npu-check report passed (informational lines aside)."""
    return all(c["passed"] is not False for c in report.extra["npu_check"]["checks"])
