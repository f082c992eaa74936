"""The Stable-Baselines3 converter against SB3 itself: the real CartPole model and its oracle,
and tiny models of every supported kind that SB3 builds and saves in the test."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from rlparity import converters
from rlparity.converters.sb3 import SB3Policy
from rlparity.errors import NotSupportedYet, UserError
from tests.conftest import REPO, SAMPLES, fixture_path

CARTPOLE = SAMPLES / "sb3" / "ppo-seals-CartPole-v0.zip"
ATOL = RTOL = 1e-5  # the issue's bar against SB3's own numbers


def run_ort(family, obs: np.ndarray) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(family.export(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, {"obs": obs})))


def run_torch(family, obs: np.ndarray) -> dict[str, np.ndarray]:
    with torch.no_grad():
        outputs = family.build_torch()(torch.from_numpy(obs))
    return {name: o.numpy() for name, o in zip(family.io_spec().output_names, outputs)}


# -- the real model: HumanCompatibleAI/ppo-seals-CartPole-v0's recipe, saved by SB3 2.9.2 --------

def test_cartpole_export_matches_the_oracle_on_all_rows():
    oracle = np.load(fixture_path("sb3/ppo-seals-CartPole-v0.zip.oracle.npz"))
    family = converters.load(fixture_path("sb3/ppo-seals-CartPole-v0.zip"))
    assert isinstance(family, SB3Policy)
    for run in (run_ort, run_torch):
        out = run(family, oracle["obs"])
        assert out["actions"].dtype == np.int64 and out["actions"].shape == (64,)
        np.testing.assert_array_equal(out["actions"], oracle["deterministic_actions"])
        np.testing.assert_allclose(out["logits"], oracle["logits"], atol=ATOL, rtol=RTOL)
        np.testing.assert_allclose(out["values"], oracle["value"], atol=ATOL, rtol=RTOL)
    # the rebuild in torch is SB3's own arithmetic: every bit equal
    torch_out = run_torch(family, oracle["obs"])
    assert torch_out["logits"].tobytes() == oracle["logits"].tobytes()
    assert torch_out["values"].tobytes() == oracle["value"].tobytes()


def test_cartpole_export_io_follows_the_contract():
    model = onnx.load_from_string(converters.load(CARTPOLE).export())
    onnx.checker.check_model(model, full_check=True)
    assert [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] == [17]

    def dims(v):
        return [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]

    assert [(i.name, dims(i), i.type.tensor_type.elem_type) for i in model.graph.input] == [
        ("obs", ["batch", 4], onnx.TensorProto.FLOAT)]
    assert [(o.name, dims(o), o.type.tensor_type.elem_type) for o in model.graph.output] == [
        ("actions", ["batch"], onnx.TensorProto.INT64),
        ("logits", ["batch", 2], onnx.TensorProto.FLOAT),
        ("values", ["batch", 1], onnx.TensorProto.FLOAT),
    ]
    # SB3's parameter names survive into the graph
    names = {i.name for i in model.graph.initializer}
    assert {"mlp_extractor.policy_net.0.weight", "action_net.weight", "value_net.bias"} <= names


def test_cartpole_summary_reads_only_readable_fields():
    family = converters.load(CARTPOLE)
    facts = family.summary()
    assert facts["algorithm"] == "PPO" and facts["stable_baselines3"] == "2.9.2"
    assert facts["policy layers (pi)"] == [64, 64] and facts["value layers (vf)"] == [64, 64]
    assert facts["activation"] == "ReLU (from the data)"
    assert facts["actions"] == "Discrete(2)" and facts["observations"] == "Box[4] float32"
    assert facts["training_step"] == 102400
    assert facts["parameters"] == 4 * 64 + 64 + 64 * 64 + 64 + 2 * 64 + 2 + 4 * 64 + 64 + 64 * 64 + 64 + 64 + 1


def test_unzipped_folder_and_hub_folder(tmp_path):
    import zipfile

    unzipped = tmp_path / "unzipped"
    with zipfile.ZipFile(CARTPOLE) as archive:
        for name in ("data", "policy.pth"):
            (unzipped / name).parent.mkdir(parents=True, exist_ok=True)
            (unzipped / name).write_bytes(archive.read(name))
    hub = tmp_path / "hub"
    hub.mkdir()
    (hub / "ppo-seals-CartPole-v0.zip").write_bytes(CARTPOLE.read_bytes())
    (hub / "README.md").write_text("model card")
    obs = np.random.default_rng(0).standard_normal((16, 4)).astype(np.float32)
    expected = run_torch(converters.load(CARTPOLE), obs)
    for folder in (unzipped, hub):
        family = converters.load(folder)
        assert family.name == "sb3"
        np.testing.assert_array_equal(run_ort(family, obs)["actions"], expected["actions"])
    assert converters.load(hub).source.name == "ppo-seals-CartPole-v0.zip"


def test_rlzoo_folder_prefers_the_final_model(tmp_path):
    for name in ("seals-CartPole-v0.zip", "best_model.zip", "rl_model_5000_steps.zip"):
        (tmp_path / name).write_bytes(CARTPOLE.read_bytes())
    family = converters.load(tmp_path)
    assert family.source.name == "seals-CartPole-v0.zip" and "holds 3 model(s)" in family.source_note
    (tmp_path / "another.zip").write_bytes(CARTPOLE.read_bytes())
    with pytest.raises(UserError, match="several Stable-Baselines3 models"):
        converters.load(tmp_path)


def test_validate_shows_probabilities_for_a_discrete_policy(run_cli, tmp_path):
    result = run_cli("validate", "sample:cartpole", "--json", tmp_path / "r.json")
    assert result.exit_code == 0, result.output
    assert "logits, softmax probabilities and argmax" in result.output and "verdict: PASS" in result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["verdict"] == "pass" and report["family"] == "sb3"
    view = report["extra"]["decisions"]
    assert view["columns"][:5] == ["row", "input", "obs", "logits", "probabilities"]
    assert view["columns"][5:] == ["action torch-cpu", "action ort-cpu"]
    assert len(view["rows"]) == 8 and view["inputs_digest"].startswith("sha256:")
    for row in view["rows"]:
        logits, probabilities, action = np.array(row[3]), np.array(row[4]), row[5]
        assert np.isclose(probabilities.sum(), 1.0) and np.allclose(np.exp(logits), probabilities, atol=1e-7)
        assert action == int(np.argmax(probabilities)) == row[6]
    assert report["graph_contents"]["actions"].startswith("inside: softmax and argmax")


def test_export_and_inspect_cli(run_cli, tmp_path):
    out = tmp_path / "sub" / "cartpole.onnx"
    result = run_cli("export", "sample:cartpole", "-o", out)
    assert result.exit_code == 0, result.output
    assert "opset 17" in result.output and out.is_file()
    result = run_cli("inspect", "sample:cartpole", "--json", tmp_path / "i.json")
    assert result.exit_code == 0 and "ActorCriticPolicy" in result.output
    info = json.loads((tmp_path / "i.json").read_text())
    assert info["family"] == "sb3" and [t["name"] for t in info["io_spec"]["outputs"]] == ["actions", "logits", "values"]


# -- tiny models of every supported kind, built and saved by SB3 in the test -----------------

@pytest.fixture(scope="module")
def sb3_models(tmp_path_factory):
    from tests.converters import sb3_oracle

    built = {}
    for kind in sb3_oracle.KINDS:
        folder = tmp_path_factory.mktemp(kind)
        built[kind] = sb3_oracle.build(kind, folder)
    return built


@pytest.mark.parametrize("kind", ["a2c-discrete-tanh", "ppo-box-clip", "ppo-gsde-squash", "dqn",
                                  "ppo-vecnormalize", "dqn-vecnormalize"])
def test_export_equals_sb3_predict(sb3_models, kind):
    from tests.converters import sb3_oracle

    path, model, vec_normalize = sb3_models[kind]
    family = converters.load(path)
    obs_shape = model.observation_space.shape
    obs = sb3_oracle.observations(obs_shape, scale=3.0)
    if vec_normalize is not None:  # raw observations around the statistics, some beyond the clip
        std = np.sqrt(vec_normalize.obs_rms.var)
        obs = (vec_normalize.obs_rms.mean + obs * std).astype(np.float32)
        assert "VecNormalize statistics used" in family.source_note
        assert family.graph_contents()["observation normalization"].startswith("inside: clip((obs - mean)")
    expected = sb3_oracle.oracle(model, obs, vec_normalize)
    for run in (run_ort, run_torch):
        out = run(family, obs)
        assert out["actions"].dtype == expected["actions"].dtype, run.__name__
        np.testing.assert_array_equal(out["actions"], expected["actions"]) if out["actions"].dtype == np.int64 else \
            np.testing.assert_allclose(out["actions"], expected["actions"], atol=ATOL, rtol=RTOL)
        for name in ("logits", "mean", "q_values", "values"):
            if name in expected:
                np.testing.assert_allclose(out[name], expected[name], atol=ATOL, rtol=RTOL, err_msg=f"{kind} {name}")
    if kind in ("ppo-box-clip", "ppo-gsde-squash"):  # means far outside the bounds: clip / squash at work
        low, high = model.action_space.low, model.action_space.high
        assert ((expected["mean"] < low) | (expected["mean"] > high)).any()
        assert ((expected["actions"] >= low) & (expected["actions"] <= high)).all()
        if kind == "ppo-box-clip":
            assert (expected["actions"] == low).any() and (expected["actions"] == high).any()


def test_families_read_architecture_from_the_data(sb3_models):
    facts = {kind: converters.load(path).summary() for kind, (path, _, _) in sb3_models.items()}
    assert facts["a2c-discrete-tanh"]["algorithm"] == "A2C"
    assert facts["a2c-discrete-tanh"]["activation"] == "Tanh (from the data)"
    assert facts["a2c-discrete-tanh"]["policy layers (pi)"] == [32] == facts["a2c-discrete-tanh"]["value layers (vf)"]
    assert facts["ppo-box-clip"]["activation"] == "Tanh (SB3's default)"
    assert facts["ppo-box-clip"]["observations"] == "Box[2, 3] float32"
    assert facts["ppo-box-clip"]["actions"].startswith("Box[2] float32, low [-1, 0], high [2, 0.5]")
    assert facts["ppo-gsde-squash"]["gSDE"] is True and facts["ppo-gsde-squash"]["squash_output"] is True
    assert facts["ppo-gsde-squash"]["value layers (vf)"] == [24, 8]
    assert facts["dqn"]["algorithm"] == "DQN" and facts["dqn"]["Q-network layers"] == [32, 16]
    assert facts["dqn"]["activation"] == "ReLU (SB3's default)"
    assert facts["ppo-vecnormalize"]["vec_normalize"]["clip_obs"] == 3.0


def test_shared_layers_of_sb3_before_1_8(sb3_models, tmp_path):
    """SB3 < 1.8 could share the first layers between actor and critic (mlp_extractor.shared_net).
    Today's SB3 cannot build one, so the oracle is a model whose first pi and vf layers hold the
    same weights, rewritten into the old layout, net_arch spelling included."""
    from tests.converters import sb3_oracle

    model = sb3_oracle.sb3.PPO("MlpPolicy", "CartPole-v1", seed=7,
                               policy_kwargs=dict(net_arch=dict(pi=[32, 16], vf=[32, 8])))
    extractor = model.policy.mlp_extractor
    with torch.no_grad():
        extractor.value_net[0].weight.copy_(extractor.policy_net[0].weight)
        extractor.value_net[0].bias.copy_(extractor.policy_net[0].bias)
    model.save(str(tmp_path / "separate.zip"))

    def to_shared(state):
        moved = {}
        for key, value in state.items():
            key = (key.replace("mlp_extractor.policy_net.0.", "mlp_extractor.shared_net.0.")
                   .replace("mlp_extractor.policy_net.2.", "mlp_extractor.policy_net.0.")
                   .replace("mlp_extractor.value_net.2.", "mlp_extractor.value_net.0."))
            if not key.startswith("mlp_extractor.value_net.0.") or value.shape[0] == 8:
                moved[key] = value
        return moved

    def old_net_arch(data):
        data["policy_kwargs"]["net_arch"] = [32, {"pi": [16], "vf": [8]}]

    shared = sb3_oracle.rewrite_zip(tmp_path / "separate.zip", tmp_path / "shared.zip", old_net_arch, to_shared)
    family = converters.load(shared)
    assert family.summary()["shared layers"] == [32]
    obs = sb3_oracle.observations((4,))
    expected = sb3_oracle.oracle(model, obs)
    out = run_ort(family, obs)
    np.testing.assert_array_equal(out["actions"], expected["actions"])
    np.testing.assert_allclose(out["logits"], expected["logits"], atol=ATOL, rtol=RTOL)
    np.testing.assert_allclose(out["values"], expected["values"], atol=ATOL, rtol=RTOL)


def test_data_and_weights_that_disagree_are_refused(sb3_models, tmp_path):
    from tests.converters import sb3_oracle

    path = sb3_models["a2c-discrete-tanh"][0]

    def wrong_arch(data):
        data["policy_kwargs"]["net_arch"] = [64, 64]

    bad = sb3_oracle.rewrite_zip(path, tmp_path / "bad.zip", data_edit=wrong_arch)
    with pytest.raises(UserError, match=r"data says net_arch \[64, 64\], but policy.pth has layers"):
        converters.load(bad)


def test_vec_normalize_option_and_mismatched_statistics(sb3_models, tmp_path, run_cli):
    path, _, _ = sb3_models["ppo-vecnormalize"]
    stats = path.parent / "vec_normalize.pkl"
    lone = tmp_path / "model.zip"
    lone.write_bytes(path.read_bytes())
    assert converters.load(lone).arch["normalization"] is None  # nothing beside it
    assert "none: no VecNormalize" in converters.load(lone).graph_contents()["observation normalization"]
    assert converters.load(lone, vec_normalize=stats).arch["normalization"]["norm_obs"] is True
    result = run_cli("validate", lone, "--vec-normalize", stats, "--batch", "16", "--json", tmp_path / "r.json")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert "vec_normalize.pkl" in report["graph_contents"]["observation normalization"]
    # statistics of a CartPole (4 observations) for a Pendulum policy (3)
    other = sb3_models["dqn-vecnormalize"][0].parent / "vec_normalize.pkl"
    result = run_cli("inspect", lone, "--vec-normalize", other)
    assert result.exit_code == 1
    assert "obs_rms.mean has shape [4], the policy observes [3]" in result.output


@pytest.mark.parametrize("edit, feature", [
    (lambda d: d["action_space"].update({":type:": "<class 'gymnasium.spaces.multi_discrete.MultiDiscrete'>"}),
     "MultiDiscrete action spaces"),
    (lambda d: d["observation_space"].update({":type:": "<class 'gymnasium.spaces.dict.Dict'>"}),
     "dict observations"),
    (lambda d: d["observation_space"].update({"_shape": [84, 84, 3], "dtype": "uint8"}), "image observations"),
    (lambda d: d["policy_class"].update({"__module__": "stable_baselines3.sac.policies"}), "SAC policies"),
    (lambda d: d["policy_class"].update({"__module__": "sb3_contrib.ppo_recurrent.policies"}), "sb3-contrib policies"),
    (lambda d: d["policy_kwargs"].update({"activation_fn": "<class 'my_project.nets.Snake'>"}), "activation"),
    (lambda d: d["policy_kwargs"].update(
        {"features_extractor_class": "<class 'stable_baselines3.common.torch_layers.NatureCNN'>"}),
     "features extractor"),
])
def test_not_supported_yet_is_said_clearly(tmp_path, run_cli, edit, feature):
    from tests.converters import sb3_oracle

    bad = sb3_oracle.rewrite_zip(CARTPOLE, tmp_path / "m.zip", data_edit=edit)
    with pytest.raises(NotSupportedYet, match=feature):
        converters.load(bad)
    result = run_cli("validate", bad)
    assert result.exit_code == 1 and "is not supported yet" in result.output and "Traceback" not in result.output


def test_rlparity_never_imports_stable_baselines3():
    """inspect, validate, export and rollout as a user runs them, in a fresh interpreter."""
    code = """
import sys, tempfile, os
from rlparity.cli import main
out = os.path.join(tempfile.mkdtemp(), "m.onnx")
for args in (["inspect", "sample:cartpole"], ["validate", "sample:cartpole", "--batch", "8"],
             ["export", "sample:cartpole", "-o", out],
             ["rollout", "sample:cartpole", "--env", "seals/CartPole-v0", "--episodes", "1"]):
    try:
        main(args, standalone_mode=False)
    except SystemExit as e:
        assert e.code in (0, None), (args, e.code)
print("LOADED", sorted(m for m in sys.modules if m.split(".")[0] in ("stable_baselines3", "sb3_contrib")))
print("GYMNASIUM", "gymnasium" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "LOADED []" in done.stdout
    assert "GYMNASIUM True" in done.stdout  # the rollout did run in the real environment


def test_families_without_a_decision_view_report_none(run_cli, tmp_path):
    result = run_cli("validate", "sample:tinybranches", "--batch", "8", "--draws", "32", "--json", tmp_path / "r.json")
    assert result.exit_code == 0, result.output
    assert "decisions" not in json.loads((tmp_path / "r.json").read_text())["extra"]
    assert "Decisions on the first" not in result.output
