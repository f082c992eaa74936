"""Shared test helpers: where the real fixtures are, and running the CLI in-process."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
SAMPLES = REPO / "rlparity" / "samples"
# The large real checkpoints live beside the checkout (../shared/fixtures) and in CI.
FIXTURES = Path(os.environ.get("RLPARITY_FIXTURES", REPO.parent / "shared" / "fixtures"))

# Tests of what rlparity says on a host WITHOUT an accelerator (CI, laptops). On an NPU or GPU
# host they would be testing the wrong thing, so they step aside there.
without_npu = pytest.mark.skipif(importlib.util.find_spec("torch_npu") is not None,
                                 reason="torch_npu is installed on this host")


def _cuda_visible() -> bool:
    import torch

    return torch.cuda.is_available()


without_cuda = pytest.mark.skipif(_cuda_visible(), reason="a CUDA device is visible on this host")

TINYWALKER = SAMPLES / "mlagents" / "TinyWalker"
TINYBRANCHES = SAMPLES / "mlagents" / "TinyBranches"
TINYHOPPER = SAMPLES / "decision_transformer" / "TinyHopper"


def fixture_path(relative: str) -> Path:
    """A file under ../shared/fixtures, or skip the test when the fixtures are absent."""
    path = FIXTURES / relative
    if not path.exists():
        pytest.skip(f"fixture {relative} not present (expected under {FIXTURES})")
    return path


def tampered_onnx(source: Path, folder: Path, initializer: str, change) -> Path:
    """A copy of the ONNX file ``source`` in ``folder`` with one initializer changed by ``change``."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(source))
    for init in model.graph.initializer:
        if init.name == initializer:
            init.CopyFrom(numpy_helper.from_array(change(numpy_helper.to_array(init).copy()), init.name))
    path = folder / f"tampered-{source.name}"
    onnx.save(model, path)
    return path


def bias_plus_1e2(value):
    value[0] += 1e-2
    return value


@pytest.fixture
def run_cli():
    """Run `rlparity ARGS...` in-process; returns the click Result (exit_code, output)."""
    from rlparity.cli import main

    def run(*args: str):
        return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)

    return run
