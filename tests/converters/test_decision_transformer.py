"""The Decision Transformer converter against transformers' own DecisionTransformerModel.

Oracles: the hopper-medium fixture's (transformers 5.24, batch 2 x 20 steps, row 1 left-padded
by 5) and the bundled TinyHopper's (tests/data). Where transformers is installed (the test
extra), configurations no fixture covers are built with it and compared live.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from rlparity import converters
from rlparity.converters.decision_transformer import DecisionTransformer
from tests.conftest import DATA, REPO, TINYHOPPER, fixture_path

OUTPUTS = ("state_preds", "action_preds", "return_preds")
ATOL = RTOL = 1e-5  # what the export must meet against transformers, at every unpadded position
HOPPER = "dt/decision-transformer-gym-hopper-medium"


def oracle_case(name):
    if name == "hopper-medium":
        folder = fixture_path(HOPPER)
        return folder, dict(np.load(fixture_path(HOPPER + ".oracle.npz")))
    return TINYHOPPER, dict(np.load(DATA / "TinyHopper.oracle.npz"))


@pytest.fixture(params=["hopper-medium", "TinyHopper"], scope="module")
def case(request):
    """(family, oracle, onnxruntime session of the export), built once per model."""
    folder, oracle = oracle_case(request.param)
    family = DecisionTransformer.load(folder)
    return family, oracle, ort_session(family)


def torch_outputs(family, feeds):
    with torch.no_grad():
        out = family.build_torch()(*(torch.from_numpy(feeds[n]) for n in family.io_spec().input_names))
    return {n: o.numpy() for n, o in zip(OUTPUTS, out)}


def ort_session(family):
    return ort.InferenceSession(family.export(), providers=["CPUExecutionProvider"])


def ort_outputs(session, feeds):
    names = [i.name for i in session.get_inputs()]
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, {n: feeds[n] for n in names})))


def assert_close_where_unpadded(got, want, mask, atol=ATOL, rtol=RTOL):
    real = np.asarray(mask) != 0
    assert real.any()
    for name in OUTPUTS:
        assert got[name].shape == want[name].shape, name
        np.testing.assert_allclose(got[name][real], want[name][real], atol=atol, rtol=rtol, err_msg=name)


# -- the oracles --------------------------------------------------------------------------------

def test_torch_rebuild_matches_transformers_oracle(case):
    family, oracle, _ = case
    got = torch_outputs(family, oracle)
    assert_close_where_unpadded(got, oracle, oracle["attention_mask"])
    # Padded positions too: a query with nothing to attend to gets zeros, as transformers' SDPA gives.
    for name in OUTPUTS:
        np.testing.assert_allclose(got[name], oracle[name], atol=ATOL, rtol=RTOL)


def test_export_matches_transformers_oracle_at_its_shape(case):
    family, oracle, session = case
    got = ort_outputs(session, oracle)
    assert_close_where_unpadded(got, oracle, oracle["attention_mask"])


@pytest.mark.parametrize("steps", [1, 5, 12, 20])
def test_export_matches_oracle_at_other_sequence_lengths(case, steps):
    """Attention is causal and every token gets wpe[0]: the first n steps alone give the
    oracle's first n outputs, so every prefix of the oracle is an oracle too."""
    family, oracle, session = case
    prefix = {k: np.ascontiguousarray(v[:, :steps]) for k, v in oracle.items()}
    assert_close_where_unpadded(ort_outputs(session, prefix), prefix, prefix["attention_mask"])
    assert_close_where_unpadded(torch_outputs(family, prefix), prefix, prefix["attention_mask"])


def test_padded_positions_do_not_leak_into_real_ones(case):
    family, oracle, session = case
    scrambled = {k: v.copy() for k, v in oracle.items()}
    pad = oracle["attention_mask"] == 0
    assert pad.any()
    rng = np.random.default_rng(7)
    for name in ("states", "actions", "returns_to_go"):
        scrambled[name][pad] = rng.normal(0, 50, scrambled[name][pad].shape).astype(np.float32)
    scrambled["timesteps"][pad] = rng.integers(0, family.config["max_ep_len"], int(pad.sum()))
    for run in (lambda f: ort_outputs(session, f), lambda f: torch_outputs(family, f)):
        before, after = run(oracle), run(scrambled)
        for name in OUTPUTS:
            assert np.array_equal(before[name][~pad], after[name][~pad]), name
            assert np.isfinite(after[name]).all()


# -- the export ---------------------------------------------------------------------------------

