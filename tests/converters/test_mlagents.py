"""The ML-Agents converter against the official exports of real checkpoints."""
from __future__ import annotations

import shutil

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from rlparity import converters
from rlparity.converters.mlagents import MLAgentsPolicy
from rlparity.errors import NotSupportedYet
from tests.conftest import DATA, TINYBRANCHES, TINYWALKER, fixture_path

# (checkpoint, official export, oracle) for every ML-Agents fixture
CASES = {
    "TinyWalker": (TINYWALKER / "TinyWalker-1000.pt", TINYWALKER / "TinyWalker-1000.onnx",
                   DATA / "TinyWalker-1000.onnx.oracle.npz"),
    "TinyBranches": (TINYBRANCHES / "TinyBranches-5000.pt", TINYBRANCHES / "TinyBranches-5000.onnx",
                     DATA / "TinyBranches-5000.onnx.oracle.npz"),
    "Huggy": ("mlagents/Huggy/Huggy/Huggy-2000049.pt", "mlagents/Huggy/Huggy.onnx",
              "mlagents/Huggy/Huggy.onnx.oracle.npz"),
}


def case(name):
    paths = CASES[name]
    return [p if not isinstance(p, str) else fixture_path(p) for p in paths]


def io_signature(model: onnx.ModelProto):
    def sig(values):
        return [(v.name, v.type.tensor_type.elem_type,
                 [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]) for v in values]
    return sig(model.graph.input), sig(model.graph.output)


@pytest.fixture(params=list(CASES))
def fixture_case(request):
    checkpoint, official, oracle = case(request.param)
    return MLAgentsPolicy.load(checkpoint), official, oracle


def test_export_matches_official_io_exactly(fixture_case):
    family, official, _ = fixture_case
    ours = onnx.load_from_string(family.export())
    theirs = onnx.load(str(official))
    # names, order, dtypes and shapes, dynamic axes (names included) where the official's are
    assert io_signature(ours) == io_signature(theirs)
    assert [o.version for o in ours.opset_import] == [9]


def test_export_graph_is_identical_to_official(fixture_case):
    family, official, _ = fixture_case
    assert onnx.load_from_string(family.export()).graph == onnx.load(str(official)).graph


def test_constants_equal_and_deterministic_outputs_match_oracle(fixture_case):
    family, official, oracle_file = fixture_case
    oracle = dict(np.load(oracle_file))
    session = ort.InferenceSession(family.export(), providers=["CPUExecutionProvider"])
    feeds = {i.name: oracle[i.name] for i in session.get_inputs()}
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    for name in ("version_number", "memory_size", "continuous_action_output_shape", "discrete_action_output_shape"):
        if name in oracle:
            assert got[name].dtype == oracle[name].dtype and np.array_equal(got[name], oracle[name]), name
    checked = 0
    for name in ("deterministic_continuous_actions", "deterministic_discrete_actions"):
        if name in oracle:
            assert got[name].dtype == oracle[name].dtype
            np.testing.assert_allclose(got[name], oracle[name], atol=1e-5, rtol=0)
            checked += 1
    assert checked == 1


def test_torch_rebuild_matches_oracle(fixture_case):
    family, _, oracle_file = fixture_case
    oracle = dict(np.load(oracle_file))
    module = family.build_torch()
    args = [torch.from_numpy(oracle[name]) for name in family.io_spec().input_names]
    with torch.no_grad():
        outputs = dict(zip(family.io_spec().output_names, module(*args)))
    for name in ("deterministic_continuous_actions", "deterministic_discrete_actions"):
        if name in oracle:
            np.testing.assert_allclose(outputs[name].numpy(), oracle[name], atol=1e-5, rtol=0)


def test_version_and_constants_in_torch(fixture_case):
    family, _, _ = fixture_case
    with torch.no_grad():
        out = dict(zip(family.io_spec().output_names, family.build_torch()(*family.export_inputs()[:len(family.io_spec().inputs)])))
    assert out["version_number"].tolist() == [3.0]
    assert out["memory_size"].tolist() == [0.0]


