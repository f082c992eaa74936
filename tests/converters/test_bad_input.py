"""Every class of bad input: one clear line naming the file, exit 1, no traceback, no code run."""
from __future__ import annotations

import io
import os
import pickle
import random
import re
import subprocess
import sys
import zipfile

import pytest
import torch

from tests.conftest import REPO, TINYWALKER

CHECKPOINT = TINYWALKER / "TinyWalker-1000.pt"


class Hostile:
    """Unpickling this runs a shell command that creates a marker file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _legacy_with_a_stray_storage_key(path):
    """torch's legacy (pre-zip) format, its list of storage keys naming one no tensor has."""
    buffer = io.BytesIO()
    torch.save({"Policy": {"w": torch.zeros(2)}}, buffer, _use_new_zipfile_serialization=False)
    data = buffer.getvalue()
    key = re.findall(rb"\d{6,}", data)[-1]  # the storage's key, listed last after the pickled objects
    at = data.rindex(key)
    return _write(path, data[:at] + (b"1" if key[:1] != b"1" else b"2") + data[at + 1:])


def _zip_with_a_name_not_utf8(path):
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("data-\u00e9.pkl", b"x")  # stored as UTF-8, flagged so
    return _write(path, path.read_bytes().replace("\u00e9".encode(), b"\xff\xfe"))


def _policy_with(tmp_path, name, edit):
    checkpoint = torch.load(CHECKPOINT, weights_only=True)
    edit(checkpoint["Policy"])
    path = tmp_path / name
    torch.save(checkpoint, path)
    return path


def _set(policy, key, value):
    policy[key] = value


BAD_FILES = {
    "truncated": (lambda tmp: _write(tmp / "t.pt", CHECKPOINT.read_bytes()[:10_000]), "truncated or corrupt"),
    "random bytes": (lambda tmp: _write(tmp / "r.pt", random.Random(0).randbytes(4096)), "PyTorch checkpoint"),
    "empty": (lambda tmp: _write(tmp / "e.pt", b""), "file is empty"),
    "legacy format, storage keys disagree": (lambda tmp: _legacy_with_a_stray_storage_key(tmp / "l.pt"),
                                             "not a readable PyTorch checkpoint: truncated or corrupt (storage key"),
    "zip whose names are not UTF-8": (lambda tmp: _zip_with_a_name_not_utf8(tmp / "z.pt"),
                                      "truncated or corrupt checkpoint archive ('utf-8' codec can't decode"),
    "not an ML-Agents dict": (
        lambda tmp: _save(tmp / "other.pt", {"model": {"w": torch.zeros(2)}}), "not an ML-Agents checkpoint"),
    "a bare tensor": (lambda tmp: _save(tmp / "tensor.pt", torch.zeros(3)), "not an ML-Agents checkpoint"),
    "missing layer": (
        lambda tmp: _policy_with(tmp, "missing.pt", lambda p: p.pop("network_body._body_endoder.seq_layers.2.weight")),
        "missing layer network_body._body_endoder.seq_layers.2.weight"),
    "missing head bias": (
        lambda tmp: _policy_with(tmp, "nobias.pt", lambda p: p.pop("action_model._continuous_distribution.mu.bias")),
        "missing layer action_model._continuous_distribution.mu.bias"),
    "mis-shaped layer": (
        lambda tmp: _policy_with(tmp, "shape.pt", lambda p: _set(p, "network_body._body_endoder.seq_layers.2.weight",
                                                                  torch.zeros(32, 30))),
        "seq_layers.2.weight has shape [32, 30], expected [32, 32]"),
    "mis-shaped constant": (
        lambda tmp: _policy_with(tmp, "const.pt", lambda p: _set(p, "version_number", torch.tensor([3.0, 3.0]))),
        "layer version_number has shape [2], but the architecture read from the other layers needs [1]"),
    "zero-variance normalizer": (
        lambda tmp: _policy_with(tmp, "var.pt", lambda p: p[
            "network_body.observation_encoder.processors.0.normalizer.running_variance"].__setitem__(3, 0.0)),
        "normalizer of observation 0 has zero or negative variance"),
    "NaN weights": (
        lambda tmp: _policy_with(tmp, "nan.pt", lambda p: p[
            "action_model._continuous_distribution.mu.weight"].__setitem__((0, 0), float("nan"))),
        "NaN or infinite"),
    "folder without checkpoint": (lambda tmp: _write(tmp / "run" / "notes.txt", b"hi").parent,
                                  "no checkpoint rlparity can read in this folder"),
    "no such path": (lambda tmp: tmp / "does-not-exist.pt", "no such file"),
}


def _write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _save(path, obj):
    torch.save(obj, path)
    return path


def assert_clean_error(result, path, fragment):
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert str(path) in lines[0]
    assert fragment in lines[0]


@pytest.mark.parametrize("command", ["inspect", "validate", "export"])
@pytest.mark.parametrize("kind", list(BAD_FILES))
def test_bad_file_gives_one_clean_line(tmp_path, run_cli, kind, command):
    make, fragment = BAD_FILES[kind]
    path = make(tmp_path)
    args = [command, path] + (["-o", tmp_path / "out.onnx"] if command == "export" else [])
    assert_clean_error(run_cli(*args), path, fragment)
    assert not (tmp_path / "out.onnx").exists()


@pytest.mark.parametrize("layout", ["inside a torch checkpoint", "raw pickle"])
def test_hostile_pickle_never_runs(tmp_path, run_cli, layout):
    marker = tmp_path / "PWNED"
    path = tmp_path / "Huggy-1.pt"
    if layout == "raw pickle":
        path.write_bytes(pickle.dumps({"Policy": Hostile(marker)}))
    else:
        torch.save({"Policy": {"w": Hostile(marker)}}, path)
    result = run_cli("validate", path)
    assert_clean_error(result, path, "nothing from it was run")
    assert not marker.exists()


def test_hostile_pickle_in_a_real_process(tmp_path):
    """The shipped entry point, as a user runs it: exit status, stderr, and no side effect."""
    marker = tmp_path / "PWNED"
    path = tmp_path / "Huggy-1.pt"
    torch.save({"Policy": Hostile(marker)}, path)
    done = subprocess.run([sys.executable, str(REPO / "cli.py"), "inspect", str(path)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().startswith("error: ") and "posix.system" in done.stderr
    assert not marker.exists()