def test_export_has_optimum_names_and_dynamic_axes(tmp_path):
    family = DecisionTransformer.load(TINYHOPPER)
    model = onnx.load_from_string(family.export(tmp_path / "dt.onnx"))
    assert (tmp_path / "dt.onnx").read_bytes() == model.SerializeToString()

    def signature(values):
        return [(v.name, onnx.helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type).name,
                 [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]) for v in values]

    assert signature(model.graph.input) == [
        ("states", "float32", ["batch", "sequence", 11]),
        ("actions", "float32", ["batch", "sequence", 3]),
        ("timesteps", "int64", ["batch", "sequence"]),
        ("returns_to_go", "float32", ["batch", "sequence", 1]),
        ("attention_mask", "int64", ["batch", "sequence"]),
    ]
    assert signature(model.graph.output) == [
        ("state_preds", "float32", ["batch", "sequence", 11]),
        ("action_preds", "float32", ["batch", "sequence", 3]),
        ("return_preds", "float32", ["batch", "sequence", 1]),
    ]
    assert [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] == [17]
    initializers = {i.name for i in model.graph.initializer}
    assert "embed_timestep.weight" in initializers and "encoder.h.1.attn.c_attn.weight" in initializers


@pytest.mark.parametrize("batch,steps", [(1, 1), (3, 5), (8, 20), (2, 33)])
def test_export_runs_at_shapes_other_than_the_trace(batch, steps):
    family = DecisionTransformer.load(TINYHOPPER)
    assert family.io_spec().axes == {"batch": 2, "sequence": 20}  # the trace's shape
    feeds = family.make_feeds(batch, seed=batch * 100 + steps, sequence=steps)
    got = ort_outputs(ort_session(family), feeds.arrays)
    assert_close_where_unpadded(got, torch_outputs(family, feeds.arrays), feeds.arrays["attention_mask"])
    assert all(np.isfinite(v).all() for v in got.values())


# -- validation inputs --------------------------------------------------------------------------

@pytest.mark.parametrize("steps", [1, 5, 20])
def test_validation_inputs_look_like_trajectories(steps):
    family = DecisionTransformer.load(TINYHOPPER)
    feeds = family.make_feeds(32, seed=0, sequence=steps)
    a = feeds.arrays
    assert a["states"].shape == (32, steps, 11) and a["timesteps"].dtype == np.int64
    assert a["attention_mask"].dtype == np.int64 and set(np.unique(a["attention_mask"])) <= {0, 1}
    mask = a["attention_mask"].astype(bool)
    assert mask[:, -1].all()  # every row has at least its last step
    assert (np.diff(mask.astype(int), axis=1) >= 0).all()  # padding only on the left
    if steps > 1:
        assert (~mask).any(axis=1).sum() >= 3  # some rows are left-padded
        assert feeds.rows[1] == "first step" and mask[1].sum() == 1
    assert np.abs(a["actions"]).max() <= 1.0
    assert 0 <= a["timesteps"].min() and a["timesteps"].max() <= 999
    assert a["timesteps"][3, -1] == 999  # a window ending at max_ep_len - 1
    for row in range(32):
        real = mask[row]
        assert (np.diff(a["timesteps"][row][real]) >= 0).all()
        assert (np.diff(a["returns_to_go"][row, real, 0]) <= 0).all()
    valid = family.valid_elements(a)
    assert set(valid) == set(OUTPUTS) and valid["action_preds"].shape == (32, steps, 1)
    assert feeds.digest == family.make_feeds(32, seed=0, sequence=steps).digest


def test_validation_shapes_cover_several_lengths_and_batch_one():
    family = DecisionTransformer.load(TINYHOPPER)
    assert family.validation_shapes(64) == [
        {"batch": 64, "sequence": 20}, {"batch": 64, "sequence": 5},
        {"batch": 64, "sequence": 1}, {"batch": 1, "sequence": 20},
    ]


# -- reading the folder -------------------------------------------------------------------------

def test_folder_config_and_weights_paths_all_load():
    for path in (TINYHOPPER, TINYHOPPER / "config.json", TINYHOPPER / "model.safetensors"):
        family = converters.load(path)
        assert isinstance(family, DecisionTransformer)
        assert family.source == TINYHOPPER / "model.safetensors"
    assert converters.load("sample:tinyhopper").config["activation_function"] == "gelu_new"


