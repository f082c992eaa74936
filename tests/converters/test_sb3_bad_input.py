"""Every class of bad Stable-Baselines3 input: one clear line naming the file, exit 1, no
traceback, no code run, nothing written outside the output path."""
from __future__ import annotations

import base64
import io
import json
import os
import pickle
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import torch

from tests.conftest import REPO, SAMPLES
from tests.converters.test_bad_input import Hostile, assert_clean_error

CARTPOLE = SAMPLES / "sb3" / "ppo-seals-CartPole-v0.zip"


def members() -> dict[str, bytes]:
    with zipfile.ZipFile(CARTPOLE) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def write_zip(path, content: dict[str, bytes], compression=zipfile.ZIP_STORED):
    with zipfile.ZipFile(path, "w", compression=compression) as archive:
        for name, payload in content.items():
            archive.writestr(name, payload)
    return path


def corrupt_compressed(path, compression):
    """The model zipped with ``compression``, its data member's compressed stream overwritten."""
    write_zip(path, members(), compression)
    raw = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("data")
    header = info.header_offset  # the local header: 30 bytes, then the name and extra field
    start = header + 30 + int.from_bytes(raw[header + 26:header + 28], "little") + \
        int.from_bytes(raw[header + 28:header + 30], "little")
    end = start + info.compress_size
    if compression == zipfile.ZIP_LZMA:
        start += 4 + raw[start + 2]  # past zipfile's lzma header and the properties it announces
    raw[start:end] = b"\xff" * (end - start)
    path.write_bytes(bytes(raw))
    return path


def torch_bytes(obj) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def without(name):
    content = members()
    content.pop(name)
    return content


def with_member(name, payload):
    return {**members(), name: payload}


def edited_data(edit):
    content = members()
    data = json.loads(content["data"])
    edit(data)
    content["data"] = json.dumps(data).encode()
    return content


BAD_MODELS = {
    "truncated zip": (lambda tmp: _bytes(tmp / "t.zip", CARTPOLE.read_bytes()[:50_000]), "truncated or corrupt zip archive"),
    "not a zip at all": (lambda tmp: _bytes(tmp / "r.zip", os.urandom(2048)), "truncated or corrupt zip archive"),
    "empty file": (lambda tmp: _bytes(tmp / "e.zip", b""), "file is empty"),
    "corrupt deflated member": (lambda tmp: corrupt_compressed(tmp / "d.zip", zipfile.ZIP_DEFLATED),
                                "truncated or corrupt zip archive (Error -3 while decompressing data"),
    "corrupt lzma member": (lambda tmp: corrupt_compressed(tmp / "l.zip", zipfile.ZIP_LZMA),
                            "truncated or corrupt zip archive (Corrupt input data)"),
    "zip without policy.pth": (lambda tmp: write_zip(tmp / "m.zip", without("policy.pth")), "the archive has no policy.pth"),
    "zip without data": (lambda tmp: write_zip(tmp / "m.zip", without("data")), "the archive has no data"),
    "data not JSON": (lambda tmp: write_zip(tmp / "m.zip", with_member("data", b"\x80\x04K\x01.")), "member data is not JSON"),
    "data a JSON list": (lambda tmp: write_zip(tmp / "m.zip", with_member("data", b"[1, 2]")), "not an object"),
    "data without spaces": (lambda tmp: write_zip(tmp / "m.zip", edited_data(lambda d: d.pop("observation_space"))),
                            "data has no observation_space"),
    "unreadable action bounds": (
        lambda tmp: write_zip(tmp / "m.zip", edited_data(lambda d: d["action_space"].update({"n": "many"}))),
        "action_space has no readable n"),
    "net_arch not lists": (
        lambda tmp: write_zip(tmp / "m.zip", edited_data(lambda d: d["policy_kwargs"].update({"net_arch": {"pi": 64}}))),
        "data says net_arch {'pi': 64}, but policy.pth has layers"),
    "policy.pth truncated": (
        lambda tmp: write_zip(tmp / "m.zip", with_member("policy.pth", members()["policy.pth"][:4000])),
        "policy.pth: truncated or corrupt"),
    "policy.pth not a state dict": (
        lambda tmp: write_zip(tmp / "m.zip", with_member("policy.pth", torch_bytes([torch.zeros(2)]))),
        "policy.pth is not a state dict of tensors"),
    "policy.pth missing a layer": (
        lambda tmp: write_zip(tmp / "m.zip", with_member("policy.pth", torch_bytes(
            {k: v for k, v in torch.load(io.BytesIO(members()["policy.pth"])).items() if k != "value_net.bias"}))),
        "policy.pth: missing layer value_net.bias"),
    "mis-shaped layer": (
        lambda tmp: write_zip(tmp / "m.zip", with_member("policy.pth", torch_bytes({
            **torch.load(io.BytesIO(members()["policy.pth"])), "mlp_extractor.policy_net.2.weight": torch.zeros(64, 60)}))),
        "layer mlp_extractor.policy_net.2 is mis-shaped"),
    "NaN weights": (
        lambda tmp: write_zip(tmp / "m.zip", with_member("policy.pth", torch_bytes({
            **torch.load(io.BytesIO(members()["policy.pth"])), "action_net.bias": torch.tensor([0.0, float("nan")])}))),
        "NaN or infinite"),
    "folder without a model": (lambda tmp: _bytes(tmp / "run" / "notes.txt", b"hi").parent,
                               "no checkpoint rlparity can read in this folder"),
}


