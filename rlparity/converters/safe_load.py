"""Reading checkpoint files without ever running code from them.

Checkpoints are pickles, and a pickle can execute anything when it is loaded. Every
family reads its files through here: ``torch.load(weights_only=True)``, which admits only
tensors and plain containers, with each way a file can be bad turned into one clear line.
"""
from __future__ import annotations

import hashlib
import io
import pickle
import re
import warnings
import zipfile
from pathlib import Path
from typing import Any

from rlparity.errors import UserError

_ZIP_MAGIC = b"PK\x03\x04"


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def require_file(path: Path) -> None:
    """A readable, non-empty regular file, or a UserError saying which of these it is not."""
    if not path.exists():
        raise UserError("no such file", path)
    if path.is_dir():
        raise UserError("is a folder, expected a file", path)
    if path.stat().st_size == 0:
        raise UserError("file is empty", path)
    try:
        with open(path, "rb"):
            pass
    except OSError as e:
        raise UserError(f"cannot read: {e.strerror or e}", path) from None


def load_torch_file(path: str | Path) -> Any:
    """``torch.load(path, weights_only=True)`` with one-line errors for every bad file."""
    path = Path(path)
    require_file(path)
    with open(path, "rb") as f:
        head = f.read(4)
    if head == _ZIP_MAGIC:
        _check_archive(path, path, "")
    return _weights_only_load(path, path, "")


def load_torch_bytes(data: bytes, where: str | Path, member: str) -> Any:
    """Like ``load_torch_file`` for a file held in memory, e.g. ``policy.pth`` inside a zip.

    Errors name ``where`` (the file the user gave) and start with ``member``.
    """
    if not data:
        raise UserError(f"{member} is empty", where)
    if data[:4] == _ZIP_MAGIC:
        _check_archive(io.BytesIO(data), where, f"{member}: ")
    return _weights_only_load(io.BytesIO(data), where, f"{member}: ")


def _check_archive(source: Any, where: str | Path, prefix: str) -> None:
    """A checkpoint in torch's zip format must at least have a readable directory."""
    try:
        with zipfile.ZipFile(source) as archive:
            archive.namelist()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:  # ValueError: a name that is not UTF-8
        raise UserError(f"{prefix}truncated or corrupt checkpoint archive ({e})", where) from None


def _weights_only_load(source: Any, where: str | Path, prefix: str) -> Any:
    import torch

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.load(source, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise UserError(prefix + _explain_refusal(str(e)), where) from None
    except Exception as e:  # EOFError, RuntimeError, AssertionError, AttributeError, ...: any byte can be wrong
        detail = " ".join(str(e).split())[:160] or type(e).__name__
        raise UserError(f"{prefix}not a readable PyTorch checkpoint: truncated or corrupt ({detail})", where) from None


def _explain_refusal(message: str) -> str:
    """Turn torch's multi-paragraph weights_only refusal into one line."""
    found = re.search(r"GLOBAL ([\w.]+)", message)
    if found:
        return (
            f"refused to load: the pickle asks to import {found.group(1)}, which is not a tensor "
            "or plain data (a hostile or non-weights file); nothing from it was run"
        )
    operand = re.search(r"Unsupported operand (\d+)", message)
    if operand:
        return "not a PyTorch checkpoint: the data is not a weights-only pickle (unreadable or hostile); nothing from it was run"
    return "refused to load: not a weights-only PyTorch checkpoint; nothing from it was run"


# -- pickles that are not torch checkpoints ------------------------------------------------

class PickleRefused(Exception):
    """Raised while unpickling: the pickle wants something its kind of file never holds.
    The message completes "the pickle ...", e.g. "asks to import posix.system"."""


class _RestrictedUnpickler(pickle.Unpickler):
    """Resolves only the globals in ``allowed``; any other import request is refused
    before anything is called, so a hostile pickle cannot run code."""

    def __init__(self, file, allowed: dict[tuple[str, str], Any]):
        super().__init__(file)
        self.allowed = allowed

    def find_class(self, module: str, name: str) -> Any:
        try:
            return self.allowed[(module, name)]
        except KeyError:
            raise PickleRefused(f"asks to import {module}.{name}") from None


def load_restricted_pickle(path: str | Path, allowed: dict[tuple[str, str], Any], what: str) -> Any:
    """Unpickle ``path`` admitting only the globals in ``allowed`` (``(module, name) -> object``).

    ``what`` names the kind of file for messages, e.g. "VecNormalize statistics".
    """
    path = Path(path)
    require_file(path)
    with open(path, "rb") as f:
        try:
            return _RestrictedUnpickler(f, allowed).load()
        except PickleRefused as e:
            raise UserError(
                f"refused to load: the pickle {e}, which {what} do not hold "
                "(a hostile or foreign file); nothing from it was run", path) from None
        except Exception as e:  # UnpicklingError, EOFError, OverflowError, ...: any byte can be wrong
            detail = " ".join(str(e).split())[:160] or type(e).__name__
            raise UserError(f"not readable as {what}: truncated or corrupt ({detail})", path) from None