def test_obs_split_read_from_normalizers_and_official_export():
    walker = MLAgentsPolicy.load(TINYWALKER)
    assert walker.arch["obs_sizes"] == [12, 5] and walker.arch["obs_split_source"] == "normalizer statistics"
    branches = MLAgentsPolicy.load(TINYBRANCHES)
    assert branches.arch["obs_sizes"] == [27, 9, 3]
    assert branches.arch["branches"] == [3, 3, 2]


def test_obs_split_unknown_without_official_export(tmp_path):
    shutil.copy(TINYBRANCHES / "TinyBranches-5000.pt", tmp_path / "TinyBranches-5000.pt")
    alone = MLAgentsPolicy.load(tmp_path / "TinyBranches-5000.pt")
    assert alone.arch["obs_sizes"] == [39]
    assert "--obs-sizes" in alone.arch["obs_split_source"]
    split = MLAgentsPolicy.load(tmp_path / "TinyBranches-5000.pt", obs_sizes=[27, 9, 3])
    assert split.io_spec().input_names == ["obs_0", "obs_1", "obs_2", "action_masks"]


def test_run_folder_uses_highest_step(tmp_path):
    run = tmp_path / "results" / "Walker"
    (run / "Walker").mkdir(parents=True)
    source = TINYWALKER / "TinyWalker-1000.pt"
    for step in (500, 1000, 99):
        shutil.copy(source, run / "Walker" / f"Walker-{step}.pt")
    shutil.copy(source, run / "Walker" / "checkpoint.pt")  # step 1000 inside
    family = converters.load(run)
    assert family.source.name == "Walker-1000.pt"
    assert "4 checkpoint(s)" in family.source_note and "step 1,000" in family.source_note


def test_published_repo_layout_finds_official_export():
    root = fixture_path("mlagents/Huggy")
    family = converters.load(root)
    assert family.source.name == "Huggy-2000049.pt"
    assert family.reference_export().name == "Huggy-2000049.onnx"
    assert family.step == 2000049


def test_summary_reports_normalizer_and_parameters():
    summary = MLAgentsPolicy.load(TINYWALKER).summary()
    assert summary["training_step"] == 1000
    # the weights: body 17->32->32, mu 32->4, log_sigma 4 (normalizer statistics are buffers)
    assert summary["parameters"] == 17 * 32 + 32 + 32 * 32 + 32 + 4 * 32 + 4 + 4
    assert [n["observation"] for n in summary["normalizers"]] == ["obs_0", "obs_1"]
    assert all(n["std_range"][0] > 0 for n in summary["normalizers"])


# -- policies no fixture covers: built from a real checkpoint's tensors -----------------------

def _hybrid_policy(tmp_path):
    """TinyWalker's continuous head plus TinyBranches-like discrete branches [3, 2]."""
    checkpoint = torch.load(TINYWALKER / "TinyWalker-1000.pt", weights_only=True)
    policy = checkpoint["Policy"]
    generator = torch.Generator().manual_seed(0)
    for b, n in enumerate((3, 2)):
        policy[f"action_model._discrete_distribution.branches.{b}.weight"] = torch.randn(n, 32, generator=generator)
        policy[f"action_model._discrete_distribution.branches.{b}.bias"] = torch.randn(n, generator=generator)
    policy["discrete_act_size_vector"] = torch.tensor([[3.0, 2.0]])
    path = tmp_path / "Hybrid-1000.pt"
    torch.save(checkpoint, path)
    return path


