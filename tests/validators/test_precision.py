"""The precision sweep: lower precisions on the device, normalizer statistics kept float32."""
from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

from rlparity import converters
from rlparity.spec import TensorSpec
from rlparity.validators.compare import DEFAULT_TOLERANCES, compare_distribution
from rlparity.validators.precision import precision_sweep
from rlparity.validators.torch_runtime import TorchRuntime, cast_module
from rlparity.validators.validate import ValidateOptions, validate
from tests.conftest import TINYBRANCHES, TINYWALKER, fixture_path, without_npu

FLOAT16_MAX = torch.finfo(torch.float16).max  # 65504


@pytest.mark.parametrize("where", ["TinyWalker", "Huggy"])
def test_naive_half_overflows_the_normalizer_and_the_mixed_cast_does_not(where):
    path = TINYWALKER if where == "TinyWalker" else fixture_path("mlagents/Huggy")
    family = converters.load(path)
    module = family.build_torch()
    normalizer = family.float32_modules()[0]
    variance = module.get_submodule(normalizer).running_variance
    assert variance.max() > FLOAT16_MAX  # accumulated over 20001 steps: beyond float16

    naive = copy.deepcopy(module).half()
    assert torch.isinf(naive.get_submodule(normalizer).running_variance).any()
    mixed = copy.deepcopy(module)
    cast_module(mixed, torch.float16, family.float32_modules())
    kept = mixed.get_submodule(normalizer)
    assert kept.running_variance.dtype == torch.float32 and torch.equal(kept.running_variance, variance)
    assert mixed.network_body._body_endoder.seq_layers[0].weight.dtype == torch.float16

    spec = family.io_spec()
    feeds = family.make_feeds(64, seed=0).arrays
    reference = TorchRuntime(spec, "cpu")
    reference.prepare(module)
    expected = reference.run(feeds)["deterministic_continuous_actions"]
    errors = {}
    for name, keep in (("naive", ()), ("mixed", family.float32_modules())):
        runtime = TorchRuntime(spec, "cpu", dtype="float16", keep_float32=keep)
        runtime.prepare(module)
        got = runtime.run(feeds)["deterministic_continuous_actions"]
        assert got.dtype == np.float32  # compared in float32
        errors[name] = float(np.abs(got - expected).max())
    # Actions live in [-1, 1]: the naive cast flips them; the mixed cast is within fp16 tolerance.
    assert errors["naive"] > 0.5
    assert errors["mixed"] < DEFAULT_TOLERANCES["float16"][0]


def test_validate_dtype_sweep_reports_every_dtype(run_cli, tmp_path):
    result = run_cli("validate", TINYWALKER, "--dtype", "float32,fp16,bfloat16", "--batch", "16", "--draws", "64",
                     "--json", tmp_path / "r.json")
    assert result.exit_code == 0, result.output
    assert "Precision sweep" in result.output and "torch-cpu float16 vs torch-cpu" in result.output
    report = json.loads((tmp_path / "r.json").read_text())
    sweep = report["extra"]["precision"]
    assert [e["dtype"] for e in sweep] == ["float32", "float16", "bfloat16"]
    for entry in sweep:
        assert entry["device"] == "cpu"
        assert (entry["tolerance"]["atol"], entry["tolerance"]["rtol"]) == DEFAULT_TOLERANCES[entry["dtype"]]
        [comparison] = entry["comparisons"]
        assert comparison["passed"] and comparison["reference"] == "torch-cpu"
        by_output = {o["output"]: o for o in comparison["outputs"]}
        deterministic = by_output["deterministic_continuous_actions"]
        assert deterministic["atol"] == DEFAULT_TOLERANCES[entry["dtype"]][0]
        assert by_output["continuous_actions"]["rule"] == "distribution"
    float32, float16, bfloat16 = sweep
    assert float32["comparisons"][0]["outputs"][-1]["metrics"]["max_abs"] == 0.0  # the reference itself
    assert 0 < float16["comparisons"][0]["outputs"][-1]["metrics"]["max_abs"] < 1e-2
    assert float16["float32_modules"] == converters.load(TINYWALKER).float32_modules()
    assert float16["naive_cast"]["passed"] is False and float16["naive_cast"]["max_abs"] > 0.5


def test_dtype_sweep_on_discrete_actions(tmp_path):
    family = converters.load(TINYBRANCHES)
    report = validate(family, ValidateOptions(dtypes=["float16", "bfloat16"], batch=32, draws=64))
    assert report.verdict == "pass"
    for entry in report.extra["precision"]:
        outputs = {o["output"]: o for o in entry["comparisons"][0]["outputs"]}
        assert outputs["deterministic_discrete_actions"]["rule"] == "agreement"
        assert outputs["discrete_actions"]["passed"] is True
        assert entry["float32_modules"] == []  # TinyBranches has no normalizer


def test_a_sweep_that_exceeds_its_tolerance_is_a_mismatch(run_cli, monkeypatch, tmp_path):
    """Without the float32 normalizers, float16 fails, and validate says so with exit 3."""
    from rlparity.converters.mlagents import MLAgentsPolicy

    monkeypatch.setattr(MLAgentsPolicy, "float32_modules", lambda self: [])
    result = run_cli("validate", TINYWALKER, "--dtype", "float16", "--batch", "16", "--draws", "64",
                     "--json", tmp_path / "r.json")
    assert result.exit_code == 3, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["verdict"] == "mismatch"
    assert all(c["passed"] for c in report["comparisons"])  # the float32 runtimes agree
    [entry] = report["extra"]["precision"]
    failing = [o["output"] for o in entry["comparisons"][0]["outputs"] if o["passed"] is False]
    assert "deterministic_continuous_actions" in failing


def test_sweep_computes_its_own_reference_when_validate_did_not():
    family = converters.load(TINYWALKER)
    feeds = family.make_feeds(8, seed=3)
    [entry] = precision_sweep(family, ["bf16"], "cpu", feeds, seed=3)
    assert entry["dtype"] == "bfloat16" and entry["comparisons"][0]["passed"]


@without_npu
def test_sweep_on_a_missing_device_records_why():
    family = converters.load(TINYWALKER)
    [entry] = precision_sweep(family, ["float16"], "npu:0", family.make_feeds(4, seed=0))
    assert entry["comparisons"] == [] and "torch_npu is not installed" in entry["error"]


def test_unknown_dtype_is_a_usage_error(run_cli):
    result = run_cli("validate", TINYWALKER, "--dtype", "float32,int4")
    assert result.exit_code == 2 and "unknown dtype 'int4'" in result.output


def test_distribution_tolerance_allows_rounding_but_not_a_real_shift():
    spec = TensorSpec("a", "float32", ("batch", 3), "stochastic")
    rng = np.random.default_rng(0)
    reference = rng.normal(0.5, 0.01, size=(4096, 4, 3))
    rounded = reference + 0.004  # a float16-sized bias on a narrow distribution
    shifted = reference + 0.2
    assert not compare_distribution(spec, rounded, reference).passed  # float32 rules: a real difference
    assert compare_distribution(spec, rounded, reference, tolerance=DEFAULT_TOLERANCES["float16"]).passed
    assert not compare_distribution(spec, shifted, reference, tolerance=DEFAULT_TOLERANCES["float16"]).passed
