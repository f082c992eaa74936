"""Every class of bad Decision Transformer folder: one line naming the file, exit 1, no code run."""
from __future__ import annotations

import json
import os
import random
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.conftest import TINYHOPPER
from tests.converters.test_bad_input import Hostile, assert_clean_error


def _copy(tmp_path, name="model"):
    folder = tmp_path / name
    shutil.copytree(TINYHOPPER, folder)
    return folder


def _edit_config(tmp_path, **changes):
    folder = _copy(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _edit_weights(tmp_path, edit):
    folder = _copy(tmp_path)
    state = load_file(str(folder / "model.safetensors"))
    edit(state)
    save_file(state, str(folder / "model.safetensors"))
    return folder


def _write(folder, name, data):
    (folder / name).write_bytes(data)
    return folder


def _without(tmp_path, *names):
    folder = _copy(tmp_path)
    for name in names:
        (folder / name).unlink()
    return folder


def _set_nan(state):
    state["encoder.h.0.mlp.c_fc.weight"][0, 0] = float("nan")


BAD_FOLDERS = {
    # (make the folder, the path the error names relative to it, a fragment of the message)
    "missing weights": (lambda tmp: _without(tmp, "model.safetensors"), "",
                        "no weights: neither model.safetensors nor pytorch_model.bin"),
    "state_dim mismatch": (lambda tmp: _edit_config(tmp, state_dim=17), "model.safetensors",
                           "embed_state.weight has shape [16, 11], but config.json (state_dim 17, hidden_size 16) implies [16, 17]"),
    "act_dim mismatch": (lambda tmp: _edit_config(tmp, act_dim=6), "model.safetensors",
                         "config.json (act_dim 6, hidden_size 16) implies [16, 6]"),
    "n_layer mismatch": (lambda tmp: _edit_config(tmp, n_layer=3), "model.safetensors",
                         "holds 2 transformer layers (encoder.h.*), but config.json says n_layer 3"),
    "hidden_size mismatch": (lambda tmp: _edit_config(tmp, hidden_size=32), "model.safetensors",
                             "implies [1000, 32]"),
    "max_ep_len mismatch": (lambda tmp: _edit_config(tmp, max_ep_len=4096), "model.safetensors",
                            "embed_timestep.weight has shape [1000, 16], but config.json (max_ep_len 4096"),
    "corrupt safetensors": (lambda tmp: _write(_copy(tmp), "model.safetensors", random.Random(0).randbytes(4096)),
                            "model.safetensors", "not a readable safetensors file"),
    "truncated safetensors": (lambda tmp: _write(_copy(tmp), "model.safetensors",
                                                 (TINYHOPPER / "model.safetensors").read_bytes()[:40_000]),
                              "model.safetensors", "not a readable safetensors file: truncated or corrupt"),
    "empty safetensors": (lambda tmp: _write(_copy(tmp), "model.safetensors", b""), "model.safetensors",
                          "file is empty"),
    "another model_type": (lambda tmp: _edit_config(tmp, model_type="gpt2"), "config.json",
                           "model_type 'gpt2': rlparity reads Hugging Face models of model_type 'decision_transformer' only"),
    "config not JSON": (lambda tmp: _write(_copy(tmp), "config.json", b"{state_dim: 11"), "config.json",
                        "not valid JSON"),
    "config not an object": (lambda tmp: _write(_copy(tmp), "config.json", b"[1, 2]"), "config.json",
                             "expected a JSON object, found list"),
    "bad config value": (lambda tmp: _edit_config(tmp, n_head="two"), "config.json",
                         "n_head must be a positive integer, found 'two'"),
    "heads do not divide hidden": (lambda tmp: _edit_config(tmp, n_head=3), "config.json",
                                   "hidden_size 16 is not divisible by n_head 3"),
    "unknown activation": (lambda tmp: _edit_config(tmp, activation_function="xielu"), "config.json",
                           "activation_function 'xielu'"),
    "missing weight": (lambda tmp: _edit_weights(tmp, lambda s: s.pop("encoder.h.1.ln_2.bias")), "model.safetensors",
                       "missing weight encoder.h.1.ln_2.bias"),
    "unexpected weight": (lambda tmp: _edit_weights(tmp, lambda s: s.update({"value_head.weight": torch.zeros(1, 16)})),
                          "model.safetensors", "unexpected weight value_head.weight"),
    "NaN weight": (lambda tmp: _edit_weights(tmp, _set_nan), "model.safetensors",
                   "weight encoder.h.0.mlp.c_fc.weight holds NaN or infinite values"),
    "integer weight": (lambda tmp: _edit_weights(tmp, lambda s: s.update({"embed_ln.bias": torch.zeros(16, dtype=torch.int32)})),
                       "model.safetensors", "weight embed_ln.bias is int32, expected floating point"),
    "pickle weights not a dict": (lambda tmp: _pickle_weights(tmp, torch.zeros(3)), "pytorch_model.bin",
                                  "not a transformers weights file"),
}


def _pickle_weights(tmp_path, obj):
    folder = _without(tmp_path, "model.safetensors")
    torch.save(obj, folder / "pytorch_model.bin")
    return folder


@pytest.mark.parametrize("command", ["inspect", "validate", "export"])
@pytest.mark.parametrize("kind", list(BAD_FOLDERS))
def test_bad_folder_gives_one_clean_line(tmp_path, run_cli, kind, command):
    make, named, fragment = BAD_FOLDERS[kind]
    folder = make(tmp_path)
    args = [command, folder] + (["-o", tmp_path / "out.onnx"] if command == "export" else [])
    result = run_cli(*args)
    assert_clean_error(result, folder / named if named else folder, fragment)
    assert not (tmp_path / "out.onnx").exists()


def test_folder_of_another_family_is_not_claimed(tmp_path, run_cli):
    """A config.json without model_type and without transformers weights is not ours."""
    folder = tmp_path / "sb3-like"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"policy_class": "MlpPolicy"}))
    assert_clean_error(run_cli("inspect", folder), folder, "no checkpoint rlparity can read in this folder")


def test_family_forced_on_a_folder_without_config(tmp_path, run_cli):
    folder = tmp_path / "empty"
    folder.mkdir()
    result = run_cli("inspect", folder, "--family", "decision_transformer")
    assert_clean_error(result, folder, "no config.json in this folder")


def test_hostile_pytorch_model_bin_never_runs(tmp_path, run_cli):
    marker = tmp_path / "PWNED"
    folder = _pickle_weights(tmp_path, {"embed_ln.weight": Hostile(marker)})
    result = run_cli("validate", folder)
    assert_clean_error(result, folder / "pytorch_model.bin", "nothing from it was run")
    assert not marker.exists()


def test_hostile_config_is_only_read_as_json(tmp_path, run_cli):
    """A config.json is data: nothing in it is imported or executed (e.g. auto_map code)."""
    marker = tmp_path / "PWNED"
    folder = _edit_config(tmp_path, auto_map={"AutoModel": "evil.Model"}, activation_function="relu",
                          __import__=f"os.system('touch {marker}')")
    result = run_cli("inspect", folder)
    # relu instead of the weights' gelu_new still loads: activations have no weights
    assert result.exit_code == 0, result.output
    assert not marker.exists()
    assert set(os.listdir(folder)) == {"config.json", "model.safetensors", "rollout.json"}


def test_sharded_weights_are_not_supported_yet(tmp_path, run_cli):
    folder = _without(tmp_path, "model.safetensors")
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {}}))
    result = run_cli("inspect", folder)
    assert_clean_error(result, folder / "model.safetensors.index.json", "sharded weights")
    assert "not supported yet" in result.output