def _bytes(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("command", ["inspect", "validate", "export"])
@pytest.mark.parametrize("kind", list(BAD_MODELS))
def test_bad_model_gives_one_clean_line(tmp_path, run_cli, kind, command):
    make, fragment = BAD_MODELS[kind]
    path = make(tmp_path)
    args = [command, path] + (["-o", tmp_path / "out.onnx"] if command == "export" else [])
    assert_clean_error(run_cli(*args), path, fragment)
    assert not (tmp_path / "out.onnx").exists()


@pytest.mark.parametrize("member", ["../escape.txt", "/absolute/path.txt", "sub/../../escape.txt", "..\\win.txt"])
def test_member_escaping_the_folder_is_refused(tmp_path, run_cli, member):
    work = tmp_path / "work"
    work.mkdir()
    path = write_zip(work / "m.zip", with_member(member, b"echo pwned"))
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    result = run_cli("export", path, "-o", work / "out" / "m.onnx")
    assert_clean_error(result, path, "escapes the archive's folder")
    # nothing written anywhere: not the export, not any member
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_hostile_pickle_in_policy_pth_never_runs(tmp_path, run_cli):
    marker = tmp_path / "PWNED"
    path = write_zip(tmp_path / "m.zip", with_member("policy.pth", torch_bytes({"action_net.weight": Hostile(marker)})))
    result = run_cli("validate", path)
    assert_clean_error(result, path, "policy.pth: refused to load")
    assert "posix.system" in result.output and "nothing from it was run" in result.output
    assert not marker.exists()


def test_hostile_serialized_fields_are_never_decoded(tmp_path, run_cli):
    """Every ':serialized:' field replaced by a pickle that would create a marker file: the
    model still loads and validates, because those fields are never decoded."""
    marker = tmp_path / "PWNED"
    payload = base64.b64encode(pickle.dumps(Hostile(marker), protocol=5)).decode()
    replaced = []

    def poison(data):
        for key, value in data.items():
            if isinstance(value, dict) and ":serialized:" in value:
                value[":serialized:"] = payload
                replaced.append(key)

    path = write_zip(tmp_path / "m.zip", edited_data(poison))
    assert {"policy_class", "policy_kwargs", "observation_space", "action_space"} <= set(replaced)
    result = run_cli("validate", path, "--batch", "8")
    assert result.exit_code == 0, result.output
    assert not marker.exists()
    # and the loaded pickle would have run: the payload is real
    pickle.loads(base64.b64decode(payload))
    assert marker.exists()


def test_hostile_vec_normalize_pickle_never_runs(tmp_path, run_cli):
    marker = tmp_path / "PWNED"
    stats = tmp_path / "vec_normalize.pkl"
    stats.write_bytes(pickle.dumps(Hostile(marker)))
    model = tmp_path / "model.zip"
    model.write_bytes(CARTPOLE.read_bytes())
    result = run_cli("validate", model)  # picked up from beside the model
    assert_clean_error(result, stats, "refused to load: the pickle asks to import posix.system")
    assert "nothing from it was run" in result.output
    assert not marker.exists()


def test_hostile_object_inside_real_statistics_never_runs(tmp_path, run_cli):
    """SB3's own RunningMeanStd, its mean replaced by an array holding a hostile object."""
    running_mean_std = pytest.importorskip("stable_baselines3.common.running_mean_std")
    marker = tmp_path / "PWNED"
    stats = running_mean_std.RunningMeanStd(shape=(4,))
    stats.mean = np.array([Hostile(marker)] * 4, dtype=object)
    path = tmp_path / "stats.pkl"
    path.write_bytes(pickle.dumps(stats))
    result = run_cli("inspect", CARTPOLE, "--vec-normalize", path)
    assert_clean_error(result, path, "refused to load: the pickle holds an array of Python objects")
    assert not marker.exists()


class NumpyDtype:
    """Pickles as ``numpy.dtype(spec)`` whose BUILD is given ``state``, as a real dtype pickles."""

    def __init__(self, spec, state):
        self.spec, self.state = spec, state

    def __reduce__(self):
        return np.dtype, (self.spec, False, True), self.state


FLOAT_STATE = (3, "<", None, None, None, -1, -1, 0)  # what np.dtype("f8") pickles as its state


def test_a_dtype_state_that_crashes_numpy_never_reaches_it(tmp_path):
    """numpy's dtype.__setstate__ crashes the interpreter (SIGSEGV) on a timedelta dtype given
    a float's state: the shipped entry point, in a process of its own, refuses the file."""
    stats = tmp_path / "stats.pkl"
    stats.write_bytes(pickle.dumps({"obs_rms": NumpyDtype("m8", FLOAT_STATE)}))
    done = subprocess.run([sys.executable, str(REPO / "cli.py"), "inspect", str(CARTPOLE), "--vec-normalize", str(stats)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert "refused to load: the pickle declares a numpy dtype of timedelta64 values" in done.stderr


@pytest.mark.parametrize("protocol", [3, 4, 5])
def test_numpy_arrays_and_scalars_still_load_at_every_protocol(tmp_path, protocol):
    from rlparity.converters.safe_load import load_restricted_pickle
    from rlparity.converters.sb3 import _vec_normalize_globals

    path = tmp_path / "arrays.pkl"
    path.write_bytes(pickle.dumps({"mean": np.arange(4.0).reshape(2, 2), "big_endian": np.arange(3, dtype=">i4"),
                                   "count": np.float64(2.5)}, protocol=protocol))
    loaded = load_restricted_pickle(path, _vec_normalize_globals(), "statistics")
    assert loaded["mean"].dtype == np.float64 and np.array_equal(loaded["mean"], np.arange(4.0).reshape(2, 2))
    assert loaded["big_endian"].tolist() == [0, 1, 2]  # its byte order honoured
    assert type(loaded["count"]) is np.float64 and loaded["count"] == 2.5


@pytest.mark.parametrize("content, fragment", [
    (lambda: pickle.dumps({"obs_rms": 1}), "not VecNormalize statistics"),
    (lambda: pickle.dumps(NumpyDtype("f8", (3, "|", None, ("a",), {"a": (np.dtype("f8"), 0)}, 8, 1, 0))),
     "declares a structured or malformed numpy dtype"),
    (lambda: pickle.dumps(eval), "asks to import builtins.eval"),
    (lambda: pickle.dumps(np.array([1, "x"], dtype=object)), "holds an array of Python objects"),
    (lambda: b"\x80\x04\x95", "truncated or corrupt"),
    (lambda: b"\x80\x04\x95" + b"\xff" * 8, "truncated or corrupt (FRAME length exceeds"),
])
def test_foreign_vec_normalize_pickles_are_refused(tmp_path, run_cli, content, fragment):
    stats = tmp_path / "stats.pkl"
    stats.write_bytes(content())
    result = run_cli("inspect", CARTPOLE, "--vec-normalize", stats)
    assert_clean_error(result, stats, fragment)


def test_missing_vec_normalize_file(tmp_path, run_cli):
    result = run_cli("inspect", CARTPOLE, "--vec-normalize", tmp_path / "nope.pkl")
    assert_clean_error(result, tmp_path / "nope.pkl", "no such file")
