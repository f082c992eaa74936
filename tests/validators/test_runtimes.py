"""One contract for every runtime, and honest reasons when a device is missing."""
from __future__ import annotations

import numpy as np
import pytest

from rlparity.converters.mlagents import MLAgentsPolicy
from rlparity.errors import AcceleratorUnavailable
from rlparity.validators.feeds import make_feeds
from rlparity.validators.ort import OrtRuntime
from rlparity.validators.runtimes import runtime_for_device
from rlparity.validators.torch_runtime import TorchRuntime, device_status, parse_device
from tests.conftest import TINYBRANCHES, TINYWALKER, without_cuda, without_npu


def _runtime_and_model(name, family):
    spec = family.io_spec()
    if name == "torch-cpu":
        return TorchRuntime(spec, "cpu"), family.build_torch()
    if name == "ort-cpu":
        return OrtRuntime("ort-cpu"), family.export()
    return OrtRuntime("ort-ref"), family.reference_export()


@pytest.mark.parametrize("sample", [TINYWALKER, TINYBRANCHES])
@pytest.mark.parametrize("name", ["torch-cpu", "ort-cpu", "ort-ref"])
def test_runtime_contract(name, sample):
    family = MLAgentsPolicy.load(sample)
    spec = family.io_spec()
    runtime, model = _runtime_and_model(name, family)
    assert runtime.available() == (True, "")
    runtime.prepare(model)
    feeds = make_feeds(spec, batch=5, seed=1).arrays
    out = runtime.run(feeds)
    assert list(out) == spec.output_names
    for t in spec.outputs:
        assert out[t.name].dtype == t.np_dtype, t.name
        assert out[t.name].shape == t.concrete_shape(batch=5), t.name
    assert runtime.info()["name"] == name and runtime.info()["device"] == "cpu"
    runtime.close()
    runtime.close()  # closing twice is harmless


def test_torch_runtime_sampling_is_seeded():
    family = MLAgentsPolicy.load(TINYWALKER)
    runtime = TorchRuntime(family.io_spec(), "cpu", seed=7)
    runtime.prepare(family.build_torch())
    feeds = make_feeds(family.io_spec(), batch=4).arrays
    assert np.array_equal(runtime.run(feeds)["continuous_actions"], runtime.run(feeds)["continuous_actions"])


@without_npu
@without_cuda
def test_missing_accelerators_state_their_reason():
    assert device_status("cpu") == (True, "")
    ok, reason = device_status("npu:0")
    assert not ok and "torch_npu is not installed" in reason
    ok, reason = device_status("cuda:0")
    assert not ok and "CUDA" in reason
    ok, reason = device_status("tpu")
    assert not ok and "unknown device type 'tpu'" in reason


@without_npu
def test_preparing_on_a_missing_device_raises_a_clean_error():
    family = MLAgentsPolicy.load(TINYWALKER)
    runtime = TorchRuntime(family.io_spec(), "npu:1")
    assert runtime.name == "torch-npu:1"
    with pytest.raises(AcceleratorUnavailable, match="npu:1: torch_npu is not installed"):
        runtime.prepare(family.build_torch())


def test_device_names():
    assert parse_device("NPU:1") == ("npu", 1)
    assert parse_device("cuda") == ("cuda", 0)
    assert parse_device("cpu") == ("cpu", None)
    assert runtime_for_device("cuda") == "torch-cuda:0"
    assert runtime_for_device("cpu") == "torch-cpu"
    with pytest.raises(AcceleratorUnavailable):
        parse_device("cuda:x")


def test_ort_runtime_refuses_a_file_that_is_not_onnx(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_text("not onnx")
    with pytest.raises(Exception, match="onnxruntime cannot load this model"):
        OrtRuntime().prepare(bad)


def test_the_cpu_is_one_device_however_it_is_numbered():
    assert parse_device("cpu:0") == ("cpu", None)
    assert runtime_for_device("cpu:0") == "torch-cpu"
