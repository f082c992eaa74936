"""`rlparity npu-check`: the same path on the CPU as on an accelerator, and clear exits without one."""
from __future__ import annotations

import json
import warnings

import torch
from torch import nn

from rlparity.spec import IOSpec, TensorSpec
from rlparity.validators.accelerator import (
    cann_version,
    residency,
    tiny_op,
    unavailable_reason,
)
from rlparity.validators.torch_runtime import TorchRuntime
from tests.conftest import TINYBRANCHES, without_cuda, without_npu

PROOFS = ["device available", "operation on the device", "parameters and buffers on the device", "inputs on the device",
          "activations on the device", "outputs on the device", "no CPU fallback", "ort-cpu agrees with torch-cpu"]


def test_npu_check_on_the_cpu_passes_every_proof(run_cli, tmp_path):
    result = run_cli("npu-check", "--device", "cpu", "--json", tmp_path / "check.json")
    assert result.exit_code == 0, result.output
    assert "npu-check: PASS on cpu" in result.output
    report = json.loads((tmp_path / "check.json").read_text())
    section = report["extra"]["npu_check"]
    assert [c["check"] for c in section["checks"]] == PROOFS
    assert all(c["passed"] for c in section["checks"])
    assert section["environment"]["torch"] == torch.__version__
    assert section["devices"]["count"] == 1
    assert report["source"]["path"].endswith("TinyWalker-1000.pt")  # the bundled sample by default
    activations = next(c for c in section["checks"] if c["check"] == "activations on the device")
    assert "modules hooked" in activations["detail"] and activations["detail"].startswith("20 of 20")


def test_npu_check_on_cpu_0_is_the_cpu(run_cli, tmp_path):
    """torch.device("cpu:0") != torch.device("cpu"), yet every CPU tensor reports "cpu"."""
    result = run_cli("npu-check", "--device", "cpu:0", "--batch", "8", "--draws", "16", "--json", tmp_path / "c.json")
    assert result.exit_code == 0, result.output
    section = json.loads((tmp_path / "c.json").read_text())["extra"]["npu_check"]
    assert section["device"] == "cpu" and all(c["passed"] for c in section["checks"])


def test_npu_check_of_a_discrete_policy(run_cli):
    result = run_cli("npu-check", TINYBRANCHES, "--device", "cpu", "--batch", "16", "--draws", "64")
    assert result.exit_code == 0, result.output


@without_npu
def test_npu_check_without_torch_npu_exits_4_naming_what_is_missing(run_cli, tmp_path):
    result = run_cli("npu-check", "--json", tmp_path / "check.json")  # default --device npu:0
    assert result.exit_code == 4, result.output
    assert "error: npu:0: torch_npu is not installed" in result.output
    assert "CANN not found" in result.output and "Traceback" not in result.output
    section = json.loads((tmp_path / "check.json").read_text())["extra"]["npu_check"]
    assert section["environment"]["torch_npu"] == "not installed"
    assert section["checks"] == [{"check": "device available", "passed": False,
                                  "detail": unavailable_reason("npu:0")}]


@without_cuda
def test_npu_check_on_a_host_without_cuda(run_cli):
    result = run_cli("npu-check", "--device", "cuda:0")
    assert result.exit_code == 4
    assert "error: cuda:0: this torch build has no CUDA" in result.output


@without_npu
def test_cann_version_is_read_from_the_toolkit(tmp_path, monkeypatch):
    info = tmp_path / "x86_64-linux" / "ascend_toolkit_install.info"
    info.parent.mkdir()
    info.write_text("package_name=Ascend-cann-toolkit\nversion=8.0.RC2\ninnerversion=V100R001C19SPC001\n")
    monkeypatch.setenv("ASCEND_TOOLKIT_HOME", str(tmp_path))
    assert cann_version() == ("8.0.RC2", str(info))
    assert "CANN 8.0.RC2 found" in unavailable_reason("npu:0")


def test_tiny_op_on_the_cpu():
    line = tiny_op("cpu")
    assert line["passed"] and "equals the CPU result" in line["detail"]


class _Leaky(nn.Module):
    """A policy whose hidden layer quietly leaves the device (here: for the meta device)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Linear(3, 2)
        self.head = _ToMeta()

    def forward(self, x):
        return (self.head(self.body(x)),)


class _ToMeta(nn.Module):
    def forward(self, x):
        warnings.warn("The operator 'aten::mm' is not currently supported on the NPU backend and will fall back "
                      "to run on the CPU. This may have performance implications.")
        return x.to("meta")


def test_residency_catches_tensors_that_leave_the_device_and_announced_fallbacks():
    spec = IOSpec((TensorSpec("x", "float32", ("batch", 3), "observation"),),
                  (TensorSpec("y", "float32", ("batch", 2), "deterministic"),))
    runtime = TorchRuntime(spec, "cpu")
    runtime.prepare(_Leaky())
    lines = {line["check"]: line for line in residency(runtime, {"x": torch.ones(2, 3).numpy()})}
    assert lines["parameters and buffers on the device"]["passed"]
    assert lines["inputs on the device"]["passed"]
    assert not lines["activations on the device"]["passed"]
    assert "off the device: (model), head" in lines["activations on the device"]["detail"]
    assert not lines["outputs on the device"]["passed"] and "y" in lines["outputs on the device"]["detail"]
    assert not lines["no CPU fallback"]["passed"] and "fall back to run on the CPU" in lines["no CPU fallback"]["detail"]


class _LeavesOnceThenReturns(nn.Module):
    """Leaves the device on its first call only: each call of a module must be checked."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return x.to("meta") if self.calls == 1 else x


class _SharedActivation(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = _LeavesOnceThenReturns()

    def forward(self, x):
        self.act(x)  # an intermediate value off the device (its result unused, as a leak can be)
        return (self.act(x),)


def test_residency_checks_every_call_of_a_module_called_twice():
    spec = IOSpec((TensorSpec("x", "float32", ("batch", 3), "observation"),),
                  (TensorSpec("y", "float32", ("batch", 3), "deterministic"),))
    runtime = TorchRuntime(spec, "cpu")
    runtime.prepare(_SharedActivation())
    lines = {line["check"]: line for line in residency(runtime, {"x": torch.ones(2, 3).numpy()})}
    assert lines["outputs on the device"]["passed"]  # the final output is back on the CPU
    activations = lines["activations on the device"]
    assert not activations["passed"] and activations["detail"].startswith("2 of 3 module outputs")