def test_safetensors_preferred_and_pickle_weights_read_safely(tmp_path):
    folder = fixture_path(HOPPER)
    both = DecisionTransformer.load(folder)
    assert both.source.name == "model.safetensors"
    assert "pytorch_model.bin is also there and was not read" in both.source_note
    only_bin = tmp_path / "bin-only"
    only_bin.mkdir()
    shutil.copy(folder / "config.json", only_bin)
    shutil.copy(folder / "pytorch_model.bin", only_bin)
    from_bin = DecisionTransformer.load(only_bin)
    assert from_bin.source.name == "pytorch_model.bin" and from_bin.source_note == ""
    for key, value in both.state.items():
        assert torch.equal(value, from_bin.state[key]), key


def test_half_precision_weights_are_computed_in_float32(tmp_path):
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "half"
    shutil.copytree(TINYHOPPER, folder)
    state = load_file(str(folder / "model.safetensors"))
    save_file({k: v.half() for k, v in state.items()}, str(folder / "model.safetensors"))
    family = DecisionTransformer.load(folder)
    assert "stored as float16, computed in float32" in family.summary()["weights"]
    assert all(v.dtype == torch.float32 for v in family.state.values())


def test_summary_and_graph_contents():
    family = DecisionTransformer.load(TINYHOPPER)
    summary = family.summary()
    assert summary["transformer"] == "GPT-2, 2 layers x 2 heads, hidden 16, inner 24, gelu_new"
    assert summary["state_dim"] == 11 and summary["act_dim"] == 3 and summary["context_length"] == 20
    assert summary["parameters"] == sum(v.numel() for v in family.state.values())
    assert summary["rollout_settings"].endswith("rollout.json")
    contents = family.graph_contents()
    assert "wpe[0]" in contents["position embedding"]
    assert contents["state normalization"].startswith("not inside")


def test_validate_reports_every_shape_and_excludes_padding(run_cli, tmp_path):
    result = run_cli("validate", "sample:tinyhopper", "--batch", "12", "--json", tmp_path / "r.json")
    assert result.exit_code == 0, result.output
    assert "ort-cpu vs torch-cpu  (batch 12, sequence 5)" in result.output
    assert "padding excluded" in result.output and "attention_mask is 0" in result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["verdict"] == "pass" and report["family"] == "decision_transformer"
    shapes = [c["shape"] for c in report["comparisons"]]
    assert shapes == [{"batch": 12, "sequence": 20}, {"batch": 12, "sequence": 5},
                      {"batch": 12, "sequence": 1}, {"batch": 1, "sequence": 20}]
    assert [s["axes"] for s in report["inputs"]["shapes"]] == shapes
    for comparison in report["comparisons"]:
        mask_elements = {o["output"]: o["scope"] for o in comparison["outputs"]}
        assert all("(padding excluded)" in scope for scope in mask_elements.values())
        for o in comparison["outputs"]:
            assert o["passed"] and o["atol"] == 1e-5 and o["rtol"] == 1e-5
    full = report["comparisons"][0]["outputs"][1]  # action_preds at batch 12, sequence 20
    assert full["metrics"]["elements"] < 12 * 20 * 3  # padded positions were left out
    assert any("attention_mask is 0" in note for note in report["notes"])


def test_a_reference_failing_at_one_length_keeps_every_other_result(run_cli, tmp_path, monkeypatch):
    from rlparity.validators.torch_runtime import TorchRuntime

    run = TorchRuntime.run

    def fails_at_sequence_5(self, feeds):
        if feeds["states"].shape[1] == 5:
            raise RuntimeError("no kernel for this length")
        return run(self, feeds)

    monkeypatch.setattr(TorchRuntime, "run", fails_at_sequence_5)
    result = run_cli("validate", "sample:tinyhopper", "--batch", "4", "--json", tmp_path / "r.json")
    assert result.exit_code == 1, result.output
    assert "torch-cpu: RuntimeError at batch 4, sequence 5: no kernel for this length" in result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["verdict"] == "incomplete"
    # the reference stopped at sequence 5: the trace length was compared, nothing after it
    assert [c["shape"] for c in report["comparisons"]] == [{"batch": 4, "sequence": 20}]
    assert all(c["passed"] for c in report["comparisons"])


def test_inspect_and_export_commands(run_cli, tmp_path):
    result = run_cli("inspect", TINYHOPPER, "--json", tmp_path / "info.json")
    assert result.exit_code == 0, result.output
    info = json.loads((tmp_path / "info.json").read_text())
    assert info["family"] == "decision_transformer"
    assert [t["name"] for t in info["io_spec"]["inputs"]] == ["states", "actions", "timesteps", "returns_to_go",
                                                                 "attention_mask"]
    result = run_cli("export", TINYHOPPER, "-o", tmp_path / "tiny.onnx")
    assert result.exit_code == 0, result.output
    onnx.checker.check_model(onnx.load(str(tmp_path / "tiny.onnx")), full_check=True)