def test_hybrid_policy_exports_both_heads_and_runs_in_onnxruntime(tmp_path):
    family = MLAgentsPolicy.load(_hybrid_policy(tmp_path))
    spec = family.io_spec()
    assert spec.input_names == ["obs_0", "obs_1", "action_masks"]
    assert spec.output_names == [
        "version_number", "memory_size",
        "continuous_actions", "continuous_action_output_shape", "deterministic_continuous_actions",
        "discrete_actions", "discrete_action_output_shape", "deterministic_discrete_actions",
    ]
    session = ort.InferenceSession(family.export(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    feeds = {"obs_0": rng.normal(size=(16, 12)).astype(np.float32), "obs_1": rng.normal(size=(16, 5)).astype(np.float32),
             "action_masks": np.ones((16, 5), np.float32)}
    feeds["action_masks"][:, 0] = 0  # block action 0 of branch 0
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    with torch.no_grad():
        ref = dict(zip(spec.output_names, family.build_torch()(*(torch.from_numpy(feeds[n]) for n in spec.input_names))))
    np.testing.assert_allclose(got["deterministic_continuous_actions"], ref["deterministic_continuous_actions"], atol=1e-5)
    assert np.array_equal(got["deterministic_discrete_actions"], ref["deterministic_discrete_actions"].numpy())
    assert (got["deterministic_discrete_actions"][:, 0] != 0).all()
    assert (got["discrete_actions"][:, 0] != 0).all()
    assert got["discrete_action_output_shape"].tolist() == [[3.0, 2.0]]


def _body_of(widths, tmp_path):
    """A continuous policy with hidden layers of ``widths``, built from scratch in the mlagents layout."""
    g = torch.Generator().manual_seed(3)
    policy = {
        "version_number": torch.tensor([3.0]), "memory_size_vector": torch.tensor([0.0]),
        "continuous_act_size_vector": torch.tensor([2.0]), "discrete_act_size_vector": torch.zeros(1, 0),
        "network_body.observation_encoder.processors.0.normalizer.normalization_steps": torch.tensor(40),
        "network_body.observation_encoder.processors.0.normalizer.running_mean": torch.randn(6, generator=g),
        "network_body.observation_encoder.processors.0.normalizer.running_variance": torch.rand(6, generator=g) * 40 + 1,
        "action_model._continuous_distribution.log_sigma": torch.zeros(1, 2),
        "action_model._continuous_distribution.mu.weight": torch.randn(2, widths[-1], generator=g),
        "action_model._continuous_distribution.mu.bias": torch.zeros(2),
    }
    width = 6
    for i, out in enumerate(widths):
        policy[f"network_body._body_endoder.seq_layers.{2 * i}.weight"] = torch.randn(out, width, generator=g) * 0.3
        policy[f"network_body._body_endoder.seq_layers.{2 * i}.bias"] = torch.zeros(out)
        width = out
    path = tmp_path / "Deep-40.pt"
    torch.save({"Policy": policy, "global_step": {"_GlobalSteps__global_step": torch.tensor([40])}}, path)
    return MLAgentsPolicy.load(path)


def test_deeper_wider_body_and_single_normalized_observation(tmp_path):
    """Any depth and width: a 4-layer body of 48 units built from scratch in the mlagents layout."""
    family = _body_of([48] * 4, tmp_path)
    assert family.arch["hidden"] == [48, 48, 48, 48]
    assert family.summary()["hidden_layers"] == "4 x 48 (Linear + Swish)"
    model = onnx.load_from_string(family.export())
    assert sum(n.op_type == "Gemm" for n in model.graph.node) == 5
    assert any(n.op_type == "Clip" and "normalizer" in n.name for n in model.graph.node)


def test_summary_of_a_body_whose_layers_differ_in_width(tmp_path):
    family = _body_of([48, 24], tmp_path)
    assert family.summary()["hidden_layers"] == "widths [48, 24] (Linear + Swish)"
    assert family.summary()["parameters"] == 6 * 48 + 48 + 48 * 24 + 24 + 24 * 2 + 2 + 2


def test_recurrent_policy_is_not_supported_yet(tmp_path):
    checkpoint = torch.load(TINYWALKER / "TinyWalker-1000.pt", weights_only=True)
    checkpoint["Policy"]["memory_size_vector"] = torch.tensor([128.0])
    checkpoint["Policy"]["network_body.lstm.lstm.weight_ih_l0"] = torch.zeros(256, 32)
    torch.save(checkpoint, tmp_path / "Memory-1.pt")
    with pytest.raises(NotSupportedYet, match="recurrent"):
        MLAgentsPolicy.load(tmp_path / "Memory-1.pt")


def test_visual_observation_is_not_supported_yet(tmp_path):
    checkpoint = torch.load(TINYWALKER / "TinyWalker-1000.pt", weights_only=True)
    checkpoint["Policy"]["network_body.observation_encoder.processors.2.conv_layers.0.weight"] = torch.zeros(16, 3, 8, 8)
    torch.save(checkpoint, tmp_path / "Visual-1.pt")
    with pytest.raises(NotSupportedYet, match="visual observations"):
        MLAgentsPolicy.load(tmp_path / "Visual-1.pt")