def test_rebuild_runs_with_transformers_absent(tmp_path):
    """validate in a fresh process where importing transformers fails."""
    script = (
        "import sys; sys.modules['transformers'] = None\n"
        "from rlparity.cli import main\n"
        f"sys.argv = ['rlparity', 'validate', {str(TINYHOPPER)!r}, '--batch', '8', '--json', {str(tmp_path / 'r.json')!r}]\n"
        "main()\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((tmp_path / "r.json").read_text())["verdict"] == "pass"


# -- live against transformers: configurations no fixture covers --------------------------------

def _transformers():
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    return transformers


def _hf_model(tmp_path, safe=True, **config):
    transformers = _transformers()
    torch.manual_seed(0)
    base = dict(state_dim=5, act_dim=2, hidden_size=24, n_layer=2, n_head=3, max_ep_len=64, n_positions=16)
    model = transformers.DecisionTransformerModel(transformers.DecisionTransformerConfig(**{**base, **config})).eval()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.3)
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    if not safe:  # what transformers 4 wrote by default: a plain state-dict pickle
        torch.save(model.state_dict(), folder / "pytorch_model.bin")
        (folder / "model.safetensors").unlink()
    return folder, model


VARIANTS = {
    "relu": {},
    "gelu exact, no tanh": {"activation_function": "gelu", "action_tanh": False},
    "gelu_new, inverse layer scaling": {"activation_function": "gelu_new", "scale_attn_by_inverse_layer_idx": True},
    "silu, unscaled attention, n_inner": {"activation_function": "silu", "scale_attn_weights": False, "n_inner": 40},
    "quick_gelu, eps 1e-3, one head": {"activation_function": "quick_gelu", "layer_norm_epsilon": 1e-3, "n_head": 1},
    "gelu_pytorch_tanh, reorder_and_upcast": {"activation_function": "gelu_pytorch_tanh", "reorder_and_upcast_attn": True},
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_config_variants_match_transformers(tmp_path, variant):
    folder, model = _hf_model(tmp_path, **VARIANTS[variant])
    family = DecisionTransformer.load(folder)
    session = ort_session(family)
    for batch, steps in ((4, 7), (1, 1), (3, 20)):
        feeds = family.make_feeds(batch, seed=steps, sequence=steps).arrays
        with torch.no_grad():
            out = model(**{k: torch.from_numpy(v) for k, v in feeds.items()}, return_dict=True)
        want = {n: out[n].numpy() for n in OUTPUTS}
        assert_close_where_unpadded(torch_outputs(family, feeds), want, feeds["attention_mask"])
        assert_close_where_unpadded(ort_outputs(session, feeds), want, feeds["attention_mask"])


def test_pickle_weights_of_a_transformers_model_load(tmp_path):
    folder, model = _hf_model(tmp_path, safe=False)
    assert (folder / "pytorch_model.bin").exists() and not (folder / "model.safetensors").exists()
    family = DecisionTransformer.load(folder)
    feeds = family.make_feeds(4, seed=3, sequence=6).arrays
    with torch.no_grad():
        out = model(**{k: torch.from_numpy(v) for k, v in feeds.items()}, return_dict=True)
    assert_close_where_unpadded(torch_outputs(family, feeds), {n: out[n].numpy() for n in OUTPUTS},
                                feeds["attention_mask"])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_reduced_precision_keeps_padding_finite(dtype):
    """In half precision a -inf mask would turn fully padded rows into NaN that leaks into
    real positions (0 * NaN); the rebuild masks with the dtype's lowest finite value."""
    import copy

    family = DecisionTransformer.load(TINYHOPPER)
    oracle = dict(np.load(DATA / "TinyHopper.oracle.npz"))
    module = copy.deepcopy(family.build_torch()).to(dtype)
    args = [torch.from_numpy(oracle[n]) for n in family.io_spec().input_names]
    with torch.no_grad():
        out = module(*(a.to(dtype) if a.is_floating_point() else a for a in args))
    got = {n: o.float().numpy() for n, o in zip(OUTPUTS, out)}
    assert all(np.isfinite(v).all() for v in got.values())
    assert_close_where_unpadded(got, oracle, oracle["attention_mask"], atol=0.1, rtol=0.05)
